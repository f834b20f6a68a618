"""``HybridRetriever``: dense and BM25 fused by weighted scores, each run weighted per query by how sure it is.

Why per query: a fixed weight chosen on one corpus is wrong on another. Where BM25 is weak (short
entity queries, paraphrases) its scores are flat, many chunks matching about as well as its best; where
it is strong its best hit stands out. ``fusion="adaptive"`` (the default) multiplies each run's weight
by that separation (:func:`run_confidence`), so a flat run counts for little on that query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from contextkit.core.errors import InvalidArgumentError
from contextkit.embedders import Embedder
from contextkit.retrievers.base import Retriever
from contextkit.retrievers.bm25 import BM25Retriever
from contextkit.retrievers.dense import DenseRetriever

__all__ = ["HybridRetriever", "adaptive_weights", "rrf_fuse", "run_confidence", "weighted_fuse"]

Fusion = Literal["adaptive", "rrf", "weighted"]
FUSIONS: tuple[str, ...] = ("adaptive", "rrf", "weighted")


def rrf_fuse(runs: list[list[tuple[int, float]]], weights: list[float], k: int = 60) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: ``sum(w / (k + rank))`` over the runs, rank from 1."""
    fused: dict[int, float] = {}
    for run, weight in zip(runs, weights):
        for rank, (rowid, _) in enumerate(run, start=1):
            fused[rowid] = fused.get(rowid, 0.0) + weight / (k + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def weighted_fuse(runs: list[list[tuple[int, float]]], weights: list[float],
                  anchor: int | None = None) -> list[tuple[int, float]]:
    """Weighted sum of min-max normalised scores: a run's best scores 1 and its ``anchor``-th best 0 (its
    last, when ``anchor`` is None or past its end); a chunk missing from a run scores 0 there.

    Why an anchor: a deeper run (a larger budget asks for more candidates) reaches lower scores, and
    normalised against its own minimum every chunk's fused score would rise with the depth, so a gate
    relative to the best would let more through the larger the budget. Anchored at a fixed rank, and a
    score below the anchor's counted as the anchor's (0, as a chunk the run did not reach), a chunk's
    fused score does not depend on how deep the runs went; the chunks below the anchor in every run
    (all scoring 0) are ordered by their unclipped sum."""
    fused: dict[int, list[float]] = {}  # rowid -> [clipped sum, unclipped sum]
    for run, weight in zip(runs, weights):
        if not run:
            continue
        scores = np.array([s for _, s in run], dtype=np.float64)
        hi = scores.max()
        cut = len(scores) if anchor is None else max(1, min(anchor, len(scores)))
        lo = -np.partition(-scores, cut - 1)[cut - 1]  # the cut-th best score
        norm = (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
        for (rowid, _), value in zip(run, norm):
            sums = fused.setdefault(rowid, [0.0, 0.0])
            sums[0] += weight * max(float(value), 0.0)
            sums[1] += weight * float(value)
    order = sorted(fused.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))
    return [(rowid, sums[0]) for rowid, sums in order]


def run_confidence(run: list[tuple[int, float]], depth: int) -> float:
    """How far a run's best score stands above its others: ``(best - mean) / std`` over ``depth`` scores
    (the candidates a full run would hold: ``depth``, or fewer when the index has fewer chunks), chunks the
    run left out (BM25 returns only chunks that share a term) counting as 0. A flat run is near 0; a run
    with one clear winner is large. 0 for an empty run or one whose scores are all equal."""
    if not run:
        return 0.0
    scores = np.zeros(max(depth, len(run)), dtype=np.float64)
    scores[: len(run)] = [s for _, s in run]
    spread = float(scores.std())
    return max(0.0, float(scores[0] - scores.mean()) / spread) if spread > 0 else 0.0


def adaptive_weights(runs: list[list[tuple[int, float]]], weights: list[float], depth: int,
                     power: float = 1.0) -> list[float]:
    """``weights`` scaled by each run's :func:`run_confidence` to the ``power``, summing to the sum of
    ``weights`` (the given weights unchanged when no run has a confidence)."""
    conf = [run_confidence(run, depth) ** power for run in runs]
    scaled = [w * c for w, c in zip(weights, conf)]
    total = sum(scaled)
    return list(weights) if total <= 0 else [x * sum(weights) / total for x in scaled]


class HybridRetriever(Retriever):
    """Both retrievers search ``depth`` candidates each; the fused list is cut to ``k``.

    ``fusion``: ``"adaptive"`` (default; :func:`adaptive_weights` then :func:`weighted_fuse`), ``"weighted"``
    (fixed weights over min-max normalised scores) or ``"rrf"``. Defaults were chosen on the BEIR SciFact
    *train* queries only (``python bench/bench_heldout_retrieval.py tune``); held-out figures (SciFact
    test, XQuAD) are in ``bench/README.md``.
    """

    def __init__(self, index: Any, embedder: Embedder | None = None, *,
                 fusion: Fusion = "adaptive", rrf_k: int = 60, dense_weight: float = 0.5,
                 bm25_weight: float = 0.5, depth: int = 100, **options: Any) -> None:
        super().__init__(index, **options)
        if fusion not in FUSIONS:
            raise InvalidArgumentError(f"fusion must be 'adaptive', 'rrf' or 'weighted', not {fusion!r}")
        self.dense = DenseRetriever(index, embedder)
        self.embedder = self.dense.embedder
        self.sparse = BM25Retriever(index)
        self.fusion, self.rrf_k, self.depth = fusion, rrf_k, depth
        self.weights = [dense_weight, bm25_weight]

    def _settings(self) -> dict[str, Any]:
        return {**super()._settings(), "fusion": self.fusion, "rrf_k": self.rrf_k, "dense_weight": self.weights[0],
                "bm25_weight": self.weights[1], "depth": self.depth}

    def _candidates(self, query: str, n: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        # Runs of max(n, depth) chunks, fused as runs of ``depth`` would be (weights and the normalising
        # anchor from their first ``depth``): the top chunks score the same whatever ``n`` (the budget).
        runs, deepest = self._runs(query, max(n, self.depth), allowed)
        return fuse(runs, self.fusion, self.weights, min(self.depth, deepest), self.rrf_k)[:n]

    def _runs(self, query: str, depth: int, allowed: np.ndarray | None) -> tuple[list[list[tuple[int, float]]], int]:
        """The dense and BM25 runs, and how many candidates a full run holds (``depth``, or fewer chunks)."""
        together = getattr(self.index, "run_together", None)  # (an index-like object of a caller's own has none)
        calls = (lambda: self.dense._candidates(query, depth, allowed), lambda: self.sparse._candidates(query, depth, allowed))
        runs = together(*calls) if together is not None else [call() for call in calls]
        return runs, min(depth, len(self.index) if allowed is None else len(allowed))

    def relevance_anchor(self, scores: Sequence[float]) -> float | None:
        """0 for the weighted fusions (a chunk at ``depth`` in both runs scores 0 there, whatever the number
        of candidates); for ``"rrf"`` or with a reranker, the score at the anchor rank, as for any retriever."""
        if self.fusion == "rrf" or self.reranker is not None:
            return super().relevance_anchor(scores)
        return 0.0

    def fusion_weights(self, query: str, filters: Any = None) -> tuple[float, float]:
        """The (dense, BM25) weights this retriever fuses ``query``'s runs with: the constructor's for
        ``"weighted"`` and ``"rrf"``; for ``"adaptive"``, scaled by each run's :func:`run_confidence`
        (a run of flat scores, or an empty one, counts for little or nothing)."""
        self.check_request(query, 1)
        if self.fusion != "adaptive":
            return self.weights[0], self.weights[1]
        with self.index.snapshot():
            runs, depth = self._runs(query, self.depth, self._allowed(self.filters if filters is None else filters))
        dense, bm25 = adaptive_weights(runs, self.weights, depth)
        return dense, bm25


def fuse(runs: list[list[tuple[int, float]]], fusion: str, weights: list[float], depth: int,
         rrf_k: int = 60) -> list[tuple[int, float]]:
    """The runs fused as ``HybridRetriever(fusion=...)`` fuses them (the tuning bench replays this): runs
    deeper than ``depth`` are weighted and normalised by their first ``depth`` chunks (the anchor of
    :func:`weighted_fuse`), so their top chunks score as in runs of ``depth``."""
    if fusion == "rrf":
        return rrf_fuse(runs, weights, rrf_k)
    if fusion == "adaptive":
        weights = adaptive_weights([run[:depth] for run in runs], weights, depth)
    return weighted_fuse(runs, weights, anchor=depth)
