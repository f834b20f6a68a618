"""``HybridRetriever``: dense and BM25 fused by reciprocal rank (default) or weighted scores."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from contextkit.core.errors import InvalidArgumentError
from contextkit.embedders import Embedder
from contextkit.retrievers.base import Retriever
from contextkit.retrievers.bm25 import BM25Retriever
from contextkit.retrievers.dense import DenseRetriever

__all__ = ["HybridRetriever", "rrf_fuse", "weighted_fuse"]


def rrf_fuse(runs: list[list[tuple[int, float]]], weights: list[float], k: int = 60) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: ``sum(w / (k + rank))`` over the runs, rank from 1."""
    fused: dict[int, float] = {}
    for run, weight in zip(runs, weights):
        for rank, (rowid, _) in enumerate(run, start=1):
            fused[rowid] = fused.get(rowid, 0.0) + weight / (k + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def weighted_fuse(runs: list[list[tuple[int, float]]], weights: list[float]) -> list[tuple[int, float]]:
    """Weighted sum of min-max normalised scores (a chunk missing from a run scores 0 there)."""
    fused: dict[int, float] = {}
    for run, weight in zip(runs, weights):
        if not run:
            continue
        scores = np.array([s for _, s in run], dtype=np.float64)
        lo, hi = scores.min(), scores.max()
        norm = (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
        for (rowid, _), value in zip(run, norm):
            fused[rowid] = fused.get(rowid, 0.0) + weight * float(value)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


class HybridRetriever(Retriever):
    """Both retrievers search ``depth`` candidates each; the fused list is cut to ``k``.

    Defaults were chosen on the BEIR SciFact *train* queries (809) only: weighted
    fusion of min-max normalised scores with equal weights and depth 100 scored
    best there, ahead of the best RRF (``python bench/bench_retrieval.py tune``).
    """

    def __init__(self, index: Any, embedder: Embedder | None = None, *,
                 fusion: Literal["rrf", "weighted"] = "weighted", rrf_k: int = 60, dense_weight: float = 0.5,
                 bm25_weight: float = 0.5, depth: int = 100, **options: Any) -> None:
        super().__init__(index, **options)
        if fusion not in ("rrf", "weighted"):
            raise InvalidArgumentError(f"fusion must be 'rrf' or 'weighted', not {fusion!r}")
        self.dense = DenseRetriever(index, embedder)
        self.embedder = self.dense.embedder
        self.sparse = BM25Retriever(index)
        self.fusion, self.rrf_k, self.depth = fusion, rrf_k, depth
        self.weights = [dense_weight, bm25_weight]

    def _settings(self) -> dict[str, Any]:
        return {**super()._settings(), "fusion": self.fusion, "rrf_k": self.rrf_k, "dense_weight": self.weights[0],
                "bm25_weight": self.weights[1], "depth": self.depth}

    def _candidates(self, query: str, n: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        depth = max(n, self.depth)
        runs = [self.dense._candidates(query, depth, allowed), self.sparse._candidates(query, depth, allowed)]
        fused = rrf_fuse(runs, self.weights, self.rrf_k) if self.fusion == "rrf" else weighted_fuse(runs, self.weights)
        return fused[:n]
