"""A server's settings and state (the ways to run it are :mod:`._run`'s).

Why one process: the model and the index are loaded once and serve every client (a service of
several worker processes loaded them in each). Calls run in worker threads, at most ``workers`` at
once (a search is CPU work: more threads than cores only queue inside torch and FAISS), so the event
loop keeps accepting and refusing while they run; a client that goes away mid-call leaves its thread
to finish one bounded call and nothing else.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contextkit.core.errors import ServeError
from contextkit.serve._audit import AuditLog
from contextkit.serve._calls import CallOutcome, run_call
from contextkit.serve._service import DEFAULT_RESULT_TOKENS, MAX_RESULT_TOKENS, IndexService

__all__ = ["ServeSettings", "ServerState", "is_loopback", "read_token"]

#: The environment variable a bearer token may come from (a token on the command line shows in `ps`).
TOKEN_ENV = "CONTEXTKIT_SERVE_TOKEN"


@dataclass
class ServeSettings:
    """How a server runs; each field is a ``contextkit serve`` option of the same name."""

    index: Path
    mcp: Literal["http", "stdio"] = "http"
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = field(default=None, repr=False)
    audit_log: Path | None = None
    max_request_bytes: int = 1_048_576
    rate_limit: float = 20.0  # calls per second per client (address, or token when one is set); 0 turns it off
    rate_burst: int = 100
    max_inflight: int = 256
    workers: int = 4
    max_result_tokens: int = MAX_RESULT_TOKENS
    default_result_tokens: int = DEFAULT_RESULT_TOKENS
    device: str = "auto"

    def check(self) -> None:
        """Usage errors, before anything is loaded."""
        if self.mcp not in ("http", "stdio"):
            raise ServeError(f"--mcp is http or stdio, not {self.mcp!r}")
        if not 1 <= self.port <= 65535:
            raise ServeError(f"--port must be 1-65535, not {self.port}")
        for name in ("max_request_bytes", "rate_burst", "max_inflight", "workers", "max_result_tokens",
                     "default_result_tokens"):
            if getattr(self, name) < 1:
                raise ServeError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}")
        if self.rate_limit < 0:
            raise ServeError(f"--rate-limit must be 0 (off) or more, not {self.rate_limit}")
        if self.default_result_tokens > self.max_result_tokens:
            raise ServeError(f"--default-result-tokens ({self.default_result_tokens}) is more than "
                             f"--max-result-tokens ({self.max_result_tokens})")
        if self.token is not None and len(self.token) < 16:
            raise ServeError("the bearer token must be at least 16 characters (e.g. `openssl rand -hex 32`)")


class ServerState:
    """What every request of one server shares: the service, the audit log, the worker-thread limiter."""

    def __init__(self, settings: ServeSettings, service: IndexService | None = None) -> None:
        settings.check()
        self.settings = settings
        self.service = service or IndexService(settings.index, device=settings.device,
                                               max_result_tokens=settings.max_result_tokens,
                                               default_result_tokens=settings.default_result_tokens)
        self.audit = AuditLog(settings.audit_log, mask=self.service.masked) if settings.audit_log else None
        self.mcp_transport = f"mcp-{settings.mcp}"
        self._limiter: Any = None

    async def run(self, name: str, arguments: Any, *, transport: str, client: str) -> CallOutcome:
        """One call in a worker thread (at most ``workers`` at once)."""
        import anyio

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.settings.workers)

        def work() -> CallOutcome:
            return run_call(self.service, name, arguments, transport=transport, client=client, audit=self.audit)

        return await anyio.to_thread.run_sync(work, limiter=self._limiter)

    def close(self) -> None:
        if self.audit is not None:
            self.audit.close()
        self.service.close()


def read_token(token_file: Path | None) -> str | None:
    """The bearer token: from ``token_file`` (its first line) or the environment; None when neither is set."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").splitlines()[0].strip() if token_file.stat().st_size else ""
        except (OSError, UnicodeDecodeError) as exc:
            raise ServeError(f"{token_file}: cannot read the token file ({getattr(exc, 'strerror', None) or exc})"
                             ) from None
        if not token:
            raise ServeError(f"{token_file}: the token file is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
