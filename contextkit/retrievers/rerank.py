"""Rerankers: reorder a retriever's candidates with a stronger (slower) model."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self

from contextkit.errors import InvalidArgumentError
from contextkit.records import ScoredChunk

__all__ = ["CrossEncoderReranker", "Reranker"]


class Reranker(ABC):
    """Reorders a retriever's candidates with a stronger, slower model (one obvious method)."""

    @abstractmethod
    def rerank(self, query: str, hits: list[ScoredChunk]) -> list[ScoredChunk]:
        """The same hits, reordered, with the reranker's scores."""

    def _settings(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this reranker; none by default."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """``{"type": class name, **settings}``, so a retriever's :meth:`~Retriever.to_dict` can carry it."""
        return {"type": type(self).__name__, **self._settings()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The reranker ``data`` describes: this class or the subclass its ``"type"`` names
        (``Reranker.from_dict`` rebuilds any)."""
        settings = dict(data)
        kind = settings.pop("type", cls.__name__)
        classes: list[type[Self]] = [cls]
        for found in classes:
            if found.__name__ == kind:
                return found(**settings)
            classes.extend(found.__subclasses__())
        raise InvalidArgumentError(f"{cls.__name__}.from_dict got the settings of a {kind!r}")


class CrossEncoderReranker(Reranker):
    """A sentence-transformers ``CrossEncoder`` (e.g. ``cross-encoder/ms-marco-MiniLM-L-6-v2``).

    No cross-encoder ships with contextkit; give a model name (needs the Hub) or a local path.
    """

    def __init__(self, model: str, device: str | None = None, batch_size: int = 32) -> None:
        self.model_name, self.device, self.batch_size = model, device, batch_size
        self._model: Any = None

    def _settings(self) -> dict[str, Any]:
        return {"model": self.model_name, "device": self.device, "batch_size": self.batch_size}

    def rerank(self, query: str, hits: list[ScoredChunk]) -> list[ScoredChunk]:
        if not hits:
            return []
        if self._model is None:
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(self.model_name, device=self.device)
        scores = self._model.predict([(query, h.chunk.text) for h in hits], batch_size=self.batch_size)
        rescored = [ScoredChunk(h.chunk, float(s)) for h, s in zip(hits, scores)]
        return sorted(rescored, key=lambda h: -h.score)
