"""Retrievers over an index folder: dense (FAISS), sparse (BM25) and hybrid.

All share ``retrieve(query, k, filters=None)`` and the options of
:class:`~contextkit.retrievers.base.Retriever` (filters, minimum score, MMR, reranker);
:func:`make_retriever` builds one by mode name, :func:`embedder_for` loads an index's own model.
"""

from contextkit.retrievers.base import Filters, RetrievalError, Retriever
from contextkit.retrievers.bm25 import BM25Retriever
from contextkit.retrievers.dense import DenseRetriever
from contextkit.retrievers.factory import embedder_for, make_retriever
from contextkit.retrievers.hybrid import HybridRetriever, adaptive_weights, rrf_fuse, run_confidence, weighted_fuse
from contextkit.retrievers.mmr import mmr_select
from contextkit.retrievers.rerank import CrossEncoderReranker, Reranker

__all__ = [
    "BM25Retriever",
    "CrossEncoderReranker",
    "DenseRetriever",
    "Filters",
    "HybridRetriever",
    "Reranker",
    "RetrievalError",
    "Retriever",
    "adaptive_weights",
    "embedder_for",
    "make_retriever",
    "mmr_select",
    "rrf_fuse",
    "run_confidence",
    "weighted_fuse",
]
