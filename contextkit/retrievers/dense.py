"""``DenseRetriever``: nearest chunks by embedding, over the index's FAISS vectors."""

from __future__ import annotations

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
