"""``DenseRetriever``: nearest chunks by embedding, over the index's FAISS vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from contextkit.core.errors import RetrievalError
from contextkit.embedders import Embedder
from contextkit.retrievers.base import Retriever

__all__ = ["DenseRetriever"]


class DenseRetriever(Retriever):
    """Embeds the query with the index's own model (long queries are windowed, never truncated)."""

    def __init__(self, index: Any, embedder: Embedder | None = None, **options: Any) -> None:
        super().__init__(index, **options)
        self.embedder = embedder or Embedder.for_index(index)
        if self.embedder.model_name != index.manifest.model:
            raise RetrievalError(f"the index was built with {index.manifest.model!r}, "
                                 f"the embedder is {self.embedder.model_name!r}")

    def _candidates(self, query: str, n: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        return self.search_vector(self.embedder.embed([query])[0], n, allowed)

    def search_vector(self, vector: np.ndarray, n: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """``(rowid, score)`` of the nearest chunks to a query vector (see :meth:`Index.nearest_rowids`)."""
        return self.index.nearest_rowids(vector, n, allowed)


def query_similarities(retriever: Retriever, query: str, ids: Sequence[str], scores: Sequence[float], n: int,
                       filters: Any = None) -> dict[str, float] | None:
    """Each hit's query similarity (the dense cosine), by chunk id: what the relevance gate's off-topic
    check reads. ``ids``/``scores``: the hits ``retriever`` returned for ``query`` out of ``n`` asked.

    A dense retriever's scores are that similarity; a hybrid one's are fused and relative (the best hit
    scores about 1 whatever the question), so its dense half is asked once more (the query's embedding
    is cached). A hit outside the dense top ``n`` gets the lowest similarity seen (it ranks below them
    all). None for a retriever with no dense part (BM25): the similarity is unknown."""
    dense = retriever if isinstance(retriever, DenseRetriever) else getattr(retriever, "dense", None)
    if not isinstance(dense, DenseRetriever):
        return None
    if dense is retriever:
        return {i: float(s) for i, s in zip(ids, scores)}
    sims = {hit.chunk.id: float(hit.score) for hit in dense.retrieve(query, max(n, 1), filters)}
    low = min(sims.values(), default=0.0)
    return {i: sims.get(i, low) for i in ids}
