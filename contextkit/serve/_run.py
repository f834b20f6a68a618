"""Running a server until it is interrupted: MCP over stdin/stdout, or HTTP (MCP at ``/mcp``, JSON at ``/v1``)."""

from __future__ import annotations

from typing import Any

from contextkit.serve._server import ServerState, ServeSettings

__all__ = ["serve"]


def serve(settings: ServeSettings, ready: Any = None) -> None:
    """Run a server until interrupted: MCP over stdin/stdout, or HTTP with MCP at ``/mcp`` and JSON at ``/v1``.
    ``ready`` is called with the state once the index and the model are loaded (the CLI says where it listens)."""
    state = ServerState(settings)  # checks the settings first
    if ready is not None:
        ready(state)
    try:
        if settings.mcp == "stdio":
            from contextkit.serve._mcp import build_mcp_server

            build_mcp_server(state).run("stdio")
        else:
            from contextkit.serve._http import run_http

            run_http(state)
    finally:
        state.close()
