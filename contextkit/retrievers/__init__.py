"""Retrievers over an index folder: dense (FAISS), sparse (BM25) and hybrid.

All share ``retrieve(query, k, filters=None)`` and the options of
:class:`~contextkit.retrievers.base.Retriever` (filters, minimum score, MMR, reranker).
"""

from contextkit.retrievers.base import Filters, RetrievalError, Retriever
from contextkit.retrievers.bm25 import BM25Retriever
from contextkit.retrievers.dense import DenseRetriever
from contextkit.retrievers.hybrid import HybridRetriever, rrf_fuse, weighted_fuse
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
    "mmr_select",
    "rrf_fuse",
    "weighted_fuse",
]
