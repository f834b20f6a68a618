"""``LLMHistorySummarizer``: history summaries written by any LlamaIndex LLM, with a safety net.

An LLM writes better summaries than sentence selection, but it can fail (errors,
timeouts, empty or rambling output). So: a clear prompt, retries with
exponential backoff, validation of what comes back (non-empty; under the cap,
else trimmed at a sentence end, else retried with a firmer instruction), and
after the last failure the extractive :class:`HistorySummarizer`, with the
reason recorded in ``report.fallback`` (which the assembly report carries).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Self

from contextkit.compressors.base import CompressionReport, Compressor
from contextkit.compressors.history import (
    HistoryResult,
    HistorySummarizer,
    as_messages,
    split_recent,
)
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS, DEFAULT_TOKENIZER
from contextkit.core.records import Message
from contextkit.core.text import truncate_at_sentence
from contextkit.core.tokenizers import Tokenizer, get_tokenizer

__all__ = ["DEFAULT_SUMMARY_PROMPT", "LLMHistorySummarizer"]

DEFAULT_SUMMARY_PROMPT = (
    "Summarise the conversation below for an assistant who will continue it.\n"
    "Keep every fact a participant stated about themselves or asked to be remembered (names, numbers, "
    "dates, places, preferences, decisions, open questions), and say who said what.\n"
    "{focus}Write plain sentences, at most {max_words} words. Do not add anything that was not said.\n\n"
    "<conversation>\n{transcript}\n</conversation>\n\nSummary:"
)


class LLMHistorySummarizer(Compressor):
    """Summaries by ``llm`` (any ``llama_index.core.llms.LLM``); falls back to extractive ones."""

    name = "llm_history"

    def __init__(self, llm: Any, *, keep_last: int = 6, summary_max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS, retries: int = 2,
                 backoff_seconds: float = 0.5, prompt: str = DEFAULT_SUMMARY_PROMPT,
                 tokenizer: str | Tokenizer = DEFAULT_TOKENIZER, fallback: HistorySummarizer | None = None) -> None:
        if not hasattr(llm, "complete"):
            raise TypeError(f"llm must be a LlamaIndex LLM (with .complete), not {type(llm).__name__}")
        self.llm = llm
        self.keep_last, self.summary_max_tokens = keep_last, summary_max_tokens
        self.retries, self.backoff_seconds, self.prompt = retries, backoff_seconds, prompt
        self.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else get_tokenizer(tokenizer)
        self.fallback = fallback or HistorySummarizer(self.tokenizer, keep_last=keep_last,
                                                      summary_max_tokens=summary_max_tokens)
        self.config = self.fallback.config  # the assembler reads summary_max_tokens here
        self._cache: dict[tuple[str, int, str | None], str] = {}  # rolling: same turns, same summary

    def to_dict(self) -> dict[str, Any]:
        """The settings; ``llm`` is the model's name only (:meth:`from_dict` takes the LLM itself)."""
        meta = getattr(self.llm, "metadata", None)
        return {"type": "LLMHistorySummarizer", "llm": getattr(meta, "model_name", type(self.llm).__name__),
                "keep_last": self.keep_last, "summary_max_tokens": self.summary_max_tokens,
                "retries": self.retries, "backoff_seconds": self.backoff_seconds, "prompt": self.prompt,
                "tokenizer": self.tokenizer.name}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """Rebuild from :meth:`to_dict` with ``llm=`` the model to ask (a dict cannot hold one)."""
        settings = cls._settings_of(data)
        settings.pop("llm", None)
        if "llm" not in objects:
            raise TypeError("LLMHistorySummarizer.from_dict needs llm=: the LLM to ask (to_dict keeps its name only)")
        return cls(objects.pop("llm"), **{**settings, **objects})

    def compress(self, items: Sequence[Message | dict[str, Any]], query: str | None = None, *,
                 keep_last: int | None = None, max_tokens: int | None = None) -> HistoryResult:
        """Like :meth:`HistorySummarizer.compress`, the summary written by the LLM (cached per transcript)."""
        started = time.perf_counter()
        msgs = as_messages(items)
        keep = self.keep_last if keep_last is None else keep_last
        cap = self.summary_max_tokens if max_tokens is None else max_tokens
        older, recent = split_recent(msgs, keep)
        if not older:
            return self.fallback.compress(msgs, query, keep_last=keep, max_tokens=cap)
        transcript = "\n".join(f"{m.role}: {m.content}" for m in older)
        key = (transcript, cap, query)
        summary, failure, attempts = self._cache.get(key), None, 0
        if summary is None:
            summary, failure, attempts = self._ask(transcript, query, cap)
        if summary is None:
            result = self.fallback.compress(msgs, query, keep_last=keep, max_tokens=cap)
            result.report.fallback = f"LLM summary failed after {attempts} attempts ({failure}); extractive used"
            result.report.compressor = self.name
            return result
        self._cache[key] = summary
        report = CompressionReport(compressor=self.name, items_in=len(msgs), items_out=len(recent) + 1)
        report.input_tokens = sum(self.tokenizer.count(m.content) for m in msgs)
        report.output_tokens = self.tokenizer.count(summary) + sum(self.tokenizer.count(m.content) for m in recent)
        report.details = {"attempts": attempts, "cached": attempts == 0}
        report.seconds = time.perf_counter() - started
        return HistoryResult(summary, recent, report, older)

    def _ask(self, transcript: str, query: str | None, cap: int) -> tuple[str | None, str | None, int]:
        header = "Summary of earlier turns: "
        room = cap - self.tokenizer.count(header)
        focus = f"The user's current question is: {query}\nKeep what bears on it first.\n" if query else ""
        failure = None
        for attempt in range(1, self.retries + 2):
            words = max(8, int(room * 0.6 / (1 if attempt == 1 else attempt)))  # firmer each retry
            prompt = self.prompt.format(transcript=transcript, max_words=words, focus=focus)
            try:
                text = str(self.llm.complete(prompt).text or "").strip()
            except Exception as exc:  # noqa: BLE001 - any provider error: retry, then fall back
                failure = f"{type(exc).__name__}: {exc}"
                if attempt <= self.retries:
                    time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
                continue
            if not text:
                failure = "empty answer"
                continue
            target = room
            while text and self.tokenizer.count(text) > room:  # trimmed at a sentence end, recounted
                target -= max(1, self.tokenizer.count(text) - room)
                text = truncate_at_sentence(text, target, self.tokenizer) or ""
            if not text:
                failure = "answer over the cap with no sentence end to cut at"
                continue
            return header + text, None, attempt
        return None, failure, self.retries + 1
