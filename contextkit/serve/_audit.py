"""The audit log of a server: one JSON line per call, whatever the transport, success or refusal.

Why a file of JSON lines: an operator answers "who asked what, when, and what went back" with
``grep`` and ``jq``, and a log shipper reads it as it grows. A line holds the operation, the
caller (its address, or ``stdio``), the arguments with their text masked when the index redacts
(a query is personal data as often as a document), the outcome, the result's size in tokens and the
time taken; never the text returned (that is the index's, and the log must not become a second copy).
The file is created owner-only (0600) and appended to by one lock, so lines never interleave.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contextkit.core.errors import ServeError

__all__ = ["AuditLog"]

#: Argument fields whose text is the caller's (masked when the index redacts, cut to a length).
_TEXT_FIELDS = ("query", "question", "instructions", "glob", "id")
_MAX_LOGGED_CHARS = 500


class AuditLog:
    """Appends audit records to ``path`` (JSON lines); ``mask`` masks personal data in logged text."""

    def __init__(self, path: str | Path, mask: Callable[[str], str] | None = None) -> None:
        self.path = Path(path)
        self.mask = mask or (lambda text: text)
        self._lock = threading.Lock()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            raise ServeError(f"{self.path}: cannot open the audit log ({exc.strerror or exc})") from None
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def record(self, *, transport: str, client: str, operation: str, arguments: dict[str, Any] | None,
               outcome: str, started: float, tokens: int | None = None, error: str | None = None,
               **extra: Any) -> None:
        """One call: ``outcome`` is ``ok``, ``refused`` (the caller's mistake or a limit) or ``failed``."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        line = {"time": now,
                "transport": transport, "client": client, "operation": operation,
                "arguments": self._arguments(arguments or {}), "outcome": outcome,
                "ms": round((time.perf_counter() - started) * 1000, 2)}
        if tokens is not None:
            line["result_tokens"] = tokens
        if error is not None:
            line["error"] = self.mask(error)[:_MAX_LOGGED_CHARS]
        line.update(extra)
        text = json.dumps(line, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            self._file.write(text)
            self._file.flush()

    def _arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as logged: text masked and cut, history and filters summarised (sizes, not text)."""
        out: dict[str, Any] = {}
        for key, value in arguments.items():
            if key in _TEXT_FIELDS and isinstance(value, str):
                out[key] = self.mask(value[:_MAX_LOGGED_CHARS]) + ("…" if len(value) > _MAX_LOGGED_CHARS else "")
            elif key == "history" and isinstance(value, list):
                out["history_messages"] = len(value)
            elif key == "filters" and isinstance(value, dict):
                out["filters"] = self.mask(json.dumps(value, ensure_ascii=False, default=str)[:_MAX_LOGGED_CHARS])
            elif isinstance(value, int | float | bool) or value is None:
                out[key] = value
            elif isinstance(value, str):
                out[key] = self.mask(value[:100])
        return out

    def close(self) -> None:
        with self._lock:
            self._file.close()
