"""Search an index folder by dense, BM25 or hybrid retrieval (what ``contextkit search`` runs)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from contextkit.embedders import Embedder
from contextkit.index import Index, IndexFolderError
from contextkit.records import ScoredChunk
from contextkit.errors import SearchError

__all__ = ["SearchError", "search_index"]

Mode = Literal["dense", "bm25", "hybrid"]


def search_index(index_dir: str | Path, query: str, k: int = 10, mode: Mode = "hybrid",
                 filters: Any = None, device: str = "auto", **options: Any) -> list[ScoredChunk]:
    """The ``k`` best chunks for ``query`` from the index at ``index_dir``, best first.

    ``filters`` is a :class:`~contextkit.retrievers.Filters`, a dict of its fields, or
    CLI-style ``["key=value", ...]``; ``options`` go to the retriever (``mmr``, ``min_score``...).
    """
    from contextkit.retrievers import BM25Retriever, DenseRetriever, Filters, HybridRetriever, RetrievalError

    if mode not in ("dense", "bm25", "hybrid"):
        raise SearchError(f"mode must be dense, bm25 or hybrid, not {mode!r}")
    try:
        if isinstance(filters, list):
            filters = Filters.parse(filters)
        with Index.open(index_dir, read_only=True) as index:
            if mode == "bm25":
                return BM25Retriever(index, **options).retrieve(query, k, filters)
            embedder = _embedder(index.manifest.model, device, index.manifest.embedder.get("long_text", "window"))
            if embedder.dim != index.manifest.dim:
                raise SearchError(f"{index_dir}: model gives {embedder.dim}-d vectors, the index holds "
                                  f"{index.manifest.dim}-d")
            cls = DenseRetriever if mode == "dense" else HybridRetriever
            return cls(index, embedder, **options).retrieve(query, k, filters)
    except (IndexFolderError, RetrievalError, ValueError) as exc:
        raise SearchError(str(exc)) from exc


@lru_cache(maxsize=2)
def _embedder(model: str, device: str, long_text: str) -> Embedder:
    """One loaded model per process: a notebook or the demo asks many questions."""
    return Embedder(model, device=device, long_text=long_text)  # type: ignore[arg-type]
