"""Relevance-gated filling: the budget is a cap, not a target.

Why: a long window invites "dumping all information at once", which dilutes what
matters; and a question the index cannot answer should not cost a full prompt. With
``fill="relevant"`` (the default) evidence stops where relevance falls away:

* an **adaptive floor** on the retrieval scores, relative to the best hit: an item
  scoring below ``relevance_floor`` (default 0.3) of the best (``best - (1 - r) * |best|``, so it
  also holds for negative scores) adds little that the items above it do not; an
  explicit ``min_score`` sets the floor instead. When the evidence section has a
  ``relevance_anchor`` (``ContextAssembler`` sets it: the retriever's score at rank
  :data:`ANCHOR_RANK`, or 0 for ``HybridRetriever``, whose fused scores are anchored there), the floor is ``relevance_floor`` of the way from that score to the
  best: ``anchor + r * (best - anchor)``. Why: a cosine or a BM25 score has no zero that
  means "unrelated" (in a documentation index the 1,300th passage still has a cosine of
  half the best), so a floor relative to zero let through nearly every candidate, and the
  candidates grow with the budget: a 1M-token window got 47k tokens of evidence where
  5,000 tokens got 5k. Measured from a fixed rank, the floor is the same whatever the
  budget, and the budget is a cap again;
* an **off-topic check** on the query-passage similarity, when the retriever gave one
  (:attr:`EvidenceItem.similarity`, the dense cosine): when even the best passage is
  below ``min_similarity`` the index holds little that bears on the question, and no
  evidence goes in. ``min_similarity="auto"`` (the default) calibrates it per index
  (:func:`index_min_similarity`): one cosine cannot serve every corpus, since how alike a
  question and an unrelated passage are depends on how alike the index's passages are to
  each other (MiniLM, mean cosine of passages from different documents: SciFact's abstracts
  0.11, XQuAD's Wikipedia paragraphs 0.02; an answerable XQuAD question's best passage can
  be as low as 0.21, below a cosine fitted on SciFact). A question one passage holds every word of is
  never off topic (on an index about one subject, a short question is far from every passage).

Both are reported: how many items stopped at the floor, the floor itself, and why.
``fill="budget"`` fills to the cap (only ``min_score``, if given, drops items).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from contextkit.assembly._prune import terms
from contextkit.core.config import RELEVANCE_ANCHOR_RANK
from contextkit.core.records import EvidenceItem

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.index import Index

__all__ = ["ANCHOR_RANK", "AUTO_MAX_SIMILARITY", "BACKGROUND_SCALE", "FillMode", "MinSimilarity", "RelevanceReport",
           "background_similarity", "bar_from_background", "cross_document_mean", "gate",
           "index_min_similarity"]

FillMode = Literal["relevant", "budget"]
MinSimilarity = float | Literal["auto"] | None

#: The rank whose score counts as "no longer relevant" for the floor (``Section.relevance_anchor``,
#: :meth:`Retriever.relevance_anchor <contextkit.retrievers.Retriever.relevance_anchor>`).
ANCHOR_RANK = RELEVANCE_ANCHOR_RANK
#: ``min_similarity="auto"`` is never above this (the fixed cosine it replaces; chosen on SciFact train),
#: and is this when no index is known or the index is too small to measure (fewer than
#: ``_MIN_PAIRS`` pairs of passages from different documents).
AUTO_MAX_SIMILARITY = 0.3
#: ``min_similarity="auto"``: this many times the index's background similarity. Chosen on SciFact only,
#: where 0.3 was tuned (train queries against off-topic ones): its background is 0.11, so a multiple of 3
#: keeps SciFact at 0.3 (its figures unchanged) while an index of passages less alike gets a lower bar.
BACKGROUND_SCALE = 3.0
_SAMPLE = 512
_MIN_PAIRS = 50
_cache: dict[tuple[str, int], float | None] = {}


class RelevanceReport(BaseModel):
    """What the relevance gate did to the evidence (``AssemblyReport.relevance``)."""

    fill: FillMode
    candidates: int = Field(description="scored evidence items the gate looked at")
    best_score: float | None = None
    floor: float | None = Field(default=None, description="items scoring below this stopped (None: no floor)")
    floor_from: Literal["relative", "min_score", "none"] = "none"
    anchor: float | None = Field(default=None, description="the score the relative floor is measured from (the "
                                 "retriever's score at rank ANCHOR_RANK); None: from 0")
    below_floor: int = Field(default=0, description="items that stopped at the floor")
    best_similarity: float | None = Field(default=None, description="the best query-passage similarity, if known")
    min_similarity: float | None = None
    off_topic: bool = Field(default=False, description="nothing in the evidence bears on the question")
    words_found: bool = Field(default=False, description="the best similarity was under min_similarity, but a "
                              "passage holds every word of the question: not off topic")
    message: str = ""


def background_similarity(index: Index) -> float | None:
    """The mean cosine between passages of different documents in ``index`` (up to 512 chunks drawn with a
    fixed seed, so the same index gives the same value); None when fewer than 50 such pairs exist.
    Cached per index folder and generation: a few milliseconds, once."""
    key = (str(getattr(index, "path", id(index))), int(getattr(index, "generation", 0) or 0))
    if key not in _cache:
        _cache[key] = _measure_background(index)
    return _cache[key]


def _measure_background(index: Index) -> float | None:
    import numpy as np

    rows = index.store.sample_chunk_rows(4 * _SAMPLE)
    if len(rows) > _SAMPLE:
        picks = np.random.default_rng(0).choice(len(rows), _SAMPLE, replace=False)
        rows = [rows[i] for i in sorted(picks)]
    if len(rows) < 2:
        return None
    vectors = np.asarray(index.store.vectors_by_rowid([r for r, _ in rows]), dtype=np.float64)
    return cross_document_mean(vectors, [d for _, d in rows])


def cross_document_mean(vectors: Any, docs: Sequence[str]) -> float | None:
    """The mean dot product of the rows of ``vectors`` (unit vectors) that belong to different documents
    (``docs[i]`` is row i's); None under 50 such pairs. Plain arrays, so any store's vectors can be measured."""
    import numpy as np

    labels = np.array(list(docs))
    apart = np.triu(labels[:, None] != labels[None, :], k=1)
    if int(apart.sum()) < _MIN_PAIRS:
        return None
    return float((vectors @ vectors.T)[apart].mean())


def index_min_similarity(index: Index | None) -> float:
    """What ``min_similarity="auto"`` is for ``index``: :data:`BACKGROUND_SCALE` times its
    :func:`background_similarity`, at most :data:`AUTO_MAX_SIMILARITY` (that, when it cannot be measured)."""
    background = None if index is None else background_similarity(index)
    return AUTO_MAX_SIMILARITY if background is None else bar_from_background(background)


def bar_from_background(background: float) -> float:
    """The off-topic bar for a background similarity: :data:`BACKGROUND_SCALE` times it, in 0 ..
    :data:`AUTO_MAX_SIMILARITY`."""
    return float(min(AUTO_MAX_SIMILARITY, max(0.0, BACKGROUND_SCALE * background)))


def gate(items: Sequence[EvidenceItem], fill: FillMode, min_score: float | None, relevance_floor: float,
         min_similarity: MinSimilarity, anchor: float | None = None, continuations: bool = False,
         question: str | None = None) -> tuple[list[EvidenceItem], list[tuple[EvidenceItem, str]], RelevanceReport]:
    """(items kept, [(item left out, detail)], the report). Items without a score are always kept.
    ``min_similarity="auto"`` here (no index known) is :data:`AUTO_MAX_SIMILARITY`; ``ContextAssembler``
    resolves it for its retriever's index first (:func:`index_min_similarity`). ``anchor``: the score
    the relative floor is measured from (None: 0; see the module's docstring).

    ``continuations`` (a tight budget, chunk by chunk): an item under the relative floor that overlaps or
    adjoins an item kept, in the same document, is kept too: it reads on from a passage the floor let
    through, its score is its own words' (a chunk's answer often opens the next chunk: "... Toghrul Khan."
    then "She gave birth to a son, Jochi"), and as the lowest candidate it only takes room nothing better
    wants.

    ``question``: the off-topic check lets the evidence through when one passage holds every word of it
    (stemmed, stop words left out): a question can be about what the index holds though its embedding is
    far from every passage's, the short questions of an index on one subject most of all ("Who was Guy's
    rival?" at 0.245 against a bar of 0.3, on paragraphs all about the Normans)."""
    if min_similarity == "auto":
        min_similarity = AUTO_MAX_SIMILARITY
    scored = [it.score for it in items if it.score is not None]
    sims = [it.similarity for it in items if it.similarity is not None]
    report = RelevanceReport(fill=fill, candidates=len(scored), min_similarity=min_similarity,
                             best_score=max(scored) if scored else None,
                             best_similarity=max(sims) if sims else None)
    if fill == "relevant" and min_similarity is not None and sims and max(sims) < min_similarity:
        report.words_found = _holds_every_word(items, question)
        if not report.words_found:
            return _off_topic(items, report, min_similarity)
    report.floor, report.floor_from = _floor(report.best_score, fill, min_score, relevance_floor, anchor)
    if report.floor_from == "relative" and anchor is not None and report.best_score is not None \
            and anchor < report.best_score:
        report.anchor = anchor
    floor = report.floor
    if floor is None:
        return list(items), [], report
    kept = [it for it in items if it.score is None or it.score >= floor]
    below = [it for it in items if it.score is not None and it.score < floor]
    if continuations and report.floor_from == "relative":
        readmitted = {id(it) for it in below if _continues(it, kept)}
        kept += [it for it in below if id(it) in readmitted]
        below = [it for it in below if id(it) not in readmitted]
    left = [(it, f"score {it.score:.4f} below the relevance floor {floor:.4f}") for it in below]
    report.below_floor = len(left)
    if left and fill == "relevant":
        report.message = _floor_message(report, relevance_floor, min_score)
    return kept, left, report


def _holds_every_word(items: Sequence[EvidenceItem], question: str | None) -> bool:
    """Whether one of ``items`` holds every word of ``question`` (stemmed, no stop words; at least one).
    Measured on SciFact: one of ``bench/bench_relevance.py``'s 30 off-topic questions ("What is the capital
    of Australia?") has all its words in one of the 5,183 abstracts, so the check costs the gate little."""
    wanted = terms(question or "")
    return bool(wanted) and any(wanted <= terms(it.text) for it in items if it.score is not None
                                or it.similarity is not None)


def _continues(item: EvidenceItem, kept: Sequence[EvidenceItem]) -> bool:
    """Whether ``item`` overlaps or adjoins one of ``kept`` in the same document (by their offsets)."""
    if not item.doc_id or item.start is None or item.end is None:
        return False
    return any(k.doc_id == item.doc_id and k.start is not None and k.end is not None
               and item.start <= k.end and k.start <= item.end for k in kept)


def _floor_message(report: RelevanceReport, relevance_floor: float, min_score: float | None) -> str:
    if report.floor_from != "relative":
        how = f"min_score {min_score:g}"
    elif report.anchor:  # (an anchor of 0, the hybrid's, is the plain share of the best)
        how = (f"{relevance_floor:g} of the way from the score at rank {ANCHOR_RANK}, {report.anchor:.4f}, to the "
               f"best, {report.best_score:.4f}")
    else:
        how = f"{relevance_floor:g} of the best score {report.best_score:.4f}"
    return (f"{report.below_floor} of {report.candidates} evidence items stopped where relevance falls away "
            f"(floor {report.floor:.4f}: {how}); fill='budget' fills the budget instead")


def _off_topic(items: Sequence[EvidenceItem], report: RelevanceReport, min_similarity: float
               ) -> tuple[list[EvidenceItem], list[tuple[EvidenceItem, str]], RelevanceReport]:
    """Nothing bears on the question: every retrieved item stops (items given without scores stay)."""
    best = report.best_similarity
    report.off_topic = True
    report.message = (f"the index had little that bears on the question: its best passage's similarity "
                      f"{best:.3f} is below {min_similarity:.3f} (min_similarity); no evidence added")
    gone = [it for it in items if it.score is not None or it.similarity is not None]
    report.below_floor = len(gone)
    kept = [it for it in items if it.score is None and it.similarity is None]
    detail = f"off topic: the best similarity {best:.3f} is below {min_similarity:.3f}"
    return kept, [(it, detail) for it in gone], report


def _floor(best: float | None, fill: FillMode, min_score: float | None, relevance_floor: float,
           anchor: float | None) -> tuple[float | None, Literal["relative", "min_score", "none"]]:
    if min_score is not None:
        return min_score, "min_score"
    if fill == "budget" or best is None or relevance_floor <= 0:
        return None, "none"
    if anchor is not None and anchor < best:
        return anchor + relevance_floor * (best - anchor), "relative"
    return best - (1.0 - relevance_floor) * abs(best), "relative"
