"""What every HTTP request passes before it reaches MCP or a JSON route: host, token, size, rate, load.

Why in front of everything (an ASGI middleware around the whole app): the MCP endpoint and the JSON
routes must be guarded alike, and a refusal must cost nothing (no body read past the limit, no
thread taken). In order:

- **Host and Origin** (a server on loopback): a page in a browser can make requests to 127.0.0.1
  under a name it controls (DNS rebinding); only loopback names are accepted, and an Origin header,
  when a browser sends one, must be a loopback origin too (403).
- **Bearer token**, when the server has one: compared in constant time (401 and ``WWW-Authenticate``).
- **Size**: a body above ``max_request_bytes`` is refused by its Content-Length, or as soon as the bytes
  read pass it (413); nothing larger is ever held.
- **Rate**: a token bucket per client (its token when the server has one, else its address): ``rate``
  calls a second, ``burst`` at once (429 and ``Retry-After``).
- **Load**: at most ``max_inflight`` requests in the server at once (503 and ``Retry-After``).

``/v1/health`` answers without a token (it says nothing but "ok"). Each refusal goes to the audit log.
"""

from __future__ import annotations

import hmac
import json
import math
import threading
import time
from collections import OrderedDict
from typing import Any

from contextkit.serve._audit import AuditLog

__all__ = ["Guard", "RateLimiter"]

Scope = dict[str, Any]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_GONE = b"\0gone"  # what _read_capped returns for a client that disconnected mid-body (compared by identity)
_OPEN_PATHS = ("/v1/health",)


class RateLimiter:
    """Token buckets by client key: ``rate`` per second refilled, ``burst`` at most; the oldest of more than
    ``max_clients`` keys are forgotten (memory stays bounded under a flood of addresses)."""

    def __init__(self, rate: float, burst: int, max_clients: int = 10_000) -> None:
        self.rate, self.burst, self.max_clients = rate, burst, max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str, now: float | None = None) -> float:
        """0 when the call may go ahead, else the seconds until it could."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / self.rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
            return wait


class Guard:
    """The ASGI middleware in front of the app (see the module's docstring)."""

    def __init__(self, app: Any, *, token: str | None, loopback: bool, max_request_bytes: int,
                 limiter: RateLimiter, max_inflight: int, audit: AuditLog | None) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.loopback = loopback
        self.max_request_bytes = max_request_bytes
        self.limiter = limiter
        self.max_inflight = max_inflight
        self.audit = audit
        self.inflight = 0

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, message, extra = refusal
            self._audit(scope, status, message)
            await _send_error(send, status, message, extra)
            return
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            # The whole body is read here, capped, before the app sees the request: a body sent in chunks with
            # no length to refuse it by stops at the limit, and a client gone mid-body never reaches the app.
            body = await self._read_capped(receive)
            if body is _GONE:
                return
            if body is None:
                self._audit(scope, 413, "request body over the limit")
                await _send_error(send, 413, f"the request body is over {self.max_request_bytes:,} bytes", {})
                return
            receive = _replay(body)
        self.inflight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1

    async def _read_capped(self, receive: Any) -> bytes | None:
        """The whole body, None as soon as it passes the limit (what was read is dropped), or ``_GONE`` when the
        client went away before sending all of it."""
        parts, seen = [], 0
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                return _GONE
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_request_bytes:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
        path = scope.get("path", "")
        if self.loopback and not _loopback_host(headers.get("host", "")):
            return 403, "this server answers only requests addressed to a loopback name (127.0.0.1, localhost)", {}
        origin = headers.get("origin")
        if self.loopback and origin is not None and not _loopback_origin(origin):
            return 403, "requests from a web page of another origin are refused", {}
        if self.token is not None and path not in _OPEN_PATHS:
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.token):
                return 401, "a valid bearer token is required (Authorization: Bearer ...)", {
                    "www-authenticate": 'Bearer realm="contextkit"'}
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_request_bytes):
            return 413, f"the request body is over {self.max_request_bytes:,} bytes", {}
        wait = self.limiter.allow(self._client_key(scope))
        if wait > 0:
            return 429, "too many requests from this client; retry after the delay given", {
                "retry-after": str(max(1, math.ceil(wait)))}
        if self.inflight >= self.max_inflight:
            return 503, f"the server is busy ({self.max_inflight} requests in progress); retry shortly", {
                "retry-after": "1"}
        return None

    def _client_key(self, scope: Scope) -> str:
        if self.token is not None:
            return "token"  # one token, one client: its calls share one bucket wherever they come from
        client = scope.get("client")
        return str(client[0]) if client else "unknown"

    def _audit(self, scope: Scope, status: int, message: str) -> None:
        if self.audit is None:
            return
        client = scope.get("client")
        self.audit.record(transport="http", client=f"{client[0]}:{client[1]}" if client else "unknown",
                          operation=f"{scope.get('method', '?')} {scope.get('path', '?')}"[:200], arguments=None,
                          outcome="refused", started=time.perf_counter(), error=message, status=status)


def _replay(body: bytes) -> Any:
    """A ``receive`` that hands the app the body read already, then waits as the server's would."""
    sent = False

    async def receive() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        import anyio

        await anyio.sleep_forever()  # the app only asks again to learn of a disconnect; none is coming here

    return receive


def _loopback_host(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name in _LOOPBACK_NAMES


def _loopback_origin(origin: str) -> bool:
    scheme, _, rest = origin.partition("://")
    return scheme in ("http", "https") and _loopback_host(rest.split("/", 1)[0])


async def _send_error(send: Any, status: int, message: str, extra: dict[str, str]) -> None:
    body = json.dumps({"error": {"status": status, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
