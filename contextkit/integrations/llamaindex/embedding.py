"""``ContextKitEmbedding``: contextkit's embedder as a LlamaIndex embedding model.

Why use it in a LlamaIndex app: long texts are embedded as overlapping windows
instead of being cut at the model's 256 word pieces (LlamaIndex's HuggingFace
embedding truncates silently), one query runs much faster through ONNX Runtime on
a CPU (``python bench/bench_retrieval.py latency``), and the default model loads offline.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import Field, PrivateAttr

from contextkit.embedders import Embedder

__all__ = ["ContextKitEmbedding"]


class ContextKitEmbedding(BaseEmbedding):
    model: str = Field(default="default", description="sentence-transformers name or path; default all-MiniLM-L6-v2")
    device: str = "auto"
    backend: str = "auto"
    _embedder: Embedder | None = PrivateAttr(default=None)

    def __init__(self, embedder: Embedder | None = None, **kwargs: Any) -> None:
        if embedder is not None:
            kwargs.setdefault("model", embedder.model_name)
            kwargs.setdefault("model_name", embedder.model_name)
        kwargs.setdefault("model_name", kwargs.get("model", "default"))
        super().__init__(**kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "ContextKitEmbedding"

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = Embedder(self.model, device=self.device, backend=self.backend)  # type: ignore[arg-type]
        return self._embedder

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.embedder.embed([query])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.embedder.embed([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.embed(texts).tolist()
