"""Embedders: texts into vectors, with no silent truncation and a cache.

- :mod:`~contextkit.embedders.base`: :class:`BaseEmbedder` (the role), the default model, the cache protocol,
  the report, long-text windows;
- :mod:`~contextkit.embedders.sentence_transformers`: :class:`Embedder`, any sentence-transformers model;
- :mod:`~contextkit.embedders._torch_pipeline`: the pipelined PyTorch encoder (CPU and CUDA);
- :mod:`~contextkit.embedders._onnx`: the ONNX Runtime encoder for CPUs;
- :func:`embedder_for`: the model an index was built with, as its manifest recorded it.
"""

from contextkit.core.errors import EmbeddingMemoryError
from contextkit.embedders._for_index import embedder_for
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

__all__ = ["DEFAULT_MODEL", "BaseEmbedder", "Embedder", "EmbeddingCache", "EmbeddingMemoryError", "EmbeddingReport",
           "MemoryCache", "default_model_path", "embedder_for", "window_pieces"]
