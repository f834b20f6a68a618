"""Chat messages from an assembled prompt: what every provider API and LlamaIndex take.

Why: the providers' chat APIs take a system message, alternating user and assistant
turns, then the user's message; their prompt caches key on a stable prefix of those
messages. So the prompt is cut along its sections:

* a **system message**: the key instructions and the system sections (the same bytes
  whatever the question, so a cache keyed on it hits);
* the **recent history turns** as real ``user`` / ``assistant`` messages, their text as
  the user wrote it (they sit in no XML, so there is nothing for them to break out of);
  consecutive turns of one role are joined, as the APIs require alternation;
* a **final user message**: everything else in prompt order, as rendered: the evidence,
  tool results, the summary of older turns, the question and the restated instructions.

Each chat format adds tokens per message. :data:`OVERHEAD` says how many, per style;
OpenAI's (3 per message, 3 to prime the reply) is its documented count, exact for its
models; Anthropic's and LlamaIndex's (which depends on the LLM behind it) are estimates.
``assemble(..., chat=style)`` keeps :func:`chat_reserve` tokens aside so that the
messages, overhead included, fit the budget (a verbatim turn's ``<message>`` tags, which
the prompt counted, cost more than the overhead of the message it becomes).
Anthropic's style marks the stable prefix with ``cache_control`` breakpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from contextkit.assembly._states import ItemStatus, Role
from contextkit.core.errors import InvalidArgumentError

__all__ = ["OVERHEAD", "ChatParts", "ChatStyle", "build_messages", "chat_reserve", "count_messages"]

ChatStyle = Literal["openai", "anthropic", "llamaindex"]

#: style -> (tokens per message, tokens priming the reply, exact?)
OVERHEAD: dict[str, tuple[int, int, bool]] = {"openai": (3, 3, True), "anthropic": (4, 4, False),
                                              "llamaindex": (4, 4, False)}
_OPENER = "(The conversation so far.)"  # Anthropic's first message must be the user's
_CACHE = {"type": "ephemeral"}


@dataclass
class ChatParts:
    """The prompt cut for chat: the system text, the verbatim turns (role, text), the final user text."""

    system: str = ""
    turns: list[tuple[str, str]] = field(default_factory=list)
    final: str = ""


def chat_reserve(style: str, tokenizer: Any) -> int:
    """Tokens to keep aside for the chat format: the system and final messages, the reply, and the
    opener a conversation starting with an assistant turn needs."""
    per, reply, _ = _overhead(style)
    return 2 * per + reply + tokenizer.count(_OPENER) + per + 4


def _overhead(style: str) -> tuple[int, int, bool]:
    if style not in OVERHEAD:
        raise InvalidArgumentError(f"message style must be one of {', '.join(OVERHEAD)}, not {style!r}")
    return OVERHEAD[style]


def _plain(parts: ChatParts, opener: bool) -> tuple[str, list[dict[str, str]]]:
    """(system text, the user/assistant messages: turns merged by role, then the final user text)."""
    msgs: list[dict[str, str]] = []
    for role, text in [*parts.turns, ("user", parts.final)]:
        if msgs and msgs[-1]["role"] == role:
            msgs[-1]["content"] += "\n\n" + text
        else:
            msgs.append({"role": role, "content": text})
    if opener and msgs and msgs[0]["role"] != "user":
        msgs.insert(0, {"role": "user", "content": _OPENER})
    return parts.system, msgs


def build_messages(parts: ChatParts, style: str = "openai") -> Any:
    """``openai``: a list of ``{"role", "content"}`` dicts, system first. ``anthropic``: ``{"system": [...],
    "messages": [...]}`` (the API's two arguments), with ``cache_control`` on the system block and on
    the last history turn. ``llamaindex``: a list of ``llama_index.core.llms.ChatMessage``."""
    _overhead(style)
    system, msgs = _plain(parts, opener=style == "anthropic")
    if style == "openai":
        return ([{"role": "system", "content": system}] if system else []) + msgs
    if style == "anthropic":
        blocks = [{"type": "text", "text": system, "cache_control": dict(_CACHE)}] if system else []
        out = []
        for i, m in enumerate(msgs):
            block: dict[str, Any] = {"type": "text", "text": m["content"]}
            if i == len(msgs) - 2 and parts.turns:  # the last message before the final one: the stable prefix ends
                block["cache_control"] = dict(_CACHE)
            out.append({"role": m["role"], "content": [block]})
        return {"system": blocks, "messages": out}
    from llama_index.core.llms import ChatMessage, MessageRole

    roles = {"system": MessageRole.SYSTEM, "user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
    head = [ChatMessage(role=MessageRole.SYSTEM, content=system)] if system else []
    return head + [ChatMessage(role=roles[m["role"]], content=m["content"]) for m in msgs]


def count_messages(parts: ChatParts, style: str, tokenizer: Any) -> int:
    """Tokens of the messages in ``style``'s chat format (exact for ``openai``, else an estimate)."""
    per, reply, _ = _overhead(style)
    system, msgs = _plain(parts, opener=style == "anthropic")
    texts = ([system] if system else []) + [m["content"] for m in msgs]
    return sum(tokenizer.count_many(texts)) + per * len(texts) + reply


_SYSTEM_ROLES = (Role.KEY_INSTRUCTIONS, Role.SYSTEM)
_CHAT_ROLES = ("user", "assistant")


def chat_parts(fills: list[Any]) -> ChatParts:
    """Cut the filled sections (prompt order, blocks final, entries not yet released) into :class:`ChatParts`."""
    parts = ChatParts()
    system, final = [], []
    for f in fills:
        if f.section.role in _SYSTEM_ROLES:
            system += [b.text for b in f.blocks]
        elif f.section.messages is not None and f.blocks:
            kept = []
            for b in f.blocks:
                e = f.entries[b.item] if b.item is not None else None
                if e is not None and e.role in _CHAT_ROLES and e.status == ItemStatus.INCLUDED:
                    parts.turns.append((e.role, e.raw))
                else:
                    kept.append(b.text)
            if len(kept) > 2:  # the frame holds a summary or turns of other roles
                final += kept
        else:
            final += [b.text for b in f.blocks]
    parts.system, parts.final = "".join(system).rstrip("\n"), "".join(final).rstrip("\n")
    return parts
