"""Serving an index to agents and services: an MCP server and an HTTP JSON endpoint (``contextkit serve``).

One process holds the index's model and the read-only index and answers many clients; each call
pins one committed generation, so a new commit is served without a restart. The operations
(``search``, ``assemble_context``, ``get_document``, ``list_sources``) are :class:`IndexService`'s,
the same under MCP and HTTP; :func:`serve` runs them over stdio or HTTP. Needs the ``serve`` extra
(``pip install 'contextkit[serve]'``: the ``mcp`` SDK, which brings Starlette and uvicorn) for the
transports; :class:`IndexService` alone needs nothing more than the library. See ``docs/serving.md``.
"""

from contextkit.core.errors import DocumentNotFoundError, ServeError
from contextkit.serve._requests import (
    AssembleRequest,
    GetDocumentRequest,
    ListSourcesRequest,
    SearchRequest,
)
from contextkit.serve._run import serve
from contextkit.serve._server import ServerState, ServeSettings
from contextkit.serve._service import IndexService

__all__ = [
    "AssembleRequest",
    "DocumentNotFoundError",
    "GetDocumentRequest",
    "IndexService",
    "ListSourcesRequest",
    "SearchRequest",
    "ServeError",
    "ServeSettings",
    "ServerState",
    "serve",
]
