"""One call of an operation, as every transport makes it: parse, run, audit, and an outcome a client may read.

Why here and not in each transport: the MCP tools and the HTTP routes must refuse the same requests
with the same words, log the same line and never show a traceback. A ``ContextkitError`` is the
caller's (a bad field, a limit, an unknown document) and its message goes back; an unreadable index
is the operator's (503, said plainly); anything else is a bug, logged here with its traceback and
answered with a generic line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from contextkit.core.errors import ContextkitError, DocumentNotFoundError, IndexFolderError, LimitExceededError
from contextkit.serve._audit import AuditLog
from contextkit.serve._requests import parse_request
from contextkit.serve._service import IndexService

__all__ = ["CallOutcome", "run_call"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallOutcome:
    """What went back: ``status`` as HTTP has it (200, 4xx, 5xx), ``text`` the JSON result or the error's
    message, ``data`` the result (None on an error)."""

    status: int
    text: str
    data: dict[str, Any] | None = None
    error_type: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200


def run_call(service: IndexService, name: str, arguments: Any, *, transport: str, client: str,
             audit: AuditLog | None) -> CallOutcome:
    """Run operation ``name`` with ``arguments`` (decoded JSON); never raises for the caller's input."""
    started = time.perf_counter()
    with service.one_call():  # the audit's count of the result is the one its limit check made
        outcome = _outcome(service, name, arguments)
        if audit is not None:
            tokens = service.count(outcome.text) if outcome.ok else None
            kind = "ok" if outcome.ok else ("failed" if outcome.status >= 500 else "refused")
            extra = {"generation": outcome.data.get("generation")} if outcome.data else {}
            audit.record(transport=transport, client=client, operation=name,
                         arguments=arguments if isinstance(arguments, dict) else None, outcome=kind,
                         started=started, tokens=tokens, error=None if outcome.ok else outcome.text,
                         status=outcome.status, **extra)
    return outcome


def _outcome(service: IndexService, name: str, arguments: Any) -> CallOutcome:
    try:
        request = parse_request(name, arguments)
        data, text = service.answer(name, request)
        return CallOutcome(200, text, data)
    except DocumentNotFoundError as exc:
        return CallOutcome(404, str(exc), error_type="not_found")
    except LimitExceededError as exc:
        return CallOutcome(413, str(exc), error_type="limit_exceeded")
    except IndexFolderError as exc:
        log.error("%s: the index cannot be read: %s", name, exc)
        return CallOutcome(503, f"the index cannot be read now: {exc}", error_type="index_unavailable")
    except ContextkitError as exc:
        return CallOutcome(400, str(exc), error_type="invalid_request")
    except Exception:  # a bug: its traceback in the server's log, one line to the client
        log.exception("%s failed", name)
        return CallOutcome(500, f"{name} failed on the server (the server's log has the details)",
                           error_type="internal_error")
