"""A retriever by mode name, and the embedding model an index was built with.

``search``, the evaluation, ``ContextAssembler``, the LlamaIndex retriever and the
ingestion all turn a mode name ("dense", "bm25", "hybrid") into a retriever and reopen
an index's own model; they do it here, so a new mode or a new recorded setting of the
model is added in one place.
"""

from __future__ import annotations

from typing import Any

from contextkit.embedders import Embedder
from contextkit.errors import RetrievalError
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


def embedder_for(index: Any, device: str = "auto", batch_size: int | None = None, *,
                 shared: bool = False) -> Embedder:
    """The model ``index`` was built with, with the settings its manifest recorded (``long_text``).

    Vectors only compare with the index's when the same model embeds them the same way,
    so the model is never a choice here; ``device`` and ``batch_size`` only change speed.
    ``shared`` returns one loaded model per process for these settings (a notebook or the
    demo asks many questions); leave it off when the caller changes the embedder (its cache).
    """
    if not shared:
        return Embedder.for_index(index, device, batch_size)
    manifest = index.manifest
    key = (manifest.model, manifest.embedder.get("long_text", "window"), device, batch_size)
    if key not in _SHARED:
        while len(_SHARED) >= _SHARED_MAX:  # the oldest model goes first
            _SHARED.pop(next(iter(_SHARED)))
        _SHARED[key] = Embedder.for_index(index, device, batch_size)
    return _SHARED[key]


#: The models ``embedder_for(..., shared=True)`` keeps loaded, by what defines their vectors.
_SHARED: dict[tuple[str, str, str, int | None], Embedder] = {}
_SHARED_MAX = 2
