"""Embedders: texts into vectors, with no silent truncation and a cache.

- :mod:`~contextkit.embedders.base`: :class:`BaseEmbedder` (the role), the default model, the cache protocol,
  the report, long-text windows;
- :mod:`~contextkit.embedders.sentence_transformers`: :class:`Embedder`, any sentence-transformers model;
- :mod:`~contextkit.embedders._torch_pipeline`: the pipelined PyTorch encoder (CPU and CUDA);
- :mod:`~contextkit.embedders._onnx`: the ONNX Runtime encoder for CPUs.
"""

from contextkit.embedders.base import (
    DEFAULT_MODEL,
    BaseEmbedder,
    EmbeddingCache,
    EmbeddingReport,
    MemoryCache,
    default_model_path,
    window_pieces,
)
from contextkit.embedders.sentence_transformers import Embedder
from contextkit.errors import EmbeddingMemoryError

__all__ = ["DEFAULT_MODEL", "BaseEmbedder", "Embedder", "EmbeddingCache", "EmbeddingMemoryError", "EmbeddingReport",
           "MemoryCache", "default_model_path", "window_pieces"]
