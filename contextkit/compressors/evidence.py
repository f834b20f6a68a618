"""``EvidenceCompressor``: query-aware pruning of sentences inside retrieved passages.

Each passage is split into sentences (:func:`contextkit.text.split_sentences`, exact character
spans) and every sentence is scored against the query. Three scorers
(:mod:`~contextkit.compressors._evidence_score`, :mod:`~contextkit.compressors._evidence_fuse`):

* ``scorer="fused"`` (default): query relevance, ``z(BM25) + z(cosine)`` over the call's
  sentences (BM25 with the call's sentences as the corpus, the MiniLM cosine with the
  query), mixed with the learned model's log-odds in proportion to how many sentences
  carry an abstract's form (reported findings, section headings): none on prose, all on
  structured abstracts, where it is the learned scorer as fitted. Why: the learned
  model's priors (findings last, ``METHODS`` irrelevant) cost prose answer sentences
  (XQuAD, held out, 4x: 0.787 kept against 0.914 for BM25 sentence ranking; fused 0.910),
  while on SciFact they are worth 10-15 points over relevance alone (held out, 2x: 0.805,
  fused 0.803, against 0.649-0.701; ``bench/bench_compress_evidence.py``);
* ``scorer="learned"``: a logistic model over per-sentence features
  (:mod:`~contextkit.compressors._evidence_features`): the MiniLM cosine with the
  query, IDF-weighted stemmed term coverage, both relative to the passage's best and
  smoothed with the neighbours, position, section headings (``RESULTS``,
  ``METHODS``...) and cue words of findings, aims, methods and background. Weights:
  ``evidence_scorer.json`` (plain JSON, fitted on SciFact *train* claims by
  ``bench/fit_evidence_scorer.py``; ``weights=`` loads another file, for this scorer
  and the fused one's learned part). Scores are probabilities that the sentence carries
  the evidence. Position and headings are priors of scientific abstracts;
* ``scorer="linear"``: ``weight_embedding * cosine + weight_lexical * coverage``.

All sentences of all passages go to the embedder in *one* batched call with the query.
``position_weight`` adds ``position_weight * i / (n - 1)`` to a passage's ``i``-th of
``n`` sentences under any scorer (0 by default).

**Budget.** Exactly one of ``target_ratio`` (input over output tokens: 2.0 keeps about
half) or ``max_tokens`` (a cap on all items together); both are hard caps, counted with
the tokenizer on the final texts (the ratio's budget is ``input tokens // ratio`` over
the items as given, duplicates included). The budget is shared by all passages and
filled *globally* (:mod:`~contextkit.compressors._evidence_select`): each passage's
``min_sentences`` best sentences (0 by default: one ranking over all sentences, so a
weak passage takes no forced share of a small budget), then the rest best first over
all passages, or by score per token (``selection="density"``: the most likely-relevant
sentences a budget can buy; ``"auto"``, the default, takes what the weights file says
for the learned scorer, density for the shipped one, and score for the linear scorer
and the fused one, except where its gate is fully open), so a strong sentence of one
passage beats a weak one of another. A sentence already kept from another passage (same
text up to case and white space) is not kept twice. With ``cut=True`` (default) what
whole sentences leave of the budget goes to the leading words of the best sentence
left out, cut after a word and marked with the separator's ``…``: 4x asked gives about
4x, not 4.6x.

**Output.** Whole sentences in their original order, and at most one cut sentence
(``metadata["cut_span"]``, its shown prefix); consecutive kept sentences are one slice
of the passage, non-adjacent runs are joined with ``separator`` (`` … ``).
An item keeps its id, source, score and doc id; ``token_count`` is recounted;
``start``/``end`` stay document offsets when the kept text is one contiguous slice of
whole sentences, else None; ``metadata`` gains ``compressed_from``, ``kept_spans`` and the sentence counts.

**Removed items** (counted in :attr:`CompressionReport.removed`, named with the reason
in ``details["dropped"]``): exact and near duplicates of an earlier item
(:class:`~contextkit.assembly.passages.Deduplicator`; also an item all of whose
sentences are kept from other items, under ``duplicate``), items with no sentence text
(``empty``), items whose best sentence's *query match* (the linear mix, whatever the
scorer: the learned score also rewards the form of a finding, which is no evidence of
relevance) is below ``min_relevance`` (``irrelevant``; off by default: with the default
weights every abstract cited for a SciFact train claim has a sentence at 0.3 or more,
while 0.3 drops about half of random other abstracts) and, when the budget cannot hold
every item's ``min_sentences``, the weakest items (``over_budget``; ``report.fallback``).
Pruned sentences of the kept items count under ``sentences``.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, Self

from pydantic import Field, model_validator

from contextkit.compressors._evidence_features import feature_matrix, sentence_features
from contextkit.compressors._evidence_fuse import abstract_share, fuse, gate
from contextkit.compressors._evidence_score import (
    LinearScorer,
    Terms,
    bm25_scores,
    lexical_scores,
    load_scorer,
)
from contextkit.compressors._evidence_select import Passage, build, norm, select
from contextkit.compressors.base import CompressionReport, Compressor
from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import EvidenceItem
from contextkit.core.settings import Settings
from contextkit.core.text import Deduplicator, split_sentences
from contextkit.core.tokenizers import Tokenizer, get_tokenizer

__all__ = ["EvidenceCompressor", "EvidenceCompressorConfig", "EvidenceResult", "lexical_scores", "split_sentences"]

_REMOVED = ("sentences", "duplicate", "near_duplicate", "empty", "irrelevant", "over_budget")

log = logging.getLogger(__name__)


class EvidenceCompressorConfig(Settings):
    """The settings of an :class:`EvidenceCompressor` (what :meth:`~EvidenceCompressor.to_dict` saves)."""

    model: str = Field(default="sentence-transformers/all-MiniLM-L6-v2", description="the embedding model's name")
    tokenizer: str = DEFAULT_TOKENIZER
    target_ratio: float | None = Field(default=None, ge=1.0, description="input over output tokens; 2.0 = half")
    max_tokens: int | None = Field(default=None, ge=0, description="cap on the output tokens of all items")
    scorer: Literal["fused", "learned", "linear"] = Field(
        default="fused", description="fused: the learned model where the text has an abstract's form, BM25 + "
        "cosine elsewhere; learned: the fitted logistic model; linear: the weighted mix below")
    weights: str | None = Field(default=None, description="a weights JSON for the learned scorer (also the fused "
                                "scorer's learned part); None: shipped")
    selection: Literal["auto", "score", "density"] = Field(
        default="auto", description="fill the budget by score, or by score per token; auto: what the learned "
        "scorer's weights file says (density for the shipped one), score for the fused and linear scorers")
    cut: bool = Field(default=True, description="spend what whole sentences leave of the budget on the leading "
                      "words of the best sentence left out (marked as cut)")
    weight_embedding: float = Field(default=0.7, ge=0.0, description="linear scorer; and the query match "
                                    "min_relevance tests")
    weight_lexical: float = Field(default=0.3, ge=0.0)
    keep_first: bool = Field(default=False, description="always keep each passage's first sentence")
    dedup_threshold: float | None = Field(default=0.8, gt=0.0, le=1.0,
                                          description="near-duplicate Jaccard threshold; None: exact only")
    min_sentences: int = Field(default=0, ge=0, description="best sentences kept in every item that is kept "
                               "(0: a global ranking, no share per item)")
    min_relevance: float | None = Field(default=None, description="drop an item whose best query match is lower")
    position_weight: float = Field(default=0.0, description="added score for a sentence's relative position in its "
                                   "passage (0 first .. 1 last); > 0 favours endings, < 0 the lead")
    separator: str = Field(default=" … ", description="between non-adjacent kept sentences")

    @model_validator(mode="after")
    def _check(self) -> EvidenceCompressorConfig:
        if self.target_ratio is not None and self.max_tokens is not None:
            raise InvalidArgumentError("give target_ratio or max_tokens, not both")
        if self.weight_embedding + self.weight_lexical <= 0:
            raise InvalidArgumentError("weight_embedding and weight_lexical cannot both be 0")
        return self


class EvidenceResult(NamedTuple):
    """The pruned items and the report; unpacks as ``items, report`` as it always has."""

    items: list[EvidenceItem]
    report: CompressionReport


class _Run:
    """What one :meth:`EvidenceCompressor.compress` call removed so far, by kind and by item id."""

    def __init__(self) -> None:
        self.removed = dict.fromkeys(_REMOVED, 0)
        self.dropped: dict[str, str] = {}

    def drop(self, item_id: str, kind: str, reason: str) -> None:
        self.removed[kind] += 1
        self.dropped[item_id] = reason


class EvidenceCompressor(Compressor):
    """Keep the sentences of retrieved passages that matter to the query (see the module docstring).

    ``embedder`` is an :class:`~contextkit.embedders.Embedder` (the default model,
    loaded on first use, when None). ``tokenizer`` counts the budget. Values given
    to :meth:`compress` override the constructor's for that call.
    """

    name = "evidence"

    def __init__(self, embedder: Any = None, tokenizer: str | Tokenizer = DEFAULT_TOKENIZER,
                 target_ratio: float | None = None, max_tokens: int | None = None,
                 weight_embedding: float = 0.7, weight_lexical: float = 0.3, keep_first: bool = False,
                 dedup_threshold: float | None = 0.8, min_sentences: int = 0, *,
                 min_relevance: float | None = None, position_weight: float = 0.0, separator: str = " … ",
                 scorer: Literal["fused", "learned", "linear"] = "fused", weights: str | None = None,
                 selection: Literal["auto", "score", "density"] = "auto", cut: bool = True) -> None:
        model = getattr(embedder, "model_name", None)
        if model is None:
            from contextkit.embedders import DEFAULT_MODEL

            model = DEFAULT_MODEL
        tok_name = tokenizer.name if isinstance(tokenizer, Tokenizer) else tokenizer
        self.config = EvidenceCompressorConfig(
            model=model, tokenizer=tok_name, target_ratio=target_ratio, max_tokens=max_tokens, scorer=scorer,
            weights=None if weights is None else str(weights), selection=selection, cut=cut,
            weight_embedding=weight_embedding, weight_lexical=weight_lexical, keep_first=keep_first,
            dedup_threshold=dedup_threshold, min_sentences=min_sentences, min_relevance=min_relevance,
            position_weight=position_weight, separator=separator)
        self._embedder = embedder
        self._tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else None
        self._terms = Terms()
        # Bad weights fail here, by file and reason, not at the first compress().
        self.scorer: LinearScorer | None = load_scorer(self.config.weights) if scorer != "linear" else None
        if self.scorer is not None and self.scorer.model and self.scorer.model != model:
            log.warning("evidence scorer weights %s were fitted with %s, the embedder is %s: its cosines may differ "
                        "in scale; refit with bench/fit_evidence_scorer.py", self.scorer.source, self.scorer.model,
                        model)

    @property
    def selection(self) -> str:
        """The selection rule in effect ("score" or "density"), ``auto`` resolved (for the fused
        scorer: where the text has an abstract's form throughout, the weights file's rule)."""
        if self.config.selection != "auto":
            return self.config.selection
        return self.scorer.selection if self.scorer is not None and self.config.scorer == "learned" else "score"

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
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """Rebuild from :meth:`to_dict`; the embedder is ``embedder=`` or the saved model, loaded lazily."""
        settings = cls._settings_of(data)
        embedder = objects.pop("embedder", None)
        model = settings.pop("model", None)
        out = cls(embedder, **settings, **objects)
        if embedder is None and model:
            out.config.model = model
        return out

    # -------------------------------------------------------------- compress
    def compress(self, items: Sequence[EvidenceItem | str | dict[str, Any]], query: str | None = None, *,
                 target_ratio: float | None = None, max_tokens: int | None = None) -> EvidenceResult:
        """Prune ``items`` to the sentences that bear on ``query``, within the budget.

        A ``target_ratio`` or ``max_tokens`` given here replaces the constructor's
        budget (whichever kind it was); giving both, or neither anywhere, is a ValueError.
        The old order, ``compress(query, items)``, still works, with a DeprecationWarning.
        """
        started = time.perf_counter()
        items, query = _items_first(items, query)
        self._check_query(query)
        ratio, cap = self._budget_mode(target_ratio, max_tokens)
        evidence = [EvidenceItem.coerce(v, i) for i, v in enumerate(items)]
        report = CompressionReport(compressor=self.name, items_in=len(evidence))
        counts = self.tokenizer.count_many([it.text for it in evidence])
        report.input_tokens = sum(counts)
        if cap is not None:
            budget = cap
        else:
            assert ratio is not None  # _budget_mode gives exactly one of the two
            budget = int(report.input_tokens / ratio)
        run = _Run()
        passages = self._passages(evidence, counts, run)  # 1. duplicates and empty items
        texts = self._flatten(passages)
        # 2. scores: one embedding call for the query and every sentence
        scores, relevance, embed_seconds, selection = self._score(query, texts,
                                                                  [(p.first, len(p.spans)) for p in passages])
        passages = self._relevant(passages, relevance, run)  # 3. the query match, not the form of a finding
        self._position_prior(passages, scores)  # 4. after the relevance test: position is no evidence
        # 5. choose sentences within the budget
        density = selection == "density"
        sentence_tokens = self.tokenizer.count_many(texts) if texts else []
        chosen, forced, repeats, seen = select(passages, scores, sentence_tokens, texts, budget,
                                               self.config.min_sentences, self.config.keep_first, density)
        out, out_counts, trimmed = build(passages, chosen, forced, scores, sentence_tokens, seen, budget,
                                         self.tokenizer, self.config.separator, density, self.config.cut,
                                         self.config.min_sentences)
        kept_sentences = self._left_out(passages, chosen, texts, seen, run)
        if run.removed["over_budget"]:
            report.fallback = (f"the budget ({budget} tokens) cannot hold min_sentences={self.config.min_sentences} "
                               f"of every item: dropped the {run.removed['over_budget']} weakest"
                               if self.config.min_sentences else
                               f"the budget ({budget} tokens) holds no sentence of {run.removed['over_budget']} "
                               "item(s): dropped")
        report.removed = run.removed
        report.items_out = len(out)
        report.output_tokens = sum(out_counts)
        report.details = {
            "budget": budget, "budget_mode": "max_tokens" if cap is not None else "target_ratio",
            "target_ratio": ratio, "max_tokens": cap, "scorer": self.config.scorer, "selection": selection,
            "sentences_in": len(texts),
            "sentences_kept": kept_sentences, "repeated_sentences": repeats, "trimmed_after_count": trimmed,
            "dropped": run.dropped, "embedding_seconds": round(embed_seconds, 4),
        }
        report.seconds = time.perf_counter() - started
        return EvidenceResult(out, report)

    def _passages(self, items: list[EvidenceItem], counts: list[int], run: _Run) -> list[Passage]:
        """The items with sentence text that are no (near) duplicate of an earlier one, split into sentences."""
        dedup = Deduplicator(self.config.dedup_threshold)
        passages: list[Passage] = []
        for pos, (item, n) in enumerate(zip(items, counts)):
            spans = split_sentences(item.text)
            if not spans:
                run.drop(item.id, "empty", "empty: no sentence text")
                continue
            found = dedup.check(item.id, item.text)
            if found is not None:
                run.drop(item.id, found[0], f"{found[0].replace('_', ' ')} of {found[1]}")
                continue
            passages.append(Passage(item, pos, spans, tokens=n))
        return passages

    def _relevant(self, passages: list[Passage], relevance: list[float], run: _Run) -> list[Passage]:
        """The passages whose best sentence matches the query at least ``min_relevance`` (all when None)."""
        floor = self.config.min_relevance
        if floor is None:
            return passages
        kept = []
        for p in passages:
            best = max(relevance[p.first:p.first + len(p.spans)])
            if best < floor:
                run.drop(p.item.id, "irrelevant", f"irrelevant: best sentence scores {best:.3f} < {floor}")
            else:
                kept.append(p)
        return kept

    def _position_prior(self, passages: list[Passage], scores: list[float]) -> None:
        """Add ``position_weight * i / (n - 1)`` to the ``i``-th of a passage's ``n`` sentences."""
        weight = self.config.position_weight
        if not weight:
            return
        for p in passages:
            last = max(len(p.spans) - 1, 1)
            for i in range(len(p.spans)):
                scores[p.first + i] += weight * i / last

    @staticmethod
    def _left_out(passages: list[Passage], chosen: dict[int, set[int]], texts: list[str], seen: set[str],
                  run: _Run) -> int:
        """Count the passages that kept nothing (repeats, or over the budget) and the pruned
        sentences of the others; the number of sentences kept."""
        for p in passages:
            if id(p) in chosen:
                continue
            if all(norm(t) in seen for t in texts[p.first:p.first + len(p.spans)]):
                run.drop(p.item.id, "duplicate", "duplicate: all its sentences are kept from other items")
            else:
                run.drop(p.item.id, "over_budget", "over budget: not even its best sentences fit")
        kept = sum(len(chosen[id(p)]) for p in passages if id(p) in chosen)
        run.removed["sentences"] = sum(len(p.spans) for p in passages if id(p) in chosen) - kept
        return kept

    def features(self, query: str, items: Sequence[EvidenceItem | str | dict[str, Any]]
                 ) -> list[tuple[EvidenceItem, list[tuple[int, int]], list[list[float]]]]:
        """Each item's sentence spans and feature rows (``FEATURES`` order), as :meth:`compress`
        computes them for the learned scorer, without dedup or a budget: what
        ``bench/fit_evidence_scorer.py`` fits the weights on."""
        self._check_query(query)
        passages = [Passage(EvidenceItem.coerce(v, i), i, []) for i, v in enumerate(items)]
        for p in passages:
            p.spans = split_sentences(p.item.text)
        passages = [p for p in passages if p.spans]
        texts = self._flatten(passages)
        emb, lex, _ = self._signals(query, texts, need_embedding=True)
        rows = sentence_features(texts, [(p.first, len(p.spans)) for p in passages], emb, lex)
        return [(p.item, p.spans, rows[p.first:p.first + len(p.spans)]) for p in passages]

    @staticmethod
    def _flatten(passages: list[Passage]) -> list[str]:
        texts: list[str] = []
        for p in passages:
            p.first = len(texts)
            texts.extend(p.item.text[a:b] for a, b in p.spans)
        return texts

    @staticmethod
    def _check_query(query: Any) -> None:
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("EvidenceCompressor.compress needs a query: the sentences are scored against it, "
                             f"and got {query!r}")

    def _budget_mode(self, target_ratio: float | None, max_tokens: int | None) -> tuple[float | None, int | None]:
        if target_ratio is not None and max_tokens is not None:
            raise InvalidArgumentError("give target_ratio or max_tokens to compress(), not both")
        if target_ratio is None and max_tokens is None:
            target_ratio, max_tokens = self.config.target_ratio, self.config.max_tokens
            if target_ratio is None and max_tokens is None:
                raise InvalidArgumentError("EvidenceCompressor needs a budget: set target_ratio (e.g. 2.0 keeps about half "
                                 "the tokens) or max_tokens, in the constructor or in compress()")
        if target_ratio is not None and (isinstance(target_ratio, bool) or not isinstance(target_ratio, (int, float))
                                         or not target_ratio >= 1.0):
            raise InvalidArgumentError("target_ratio is input tokens over output tokens and must be a number >= 1.0, "
                             f"not {target_ratio!r}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 0):
            raise InvalidArgumentError(f"max_tokens must be a non-negative int, not {max_tokens!r}")
        return target_ratio, max_tokens

    def _signals(self, query: str, texts: list[str], need_embedding: bool) -> tuple[list[float], list[float], float]:
        """Each sentence's cosine with the query (0s when not needed) and lexical coverage."""
        emb = [0.0] * len(texts)
        seconds = 0.0
        if texts and need_embedding:
            t0 = time.perf_counter()
            vectors = self.embedder.embed([query, *texts])
            seconds = time.perf_counter() - t0
            emb = (vectors[1:] @ vectors[0]).tolist()
        lex = lexical_scores(self._terms(query), [self._terms(t) for t in texts]) if texts else []
        return emb, lex, seconds

    def _score(self, query: str, texts: list[str], groups: list[tuple[int, int]]
               ) -> tuple[list[float], list[float], float, str]:
        """The selection scores, the query match (linear mix) of every sentence, the embedding time
        and the selection rule for these scores."""
        if not texts:
            return [], [], 0.0, self.selection
        cfg = self.config
        learned = self.scorer is not None
        emb, lex, seconds = self._signals(query, texts, need_embedding=learned or cfg.weight_embedding > 0)
        relevance = [cfg.weight_embedding * e + cfg.weight_lexical * x for e, x in zip(emb, lex)]
        if self.scorer is None:  # not learned
            return list(relevance), relevance, seconds, self.selection
        rows = sentence_features(texts, groups, emb, lex)
        learned_scores = self.scorer.score(feature_matrix(rows))
        if cfg.scorer == "learned":
            return learned_scores, relevance, seconds, self.selection
        alpha = gate(abstract_share(rows))
        if alpha == 1.0:  # text of the form it was fitted on: the learned model as fitted, fill rule included
            return learned_scores, relevance, seconds, cfg.selection if cfg.selection != "auto" else \
                self.scorer.selection
        bm25 = bm25_scores(self._terms.tokens(query), [self._terms.tokens(t) for t in texts])
        return fuse(learned_scores, bm25, emb, alpha), relevance, seconds, self.selection



def _items_first(items: Any, query: Any) -> tuple[Any, Any]:
    """``(items, query)``, accepting the old ``compress(query, items)`` order with a DeprecationWarning."""
    if isinstance(items, str) and query is not None and not isinstance(query, str):
        warnings.warn("EvidenceCompressor.compress(query, items) is deprecated: pass the items first, "
                      "compress(items, query), as every compressor takes them", DeprecationWarning, stacklevel=3)
        return query, items
    if isinstance(items, str):
        raise TypeError("EvidenceCompressor.compress(items, query): items is a list of passages, not one string")
    return items, query
