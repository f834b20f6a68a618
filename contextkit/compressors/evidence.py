"""``EvidenceCompressor``: query-aware pruning of sentences inside retrieved passages.

Each passage is split into sentences (:func:`split_sentences`, which keeps every
sentence's character offsets), and every sentence is scored against the query:

* **embedding**: cosine similarity of the sentence and the query vectors; all
  sentences of all passages go to the embedder in *one* batched call with the query;
* **lexical**: IDF-weighted coverage of the query's content words (lower-cased,
  stop words removed, Snowball-stemmed with PyStemmer): the share of the query's
  term weight that the sentence contains, with IDF taken over the sentences of the
  call, so a word every sentence shares (the topic) counts little and a rare one
  (a number, a drug name) counts a lot.

The two are mixed with ``weight_embedding`` and ``weight_lexical``. An optional
``position_weight`` adds ``position_weight * i / (n - 1)`` to the ``i``-th of a
passage's ``n`` sentences: positive favours endings (scientific abstracts state
their findings last), negative favours the lead (news); it is 0 by default, since it
says nothing about relevance.

**Budget.** Exactly one of ``target_ratio`` (input tokens over output tokens: 2.0
keeps about half) or ``max_tokens`` (a cap on the output, all items together) is in
effect; both are hard caps, counted with the tokenizer on the final texts (the
ratio's budget is ``input tokens // ratio`` over the items as given, duplicates
included, so dropping a duplicate leaves more room for the rest). The budget
is shared by all passages and filled *globally*, best sentence first: after each
passage's ``min_sentences`` best sentences (which keep every passage represented), a
strong sentence of one passage beats a weak one of another. Splitting the budget in
proportion to passage length would instead force weak passages to keep filler and
cut the answer out of a dense one; greedy filling by score keeps the highest total
relevance a budget can buy (up to knapsack rounding: a sentence that does not fit is
skipped and shorter ones are tried). A sentence already kept from another passage
(same text up to case and white space) is not kept twice. Costs are estimated per
sentence, then the joined texts are counted exactly: over the budget, the weakest
optional sentences go; under it, more are tried with exact counts.

**Output.** Whole sentences only, in their original order. Consecutive kept
sentences are copied as one slice of the passage (original white space and
separators included); non-adjacent runs are joined with ``separator`` (`` … `` by
default; the assembler escapes text, so any marker is safe). An item keeps its id,
source, score and doc id; ``token_count`` is recounted; ``start``/``end`` stay
document offsets when the kept text is still one contiguous slice of the document
and become None otherwise (so the assembler will not merge it by offsets);
``metadata`` gains ``compressed_from`` (the original token count), ``kept_spans``
(``[start, end]`` of each kept sentence in the original passage) and the sentence
counts.

**Removed items** (counted in :attr:`CompressionReport.removed`, named with the
reason in ``details["dropped"]``): exact and near duplicates of an earlier item
(:class:`~contextkit.assembly.passages.Deduplicator`; also an item all of whose
sentences are kept from other items, under ``duplicate``), items with no sentence
text (``empty``: white space or nothing, which would only cost tokens, so they are
dropped rather than passed through), items whose best sentence scores below
``min_relevance`` (``irrelevant``; off by default: with the default weights, every
abstract cited for a SciFact train claim has a sentence scoring 0.3 or more, 99% of
them 0.38 or more, while 0.3 drops about half of random other abstracts) and, when the budget cannot hold every item's
``min_sentences``, the weakest items (``over_budget``; ``report.fallback`` says so).
Pruned sentences of the kept items count under ``sentences``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contextkit.assembly.passages import Deduplicator
from contextkit.assembly.sections import EvidenceItem
from contextkit.compressors.base import CompressionReport
from contextkit.tokenizers import Tokenizer, get_tokenizer

__all__ = ["EvidenceCompressor", "EvidenceCompressorConfig", "split_sentences"]

# ------------------------------------------------------------------ sentences
# A candidate end: terminal punctuation (with closing quotes/brackets) then white
# space, a CJK full stop (no space needed), or a line break.
_END = re.compile(r"[.!?…]+['\"”’)\]]*(?=\s)|[。！？]+['\"”’)\]」』]*|\n")
_NEXT_WORD = re.compile(r"\s*(\S*)")
_LIST_START = re.compile(r"[ \t]*(?:[-*•+>#|]|\d{1,3}[.)]|[a-zA-Z][.)]\s|```)")

#: Abbreviations after which a period never ends a sentence (lower case, no final period).
_NEVER_END = frozenset(
    "e.g i.e cf viz vs fig figs eq eqs ref refs approx ca resp incl dr mr mrs ms prof st jr sr rev gen hon "
    "mt sgt capt lt col dept univ suppl".split())
#: Abbreviations that do not end a sentence before a number or a bracket ("No. 5", "p. 12", "Jan. 2020").
_BEFORE_NUMBER = frozenset(
    "no nos vol vols p pp sec secs ch chap tab art para est min max avg approx "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split())
#: Ambiguous abbreviations: they end a sentence only before a typical sentence opener.
_MAYBE_END = frozenset("al etc inc ltd co corp bros ed eds a.m p.m".split())
_OPENERS = frozenset(
    "the this these that those we our in it its a an however thus therefore here there they he she his her "
    "i as for to on at by with after although but and moreover furthermore finally overall results "
    "conclusions conclusion methods background objective objectives design setting participants "
    "interventions measurements main if when while since because one two three all most some many no "
    "both each patients data".split())
_CONNECTORS = frozenset("by and of with to from & et".split())
_CLOSERS = "'\"”’)]"
_SHORT_LINE = 40  # a line this short, ended by a line break, is a heading or a list entry


def split_sentences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character offsets of the sentences of ``text``, white space trimmed.

    A sentence ends at ``.``, ``!``, ``?`` or ``…`` (plus closing quotes and
    brackets) followed by white space and something that can open a sentence (not
    an all-lower-case word; ``mRNA`` or ``p53`` can), at a CJK full stop, at a blank
    line, and at a single line break after a short line (a heading), a colon or a
    semicolon, or before a list entry; hard-wrapped prose keeps its sentences whole.
    A period does not end a sentence after a known abbreviation (``e.g.``,
    ``Fig.``, ``vs.``, ``Dr.``, ``No. 5``, ``et al. (2010)``...), after an initial
    (``J. Smith``, ``John F. Kennedy``; but ``hepatitis C. The`` ends), inside a
    number (``3.5``, ``p < .001``) or before a lower-case word.
    Every span is an exact slice: ``text[start:end]``.
    """
    cuts: list[int] = []
    line_start = 0
    for m in _END.finditer(text):
        if m.group() == "\n":
            if _line_break_ends(text, line_start, m.start()):
                cuts.append(m.start())
            line_start = m.end()
            continue
        if _punct_ends(text, m):
            cuts.append(m.end())
    spans: list[tuple[int, int]] = []
    begin = 0
    for cut in [*cuts, len(text)]:
        if cut <= begin:
            continue
        spans.extend(_trimmed(text, begin, cut))
        begin = cut
    return spans


