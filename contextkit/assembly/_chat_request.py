"""A session's request in each provider's shape, its token count, and its cache-keyed serialisation.

The order never changes: the system message (the instructions, byte-identical on every call), a
user message with the summaries of compacted turns (byte-identical between compactions), the
verbatim turns as they were added (append-only), then the tail (evidence, tool output, recalled
turns and the question). So each request starts with the one before it, less the tail: what a
provider's prompt cache keys on. Tool calls and their results stay real tool messages, in each
provider's documented shape (``validate_messages`` checks them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from contextkit.assembly._turns import Turn
from contextkit.assembly.messages import OVERHEAD
from contextkit.core.tokenizers import Tokenizer

__all__ = ["Request", "build_request", "count_request", "serialise"]

_CACHE = {"type": "ephemeral"}
#: Tokens a tool call costs beyond its name and arguments (the provider's JSON frame, an estimate).
CALL_OVERHEAD = 8
_MAX_BREAKPOINTS = 4


@dataclass
class Request:
    """The parts of one request, in order: system text, summary text, verbatim turns, tail text."""

    system: str = ""
    summary: str = ""
    turns: list[Turn] = field(default_factory=list)
    tail: str = ""


def build_request(req: Request, style: str) -> Any:
    """The request in ``style``: OpenAI's message list, Anthropic's ``{"system", "messages"}``, LlamaIndex's
    ``ChatMessage`` list."""
    if style == "anthropic":
        return _anthropic(req)
    messages = _openai(req)
    return messages if style == "openai" else _llamaindex(messages)


def _openai(req: Request) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": req.system}] if req.system else []
    if req.summary:
        out.append({"role": "user", "content": req.summary})
    for turn in req.turns:
        if turn.role == "tool":
            out.append({"role": "tool", "tool_call_id": turn.call_id, "content": turn.body})
        elif turn.tool_calls:
            out.append({"role": "assistant", "content": turn.body or None, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls]})
        else:
            out.append({"role": turn.role, "content": turn.body})
    if req.tail:
        out.append({"role": "user", "content": req.tail})
    return out


def _anthropic(req: Request) -> dict[str, Any]:
    """Alternating user and assistant messages: consecutive turns of one side share a message, tool results
    first in theirs; a system turn becomes a marked user text; ``cache_control`` on the system block, the
    summary and the last history message (at most four breakpoints)."""
    messages: list[dict[str, Any]] = []
    breakpoints = 0

    def put(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            blocks = messages[-1]["content"]
            if block["type"] == "tool_result":  # results go before any text of the same message
                at = sum(1 for b in blocks if b["type"] == "tool_result")
                blocks.insert(at, block)
            else:
                blocks.append(block)
        else:
            messages.append({"role": role, "content": [block]})

    if req.summary:
        put("user", {"type": "text", "text": req.summary, "cache_control": dict(_CACHE)})
        breakpoints += 1
    for turn in req.turns:
        for role, block in _anthropic_blocks(turn):
            put(role, block)
    if messages and req.turns and breakpoints < _MAX_BREAKPOINTS - 1:
        messages[-1]["content"][-1]["cache_control"] = dict(_CACHE)
    if req.tail:
        put("user", {"type": "text", "text": req.tail})
    if messages and messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": "(The conversation so far.)"}]})
    system = [{"type": "text", "text": req.system, "cache_control": dict(_CACHE)}] if req.system else []
    return {"system": system, "messages": messages}


def _anthropic_blocks(turn: Turn) -> list[tuple[str, dict[str, Any]]]:
    if turn.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": turn.call_id, "content": turn.body or "(empty)"}
        if turn.is_error:
            block["is_error"] = True
        return [("user", block)]
    if turn.role == "system":
        return [("user", {"type": "text", "text": f"(System note) {turn.body}"})]
    out: list[tuple[str, dict[str, Any]]] = []
    if turn.body or not turn.tool_calls:
        out.append((turn.role, {"type": "text", "text": turn.body or "(empty)"}))
    for call in turn.tool_calls:
        out.append(("assistant", {"type": "tool_use", "id": call.id, "name": call.name,
                                  "input": _arguments(call.arguments)}))
    return out


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": value}


def _llamaindex(messages: list[dict[str, Any]]) -> list[Any]:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

    out = []
    for m in messages:
        role = MessageRole(m["role"])
        blocks: list[Any] = [TextBlock(text=m["content"])] if m.get("content") else []
        kwargs: dict[str, Any] = {}
        for call in m.get("tool_calls", []):
            fn = call["function"]
            blocks.append(ToolCallBlock(tool_call_id=call["id"], tool_name=fn["name"],
                                        tool_kwargs=_arguments(fn["arguments"])))
        if m.get("tool_calls"):
            kwargs["tool_calls"] = m["tool_calls"]
        if m["role"] == "tool":
            kwargs["tool_call_id"] = m["tool_call_id"]
        out.append(ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs))
    return out


def count_request(req: Request, style: str, tokenizer: Tokenizer | Any) -> int:
    """Tokens of the request in ``style``'s chat format: contents, tool calls and the per-message overhead
    (exact for OpenAI's text messages; tool calls and the other styles are estimates)."""
    per, reply, _ = OVERHEAD[style]
    texts = [t for t in (req.system, req.summary, req.tail) if t]
    texts += [turn.body for turn in req.turns]
    calls = [f"{c.name}{c.arguments}" for turn in req.turns for c in turn.tool_calls]
    counts = tokenizer.count_many(texts + calls) if texts or calls else []
    messages = len(texts)
    return sum(counts) + per * messages + CALL_OVERHEAD * len(calls) + reply


def serialise(req: Request) -> tuple[list[str], list[int]]:
    """The request as a cache sees it: its messages' texts in order (roles, contents, calls), and the
    indexes of the parts after which Anthropic's ``cache_control`` breakpoints end (system, summary,
    last history message). Each part is tokenised apart, as providers tokenise messages."""
    parts = [f"<|system|>{req.system}"]
    marks = [1]
    if req.summary:
        parts.append(f"<|user|>{req.summary}")
        marks.append(len(parts))
    for turn in req.turns:
        calls = "".join(f"<|call {c.id}|>{c.name}{c.arguments}" for c in turn.tool_calls)
        answered = f"<|result {turn.call_id}|>" if turn.call_id else ""
        parts.append(f"<|{turn.role}|>{answered}{turn.body}{calls}")
    if req.turns:
        marks.append(len(parts))
    parts.append(f"<|user|>{req.tail}")
    return parts, marks
