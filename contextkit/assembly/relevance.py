"""Relevance-gated filling: the budget is a cap, not a target.

Why: a long window invites "dumping all information at once", which dilutes what
matters; and a question the index cannot answer should not cost a full prompt. With
``fill="relevant"`` (the default) evidence stops where relevance falls away:

* an **adaptive floor** on the retrieval scores, relative to the best hit: an item
  scoring below ``relevance_floor`` (default 0.3) of the best (``best - (1 - r) * |best|``, so it
  also holds for negative scores) adds little that the items above it do not; an
  explicit ``min_score`` sets the floor instead;
* an **off-topic check** on the query-passage similarity, when the retriever gave one
  (:attr:`EvidenceItem.similarity`, the dense cosine): when even the best passage is
  below ``min_similarity`` the index holds little that bears on the question, and no
  evidence goes in.

Both are reported: how many items stopped at the floor, the floor itself, and why.
``fill="budget"`` fills to the cap (only ``min_score``, if given, drops items).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from contextkit.core.records import EvidenceItem

__all__ = ["FillMode", "RelevanceReport", "gate"]

FillMode = Literal["relevant", "budget"]


class RelevanceReport(BaseModel):
    """What the relevance gate did to the evidence (``AssemblyReport.relevance``)."""

    fill: FillMode
    candidates: int = Field(description="scored evidence items the gate looked at")
    best_score: float | None = None
    floor: float | None = Field(default=None, description="items scoring below this stopped (None: no floor)")
    floor_from: Literal["relative", "min_score", "none"] = "none"
    below_floor: int = Field(default=0, description="items that stopped at the floor")
    best_similarity: float | None = Field(default=None, description="the best query-passage similarity, if known")
    min_similarity: float | None = None
    off_topic: bool = Field(default=False, description="nothing in the evidence bears on the question")
    message: str = ""


def gate(items: Sequence[EvidenceItem], fill: FillMode, min_score: float | None, relevance_floor: float,
         min_similarity: float | None) -> tuple[list[EvidenceItem], list[tuple[EvidenceItem, str]], RelevanceReport]:
    """(items kept, [(item left out, detail)], the report). Items without a score are always kept."""
    scored = [it.score for it in items if it.score is not None]
    sims = [it.similarity for it in items if it.similarity is not None]
    report = RelevanceReport(fill=fill, candidates=len(scored), min_similarity=min_similarity,
                             best_score=max(scored) if scored else None,
                             best_similarity=max(sims) if sims else None)
    if fill == "relevant" and min_similarity is not None and sims and max(sims) < min_similarity:
        return _off_topic(items, report, min_similarity)
    report.floor, report.floor_from = _floor(report.best_score, fill, min_score, relevance_floor)
    floor = report.floor
    if floor is None:
        return list(items), [], report
    kept = [it for it in items if it.score is None or it.score >= floor]
    left = [(it, f"score {it.score:.4f} below the relevance floor {floor:.4f}") for it in items
            if it.score is not None and it.score < floor]
    report.below_floor = len(left)
    if left and fill == "relevant":
        report.message = _floor_message(report, relevance_floor, min_score)
    return kept, left, report


def _floor_message(report: RelevanceReport, relevance_floor: float, min_score: float | None) -> str:
    how = (f"{relevance_floor:g} of the best score {report.best_score:.4f}" if report.floor_from == "relative"
           else f"min_score {min_score:g}")
    return (f"{report.below_floor} of {report.candidates} evidence items stopped where relevance falls away "
            f"(floor {report.floor:.4f}: {how}); fill='budget' fills the budget instead")


def _off_topic(items: Sequence[EvidenceItem], report: RelevanceReport, min_similarity: float
               ) -> tuple[list[EvidenceItem], list[tuple[EvidenceItem, str]], RelevanceReport]:
    """Nothing bears on the question: every retrieved item stops (items given without scores stay)."""
    best = report.best_similarity
    report.off_topic = True
    report.message = (f"the index had little that bears on the question: its best passage's similarity "
                      f"{best:.3f} is below {min_similarity} (min_similarity); no evidence added")
    gone = [it for it in items if it.score is not None or it.similarity is not None]
    report.below_floor = len(gone)
    kept = [it for it in items if it.score is None and it.similarity is None]
    detail = f"off topic: the best similarity {best:.3f} is below {min_similarity}"
    return kept, [(it, detail) for it in gone], report


def _floor(best: float | None, fill: FillMode, min_score: float | None,
           relevance_floor: float) -> tuple[float | None, Literal["relative", "min_score", "none"]]:
    if min_score is not None:
        return min_score, "min_score"
    if fill == "budget" or best is None or relevance_floor <= 0:
        return None, "none"
    return best - (1.0 - relevance_floor) * abs(best), "relative"