def _trimmed(text: str, a: int, b: int) -> list[tuple[int, int]]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return [(a, b)] if b > a else []


def _line_break_ends(text: str, line_start: int, pos: int) -> bool:
    line = text[line_start:pos].strip()
    if not line:
        return True  # a blank line: paragraph break
    nl = text.find("\n", pos + 1)
    next_line = text[pos + 1:nl if nl >= 0 else len(text)]
    if not next_line.strip():
        return True  # a blank line follows
    if line.rstrip(_CLOSERS)[-1:] in (".", "!", "?", "…"):
        return False  # the punctuation rule has decided ("e.g.\nthe" goes on)
    if line[-1] in ":;。！？" or _LIST_START.match(next_line):
        return True
    return len(line) < _SHORT_LINE


def _word_before(text: str, pos: int) -> tuple[str, int]:
    """The white-space-delimited word ending at ``pos`` and where it starts."""
    start = pos
    while start > 0 and not text[start - 1].isspace() and pos - start < 64:
        start -= 1
    return text[start:pos], start


def _punct_ends(text: str, m: re.Match[str]) -> bool:
    mark = m.group()
    if mark[0] in "。！？":
        return True
    nxt = _NEXT_WORD.match(text, m.end()).group(1)
    if not nxt:
        return True  # end of text
    first = nxt[0]
    if first.islower() and not any(c.isupper() or c.isdigit() for c in nxt):
        return False  # "e.g. the", "vs. control", "approx. two" ("mRNA", "p53" may open a sentence)
    if mark.rstrip(_CLOSERS) != ".":
        return True  # ! ? … and "...": the next word opens a new sentence
    if mark != ".":
        return True  # a closing quote or bracket after the period
    word, word_start = _word_before(text, m.start())
    word = word.lstrip("(['\"“‘")
    key = word.lower()
    if not word:
        return True
    if key in _NEVER_END:
        return False
    if key in _BEFORE_NUMBER and (first.isdigit() or first in "(["):
        return False
    if key in _MAYBE_END or re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", word):
        return nxt.lower().strip("\"“'(") in _OPENERS  # "U.S. Army" vs "in the U.S. The"
    if len(word) == 1 and word.isupper():  # an initial, or a one-letter name ("vitamin D.")
        prev, _ = _word_before(text, word_start - 1) if word_start > 0 else ("", 0)
        if not prev or prev.lower() in _CONNECTORS or prev[:1].isupper() or re.fullmatch(r"[A-Z]\.", prev):
            return not first.isupper() or nxt.lower() in _OPENERS
    return True


