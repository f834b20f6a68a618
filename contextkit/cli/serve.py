"""``contextkit serve``: an index to agents (MCP) and services (HTTP JSON), from one process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from contextkit.cli._app import IndexOpt, app, err, fail, reported


@app.command()
def serve(
    index: IndexOpt,
    mcp: Annotated[str, typer.Option(
        "--mcp", help="http: MCP at /mcp and JSON at /v1 on --host:--port; stdio: MCP on stdin/stdout "
                      "(what Claude Desktop and IDEs start)")] = "http",
    host: Annotated[str, typer.Option(help="address to listen on; anything but loopback needs a token")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8765,
    token_file: Annotated[Path | None, typer.Option(
        help="file whose first line is the bearer token clients must send (or set CONTEXTKIT_SERVE_TOKEN)")] = None,
    audit_log: Annotated[Path | None, typer.Option(
        help="append one JSON line per call (who, what, outcome, tokens; masked when the index redacts)")] = None,
    max_request_bytes: Annotated[int, typer.Option(help="largest request body accepted")] = 1_048_576,
    rate_limit: Annotated[float, typer.Option(help="calls per second per client (address, or token); 0: off")] = 20.0,
    rate_burst: Annotated[int, typer.Option(help="calls a client may make at once before the rate applies")] = 100,
    max_inflight: Annotated[int, typer.Option(help="requests in progress at most; more get 503")] = 256,
    workers: Annotated[int, typer.Option(help="calls computed at once (threads; more only queue on the cores)")] = 4,
    max_result_tokens: Annotated[int, typer.Option(help="the most tokens one result may hold")] = 200_000,
    default_result_tokens: Annotated[int, typer.Option(
        help="tokens of a result when the caller gives no max_tokens")] = 8_000,
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="listen on a non-loopback --host (a token is still required)")] = False,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or mps: where the model runs")] = "auto",
    as_json: Annotated[bool, typer.Option(
        "--json", help="say where it serves as one JSON line on stderr (for a script that starts it)")] = False,
) -> None:
    """Serve an index: search, assemble_context, get_document and list_sources, read-only.

    One process loads the model and the index once and answers many clients; a new commit of the
    index (a re-ingest) is served from the next call on, without a restart.

    Example: contextkit serve --index my.ck-index --port 8765   (MCP: http://127.0.0.1:8765/mcp)
    """
    from contextkit.core.errors import ServeError
    from contextkit.index import location_name
    from contextkit.serve._server import ServeSettings, is_loopback, read_token

    with reported():
        try:
            token = read_token(token_file)
            settings = ServeSettings(index=index, mcp=mcp, host=host, port=port, token=token,  # type: ignore[arg-type]
                                     audit_log=audit_log, max_request_bytes=max_request_bytes,
                                     rate_limit=rate_limit, rate_burst=rate_burst, max_inflight=max_inflight,
                                     workers=workers, max_result_tokens=max_result_tokens,
                                     default_result_tokens=default_result_tokens, device=device)
            settings.check()
        except ServeError as exc:
            raise fail(str(exc), 2) from None
        if mcp == "http" and not is_loopback(host):
            if not allow_remote:
                raise fail(f"--host {host} is not a loopback address: add --allow-remote (and a token) to serve "
                           "other machines", 2)
            if token is None:
                raise fail("serving other machines needs a bearer token: --token-file or CONTEXTKIT_SERVE_TOKEN", 2)
        _check_extra()
        from contextkit.serve._run import serve as run

        def ready(state: Any) -> None:
            info = state.service.info()
            if as_json:  # stderr: in stdio mode stdout is the MCP channel
                base = None if mcp == "stdio" else f"http://{host}:{port}"
                sys.stderr.write(json.dumps({
                    "transport": mcp, "mcp": f"{base}/mcp" if base else "stdio", "json": f"{base}/v1" if base else None,
                    "openapi": f"{base}/openapi.json" if base else None, "index": location_name(index), "chunks": info["chunks"],
                    "generation": info["generation"], "token_required": token is not None,
                    "audit_log": str(audit_log) if audit_log else None}) + "\n")
                sys.stderr.flush()
                return
            where = "stdin/stdout (MCP)" if mcp == "stdio" else (
                f"http://{host}:{port}/mcp (MCP) and http://{host}:{port}/v1/ (JSON; /openapi.json)")
            err.print(f"serving {info['chunks']:,} chunks of {location_name(index)} on {where}; read-only"
                      + ("; token required" if token else "") + ("; audit log " + str(audit_log) if audit_log else ""),
                      highlight=False)

        try:
            run(settings, ready)
        except KeyboardInterrupt:
            pass


def _check_extra() -> None:
    """The transports need the ``serve`` extra: say so in one line, not an ImportError."""
    import importlib.util

    missing = [m for m in ("mcp", "uvicorn", "starlette") if importlib.util.find_spec(m) is None]
    if missing:
        raise fail(f"contextkit serve needs {', '.join(missing)}: pip install 'contextkit[serve]'", 2)
