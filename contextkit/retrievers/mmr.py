"""Maximal marginal relevance: pick results that are relevant and unlike each other."""

from __future__ import annotations

import numpy as np

from contextkit.core.errors import InvalidArgumentError

__all__ = ["mmr_select"]


def mmr_select(query: np.ndarray, vectors: np.ndarray, k: int, lambda_: float = 0.5) -> list[int]:
    """Indices of ``k`` rows of ``vectors`` chosen greedily by MMR.

    Each step takes the row maximising ``lambda_ * sim(query, row) - (1 - lambda_) *
    max sim(row, chosen)``; ``lambda_ = 1`` is plain relevance order. Vectors are
    expected normalised (cosine = inner product).
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise InvalidArgumentError(f"MMR lambda must be in [0, 1], not {lambda_}")
    n = len(vectors)
    if n == 0:
        return []
    relevance = vectors @ query
    chosen: list[int] = []
    redundancy = np.full(n, -np.inf)
    free = np.ones(n, dtype=bool)
    for _ in range(min(k, n)):
        penalty = np.where(np.isfinite(redundancy), redundancy, 0.0)
        score = lambda_ * relevance - (1.0 - lambda_) * penalty
        score[~free] = -np.inf
        pick = int(np.argmax(score))
        chosen.append(pick)
        free[pick] = False
        redundancy = np.maximum(redundancy, vectors @ vectors[pick])
    return chosen
