"""Compaction: the oldest verbatim turns condensed into a frozen summary, in blocks, with hysteresis.

Why blocks: a provider's prompt cache serves a request's longest prefix shared with an earlier one.
A window of verbatim turns that slides by one turn per call changes the request from its first
history message on, so only the system message is ever cached. A session instead appends turns until
the request passes a high-water mark, then condenses the oldest turns at once, down to a low-water
mark: the request changes from the summary on once per compaction and is append-only in between.

What a compacted block becomes: the sentences of its user and assistant text chosen by the
extractive :class:`~contextkit.compressors.HistorySummarizer` (verbatim, with their turn numbers; a
later statement of the same fact supersedes an earlier one when the summarizer can tell), and a stub
line per tool call and per tool result (the tool, the arguments, the size of its output, its first
error line, and the handle that gives the whole output back). A call and its results are condensed
together: a block ends only where every call before it has its results.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from contextkit.assembly._turns import Turn
from contextkit.core.records import Message
from contextkit.core.tokenizers import Tokenizer

__all__ = ["block_summary", "recall", "safe_cuts", "tool_stubs"]

_ALARM = re.compile(r"\b(?:error|exception|traceback|failed|failure|fatal|assert\w*)\b", re.IGNORECASE)
_ARGS_CHARS = 160
_LINE_CHARS = 200


def safe_cuts(turns: Sequence[Turn]) -> list[int]:
    """Indexes ``i`` where ``turns[:i]`` may be condensed: every call before ``i`` has its result there,
    and ``turns[i]`` is not a tool result."""
    cuts: list[int] = []
    open_calls: set[str] = set()
    for i, turn in enumerate(turns):
        if not open_calls and turn.role != "tool":
            cuts.append(i)
        if turn.role == "tool" and turn.call_id:
            open_calls.discard(turn.call_id)
        open_calls.update(c.id for c in turn.tool_calls)
    if not open_calls:
        cuts.append(len(turns))
    return cuts


def _as_messages(turns: Sequence[Turn], first: int) -> list[Message]:
    """The turns' text as messages, numbered from turn 1 of the session: earlier turns (and tool turns,
    whose stubs are written apart) stand as empty messages, so the summarizer's ``[turn N]`` is the
    session's turn number."""
    pad = [Message("user", "")] * first
    return pad + [Message(t.role if t.role in ("user", "assistant") else "user",
                          t.text if t.role in ("user", "assistant") else "") for t in turns]


def _excerpts(summarizer: Any, messages: list[Message], query: str | None, cap: int,
              newer: Sequence[Message], shown: str = "") -> str:
    """The summarizer's lines, without its header (``[turn N]`` counts from the session's first turn)."""
    if cap < 16 or not any(m.content for m in messages):
        return ""
    if _takes_newer(summarizer):  # later turns that may correct a fact of these (HistorySummarizer)
        text = summarizer.summarize(messages, query, max_tokens=cap, newer=newer, shown=shown)
    else:  # a summarizer of your own, without supersession
        text = summarizer.summarize(messages, query, max_tokens=cap)
    return text.split("\n", 1)[1] if "\n" in text else ""


def _takes_newer(summarizer: Any) -> bool:
    import inspect

    try:
        return "newer" in inspect.signature(summarizer.summarize).parameters
    except (TypeError, ValueError):
        return False


def tool_stubs(turns: Sequence[Turn], first: int) -> list[str]:
    """One line per call and per result: what was asked, and what came back, by handle."""
    lines = []
    for offset, turn in enumerate(turns):
        number = first + offset + 1
        for call in turn.tool_calls:
            lines.append(f"- [turn {number}] {turn.role} called {call.name}({_short(call.arguments, _ARGS_CHARS)})")
        if turn.role == "tool":
            lines.append(f"- [turn {number}] {_result_line(turn)}")
    return lines


def _result_line(turn: Turn) -> str:
    text = turn.text
    count = text.count("\n") + 1 if text else 0
    alarm = next((line for line in text.splitlines() if _ALARM.search(line)), None)
    first = alarm if alarm is not None else next((line for line in text.splitlines() if line.strip()), "")
    state = "error" if turn.is_error else "result"
    handle = f"; whole output: handle {turn.handle}" if turn.handle else ""
    return (f"{turn.name or 'tool'} {state} ({count:,} lines, {len(text):,} characters): "
            f"{_short(first.strip(), _LINE_CHARS)}{handle}")


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def block_summary(turns: Sequence[Turn], first: int, summarizer: Any, tokenizer: Tokenizer, cap: int,
                  newer: Sequence[Turn] = ()) -> str:
    """The frozen text of turns ``first+1 .. first+len(turns)`` within about ``cap`` tokens: excerpts of
    their text (two thirds of the room at least), then the tool stubs, newest kept where they do not fit."""
    head = f"Turns {first + 1}-{first + len(turns)}, condensed:"
    stubs = tool_stubs(turns, first)
    stub_room = cap // 3 if any(t.text for t in turns if t.role in ("user", "assistant")) else cap
    kept: list[str] = []
    used = 0
    for line in reversed(stubs):
        cost = tokenizer.count(line) + 1
        if used + cost > stub_room:
            kept.append(f"- ({len(stubs) - len(kept)} earlier tool lines left out)")
            break
        kept.append(line)
        used += cost
    kept.reverse()
    newer_messages = [Message(t.role, t.text) for t in newer if t.role in ("user", "assistant") and t.text]
    excerpts = _excerpts(summarizer, _as_messages(turns, first), None, cap - used - tokenizer.count(head) - 8,
                         newer_messages)
    body = [head] + ([excerpts] if excerpts else []) + (["Tool calls:", *kept] if kept else [])
    return "\n".join(body)


def recall(compacted: Sequence[Turn], summarizer: Any, query: str, cap: int, newer: Sequence[Turn] = (),
           shown: str = "") -> str:
    """Sentences of the compacted turns that bear on ``query``, verbatim with their turn numbers, within
    ``cap`` tokens: the question-dependent part, placed in the tail where it does not disturb the cache.
    Sentences of ``shown`` (the summaries the request already carries) are not repeated."""
    newer_messages = [Message(t.role, t.text) for t in newer if t.role in ("user", "assistant") and t.text]
    return _excerpts(summarizer, _as_messages(compacted, 0), query, cap, newer_messages, shown)
