"""``HistorySummarizer``: keep the last turns verbatim, condense the older ones.

The summary is extractive and deterministic: the older turns are split into
sentences, each scored by

* relevance to the current question: TF-IDF cosine, mixed with the cosine of
  sentence embeddings when the summarizer has an embedder (``embedder=``, e.g. the
  index's, which ``ContextAssembler`` hands it; or ``model=`` loaded on first use), so
  a fact asked in other words is found by meaning (no model, no network otherwise);
* the user's own statements ("my son takes", "our flight", "I'm allergic") and a
  number, time or name raise relevance in proportion to it: a number counts where
  the sentence is about the question's subject, not anywhere
  (:mod:`contextkit.compressors._history_score`);
* a small prior for the user's own statements, more for those carrying a number or
  a name (chit-chat numbers earn nothing; with no question: fact-bearing cues, numbers,
  dates, names, "my name is", "I prefer", in place of relevance),
* centrality (cosine with the centroid of all older sentences) and recency (later
  turns weigh a little more),

with a sentence that a newer turn supersedes left out (or, with ``supersede="mark"``, set on a line
of its own headed ``- [turn 3, superseded by turn 41]``): a fact the user restated later with
another value ("the dose is 5 ml" ... "the doctor changed it, 7.5 ml now"), by the deterministic
rule of :mod:`contextkit.compressors._facts`, over all the turns given: the older ones, the recent
ones and ``newer=`` turns the caller keeps elsewhere (a session's verbatim recent turns);
then chosen best-first with near-repeats skipped, until the summary's hard
token cap is reached, and written back in conversation order with the turn and
who said what (``- [turn 3] user: ...``). Sentence features (embeddings included) are cached per
message, so a new turn only costs the new message's features plus one cheap selection (and the
question's embedding): the summary is incremental.

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

import functools
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from pydantic import Field

from contextkit.compressors._facts import Statement, superseded_sentences
from contextkit.compressors._history_score import (
    Sentence,
    Space,
    dense_relevance,
    fact_cue,
    personal_cue,
    scaled,
    terms,
    value_cue,
)
from contextkit.compressors.base import CompressionReport, Compressor
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS, DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError, ModelNotFoundError
from contextkit.core.records import Message
from contextkit.core.settings import Settings
from contextkit.core.text import split_sentences
from contextkit.core.tokenizers import Tokenizer, get_tokenizer

__all__ = ["HistoryResult", "HistorySummarizer", "HistorySummarizerConfig", "as_messages", "split_recent"]

log = logging.getLogger(__name__)

#: Marks sentences of one turn that were not neighbours in its message (text left out between them).
GAP = " … "


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
    model: str | None = Field(default=None, description="embedding model for relevance by meaning, loaded on first "
                              "use when no embedder= is given ('default': all-MiniLM-L6-v2); None: lexical only")
    weight_relevance: float = Field(default=0.6, description="relevance to the question (TF-IDF, and embeddings "
                                    "when there is an embedder)")
    weight_dense: float = Field(default=0.7, ge=0.0, le=1.0, description="share of relevance from embeddings")
    boost_personal: float = Field(default=1.0, ge=0.0, description="relevance raised for the user's own facts "
                                  "('my', 'our', 'I ...') over chit-chat")
    boost_value: float = Field(default=0.5, ge=0.0, description="relevance raised for a number, time or name: "
                               "counts only as far as the sentence is about the question's subject")
    weight_centrality: float = 0.05
    weight_recency: float = 0.05
    weight_facts: float = Field(default=0.15, description="fact-bearing sentences (the user's own statements; "
                                "with no question, also numbers and names)")
    drop_unrelated: bool = Field(default=False, description="drop older turns with nothing in common with the question")
    redundancy: float = Field(default=0.6, description="skip a sentence sharing this share of terms with a chosen one")
    min_similarity: float | None = Field(
        default=None, ge=-1.0, le=1.0, description="with a question and an embedder: older sentences whose "
        "embedding cosine with it is below this are left out, so a question about nothing said before recalls "
        "nothing (a correction counts as similar as the statement it supersedes); None: every sentence competes")
    supersede: Literal["drop", "mark", "off"] = Field(
        default="drop", description="a sentence whose fact a newer turn restates with another value: left out "
        "('drop'), kept on its own line headed '[turn N, superseded by turn M]' ('mark'), or treated like any other")


class HistorySummarizer(Compressor):
    """Extractive, offline, deterministic history compression (see the module docstring).

    ``embedder`` (an :class:`~contextkit.embedders.Embedder`, e.g. the one an index's
    retriever holds) lets relevance find a fact asked in other words; without one, and
    with no ``model`` to load, relevance is lexical. A model that cannot be loaded falls
    back to lexical relevance, said in the report's ``fallback``.
    """

    name = "extractive_history"

    def __init__(self, tokenizer: str | Tokenizer | None = None, *, embedder: Any = None, **options: Any) -> None:
        if isinstance(tokenizer, str):
            options["tokenizer"] = tokenizer
        if embedder is not None and getattr(embedder, "model_name", None):
            options.setdefault("model", embedder.model_name)
        self.config = HistorySummarizerConfig(**options)
        self._tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else None
        self._embedder = embedder
        self._embedder_error: str | None = None  # why the configured model could not be loaded
        self._features: dict[bytes, list[Sentence]] = {}  # message hash -> its sentences (the rolling cache)
        self._statements: dict[tuple[str, str], list[Statement]] = {}  # (role, content) -> its value statements

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = get_tokenizer(self.config.tokenizer)
        return self._tokenizer

    @property
    def embedder(self) -> Any:
        """The embedder relevance uses: the one given, else ``model`` loaded on first use; None for
        lexical relevance (no model configured, or it could not be loaded)."""
        if self._embedder is None and self.config.model and self._embedder_error is None:
            try:
                self._embedder = _shared_model(self.config.model)
            except (ModelNotFoundError, ImportError, OSError) as exc:
                self._embedder = None
                self._embedder_error = f"embedding model {self.config.model!r} not loaded ({exc}); lexical relevance"
                log.warning("history summaries: %s", self._embedder_error)
        return self._embedder

    def to_dict(self) -> dict[str, Any]:
        """The configuration (an embedder as its model name), for :meth:`from_dict`."""
        return {"type": "HistorySummarizer", **self.config.model_dump()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """Rebuild from :meth:`to_dict`; ``tokenizer=`` may pass a :class:`Tokenizer` object and
        ``embedder=`` an embedder (else the saved ``model`` is loaded on first use)."""
        return cls(**{**cls._settings_of(data), **objects})

    # ----------------------------------------------------------------- public
    def compress(self, items: Sequence[Message | dict[str, Any]], query: str | None = None, *,
                 keep_last: int | None = None, max_tokens: int | None = None,
                 newer: Sequence[Message | dict[str, Any]] = (), shown: str = "") -> HistoryResult:
        """Summarise all but the last ``keep_last`` turns into at most ``max_tokens`` tokens.

        ``items`` are the turns, oldest first (:class:`Message` or dicts with role and
        content); ``keep_last`` and ``max_tokens`` override ``keep_last`` and
        ``summary_max_tokens`` of the configuration for this call. ``newer`` are turns after
        ``items`` that are neither summarised nor returned, only read for corrections: an older
        statement they restate with another value is superseded (the ``supersede`` setting).
        ``shown``: text the model already sees (an earlier summary): its sentences are not repeated.
        """
        started = time.perf_counter()
        msgs = as_messages(items)
        keep = self.config.keep_last if keep_last is None else keep_last
        cap = self.config.summary_max_tokens if max_tokens is None else max_tokens
        if keep < 0 or cap < 0:
            raise InvalidArgumentError("keep_last and max_tokens must not be negative")
        older, recent = split_recent(msgs, keep)
        later = [*recent, *as_messages(newer)]
        report = CompressionReport(compressor=self.name, items_in=len(msgs))
        tok = self.tokenizer
        report.input_tokens = sum(tok.count(m.content) for m in msgs)
        summary = self._summarise(older, query, cap, report, later, shown) if older else None
        report.items_out = len(recent) + (1 if summary else 0)
        report.output_tokens = sum(tok.count(m.content) for m in recent) + (tok.count(summary) if summary else 0)
        report.seconds = time.perf_counter() - started
        return HistoryResult(summary, recent, report, older)

    def summarize(self, messages: Sequence[Message | dict[str, Any]], query: str | None = None,
                  max_tokens: int | None = None, *, newer: Sequence[Message | dict[str, Any]] = (),
                  shown: str = "") -> str:
        """Just the summary of ``messages`` (all of them; no recent turns kept apart); ``newer``: later
        turns read only for corrections; ``shown``: text whose sentences are not repeated (see :meth:`compress`)."""
        return self.compress(messages, query, keep_last=0, max_tokens=max_tokens, newer=newer,
                             shown=shown).summary or ""

    # ------------------------------------------------------------- internals
    def _sentences(self, msg: Message, turn: int) -> list[Sentence]:
        key = hashlib.blake2b(f"{msg.role}\0{msg.content}".encode("utf-8", "surrogatepass"), digest_size=12).digest()
        cached = self._features.get(key)
        if cached is None:
            cached = []
            previous_end = 0
            for ordinal, (a, b) in enumerate(split_sentences(msg.content)):
                text = msg.content[a:b]
                sep = msg.content[previous_end:a] if ordinal else " "
                cached.append(Sentence(text, -1, msg.role, Counter(terms(text)), fact_cue(text),
                                       personal_cue(text, msg.role), value_cue(text), ordinal,
                                       sep if sep and "\n" not in sep else " "))
                previous_end = b
            self._features[key] = cached
        # Copies with this call's turn (a plain constructor: cheaper than dataclasses.replace on thousands
        # of sentences); the vector box stays shared.
        return [Sentence(s.text, turn, s.role, s.terms, s.fact, s.personal, s.value, s.ordinal, s.sep, s.vector)
                for s in cached]

    def _summarise(self, older: list[Message], query: str | None, cap: int, report: CompressionReport,
                   later: Sequence[Message] = (), shown: str = "") -> str | None:
        """Score the older turns' sentences (less those superseded, those already shown and, with
        ``min_similarity``, those unlike the question), choose the best within ``cap``, render them."""
        sents = [s for turn, m in enumerate(older) for s in self._sentences(m, turn)]
        report.details["sentences"] = len(sents)
        if not sents or cap <= 0:
            return None
        gone: dict[tuple[int, int], int] = {}
        if self.config.supersede != "off":
            gone = superseded_sentences(older, later, cache=self._statements)
            report.details["superseded"] = len(gone)
        cosines: dict[tuple[int, int], float] | None = None
        if query and query.strip() and self.embedder is not None and self.config.weight_dense > 0.0:
            cosines = self._cosines(sents, query, gone)
            if self.config.min_similarity is not None:
                sents = [s for s in sents if cosines[(s.turn, s.ordinal)] >= self.config.min_similarity]
                report.details["similar"] = len(sents)
        if shown:  # verbatim there too (a summary's pieces are whole sentences)
            sents = [s for s in sents if s.text not in shown]
        if not sents:
            return None
        if gone:
            if self.config.supersede == "drop":
                sents = [s for s in sents if (s.turn, s.ordinal) not in gone]
                if not sents:
                    return None
        space = Space.build(sents, query)
        ranked = self._rank(sents, space, self._relevance(sents, space, query, report, cosines),
                            turns=max(len(older) - 1, 1))
        if gone:  # "mark": a superseded sentence only where room is left, never crowding out its correction
            ranked = sorted(ranked, key=lambda i: (sents[i].turn, sents[i].ordinal) in gone)
        header = f"Earlier ({len(older)} turns, excerpts):"
        chosen = self._choose(ranked, sents, cap - self.tokenizer.count(header + "\n"))
        report.removed["sentences"] = len(sents) - len(chosen)
        if not chosen:
            return None
        return self._render(header, [sents[i] for i in sorted(chosen)], cap, gone)

    def _cosines(self, sents: list[Sentence], query: str,
                 gone: Mapping[tuple[int, int], int]) -> dict[tuple[int, int], float]:
        """Each sentence's embedding cosine with ``query``; a sentence carrying a value in a turn that
        supersedes others takes the best of theirs when higher (a correction bears on what it corrects,
        whatever its words: "the review is at 9:15 am now" answers "when is my meeting with my boss")."""
        cosines = {(s.turn, s.ordinal): c for s, c in zip(sents, dense_relevance(self.embedder, sents, query),
                                                           strict=True)}
        corrected: dict[int, float] = {}
        for key, by in gone.items():
            if key in cosines:
                corrected[by] = max(cosines[key], corrected.get(by, -1.0))
        for s in sents:
            if s.turn in corrected and s.value > 0:
                key = (s.turn, s.ordinal)
                cosines[key] = max(cosines[key], corrected[s.turn])
        return cosines

    def _relevance(self, sents: list[Sentence], space: Space, query: str | None, report: CompressionReport,
                   cosines: Mapping[tuple[int, int], float] | None = None) -> list[float] | None:
        """Each sentence's relevance to ``query`` relative to this conversation (0..1): lexical,
        mixed with the embeddings' when there is an embedder; None without a question."""
        if not query or not query.strip():
            return None
        lexical = scaled([space.relevance(i) for i in range(len(sents))])
        embedder = self.embedder
        if self._embedder_error:
            report.fallback = self._embedder_error
        if embedder is None or self.config.weight_dense == 0.0:
            report.details["relevance"] = "lexical"
            return lexical
        report.details["relevance"] = "lexical+dense"
        raw = ([cosines[(s.turn, s.ordinal)] for s in sents] if cosines is not None
               else dense_relevance(embedder, sents, query))
        dense = scaled(raw)
        w = self.config.weight_dense
        return [w * d + (1 - w) * x for d, x in zip(dense, lexical, strict=True)]

    def _rank(self, sents: list[Sentence], space: Space, relevance: list[float] | None, turns: int) -> list[int]:
        """Indices of the sentences worth keeping, best first (the weighted mix of the module docstring)."""
        cfg = self.config
        scored = []
        for i, s in enumerate(sents):
            if not space.vecs[i]:  # "Right." "Haha!": nothing to remember
                continue
            if cfg.drop_unrelated and space.qvec and space.relevance(i) == 0.0 and not s.fact:
                continue
            if relevance is None:  # no question: fact-bearing anywhere (the user's own facts first) takes its place
                prior = (s.fact + s.personal) / 2
                asked = prior
            else:  # the cues raise relevance, they do not replace it
                asked = relevance[i] * (1 + cfg.boost_personal * s.personal + cfg.boost_value * s.value)
                prior = s.personal * (0.5 + 0.5 * s.value)  # the user's own statement, most of all with a payload
            score = (cfg.weight_relevance * asked + cfg.weight_centrality * space.centrality(i)
                     + cfg.weight_recency * (s.turn / turns) + cfg.weight_facts * prior)
            scored.append((score, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [i for _, i in scored]

    def _choose(self, ranked: list[int], sents: list[Sentence], budget: int) -> list[int]:
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

    def _render(self, header: str, chosen: list[Sentence], cap: int,
                superseded: Mapping[tuple[int, int], int] | None = None) -> str:
        """One line per turn, ``- [turn N] role: ...`` (N counts from 1), its sentences verbatim; a
        superseded sentence (``supersede="mark"``) on a line of its own, ``- [turn N, superseded by turn M]``."""
        lines: list[str] = [header]
        last: Sentence | None = None
        for s in chosen:
            by = (superseded or {}).get((s.turn, s.ordinal))
            if by is not None:
                lines.append(f"- [turn {s.turn + 1}, superseded by turn {by + 1}] {s.role}: {s.text}")
                last = None
                continue
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


@functools.lru_cache(maxsize=4)
def _shared_model(name: str) -> Any:
    """One loaded model per name for every summarizer of the process: a service keeps one session per
    chat, and each loading its own copy of the model cost seconds and ~90 MB a session."""
    from contextkit.embedders import Embedder

    embedder = Embedder(name)
    _ = embedder.dim  # load it now: a missing model fails here, not mid-summary (and is not cached)
    return embedder


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
