"""``HistorySummarizer``: keep the last turns verbatim, condense the older ones.

The default summary is extractive and deterministic (no model, no network): the
older turns are split into sentences, each scored by

* relevance to the current question (TF-IDF cosine),
* centrality (cosine with the centroid of all older sentences),
* recency (later turns weigh more), and
* fact-bearing cues (numbers, dates, names, first-person statements such as
  "my name is", "I prefer"): what a user expects a conversation to remember,

then chosen best-first with near-repeats skipped, until the summary's hard
token cap is reached, and written back in conversation order with the turn and
who said what (``- [turn 3] user: ...``). Sentence features are cached per message, so a new turn only costs the
new message's features plus one cheap selection: the summary is incremental.

Faithful by construction: sentences come from the one splitter
(:mod:`contextkit.text`), which never cuts inside a number, a version, a date, a
URL or after an abbreviation, and every sentence is written exactly as it stands
in its message. Sentences of one turn that were neighbours there are joined by
the white space between them; a gap (sentences left out between them) is marked
`` … ``. So each piece of a summary line is a verbatim span of the message its
turn names (``bench/bench_history.py`` measures this): a summary may leave a fact
out, never alter one.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from pydantic import Field

from contextkit.compressors.base import CompressionReport, Compressor
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS, DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Message
from contextkit.core.settings import Settings
from contextkit.core.text import split_sentences
from contextkit.core.tokenizers import Tokenizer, get_tokenizer

__all__ = ["HistoryResult", "HistorySummarizer", "HistorySummarizerConfig", "as_messages", "split_recent"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_FACT_CUES = re.compile(
    r"\b(?:my|mine|i'm|i am|i've|i have|i live|i work|i was born|i prefer|i like|i love|i hate|"
    r"call me|remember|don't forget|birthday|named|favou?rite|appointment|deadline|meeting)\b", re.I)
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]+")
_STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that "
    "these those i you he she we they me him her us them my your his our their what which who whom do does did "
    "so not no yes just very really too also than then there here about into over can could would should will "
    "shall may might must have has had oh well like know think yeah okay ok".split())


def _terms(text: str) -> list[str]:
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOP and len(w) > 1]


#: Marks sentences of one turn that were not neighbours in its message (text left out between them).
GAP = " … "


@dataclass(slots=True)
class _Sentence:
    text: str
    turn: int
    role: str
    terms: Counter
    fact: float
    ordinal: int = 0  # its place among the message's sentences
    sep: str = " "  # the white space before it in the message (how it joins its neighbour)


@dataclass(slots=True)
class HistoryResult:
    """The summary of the older turns (None when all turns were kept) and the recent turns."""

    summary: str | None
    recent: list[Message]
    report: CompressionReport
    summarized: list[Message] = field(default_factory=list)

    def messages(self) -> list[Message]:
        """The history as messages: the summary (role ``system``) then the recent turns."""
        head = [Message("system", self.summary, id="history-summary")] if self.summary else []
        return head + list(self.recent)


class HistorySummarizerConfig(Settings):
    """The settings of a :class:`HistorySummarizer` (what :meth:`~HistorySummarizer.to_dict` saves)."""

    keep_last: int = Field(default=6, ge=0, description="turns kept verbatim (three exchanges)")
    summary_max_tokens: int = Field(default=DEFAULT_SUMMARY_MAX_TOKENS, ge=16, description="hard cap on the summary")
    tokenizer: str = DEFAULT_TOKENIZER
    weight_relevance: float = 0.45
    weight_centrality: float = 0.15
    weight_recency: float = 0.15
    weight_facts: float = 0.25
    drop_unrelated: bool = Field(default=False, description="drop older turns with nothing in common with the question")
    redundancy: float = Field(default=0.6, description="skip a sentence sharing this share of terms with a chosen one")


class HistorySummarizer(Compressor):
    """Extractive, offline, deterministic history compression (see the module docstring)."""

    name = "extractive_history"

    def __init__(self, tokenizer: str | Tokenizer | None = None, **options: Any) -> None:
        if isinstance(tokenizer, str):
            options["tokenizer"] = tokenizer
        self.config = HistorySummarizerConfig(**options)
        self._tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else None
        self._features: dict[bytes, list[_Sentence]] = {}  # message hash -> its sentences (the rolling cache)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = get_tokenizer(self.config.tokenizer)
        return self._tokenizer

    def to_dict(self) -> dict[str, Any]:
        return {"type": "HistorySummarizer", **self.config.model_dump()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """Rebuild from :meth:`to_dict`; ``tokenizer=`` may pass a :class:`Tokenizer` object."""
        return cls(**{**cls._settings_of(data), **objects})

    # ----------------------------------------------------------------- public
    def compress(self, items: Sequence[Message | dict[str, Any]], query: str | None = None, *,
                 keep_last: int | None = None, max_tokens: int | None = None) -> HistoryResult:
        """Summarise all but the last ``keep_last`` turns into at most ``max_tokens`` tokens.

        ``items`` are the turns, oldest first (:class:`Message` or dicts with role and
        content); ``keep_last`` and ``max_tokens`` override ``keep_last`` and
        ``summary_max_tokens`` of the configuration for this call.
        """
        started = time.perf_counter()
        msgs = as_messages(items)
        keep = self.config.keep_last if keep_last is None else keep_last
        cap = self.config.summary_max_tokens if max_tokens is None else max_tokens
        if keep < 0 or cap < 0:
            raise InvalidArgumentError("keep_last and max_tokens must not be negative")
        older, recent = split_recent(msgs, keep)
        report = CompressionReport(compressor=self.name, items_in=len(msgs))
        tok = self.tokenizer
        report.input_tokens = sum(tok.count(m.content) for m in msgs)
        summary = self._summarise(older, query, cap, report) if older else None
        report.items_out = len(recent) + (1 if summary else 0)
        report.output_tokens = sum(tok.count(m.content) for m in recent) + (tok.count(summary) if summary else 0)
        report.seconds = time.perf_counter() - started
        return HistoryResult(summary, recent, report, older)

    def summarize(self, messages: Sequence[Message | dict[str, Any]], query: str | None = None,
                  max_tokens: int | None = None) -> str:
        """Just the summary of ``messages`` (all of them; no recent turns kept apart)."""
        return self.compress(messages, query, keep_last=0, max_tokens=max_tokens).summary or ""

    # ------------------------------------------------------------- internals
    def _sentences(self, msg: Message, turn: int) -> list[_Sentence]:
        key = hashlib.blake2b(f"{msg.role}\0{msg.content}".encode("utf-8", "surrogatepass"), digest_size=12).digest()
        cached = self._features.get(key)
        if cached is None:
            cached = []
            previous_end = 0
            for ordinal, (a, b) in enumerate(split_sentences(msg.content)):
                text = msg.content[a:b]
                cue = bool(_FACT_CUES.search(text)) + bool(_NUMBER.search(text)) + bool(_NAME.search(text))
                sep = msg.content[previous_end:a] if ordinal else " "
                cached.append(_Sentence(text, -1, msg.role, Counter(_terms(text)), min(cue, 2) / 2, ordinal,
                                        sep if sep and "\n" not in sep else " "))
                previous_end = b
            self._features[key] = cached
        return [_Sentence(s.text, turn, s.role, s.terms, s.fact, s.ordinal, s.sep) for s in cached]

    def _summarise(self, older: list[Message], query: str | None, cap: int, report: CompressionReport) -> str | None:
        """Score the older turns' sentences, choose the best within ``cap``, render them."""
        sents = [s for turn, m in enumerate(older) for s in self._sentences(m, turn)]
        report.details["sentences"] = len(sents)
        if not sents or cap <= 0:
            return None
        ranked = self._rank(sents, _Space.build(sents, query), turns=max(len(older) - 1, 1))
        header = f"Earlier ({len(older)} turns, excerpts):"
        chosen = self._choose(ranked, sents, cap - self.tokenizer.count(header + "\n"))
        report.removed["sentences"] = len(sents) - len(chosen)
        if not chosen:
            return None
        return self._render(header, [sents[i] for i in sorted(chosen)], cap)

    def _rank(self, sents: list[_Sentence], space: _Space, turns: int) -> list[int]:
        """Indices of the sentences worth keeping, best first (the weighted mix of the module docstring)."""
        cfg = self.config
        scored = []
        for i, s in enumerate(sents):
            if not space.vecs[i]:  # "Right." "Haha!": nothing to remember
                continue
            rel = space.relevance(i)
            if cfg.drop_unrelated and space.qvec and rel == 0.0 and not s.fact:
                continue
            score = (cfg.weight_relevance * rel + cfg.weight_centrality * space.centrality(i)
                     + cfg.weight_recency * (s.turn / turns) + cfg.weight_facts * s.fact)
            scored.append((score, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [i for _, i in scored]

    def _choose(self, ranked: list[int], sents: list[_Sentence], budget: int) -> list[int]:
        """Take sentences best first while their lines fit ``budget`` tokens, skipping near-repeats."""
        chosen: list[int] = []
        for i in ranked:
            words = set(sents[i].terms)
            if any(_overlap(words, set(sents[j].terms)) >= self.config.redundancy for j in chosen):
                continue
            line_tokens = self.tokenizer.count(f"- [turn {sents[i].turn + 1}] {sents[i].role}: {sents[i].text}\n")
            if line_tokens <= budget:
                chosen.append(i)
                budget -= line_tokens
            if budget < 8:
                break
        return chosen

    def _render(self, header: str, chosen: list[_Sentence], cap: int) -> str:
        """One line per turn, ``- [turn N] role: ...`` (N counts from 1), its sentences verbatim."""
        lines: list[str] = [header]
        last: _Sentence | None = None
        for s in chosen:
            if last is not None and s.turn == last.turn:
                lines[-1] += (s.sep if s.ordinal == last.ordinal + 1 else GAP) + s.text
            else:
                lines.append(f"- [turn {s.turn + 1}] {s.role}: {s.text}")
            last = s
        text = "\n".join(lines)
        while self.tokenizer.count(text) > cap and len(lines) > 1:  # joined lines can count differently
            lines.pop()
            text = "\n".join(lines)
        return text


@dataclass(slots=True)
class _Space:
    """TF-IDF vectors of the older sentences, their norms, their centroid and the query's vector."""

    vecs: list[dict[str, float]]
    norms: list[float]
    centroid: dict[str, float]
    c_norm: float
    qvec: dict[str, float]
    q_norm: float

    @classmethod
    def build(cls, sents: list[_Sentence], query: str | None) -> _Space:
        df = Counter(t for s in sents for t in s.terms)
        n = len(sents)
        idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
        vecs = [{t: c * idf[t] for t, c in s.terms.items()} for s in sents]
        norms = [math.sqrt(sum(v * v for v in vec.values())) or 1.0 for vec in vecs]
        centroid: dict[str, float] = {}
        for vec, norm in zip(vecs, norms):
            for t, v in vec.items():
                centroid[t] = centroid.get(t, 0) + v / norm
        c_norm = math.sqrt(sum(v * v for v in centroid.values())) or 1.0
        qvec = {t: c * idf.get(t, 1.0) for t, c in Counter(_terms(query or "")).items()}
        q_norm = math.sqrt(sum(v * v for v in qvec.values())) or 1.0
        return cls(vecs, norms, centroid, c_norm, qvec, q_norm)

    def relevance(self, i: int) -> float:
        """Cosine of sentence ``i`` with the query (0 without a query)."""
        if not self.qvec:
            return 0.0
        return sum(v * self.qvec.get(t, 0.0) for t, v in self.vecs[i].items()) / (self.norms[i] * self.q_norm)

    def centrality(self, i: int) -> float:
        """Cosine of sentence ``i`` with the centroid of all the older sentences."""
        return sum(v * self.centroid[t] for t, v in self.vecs[i].items()) / (self.norms[i] * self.c_norm)


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def split_recent(msgs: list[Message], keep: int) -> tuple[list[Message], list[Message]]:
    """The older turns and the last ``keep`` (all are older when ``keep`` is 0)."""
    return (msgs[:-keep], msgs[-keep:]) if keep else (msgs, [])


def as_messages(values: Iterable[Message | dict[str, Any]]) -> list[Message]:
    """Turns as :class:`Message` (dicts through :meth:`Message.from_dict`); a bad one is named by position."""
    out: list[Message] = []
    for position, value in enumerate(values):
        if isinstance(value, Message):
            out.append(value)
            continue
        try:
            out.append(Message.from_dict(value))
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"message #{position}: {exc}") from None
    return out
