"""The HTTP server: MCP (streamable HTTP) at ``/mcp`` and the same operations as JSON at ``/v1/<name>``.

Why both on one port and in one app: a service that is not an MCP client posts JSON; an agent
speaks MCP; both reach the same :class:`~contextkit.serve._server.ServerState` (one model, one
index) behind the same :class:`~contextkit.serve._guard.Guard`. MCP runs stateless (each request
stands alone: no session to keep per client, so memory does not grow with clients) and answers in
JSON. ``/openapi.json`` describes the JSON routes from the request models (:mod:`._requests`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from contextkit.serve._guard import Guard, RateLimiter
from contextkit.serve._requests import REQUESTS
from contextkit.serve._server import ServerState, is_loopback

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["build_http_app", "openapi", "run_http"]


def build_http_app(state: ServerState) -> Any:
    """The ASGI app: the guard around MCP's Starlette app with the JSON routes added to it."""
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse, Response

    from contextkit.serve._mcp import build_mcp_server

    settings = state.settings
    server = build_mcp_server(state)

    def json_route(name: str) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                body = await request.body()
            except ClientDisconnect:  # gone before its body arrived: nothing was started, nothing to answer
                return Response(status_code=400)
            if not request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
                return _error(415, "send the request as JSON (Content-Type: application/json)")
            try:
                arguments = json.loads(body) if body else {}
            except (ValueError, RecursionError) as exc:
                return _error(400, f"the body is not valid JSON ({str(exc).splitlines()[0][:120]})")
            client = request.client
            outcome = await state.run(name, arguments, transport="http",
                                      client=f"{client.host}:{client.port}" if client else "unknown")
            if outcome.ok:
                return Response(outcome.text, media_type="application/json")
            return _error(outcome.status, outcome.text, outcome.error_type)
        return endpoint

    for name in REQUESTS:
        server.custom_route(f"/v1/{name}", methods=["POST"])(json_route(name))

    @server.custom_route("/v1/health", methods=["GET"])
    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @server.custom_route("/v1/info", methods=["GET"])
    async def info(request: Request) -> Response:
        return JSONResponse(state.service.info())

    @server.custom_route("/openapi.json", methods=["GET"])
    async def openapi_document(request: Request) -> Response:
        return JSONResponse(openapi())

    loopback = is_loopback(settings.host)
    # The guard checks Host and Origin for the whole app; the SDK's own check would only repeat it.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(stateless_http=True, json_response=True, transport_security=security,
                                     max_request_body_size=settings.max_request_bytes, host=settings.host)
    return Guard(app, token=settings.token, loopback=loopback, max_request_bytes=settings.max_request_bytes,
                 limiter=RateLimiter(settings.rate_limit, settings.rate_burst), max_inflight=settings.max_inflight,
                 audit=state.audit)


def _error(status: int, message: str, kind: str | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"status": status, "type": kind or "invalid_request", "message": message}},
                        status_code=status)


def run_http(state: ServerState) -> None:
    """Serve until interrupted (uvicorn: one process, one event loop, the calls in worker threads)."""
    import uvicorn

    settings = state.settings
    config = uvicorn.Config(build_http_app(state), host=settings.host, port=settings.port, log_level="warning",
                            access_log=False, server_header=False, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run()


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the JSON routes, from the request models' JSON Schemas."""
    from contextkit._version import __version__

    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    error = {"description": "refused: the body says why",
             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for name, model in REQUESTS.items():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        paths[f"/v1/{name}"] = {"post": {
            "operationId": name, "summary": (model.__doc__ or "").strip().splitlines()[0],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}},
            "responses": {"200": {"description": "the result (JSON, within max_tokens)",
                                  "content": {"application/json": {"schema": {"type": "object"}}}},
                          **{str(code): error for code in (400, 401, 403, 404, 413, 415, 429, 503)}},
            "security": [{"bearer": []}, {}]}}
    schemas["Error"] = {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "properties": {"status": {"type": "integer"}, "type": {"type": "string"},
                                         "message": {"type": "string"}}}}}
    paths["/v1/health"] = {"get": {"operationId": "health", "summary": "Whether the server answers",
                                   "responses": {"200": {"description": "ok"}}}}
    paths["/v1/info"] = {"get": {"operationId": "info", "summary": "The index's size, model, tokenizer and limits",
                                 "responses": {"200": {"description": "the figures"}}}}
    return {"openapi": "3.1.0",
            "info": {"title": "contextkit", "version": __version__,
                     "description": "Search an index, assemble prompts under a token budget, read its documents. "
                                    "MCP clients use /mcp (streamable HTTP) for the same operations."},
            "paths": paths,
            "components": {"schemas": schemas,
                           "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}}
