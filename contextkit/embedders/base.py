"""What every embedder shares: the :class:`BaseEmbedder` role, the default model, the vector cache,
the report, long-text windows.

A leaf of the embedders package: it imports no model library, so the index store (which
implements :class:`EmbeddingCache`) depends on it without loading torch. The default model's
name and folder live in :mod:`contextkit.core.tokenizers` (``get_tokenizer("model")`` needs them
too) and are re-exported here.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, Self

from pydantic import BaseModel

from contextkit.core.options import Component
from contextkit.core.tokenizers import DEFAULT_MODEL, default_model_path

__all__ = ["DEFAULT_MODEL", "BaseEmbedder", "EmbeddingCache", "EmbeddingReport", "MemoryCache", "default_model_path",
           "window_pieces"]

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


class BaseEmbedder(Component, ABC):
    """The embedder role: texts in, one normalised float32 row per text out.

    An abstract class rather than a :class:`typing.Protocol`: like the other roles
    (:class:`~contextkit.chunking.Chunker`, :class:`~contextkit.retrievers.Retriever`,
    the rerankers and loaders) it carries the code every embedder needs and none
    should rewrite: :meth:`embed` with the cache and the report, :meth:`cache_key`,
    :meth:`to_dict` with its ``"type"`` key and the checked :meth:`from_dict`. A
    subclass then only says how to turn texts into vectors, and one missing a piece
    fails when it is built, not deep in an ingestion run. The consumers (ingestion,
    retrievers, compressors) only call the members below, so a duck-typed object
    still works there.

    A subclass sets ``model_name`` and implements :attr:`dim`, :meth:`_encode` and
    :meth:`_settings`; :class:`~contextkit.embedders.Embedder` also overrides
    :meth:`embed` (to cache each slice as soon as it is embedded) and the index's
    :meth:`settings` and :meth:`cache_key`.
    """

    #: The model's name, as an index records it (a retriever checks its embedder against it).
    model_name: str
    #: Where vectors of texts already seen are kept (ingestion asks the index for its stored vectors instead).
    cache: EmbeddingCache | None = None
    #: What the latest :meth:`embed` call did.
    last_report: EmbeddingReport = EmbeddingReport()

    @property
    @abstractmethod
    def dim(self) -> int:
        """Length of each vector."""

    @abstractmethod
    def _encode(self, texts: list[str]) -> Any:
        """The normalised float32 vectors of ``texts``, one row each, with no cache."""

    @abstractmethod
    def _settings(self) -> dict[str, Any]:
        """The constructor arguments that define the vectors (JSON values; no cache, no live objects)."""

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None,
              keys: Sequence[str] | None = None) -> Any:
        """A ``(len(texts), dim)`` float32 array of normalised vectors; texts in :attr:`cache` are not
        embedded again. ``progress`` gets the number of texts finished; ``keys`` are the texts'
        :meth:`cache_key` values when the caller has them."""
        import numpy as np

        texts = list(texts)
        if self.cache is not None and keys is None:
            keys = [self.cache_key(t) for t in texts]
        out, todo = self._from_cache(len(texts), keys)
        if todo:
            vectors = np.asarray(self._encode([texts[i] for i in todo]), dtype=np.float32)
            out[todo] = vectors
            if self.cache is not None and keys is not None:
                self.cache.put_vectors({keys[i]: vectors[j] for j, i in enumerate(todo)})
        if progress and texts:
            progress(len(texts))
        self.last_report = EmbeddingReport(texts=len(texts), cache_hits=len(texts) - len(todo), model_inputs=len(todo))
        return out

    def _from_cache(self, n: int, keys: Sequence[str] | None) -> tuple[Any, list[int]]:
        """The output array with the cached rows filled in, and the rows still to embed."""
        import numpy as np

        out = np.zeros((n, self.dim), dtype=np.float32)
        cached = self.cache.get_vectors(keys) if self.cache is not None and keys is not None else {}
        todo = []
        for i in range(n):
            vector = cached.get(keys[i]) if cached and keys is not None else None
            if vector is None:
                todo.append(i)
            else:
                out[i] = vector
        return out, todo

    def settings(self) -> dict[str, Any]:
        """What an index records to check later vectors against its own."""
        return {"model": self.model_name, "dim": self.dim}

    def cache_key(self, text: str) -> str:
        """A key naming these settings and ``text``: equal keys mean equal vectors."""
        h = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode())
        h.update(b"\0" + text.encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """The embedder ``data`` describes: this class or the subclass its ``"type"`` names
        (``BaseEmbedder.from_dict`` rebuilds any), with ``cache=`` (which does not travel)."""
        cache = objects.pop("cache", None)
        embedder = super().from_dict(data, **objects)
        if cache is not None:
            embedder.cache = cache
        return embedder


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
