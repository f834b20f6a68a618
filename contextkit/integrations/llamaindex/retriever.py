"""``ContextKitRetriever``: a contextkit index as a LlamaIndex retriever.

A real ``BaseRetriever``, so it drops into ``RetrieverQueryEngine``,
``QueryFusionRetriever``, routers and postprocessors. Search is contextkit's
(dense FAISS, BM25 or hybrid, with its filters, minimum score, MMR and reranker);
results are ``NodeWithScore`` built by :func:`~.convert.node_from_chunk`, so a
retrieved node has the same id, offsets and metadata as the node
:class:`~.node_parser.ContextKitNodeParser` made from the same document.

Threads: contextkit's index holds a SQLite connection, which Python allows only
in the thread that opened it, and LlamaIndex runs retrievals in a worker thread
when an event loop is already running (``asyncio_run`` in Jupyter or inside an
async app, e.g. ``QueryFusionRetriever(use_async=True)``). So the index is
opened again, read-only, once per other thread that uses the retriever; the
embedding model is shared.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from contextkit.assembly.relevance import index_min_similarity
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import ScoredChunk
from contextkit.embedders import Embedder, embedder_for
from contextkit.index import Index
from contextkit.integrations.llamaindex.convert import (
    filters_from_llamaindex,
    mark_similarity,
    node_from_chunk,
)
from contextkit.retrievers import Filters, RetrievalError, make_retriever
from contextkit.retrievers.base import Retriever
from contextkit.retrievers.dense import query_similarities

__all__ = ["ContextKitRetriever", "Mode"]

log = logging.getLogger(__name__)

Mode = Literal["dense", "bm25", "hybrid"]


class ContextKitRetriever(BaseRetriever):
    """Retrieve ``similarity_top_k`` chunks from a contextkit index, best first.

    ``index`` is an index folder (opened read-only, closed by :meth:`close`) or an
    open :class:`~contextkit.index.Index` (left to its owner). ``mode`` is
    ``dense``, ``bm25`` or ``hybrid`` (the default, as ``contextkit search``).
    ``filters`` is a contextkit :class:`~contextkit.retrievers.Filters`, a dict of
    its fields, or LlamaIndex ``MetadataFilters`` of AND-ed equalities; they apply
    inside the search, so ``similarity_top_k`` results come back when enough
    chunks match. ``embedder`` reuses a loaded model (it must be the index's);
    ``options`` go to the contextkit retriever (``min_score``, ``mmr``,
    ``reranker``, ``candidates``, and for hybrid ``fusion``, ``dense_weight``...).

    Scores are the mode's own: cosine for dense, raw BM25, fused for hybrid. The
    query is ``QueryBundle.query_str``, embedded by the index's model;
    ``QueryBundle.embedding`` and ``custom_embedding_strs`` come from other models
    and are ignored. A blank query is a :class:`~contextkit.retrievers.RetrievalError`
    (a ``ValueError``).
    """

    def __init__(self, index: str | Path | Index, *, mode: Mode = "hybrid", similarity_top_k: int = 10,
                 filters: Filters | dict[str, Any] | Any | None = None, embedder: Embedder | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False,
                 **options: Any) -> None:
        if mode not in ("dense", "bm25", "hybrid"):
            raise InvalidArgumentError(f"mode must be 'dense', 'bm25' or 'hybrid', not {mode!r}")
        if not isinstance(similarity_top_k, int) or similarity_top_k <= 0:
            raise InvalidArgumentError(f"similarity_top_k must be a positive integer, not {similarity_top_k!r}")
        self.mode: Mode = mode
        self.similarity_top_k = similarity_top_k
        self.filters = self._filters(filters)
        self.options = options
        self._owns_index = not isinstance(index, Index)
        self._index: Index = index if isinstance(index, Index) else Index.open(index, read_only=True)
        self._path = self._index.path
        self._owner = threading.get_ident()
        self._local = threading.local()
        try:
            self._embedder = None if mode == "bm25" else self._check_embedder(embedder)
            self._searcher = self._make_searcher(self._index)
        except BaseException:
            self.close()
            raise
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @staticmethod
    def _filters(filters: Any) -> Filters | None:
        if filters is None or isinstance(filters, Filters):
            return filters
        if isinstance(filters, dict):
            return Filters(**filters)
        return filters_from_llamaindex(filters)

    def _check_embedder(self, embedder: Embedder | None) -> Embedder:
        manifest = self._index.manifest
        embedder = embedder or embedder_for(self._index)
        if embedder.model_name != manifest.model:
            raise RetrievalError(f"{self._path}: built with {manifest.model!r}, the embedder is "
                                 f"{embedder.model_name!r}")
        if embedder.dim != manifest.dim:
            raise RetrievalError(f"{self._path}: the index holds {manifest.dim}-d vectors, the model gives "
                                 f"{embedder.dim}-d")
        return embedder

    def _make_searcher(self, index: Index) -> Retriever:
        return make_retriever(self.mode, index, self._embedder, **self.options)

    @property
    def index(self) -> Index:
        """The index as opened by the thread that made this retriever."""
        return self._index

    def _for_this_thread(self) -> tuple[Index, Retriever]:
        if threading.get_ident() == self._owner:
            return self._index, self._searcher
        local = self._local
        if getattr(local, "searcher", None) is None:
            log.debug("%s: opening the index read-only for thread %s", self._path, threading.get_ident())
            local.index = Index.open(self._path, read_only=True)
            local.searcher = self._make_searcher(local.index)
        return local.index, local.searcher

    # ------------------------------------------------------------ retrieval
    def search(self, query: str) -> list[ScoredChunk]:
        """contextkit's own results for ``query`` (what :meth:`retrieve` converts)."""
        if not isinstance(query, str) or not query.strip():
            raise RetrievalError("ContextKitRetriever: the query is empty (QueryBundle.query_str is blank); "
                                 "give a question or keywords")
        _, searcher = self._for_this_thread()
        return searcher.retrieve(query, self.similarity_top_k, self.filters)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.search(query_bundle.query_str)
        if not hits:
            return []
        index, searcher = self._for_this_thread()
        sources = _sources(index, {h.chunk.doc_id for h in hits})
        nodes = [NodeWithScore(node=node_from_chunk(h.chunk, source=sources.get(h.chunk.doc_id)), score=h.score)
                 for h in hits]
        sims = query_similarities(searcher, query_bundle.query_str, [h.chunk.id for h in hits],
                                  [h.score for h in hits], self.similarity_top_k, self.filters)
        if sims is not None:  # dense or hybrid: the synthesizer's gate can tell an off-topic question
            bar = index_min_similarity(index)
            for hit, node in zip(hits, nodes):
                mark_similarity(node.node, sims[hit.chunk.id], bar)
        return nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The synchronous search, on the calling thread.

        Not pushed to a thread pool on purpose: each new thread would reopen the
        index (see the module docstring), and one search takes milliseconds.
        """
        return self._retrieve(query_bundle)

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the index if this retriever opened it (threads' own copies close with them)."""
        if self._owns_index and getattr(self, "_index", None) is not None:
            self._index.close()

    def __enter__(self) -> ContextKitRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sources(index: Index, doc_ids: set[str]) -> dict[str, str]:
    """Each document's source path, as the index records it (documents without one are left out)."""
    return index.document_sources(doc_ids)
