"""Memory for LlamaIndex chat engines and agents: recent turns verbatim, older ones summarised.

LlamaIndex's current ``Memory`` keeps recent messages within a token limit and
flushes older ones into *memory blocks*; ``ContextKitSummaryBlock`` is such a
block: it keeps the flushed turns and, on every read, gives back contextkit's
extractive summary of them, focused on the latest user message and capped in
tokens. ``contextkit_memory()`` builds a ``Memory`` wired with it.

``Memory.reset()`` in LlamaIndex deletes the stored messages but not what memory
blocks hold, so a summary of the previous conversation would reach the next
user's prompt after ``chat_engine.reset()``. :class:`ContextKitMemory` (what
``contextkit_memory()`` returns) clears its blocks too.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from pydantic import Field, PrivateAttr

from contextkit.assembly.render import escape_text
from contextkit.compressors.history import HistorySummarizer
from contextkit.records import Message

__all__ = ["ContextKitMemory", "ContextKitSummaryBlock", "contextkit_memory"]


def _text(message: ChatMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else str(content or "")


class ContextKitSummaryBlock(BaseMemoryBlock[str]):
    """A memory block holding the turns flushed from short-term memory, read back as a summary."""

    name: str = "conversation_summary"
    description: str | None = "Older turns of this conversation, condensed by contextkit."
    summary_max_tokens: int = Field(default=512, ge=16)
    tokenizer: str = "cl100k_base"
    _flushed: list[Message] = PrivateAttr(default_factory=list)
    _summarizer: HistorySummarizer | None = PrivateAttr(default=None)

    def _get_summarizer(self) -> HistorySummarizer:
        if self._summarizer is None:
            self._summarizer = HistorySummarizer(self.tokenizer, summary_max_tokens=self.summary_max_tokens)
        return self._summarizer

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        if not self._flushed:
            return ""
        question = next((_text(m) for m in reversed(messages or []) if str(m.role.value) == "user"), None)
        summary = self._get_summarizer().summarize(self._flushed, question, max_tokens=self.summary_max_tokens)
        return escape_text(summary)  # LlamaIndex wraps blocks in XML tags: keep turn text from closing them

    async def _aput(self, messages: list[ChatMessage]) -> None:
        self._flushed.extend(Message(str(m.role.value), _text(m)) for m in messages if _text(m).strip())

    @property
    def flushed(self) -> list[Message]:
        return list(self._flushed)

    def reset(self) -> None:
        """Forget every flushed turn (a new conversation starts)."""
        self._flushed = []


class ContextKitMemory(Memory):
    """LlamaIndex's ``Memory`` whose ``reset`` also clears the memory blocks that can be cleared."""

    @classmethod
    def class_name(cls) -> str:
        return "ContextKitMemory"

    async def areset(self, status: Any = None) -> None:
        await super().areset(status=status)
        if status is None:  # a whole reset, not one status of messages
            for block in self.memory_blocks:
                reset = getattr(block, "reset", None)
                if callable(reset):
                    reset()


def contextkit_memory(token_limit: int = 3000, summary_max_tokens: int = 512, **memory_kwargs: Any) -> ContextKitMemory:
    """A LlamaIndex ``Memory`` whose overflow goes to a :class:`ContextKitSummaryBlock` (and whose
    ``reset`` clears that summary too)."""
    block = ContextKitSummaryBlock(summary_max_tokens=summary_max_tokens)
    memory_kwargs.setdefault("token_flush_size", max(1, int(token_limit * 0.3)))
    return ContextKitMemory.from_defaults(token_limit=token_limit, memory_blocks=[block], **memory_kwargs)
