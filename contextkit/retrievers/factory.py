"""A retriever by mode name (and :func:`embedder_for`, the model an index was built with).

``search``, the evaluation, ``ContextAssembler`` and the LlamaIndex retriever all turn a
mode name ("dense", "bm25", "hybrid") into a retriever here, so a new mode is added in one
place. :func:`embedder_for` lives in :mod:`contextkit.embedders` (ingestion needs it and sits
below the retrievers); it is re-exported here for users.
"""

from __future__ import annotations

from typing import Any

from contextkit.core.errors import RetrievalError
from contextkit.embedders import Embedder, embedder_for
from contextkit.retrievers.base import Retriever
from contextkit.retrievers.bm25 import BM25Retriever
from contextkit.retrievers.dense import DenseRetriever
from contextkit.retrievers.hybrid import HybridRetriever

__all__ = ["MODES", "embedder_for", "make_retriever"]

#: The retrieval modes, as ``search --mode`` spells them.
MODES = ("dense", "bm25", "hybrid")


def make_retriever(mode: str, index: Any, embedder: Embedder | None = None, **options: Any) -> Retriever:
    """The ``mode`` retriever over ``index``; ``options`` go to its constructor.

    ``embedder`` serves the dense side (dense and hybrid; BM25 needs none). Left out, the
    retriever loads the index's own model (see :func:`embedder_for`). An unknown mode is
    a :class:`~contextkit.errors.RetrievalError` naming the valid ones.
    """
    if mode == "bm25":
        return BM25Retriever(index, **options)
    if mode == "dense":
        return DenseRetriever(index, embedder, **options)
    if mode == "hybrid":
        return HybridRetriever(index, embedder, **options)
    raise RetrievalError(f"mode must be {', '.join(MODES[:-1])} or {MODES[-1]}, not {mode!r}")
