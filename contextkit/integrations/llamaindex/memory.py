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

from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.memory import Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from pydantic import Field, PrivateAttr

from contextkit.assembly.render import escape_text
from contextkit.compressors.history import HistorySummarizer
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS, DEFAULT_TOKENIZER
from contextkit.core.records import Message
from contextkit.core.tokenizers import get_tokenizer

__all__ = ["ContextKitMemory", "ContextKitSummaryBlock", "contextkit_memory"]

#: A summary shorter than this is not worth its tags: ``atruncate`` drops the block instead.
_MIN_SUMMARY_TOKENS = 16


def _text(message: ChatMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else str(content or "")


class ContextKitSummaryBlock(BaseMemoryBlock[str]):
    """A memory block holding the turns flushed from short-term memory, read back as a summary."""

    name: str = "conversation_summary"
    description: str | None = "Older turns of this conversation, condensed by contextkit."
    summary_max_tokens: int = Field(default=DEFAULT_SUMMARY_MAX_TOKENS, ge=16)
    tokenizer: str = DEFAULT_TOKENIZER
    #: ``Memory``'s rule: 0 is never truncated, higher numbers are cut first. A summary of
    #: old turns is the first thing to give up when the limit is reached, so not 0 (the
    #: base class's default), which let the summary push ``Memory`` past ``token_limit``.
    priority: int = Field(default=1, ge=0)
    _flushed: list[Message] = PrivateAttr(default_factory=list)
    _summarizer: HistorySummarizer | None = PrivateAttr(default=None)
    _question: str | None = PrivateAttr(default=None)

    def _get_summarizer(self) -> HistorySummarizer:
        if self._summarizer is None:
            self._summarizer = HistorySummarizer(self.tokenizer, summary_max_tokens=self.summary_max_tokens)
        return self._summarizer

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        if not self._flushed:
            return ""
        question = next((_text(m) for m in reversed(messages or []) if m.role == MessageRole.USER), None)
        self._question = question  # what atruncate summarises for, if Memory must shorten this
        summary = self._get_summarizer().summarize(self._flushed, question, max_tokens=self.summary_max_tokens)
        return escape_text(summary)  # LlamaIndex wraps blocks in XML tags: keep turn text from closing them

    async def _aput(self, messages: list[ChatMessage]) -> None:
        self._flushed.extend(Message(str(m.role.value), _text(m)) for m in messages if _text(m).strip())

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """The summary made again ``tokens_to_truncate`` tokens shorter; None when too little would be left.

        ``Memory`` calls this when its blocks and the chat history exceed
        ``token_limit`` (the base class drops the whole block). Summarising again,
        rather than cutting the text, keeps the turns most relevant to the last
        question instead of the oldest ones.
        """
        if tokens_to_truncate <= 0:
            return content
        target = get_tokenizer(self.tokenizer).count(content) - tokens_to_truncate if content else 0
        if target < _MIN_SUMMARY_TOKENS or not self._flushed:
            return None
        summary = self._get_summarizer().summarize(self._flushed, self._question, max_tokens=target)
        return escape_text(summary) if summary else None

    @property
    def flushed(self) -> list[Message]:
        return list(self._flushed)

    def reset(self) -> None:
        """Forget every flushed turn (a new conversation starts)."""
        self._flushed = []
        self._question = None


class ContextKitMemory(Memory):
    """LlamaIndex's ``Memory`` whose ``reset`` also clears the memory blocks that can be cleared,
    and whose blocks are truncated in the order ``BaseMemoryBlock.priority`` documents."""

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

    async def _truncate_memory_blocks(self, content_per_memory_block: dict[str, Any], memory_blocks_tokens: int,
                                      chat_history_tokens: int) -> dict[str, Any]:
        """Shorten, then drop, blocks until blocks and history fit ``token_limit``: highest number first.

        ``priority`` is documented as "0 = never truncate, 1 = highest priority",
        and llama-index-core's own tests expect a block of priority 2 to go before
        one of 1; ``Memory`` 0.14 sorts the other way and cuts the most important
        block first. Priority 0 is never touched.
        """
        excess = memory_blocks_tokens + chat_history_tokens - self.token_limit
        if excess <= 0:
            return content_per_memory_block
        out = dict(content_per_memory_block)
        cuttable = sorted((b for b in self.memory_blocks if b.priority != 0), key=lambda b: -b.priority)
        for block in cuttable:
            if excess <= 0:
                break
            content = out.get(block.name, [])
            cut = await block.atruncate(content, excess)
            kept = 0 if cut is None else self._estimate_token_count(cut)
            excess -= self._estimate_token_count(content) - kept
            out[block.name] = [] if cut is None else cut
        for block in cuttable:  # still too long: drop whole blocks, in the same order
            if excess <= 0:
                break
            excess -= self._estimate_token_count(out.pop(block.name, []))
        return out


def contextkit_memory(token_limit: int = 3000, summary_max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS, *, priority: int = 1,
                      **memory_kwargs: Any) -> ContextKitMemory:
    """A LlamaIndex ``Memory`` whose overflow goes to a :class:`ContextKitSummaryBlock` (and whose
    ``reset`` clears that summary too).

    ``priority`` is the block's, under ``Memory``'s rule: 0 keeps the summary whole even
    past ``token_limit``; 1 (the default) or more lets ``Memory`` shorten it, after any
    block of a higher number, so the memory stays within ``token_limit``.
    """
    block = ContextKitSummaryBlock(summary_max_tokens=summary_max_tokens, priority=priority)
    memory_kwargs.setdefault("token_flush_size", max(1, int(token_limit * 0.3)))
    # Memory.from_defaults builds ``cls(...)`` but is annotated to return "Memory" (llama-index-core 0.14)
    return ContextKitMemory.from_defaults(  # type: ignore[return-value]
        token_limit=token_limit, memory_blocks=[block], **memory_kwargs)
