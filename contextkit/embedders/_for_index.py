"""The embedding model an index was built with, reopened with the settings its manifest recorded.

Ingestion (an index's own model for new chunks), the retrievers, search, the evaluation and the
LlamaIndex retriever all reopen it here, so a new recorded setting of the model is read in one
place (``contextkit.retrievers.embedder_for`` is this function).
"""

from __future__ import annotations

from typing import Any

from contextkit.embedders.sentence_transformers import Embedder

__all__ = ["embedder_for"]


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
