"""The MCP server: the four operations as tools, documents as resources (the official ``mcp`` SDK).

Why the SDK's ``MCPServer``: it speaks every protocol version and transport a client may use
(stdio for Claude Desktop and IDEs, streamable HTTP for the rest) and derives each tool's input
schema from its signature; the signatures below repeat the request models' fields (``_requests``),
and a test holds the two equal. Each tool runs its call in a worker thread (the event loop keeps
answering other clients), at most ``workers`` at a time, and returns the result's JSON as text
(the text the token limit was counted on); a refused
call is a tool error with the reason (``isError``), never a traceback.
"""

# No ``from __future__ import annotations``: the SDK reads the tools' annotations at run time.
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import unquote

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from contextkit.serve._calls import CallOutcome
from contextkit.serve._requests import MAX_WIRE_HISTORY, MAX_WIRE_K
from contextkit.serve._service import DOCUMENT_URI_PREFIX

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.serve._server import ServerState

__all__ = ["build_mcp_server"]

INSTRUCTIONS = (
    "Search a contextkit index of documents and build prompts from it. search finds the passages that "
    "answer a query (hybrid by default: meaning and words); assemble_context returns a whole prompt (or chat "
    "messages) under a token budget with a report of what went in; get_document reads a document or a range "
    "of it; list_sources lists the documents. Every result fits in max_tokens (counted on its JSON).")

Mode = Literal["dense", "bm25", "hybrid"]


def build_mcp_server(state: "ServerState") -> MCPServer:
    """An ``MCPServer`` whose tools call ``state``'s service (one per process, shared by every client)."""
    server: MCPServer = MCPServer("contextkit", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                open_world_hint=False)

    async def call(name: str, arguments: dict[str, Any], ctx: Context | None) -> CallToolResult:
        given = {k: v for k, v in arguments.items() if v is not None}
        outcome = await state.run(name, given, transport=state.mcp_transport, client=_client(ctx))
        return _tool_result(outcome)

    @server.tool(annotations=read_only, description="The k passages of the index that best answer a query, best "
                 "first, with their document id, source, score and text.")
    async def search(query: Annotated[str, Field(min_length=1, description="the question, in any language")],
                     k: Annotated[int, Field(ge=1, le=MAX_WIRE_K)] = 10, mode: Mode = "hybrid",
                     filters: dict[str, Any] | None = None, max_tokens: Annotated[int | None, Field(ge=1)] = None,
                     ctx: Context | None = None) -> CallToolResult:
        return await call("search", {"query": query, "k": k, "mode": mode, "filters": filters,
                                     "max_tokens": max_tokens}, ctx)

    @server.tool(annotations=read_only, description="A prompt for a question, built from the index under a token "
                 "budget: key instructions, evidence, history, the question; or chat messages; with a report.")
    async def assemble_context(
            question: Annotated[str, Field(min_length=1)], budget: Annotated[int | None, Field(ge=1)] = None,
            model: str | None = None, instructions: str | None = None,
            history: Annotated[list[dict[str, str]] | None, Field(max_length=MAX_WIRE_HISTORY)] = None,
            chat: Literal["openai", "anthropic"] | None = None, mode: Mode = "hybrid",
            k: Annotated[int | None, Field(ge=1, le=MAX_WIRE_K)] = None, filters: dict[str, Any] | None = None,
            report: Literal["summary", "full"] = "summary", max_tokens: Annotated[int | None, Field(ge=1)] = None,
            ctx: Context | None = None) -> CallToolResult:
        return await call("assemble_context", {
            "question": question, "budget": budget, "model": model, "instructions": instructions,
            "history": history, "chat": chat, "mode": mode, "k": k, "filters": filters, "report": report,
            "max_tokens": max_tokens}, ctx)

    @server.tool(annotations=read_only, description="The text of one document by its id, or the characters "
                 "start to end of it; a long one comes in pages (next_start).")
    async def get_document(id: Annotated[str, Field(min_length=1)], start: Annotated[int, Field(ge=0)] = 0,
                           end: Annotated[int | None, Field(ge=0)] = None,
                           max_tokens: Annotated[int | None, Field(ge=1)] = None,
                           ctx: Context | None = None) -> CallToolResult:
        return await call("get_document", {"id": id, "start": start, "end": end, "max_tokens": max_tokens}, ctx)

    @server.tool(annotations=read_only, description="The documents the index holds (id, source, size, resource "
                 "URI), by id, a page at a time; glob narrows them.")
    async def list_sources(glob: str | None = None, offset: Annotated[int, Field(ge=0)] = 0,
                           limit: Annotated[int, Field(ge=1, le=1_000)] = 100,
                           max_tokens: Annotated[int | None, Field(ge=1)] = None,
                           ctx: Context | None = None) -> CallToolResult:
        return await call("list_sources", {"glob": glob, "offset": offset, "limit": limit,
                                           "max_tokens": max_tokens}, ctx)

    # An id is a key looked up in the index, never a path opened: the SDK's path checks (no "..", nothing
    # absolute) would refuse ids that are file paths, which most are.
    @server.resource(DOCUMENT_URI_PREFIX + "{doc_id}", name="document", mime_type="text/plain",
                     security=ResourceSecurity(exempt_params={"doc_id"}),
                     description="A document of the index by its id (percent-encoded), its first page of text.")
    async def document(doc_id: str) -> str:
        outcome = await state.run("get_document", {"id": unquote(doc_id)}, transport=state.mcp_transport,
                                  client="resource")
        if not outcome.ok:
            raise ResourceError(outcome.text)
        assert outcome.data is not None
        text = str(outcome.data["text"])
        if outcome.data.get("truncated"):
            text += f"\n[... cut at character {outcome.data['end']}: get_document with start={outcome.data['end']}]"
        return text

    return server


def _tool_result(outcome: CallOutcome) -> CallToolResult:
    # The result once, as JSON text (the text its token limit was counted on): not again as structured content,
    # which would double what every call sends and parses, and what a client that shows both spends.
    return CallToolResult(content=[TextContent(type="text", text=outcome.text)], is_error=not outcome.ok)


def _client(ctx: Context | None) -> str:
    """The caller's address on HTTP, else the transport's name."""
    request = getattr(getattr(ctx, "request_context", None), "request", None) if ctx is not None else None
    peer = getattr(request, "client", None)
    return f"{peer.host}:{peer.port}" if peer is not None else "stdio"


def _version() -> str:
    from contextkit._version import __version__

    return __version__