# ------------------------------------------------------------------- lexical
_TERM = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "a about above after again against all also am an and any are as at be because been before being below "
    "between both but by can could did do does doing down during each few for from further had has have having "
    "he her here hers herself him himself his how i if in into is it its itself just me more most my myself no "
    "nor not of off on once only or other our ours ourselves out over own same she should so some such than "
    "that the their theirs them themselves then there these they this those through to too under until up very "
    "was we were what when where which while who whom why will with would you your yours yourself yourselves "
    "may might must shall whether".split())


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    try:
        import Stemmer
    except ImportError:  # pragma: no cover - PyStemmer is a dependency
        return None
    return Stemmer.Stemmer("english")


class _Terms:
    """Lower-cased, stop-word-free, stemmed content words (stems cached per word)."""

    def __init__(self) -> None:
        self._stems: dict[str, str] = {}
        self._stemmer = _stemmer()

    def __call__(self, text: str) -> set[str]:
        words = [w for w in _TERM.findall(text.casefold()) if w not in _STOP and (len(w) > 1 or w.isdigit())]
        new = [w for w in set(words) if w not in self._stems]
        if new:
            stems = self._stemmer.stemWords(new) if self._stemmer is not None else new
            self._stems.update(zip(new, stems))
        return {self._stems[w] for w in words}


def lexical_scores(query_terms: set[str], sentence_terms: Sequence[set[str]]) -> list[float]:
    """IDF-weighted share of the query's terms (those present in the pool) each sentence holds."""
    n = len(sentence_terms)
    df = dict.fromkeys(query_terms, 0)
    for terms in sentence_terms:
        for t in query_terms & terms:
            df[t] += 1
    idf = {t: math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items() if d}
    total = sum(idf.values())
    if not total:
        return [0.0] * n
    return [sum(idf.get(t, 0.0) for t in query_terms & terms) / total for terms in sentence_terms]


