"""The requests a server takes, declared once: validated the same way over MCP and HTTP, and described
by the same JSON Schema (the MCP tools' input schemas, the OpenAPI document).

Why pydantic models with ``extra="forbid"`` and bounds on every field: a request comes from another
process, perhaps an agent that was talked into sending something odd; a misspelt field is an error
that names it, not a silent default, and no field can ask for unbounded work (``k``, lengths, pages).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contextkit.core.config import MAX_QUERY_CHARS
from contextkit.core.errors import InvalidArgumentError

__all__ = ["AssembleRequest", "GetDocumentRequest", "HistoryMessage", "ListSourcesRequest", "REQUESTS",
           "SearchRequest", "parse_request"]

#: Hits one search may return over the wire (the library's own limit is 10,000: an in-process caller's).
MAX_WIRE_K = 200
#: Messages of history one assemble_context request may carry.
MAX_WIRE_HISTORY = 1_000

Mode = Literal["dense", "bm25", "hybrid"]
Query = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="the question, in any language")
MaxTokens = Field(default=None, ge=1, description="the most tokens the JSON result may take, counted with the "
                                                 "index's tokenizer (default: the server's default_result_tokens)")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class FiltersBody(_Request):
    """Which chunks may be returned; every condition given must hold."""

    source_glob: str | None = Field(default=None, max_length=1_000,
                                    description="glob over the document id or its source path, e.g. 'docs/*.md'")
    doc_ids: list[str] | None = Field(default=None, max_length=1_000)
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict, max_length=50)


class SearchRequest(_Request):
    """The ``k`` best chunks for a query."""

    query: str = Query
    k: int = Field(default=10, ge=1, le=MAX_WIRE_K, description="how many chunks")
    mode: Mode = Field(default="hybrid", description="dense (meaning), bm25 (words) or hybrid (both, fused)")
    filters: FiltersBody | None = None
    max_tokens: int | None = MaxTokens


class HistoryMessage(_Request):
    """One turn of the conversation so far."""

    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(max_length=200_000)


class AssembleRequest(_Request):
    """A prompt for a question: instructions, evidence from the index and history under a token budget."""

    question: str = Query
    budget: int | None = Field(default=None, ge=1, description="prompt budget in tokens (default: max_tokens)")
    model: str | None = Field(default=None, max_length=200,
                              description="a model profile (its window and tokenizer) instead of a budget")
    instructions: str | None = Field(default=None, max_length=100_000,
                                     description="key instructions: first in the prompt, restated at its end")
    history: list[HistoryMessage] | None = Field(default=None, max_length=MAX_WIRE_HISTORY)
    chat: Literal["openai", "anthropic"] | None = Field(
        default=None, description="return chat messages in this provider's form instead of one prompt")
    mode: Mode = "hybrid"
    k: int | None = Field(default=None, ge=1, le=MAX_WIRE_K,
                          description="chunks to retrieve (default: enough to fill the budget)")
    filters: FiltersBody | None = None
    report: Literal["summary", "full"] = Field(
        default="summary", description="summary: tokens per section, every item and why it was left out; "
                                       "full: the whole AssemblyReport")
    max_tokens: int | None = MaxTokens


class GetDocumentRequest(_Request):
    """The text of one document, or a range of its characters."""

    id: str = Field(min_length=1, max_length=4_000, description="the document's id (from search or list_sources)")
    start: int = Field(default=0, ge=0, description="first character")
    end: int | None = Field(default=None, ge=0, description="character after the last (default: the end)")
    max_tokens: int | None = MaxTokens


class ListSourcesRequest(_Request):
    """The documents the index holds, by id, a page at a time."""

    glob: str | None = Field(default=None, max_length=1_000, description="only ids or sources matching this glob")
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1_000)
    max_tokens: int | None = MaxTokens


#: The operations, by name: the MCP tool and the HTTP route ``/v1/<name>`` of each.
REQUESTS: dict[str, type[_Request]] = {
    "search": SearchRequest,
    "assemble_context": AssembleRequest,
    "get_document": GetDocumentRequest,
    "list_sources": ListSourcesRequest,
}


def parse_request(name: str, data: Any) -> Any:
    """``data`` (decoded JSON) as the request ``name`` takes, or an ``InvalidArgumentError`` naming each bad
    field and why (never the values sent: they are the caller's data)."""
    model = REQUESTS[name]
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{name}: the request body must be a JSON object, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:5]:
            where = ".".join(str(part) for part in error["loc"]) or "body"
            problems.append(f"{where}: {error['msg']}")
        raise InvalidArgumentError(f"{name}: " + "; ".join(problems)) from None
