"""The turns of a session: one plain record for what every provider sends and returns.

Why one record: an application passes a session what its API gave it (OpenAI dicts with
``tool_calls`` and ``tool`` messages, Anthropic messages of ``text``/``tool_use``/``tool_result``
blocks, LlamaIndex ``ChatMessage`` objects, contextkit :class:`~contextkit.core.records.Message`)
and asks for the next request in any of those styles. Each message becomes one or more
:class:`Turn` (an Anthropic user message holding three tool results and a remark is four turns),
and the renderer writes them back in the style asked for, so a session started with OpenAI dicts
can be sent to Anthropic. A turn is JSON all the way down (a saved session is plain JSON).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Message

__all__ = ["ToolCall", "Turn", "turns_from"]

_ROLES = ("user", "assistant", "tool", "system")


@dataclass(slots=True)
class ToolCall:
    """A call the model asked for: its id, the tool's name and the arguments as a JSON object's text."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(slots=True)
class Turn:
    """One turn: ``role`` user, assistant, tool or system; ``text`` as written (a tool turn: its output).

    An assistant turn may carry ``tool_calls``; a tool turn answers ``call_id`` (of tool ``name``),
    with ``is_error`` when the tool failed. ``shown`` is what a request carries of a long tool output
    (cut by the task when it was added; None: the whole text) and ``handle`` names the whole output
    (:meth:`~contextkit.session.Session.tool_output`).
    """

    role: str
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    shown: str | None = None
    handle: str | None = None

    @property
    def body(self) -> str:
        """The text a request carries of this turn."""
        return self.text if self.shown is None else self.shown

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        return {k: v for k, v in out.items() if v not in (None, [], False, "") or k in ("role", "text")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        calls = [ToolCall(**c) for c in data.get("tool_calls", [])]
        return cls(**{**{k: v for k, v in data.items() if k != "tool_calls"}, "tool_calls": calls})


def turns_from(message: Any) -> list[Turn]:
    """The turns of one provider-shaped message (see the module docstring); a clear error for anything else."""
    if isinstance(message, Message):
        return [_plain_turn(message.role, message.content)]
    if isinstance(message, Mapping):
        return _from_mapping(message)
    if type(message).__name__ == "ChatMessage" and hasattr(message, "blocks"):
        return _from_llamaindex(message)
    raise InvalidArgumentError(f"a session takes OpenAI or Anthropic message dicts, LlamaIndex ChatMessage or "
                               f"contextkit Message objects, not {type(message).__name__}")


def _plain_turn(role: str, text: str) -> Turn:
    role = "system" if role == "developer" else role
    if role not in _ROLES or role == "tool":
        raise InvalidArgumentError(f"a message's role must be user, assistant or system (tool results carry "
                                   f"their call's id), not {role!r}")
    return Turn(role, text)


def _from_mapping(message: Mapping[str, Any]) -> list[Turn]:
    role = message.get("role")
    if not isinstance(role, str):
        raise InvalidArgumentError(f"a message needs a role, got keys {sorted(map(str, message))}")
    content = message.get("content")
    if role == "tool":  # OpenAI: the result of one call
        call = message.get("tool_call_id")
        if not isinstance(call, str) or not call:
            raise InvalidArgumentError("a tool message needs the tool_call_id of the call it answers")
        return [Turn("tool", _text_of(content), call_id=call, name=message.get("name"))]
    if isinstance(content, list):
        return _from_blocks(role, content)
    turn = _plain_turn(role, _text_of(content))
    turn.tool_calls = [_openai_call(c) for c in message.get("tool_calls") or []]
    return [turn]


def _text_of(content: Any) -> str:
    """Text of a content field: a string, None, or a list of text parts / blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise InvalidArgumentError(f"a session keeps text; a content part of type {kind!r} is not text")
        return "\n".join(parts)
    raise InvalidArgumentError(f"message content must be text or a list of parts, not {type(content).__name__}")


def _openai_call(call: Any) -> ToolCall:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise InvalidArgumentError(f"a tool call must be {{'id', 'type': 'function', 'function': {{...}}}}, "
                                   f"not {call!r:.80}")
    fn = call["function"]
    arguments = fn.get("arguments", "{}")
    return ToolCall(_call_id(call.get("id")), str(fn.get("name", "")),
                    arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False))


def _call_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"a tool call needs an id (a non-empty string), not {value!r}")
    return value


def _from_blocks(role: str, blocks: list[Any]) -> list[Turn]:
    """Anthropic content blocks (and OpenAI content parts): tool results first, then the text and calls."""
    results: list[Turn] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "tool_result":
            results.append(Turn("tool", _text_of(block.get("content")), call_id=_call_id(block.get("tool_use_id")),
                                is_error=bool(block.get("is_error", False))))
        elif kind == "tool_use":
            calls.append(ToolCall(_call_id(block.get("id")), str(block.get("name", "")),
                                  json.dumps(block.get("input", {}), ensure_ascii=False)))
        else:
            texts.append(_text_of([block]))
    turns = list(results)
    if texts or calls or not results:
        turn = _plain_turn(role, "\n".join(texts))
        turn.tool_calls = calls
        turns.append(turn)
    return turns


def _from_llamaindex(message: Any) -> list[Turn]:
    role = str(getattr(message.role, "value", message.role))
    kwargs = dict(getattr(message, "additional_kwargs", None) or {})
    text = "".join(getattr(b, "text", "") for b in message.blocks if getattr(b, "block_type", "") == "text")
    if role == "tool":
        call = kwargs.get("tool_call_id")
        return [Turn("tool", text, call_id=_call_id(call), name=kwargs.get("name"))]
    turn = _plain_turn("system" if role in ("developer", "system") else role, text)
    for block in message.blocks:
        if getattr(block, "block_type", "") == "tool_call":
            arguments = block.tool_kwargs
            turn.tool_calls.append(ToolCall(_call_id(block.tool_call_id), block.tool_name, arguments if isinstance(
                arguments, str) else json.dumps(arguments, ensure_ascii=False)))
    for call in kwargs.get("tool_calls") or []:
        as_dict = call if isinstance(call, Mapping) else call.model_dump() if hasattr(call, "model_dump") else None
        if as_dict is None:
            raise InvalidArgumentError(f"a LlamaIndex tool call must be a dict or a pydantic model, not {call!r:.80}")
        if not any(c.id == as_dict.get("id") for c in turn.tool_calls):
            turn.tool_calls.append(_openai_call(as_dict))
    return [turn]
