"""Search an index folder by dense, BM25 or hybrid retrieval (what ``contextkit search`` runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from contextkit.core.errors import SearchError
from contextkit.core.records import ScoredChunk
from contextkit.index import Index, IndexFolderError

__all__ = ["SearchError", "search_index"]

Mode = Literal["dense", "bm25", "hybrid"]


def search_index(index_dir: str | Path, query: str, k: int = 10, mode: Mode = "hybrid",
                 filters: Any = None, device: str = "auto", **options: Any) -> list[ScoredChunk]:
    """The ``k`` best chunks for ``query`` from the index at ``index_dir``, best first.

    ``filters`` is a :class:`~contextkit.retrievers.Filters`, a dict of its fields, or
    CLI-style ``["key=value", ...]``; ``options`` go to the retriever (``mmr``, ``min_score``,
    ``max_query_chars``, ``max_k``...). The index's model is loaded once per process (a notebook or
    the demo asks many questions); the index is opened by every call (its files read and checked, so
    each call sees the last commit): for many queries, hold an :class:`~contextkit.index.Index` open
    and a retriever over it. The query and ``k`` are checked before the index is opened: a blank
    query or a bad ``k`` is a ``RetrievalError``, one past a limit a ``LimitExceededError``.
    """
    from contextkit.embedders import embedder_for
    from contextkit.retrievers import (
        Filters,
        RetrievalError,
        make_retriever,
    )
    from contextkit.retrievers.base import check_request

    if mode not in ("dense", "bm25", "hybrid"):
        raise SearchError(f"mode must be dense, bm25 or hybrid, not {mode!r}")
    check_request(query, k, **{o: options[o] for o in ("max_query_chars", "max_k") if o in options})
    try:
        if isinstance(filters, list):
            filters = Filters.parse(filters)
        with Index.open(index_dir, read_only=True) as index:
            embedder = None
            if mode != "bm25":
                embedder = embedder_for(index, device, shared=True)
                if embedder.dim != index.manifest.dim:
                    raise SearchError(f"{index_dir}: model gives {embedder.dim}-d vectors, the index holds "
                                      f"{index.manifest.dim}-d")
            return make_retriever(mode, index, embedder, **options).retrieve(query, k, filters)
    except (IndexFolderError, RetrievalError, ValueError) as exc:
        raise SearchError(str(exc)) from exc