# -------------------------------------------------------------------- config
class EvidenceCompressorConfig(BaseModel):
    """The settings of an :class:`EvidenceCompressor` (what :meth:`~EvidenceCompressor.to_dict` saves)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="sentence-transformers/all-MiniLM-L6-v2", description="the embedding model's name")
    tokenizer: str = "cl100k_base"
    target_ratio: float | None = Field(default=None, ge=1.0, description="input over output tokens; 2.0 = half")
    max_tokens: int | None = Field(default=None, ge=0, description="cap on the output tokens of all items")
    weight_embedding: float = Field(default=0.7, ge=0.0)
    weight_lexical: float = Field(default=0.3, ge=0.0)
    keep_first: bool = Field(default=False, description="always keep each passage's first sentence")
    dedup_threshold: float | None = Field(default=0.8, gt=0.0, le=1.0,
                                          description="near-duplicate Jaccard threshold; None: exact only")
    min_sentences: int = Field(default=1, ge=0, description="best sentences kept in every item that is kept")
    min_relevance: float | None = Field(default=None, description="drop an item whose best sentence scores lower")
    position_weight: float = Field(default=0.0, description="added score for a sentence's relative position in its "
                                   "passage (0 first .. 1 last); > 0 favours endings, < 0 the lead")
    separator: str = Field(default=" … ", description="between non-adjacent kept sentences")

    @model_validator(mode="after")
    def _check(self) -> EvidenceCompressorConfig:
        if self.target_ratio is not None and self.max_tokens is not None:
            raise ValueError("give target_ratio or max_tokens, not both")
        if self.weight_embedding + self.weight_lexical <= 0:
            raise ValueError("weight_embedding and weight_lexical cannot both be 0")
        return self


@dataclass(slots=True)
class _Passage:
    item: EvidenceItem
    position: int
    spans: list[tuple[int, int]]
    first: int = 0  # index of its first sentence in the flat list
    tokens: int = 0


class EvidenceCompressor:
    """Keep the sentences of retrieved passages that matter to the query (see the module docstring).

    ``embedder`` is an :class:`~contextkit.embedders.Embedder` (the default model,
    loaded on first use, when None). ``tokenizer`` counts the budget. Values given
    to :meth:`compress` override the constructor's for that call.
    """

    name = "evidence"

    def __init__(self, embedder: Any = None, tokenizer: str | Tokenizer = "cl100k_base",
                 target_ratio: float | None = None, max_tokens: int | None = None,
                 weight_embedding: float = 0.7, weight_lexical: float = 0.3, keep_first: bool = False,
                 dedup_threshold: float | None = 0.8, min_sentences: int = 1, *,
                 min_relevance: float | None = None, position_weight: float = 0.0, separator: str = " … ") -> None:
        model = getattr(embedder, "model_name", None)
        if model is None:
            from contextkit.embedders import DEFAULT_MODEL

            model = DEFAULT_MODEL
        tok_name = tokenizer.name if isinstance(tokenizer, Tokenizer) else tokenizer
        self.config = EvidenceCompressorConfig(
            model=model, tokenizer=tok_name, target_ratio=target_ratio, max_tokens=max_tokens,
            weight_embedding=weight_embedding, weight_lexical=weight_lexical, keep_first=keep_first,
            dedup_threshold=dedup_threshold, min_sentences=min_sentences, min_relevance=min_relevance,
            position_weight=position_weight, separator=separator)
        self._embedder = embedder
        self._tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else None
        self._terms = _Terms()

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from contextkit.embedders import Embedder

            self._embedder = Embedder(self.config.model)
        return self._embedder

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = get_tokenizer(self.config.tokenizer)
        return self._tokenizer

    def to_dict(self) -> dict[str, Any]:
        """The configuration (the embedder as its model name), for :meth:`from_dict`."""
        return {"type": "EvidenceCompressor", **self.config.model_dump()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], embedder: Any = None) -> EvidenceCompressor:
        """Rebuild from :meth:`to_dict`; the embedder is ``embedder`` or the saved model, loaded lazily."""
        data = {k: v for k, v in data.items() if k != "type"}
        model = data.pop("model", None)
        EvidenceCompressorConfig(**data)  # unknown or bad settings fail here, by name
        out = cls(embedder, **data)
        if embedder is None and model:
            out.config.model = model
        return out

    # -------------------------------------------------------------- compress
    def compress(self, query: str, items: Sequence[EvidenceItem | str | dict[str, Any]],
                 target_ratio: float | None = None, max_tokens: int | None = None
                 ) -> tuple[list[EvidenceItem], CompressionReport]:
        """Prune ``items`` to the sentences that bear on ``query``, within the budget.

        A ``target_ratio`` or ``max_tokens`` given here replaces the constructor's
        budget (whichever kind it was); giving both, or neither anywhere, is a ValueError.
        """
        started = time.perf_counter()
        if not isinstance(query, str) or not query.strip():
            raise ValueError("EvidenceCompressor.compress needs a query: the sentences are scored against it, "
                             f"and got {query!r}")
        ratio, cap = self._budget_mode(target_ratio, max_tokens)
        cfg = self.config
        tok = self.tokenizer
        items = [EvidenceItem.coerce(v, i) for i, v in enumerate(items)]
        report = CompressionReport(compressor=self.name, items_in=len(items))
        removed = dict.fromkeys(("sentences", "duplicate", "near_duplicate", "empty", "irrelevant",
                                 "over_budget"), 0)
        dropped: dict[str, str] = {}
        counts = tok.count_many([it.text for it in items])
        report.input_tokens = sum(counts)
        budget = cap if cap is not None else int(report.input_tokens / ratio)

        # 1. duplicates and empty items
        dedup = Deduplicator(cfg.dedup_threshold)
        passages: list[_Passage] = []
        for pos, (item, n) in enumerate(zip(items, counts)):
            spans = split_sentences(item.text)
            if not spans:
                removed["empty"] += 1
                dropped[item.id] = "empty: no sentence text"
                continue
            found = dedup.check(item.id, item.text)
            if found is not None:
                removed[found[0]] += 1
                dropped[item.id] = f"{found[0].replace('_', ' ')} of {found[1]}"
                continue
            passages.append(_Passage(item, pos, spans, tokens=n))

        # 2. scores: one embedding call for the query and every sentence
        texts: list[str] = []
        for p in passages:
            p.first = len(texts)
            texts.extend(p.item.text[a:b] for a, b in p.spans)
        scores, embed_seconds = self._score(query, texts)

        # 3. items with nothing relevant
        if cfg.min_relevance is not None:
            kept_passages = []
            for p in passages:
                best = max(scores[p.first:p.first + len(p.spans)])
                if best < cfg.min_relevance:
                    removed["irrelevant"] += 1
                    dropped[p.item.id] = f"irrelevant: best sentence scores {best:.3f} < {cfg.min_relevance}"
                else:
                    kept_passages.append(p)
            passages = kept_passages

        # 4. a position prior, if any (after the relevance test: it is no evidence of relevance)
        if cfg.position_weight:
            for p in passages:
                last = max(len(p.spans) - 1, 1)
                for i in range(len(p.spans)):
                    scores[p.first + i] += cfg.position_weight * i / last

        # 5. choose sentences within the budget
        sentence_tokens = tok.count_many(texts) if texts else []
        chosen, forced, repeats, seen = self._select(passages, scores, sentence_tokens, texts, budget)
        out, out_counts, trimmed = self._build(passages, chosen, forced, scores, sentence_tokens, seen, budget, tok)
        fallback = None
        for p in passages:
            if id(p) in chosen:
                continue
            if all(_norm(t) in seen for t in texts[p.first:p.first + len(p.spans)]):
                removed["duplicate"] += 1
                dropped[p.item.id] = "duplicate: all its sentences are kept from other items"
            else:
                removed["over_budget"] += 1
                dropped[p.item.id] = "over budget: not even its best sentences fit"
        if removed["over_budget"]:
            fallback = (f"the budget ({budget} tokens) cannot hold min_sentences={cfg.min_sentences} "
                        f"of every item: dropped the {removed['over_budget']} weakest")

        kept_sentences = sum(len(chosen[id(p)]) for p in passages if id(p) in chosen)
        removed["sentences"] = sum(len(p.spans) for p in passages if id(p) in chosen) - kept_sentences
        report.removed = removed
        report.items_out = len(out)
        report.output_tokens = sum(out_counts)
        report.fallback = fallback
        report.details = {
            "budget": budget, "budget_mode": "max_tokens" if cap is not None else "target_ratio",
            "target_ratio": ratio, "max_tokens": cap, "sentences_in": len(texts),
            "sentences_kept": kept_sentences, "repeated_sentences": repeats, "trimmed_after_count": trimmed,
            "dropped": dropped, "embedding_seconds": round(embed_seconds, 4),
        }
        report.seconds = time.perf_counter() - started
        return out, report

    def _budget_mode(self, target_ratio: float | None, max_tokens: int | None) -> tuple[float | None, int | None]:
        if target_ratio is not None and max_tokens is not None:
            raise ValueError("give target_ratio or max_tokens to compress(), not both")
        if target_ratio is None and max_tokens is None:
            target_ratio, max_tokens = self.config.target_ratio, self.config.max_tokens
            if target_ratio is None and max_tokens is None:
                raise ValueError("EvidenceCompressor needs a budget: set target_ratio (e.g. 2.0 keeps about half "
                                 "the tokens) or max_tokens, in the constructor or in compress()")
        if target_ratio is not None and (isinstance(target_ratio, bool) or not isinstance(target_ratio, (int, float))
                                         or not target_ratio >= 1.0):
            raise ValueError("target_ratio is input tokens over output tokens and must be a number >= 1.0, "
                             f"not {target_ratio!r}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 0):
            raise ValueError(f"max_tokens must be a non-negative int, not {max_tokens!r}")
        return target_ratio, max_tokens

    def _score(self, query: str, texts: list[str]) -> tuple[list[float], float]:
        if not texts:
            return [], 0.0
        cfg = self.config
        emb = [0.0] * len(texts)
        seconds = 0.0
        if cfg.weight_embedding > 0:
            t0 = time.perf_counter()
            vectors = self.embedder.embed([query, *texts])
            seconds = time.perf_counter() - t0
            emb = (vectors[1:] @ vectors[0]).tolist()
        lex = [0.0] * len(texts)
        if cfg.weight_lexical > 0:
            lex = lexical_scores(self._terms(query), [self._terms(t) for t in texts])
        return [cfg.weight_embedding * e + cfg.weight_lexical * x for e, x in zip(emb, lex)], seconds

    def _select(self, passages: list[_Passage], scores: list[float], tokens: list[int], texts: list[str],
                budget: int) -> tuple[dict[int, set[int]], dict[int, set[int]], int, set[str]]:
        """The sentences to keep (indices in each passage, by ``id(passage)``; a passage
        left out is dropped), those forced by ``min_sentences``/``keep_first``, and the
        number of sentences skipped as repeats of a kept one, and the kept sentences (normalised).

        A sentence's cost is its own token count plus one, an upper bound (in
        practice) on what it adds to the joined text: a separator, or the white space
        before it; :meth:`_build` recounts exactly and trims if need be.
        """
        cfg = self.config
        chosen: dict[int, set[int]] = {}
        forced_sets: dict[int, set[int]] = {}
        used = 0
        seen: set[str] = set()
        # Forced sentences first, strongest passages first, so a short budget drops the weakest.
        ranked = sorted(passages, key=lambda p: (-max(scores[p.first:p.first + len(p.spans)]), p.position))
        repeats = 0
        for p in ranked:
            local = sorted(range(len(p.spans)), key=lambda i: (-scores[p.first + i], i))
            forced = set()
            for i in local:  # its best sentences, skipping any already kept from a stronger passage
                if len(forced) >= cfg.min_sentences:
                    break
                if _norm(texts[p.first + i]) in seen:
                    repeats += 1
                else:
                    forced.add(i)
            if cfg.keep_first:
                forced.add(0)
            cost = sum(tokens[p.first + i] + 1 for i in forced)
            if forced and used + cost > budget:
                continue  # dropped: the budget cannot hold its best sentences
            used += cost
            chosen[id(p)] = set(forced)
            forced_sets[id(p)] = forced
            seen.update(_norm(texts[p.first + i]) for i in forced)
        # Then the rest, best first over all passages.
        pool = [(scores[p.first + i], p.position, i, p) for p in passages if id(p) in chosen
                for i in range(len(p.spans)) if i not in chosen[id(p)]]
        pool.sort(key=lambda x: (-x[0], x[1], x[2]))
        for _, _, i, p in pool:
            cost = tokens[p.first + i] + 1
            if used + cost > budget:
                continue
            key = _norm(texts[p.first + i])
            if key in seen:
                repeats += 1
                continue  # the same sentence is already kept (from another passage, or twice in one)
            seen.add(key)
            chosen[id(p)].add(i)
            used += cost
        # Passages that keep nothing (min_sentences=0 and no room) are dropped too.
        for p in passages:
            if id(p) in chosen and not chosen[id(p)]:
                del chosen[id(p)]
        return chosen, forced_sets, repeats, seen

    def _build(self, passages: list[_Passage], chosen: dict[int, set[int]], forced: dict[int, set[int]],
               scores: list[float], sentence_tokens: list[int], seen: set[str], budget: int, tok: Tokenizer
               ) -> tuple[list[EvidenceItem], list[int], int]:
        """The output items and their exact counts. Trims (weakest unforced sentence first,
        then the weakest item) while the exact total is over the budget; then fills what
        the estimates left over, with exact counts."""
        live = [p for p in passages if id(p) in chosen]
        texts = {id(p): self._text(p, chosen[id(p)]) for p in live}
        counts = dict(zip(texts, tok.count_many(list(texts.values()))))
        total = sum(counts.values())
        trimmed = 0
        while total > budget and live:
            optional = [(scores[p.first + i], p.position, i, p) for p in live
                        for i in chosen[id(p)] - forced.get(id(p), set())]
            if optional:
                _, _, i, p = min(optional, key=lambda x: (x[0], -x[1], -x[2]))
                chosen[id(p)].discard(i)
                trimmed += 1
                texts[id(p)] = self._text(p, chosen[id(p)])
                new = tok.count(texts[id(p)])
                total += new - counts[id(p)]
                counts[id(p)] = new
                continue
            p = min(live, key=lambda q: (max(scores[q.first + i] for i in chosen[id(q)]), -q.position))
            live.remove(p)
            total -= counts.pop(id(p))
            del chosen[id(p)]
        # The estimates were generous: fill what is left with exact counts, best sentence first.
        if live and total < budget:
            pool = sorted(((scores[p.first + i], p.position, i, p) for p in live for i in range(len(p.spans))
                           if i not in chosen[id(p)]), key=lambda x: (-x[0], x[1], x[2]))
            for _, _, i, p in pool:
                if total >= budget:
                    break
                if sentence_tokens[p.first + i] > budget - total + 4:
                    continue  # cannot fit, even where it replaces a separator
                if _norm(p.item.text[p.spans[i][0]:p.spans[i][1]]) in seen:
                    continue
                trial = self._text(p, chosen[id(p)] | {i})
                new = tok.count(trial)
                if total + new - counts[id(p)] <= budget:
                    chosen[id(p)].add(i)
                    seen.add(_norm(p.item.text[p.spans[i][0]:p.spans[i][1]]))
                    texts[id(p)], total, counts[id(p)] = trial, total + new - counts[id(p)], new
        live.sort(key=lambda q: q.position)
        out = [self._item(p, chosen[id(p)], texts[id(p)], counts[id(p)], tok) for p in live]
        return out, [counts[id(p)] for p in live], trimmed

    def _text(self, p: _Passage, keep: set[int]) -> str:
        if len(keep) == len(p.spans):
            return p.item.text
        parts = []
        for run in _runs(sorted(keep)):
            parts.append(p.item.text[p.spans[run[0]][0]:p.spans[run[-1]][1]])
        return self.config.separator.join(parts)

    def _item(self, p: _Passage, keep: set[int], text: str, count: int, tok: Tokenizer) -> EvidenceItem:
        item = p.item
        order = sorted(keep)
        meta = {**item.metadata, "compressed_from": p.tokens,
                "kept_spans": [list(p.spans[i]) for i in order],
                "sentences_kept": len(order), "sentences_total": len(p.spans)}
        start, end = item.start, item.end
        if len(order) < len(p.spans):
            runs = _runs(order)
            is_slice = item.start is not None and item.end is not None and item.end - item.start == len(item.text)
            if len(runs) == 1 and is_slice:
                start, end = item.start + p.spans[order[0]][0], item.start + p.spans[order[-1]][1]
            else:
                start = end = None
        return replace(item, text=text, start=start, end=end, token_count=count, tokenizer=tok.name,
                       metadata=meta)


def _runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())
