"""``BM25Retriever``: lexical retrieval (bm25s, stemming, stop words) over the same chunks."""

from __future__ import annotations

import numpy as np

from contextkit.retrievers.base import Retriever

__all__ = ["BM25Retriever"]


class BM25Retriever(Retriever):
    """Scores are raw BM25 (unbounded); only chunks sharing a term with the query come back."""

    def _candidates(self, query: str, n: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        rowids, scores = self.index.bm25.search(query, n, allowed)
        return [(int(r), float(s)) for r, s in zip(rowids, scores)]
