"""Rerankers: reorder a retriever's candidates with a stronger (slower) model."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from contextkit.core.options import Component
from contextkit.core.records import ScoredChunk

__all__ = ["CrossEncoderReranker", "Reranker"]


class Reranker(Component, ABC):
    """Reorders a retriever's candidates with a stronger, slower model (one obvious method).

    ``to_dict``/``from_dict`` come from :class:`~contextkit.core.settings.Component`
    (``{"type": class name, **settings}``), so a retriever's :meth:`~Retriever.to_dict` can carry it
    and ``Reranker.from_dict`` rebuilds any."""

    @abstractmethod
    def rerank(self, query: str, hits: list[ScoredChunk]) -> list[ScoredChunk]:
        """The same hits, reordered, with the reranker's scores."""


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
