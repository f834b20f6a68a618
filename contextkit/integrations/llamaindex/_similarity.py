"""Query similarity on the nodes of a stock ``VectorStoreIndex``, so the gate can tell an off-topic question.

Why: the relevance gate says "off topic" only where it knows a node's query similarity and a bar for the
index (``contextkit_similarity``/``contextkit_min_similarity``, which ``ContextKitRetriever`` and
``ContextKitVectorStore`` record). A ``VectorStoreIndex`` over LlamaIndex's in-memory ``SimpleVectorStore``
in its default query mode scores each node by the cosine of the app's own embedding model, so that score is
the similarity (as is a ``ContextKitVectorStore``'s in dense mode); the bar is calibrated on the store's vectors the way a contextkit index's is
(:func:`~contextkit.assembly.relevance.index_min_similarity`: a multiple of the mean cosine between passages
of different documents, at most 0.3), so it holds for any embedding model. Other stores (another
database's distance, MMR, hybrid) are left unmarked: their scores are not a cosine one bar can judge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from contextkit.assembly.relevance import (
    AUTO_MAX_SIMILARITY,
    background_similarity,
    bar_from_background,
    cross_document_mean,
)
from contextkit.integrations.llamaindex.convert import SIMILARITY_KEY, mark_similarity

__all__ = ["SimilarityMarker", "similarity_marker", "store_min_similarity", "with_similarity_marker"]

_SAMPLE = 512
_bars: dict[tuple[int, int], float] = {}
#: The bar of a store too small to calibrate one (fewer than 50 pairs of passages from different documents).
#: Lower than contextkit's own fallback of 0.3 because the app's embedding model is unknown here and a handful
#: of documents cannot say how alike its passages are: over three PEPs a fair question ("What is a PEP ... how
#: does a PEP get accepted?") scored 0.27 with MiniLM, while unrelated questions over the PEPs ("What is the
#: capital of France ...?", "How do I bake sourdough bread?", the 2018 world cup, nginx) scored 0.07-0.15.
UNCALIBRATED_MIN_SIMILARITY = 0.2


class SimilarityMarker(BaseNodePostprocessor):
    """Records each node's score as its query similarity, with the store's off-topic bar (first in a chain:
    later postprocessors may rescore). Nodes already marked (by a contextkit retriever or store) are kept."""

    _store_bar: Callable[[], float] | None = PrivateAttr(default=None)  # measured at each call: the store grows

    @classmethod
    def class_name(cls) -> str:
        return "ContextKitSimilarityMarker"

    @classmethod
    def for_store(cls, store_bar: Callable[[], float]) -> SimilarityMarker:
        marker = cls()
        marker._store_bar = store_bar
        return marker

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        bar = self._store_bar() if self._store_bar is not None else AUTO_MAX_SIMILARITY
        for n in nodes:
            if n.score is not None and SIMILARITY_KEY not in (n.node.metadata or {}):
                mark_similarity(n.node, float(n.score), bar)
        return nodes


def store_min_similarity(store: Any) -> float:
    """The off-topic bar of a ``SimpleVectorStore``'s vectors: :data:`BACKGROUND_SCALE` times their mean cosine
    across documents (up to 512 drawn with a fixed seed), at most :data:`AUTO_MAX_SIMILARITY`; when fewer than
    50 such pairs exist, :data:`UNCALIBRATED_MIN_SIMILARITY`. Cached per store and size."""
    data = store.data
    key = (id(store), len(data.embedding_dict))
    if key not in _bars:
        if len(_bars) > 64:
            _bars.clear()
        _bars[key] = _measure(data.embedding_dict, data.text_id_to_ref_doc_id)
    return _bars[key]


def _measure(embeddings: dict[str, list[float]], doc_of: dict[str, str]) -> float:
    ids = sorted(embeddings)
    if len(ids) > _SAMPLE:
        ids = [ids[i] for i in sorted(np.random.default_rng(0).choice(len(ids), _SAMPLE, replace=False))]
    if len(ids) < 2:
        return UNCALIBRATED_MIN_SIMILARITY
    vectors = np.asarray([embeddings[i] for i in ids], dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    background = cross_document_mean(vectors, [doc_of.get(i, i) for i in ids])
    return UNCALIBRATED_MIN_SIMILARITY if background is None else bar_from_background(background)


def similarity_marker(index: Any, retriever_kwargs: dict[str, Any] | None = None) -> SimilarityMarker | None:
    """A marker for the nodes ``index.as_retriever(**retriever_kwargs)`` returns, when their scores are cosines:
    a ``SimpleVectorStore`` or a dense ``ContextKitVectorStore`` queried in the default mode; else None."""
    from llama_index.core.vector_stores import SimpleVectorStore

    from contextkit.integrations.llamaindex.vector_store import ContextKitVectorStore

    store = getattr(index, "vector_store", None)
    mode = (retriever_kwargs or {}).get("vector_store_query_mode", "default")
    if str(getattr(mode, "value", mode)) != "default":
        return None
    if isinstance(store, SimpleVectorStore):
        return SimilarityMarker.for_store(lambda: store_min_similarity(store))
    if isinstance(store, ContextKitVectorStore) and store.mode == "dense":
        return SimilarityMarker.for_store(lambda: _index_bar(store.client))
    return None


def _index_bar(index: Any) -> float:
    """A ``ContextKitVectorStore``'s bar, measured as a contextkit index's; :data:`UNCALIBRATED_MIN_SIMILARITY`
    where it cannot be (its vectors are the app's embedding model's, whatever that is)."""
    background = None if index is None else background_similarity(index)
    return UNCALIBRATED_MIN_SIMILARITY if background is None else bar_from_background(background)


def with_similarity_marker(index: Any, retriever_kwargs: dict[str, Any], postprocessors: list[Any] | None) -> list[Any]:
    """``postprocessors`` with a :class:`SimilarityMarker` first when the index's scores are cosines."""
    marker = similarity_marker(index, retriever_kwargs)
    return [marker, *(postprocessors or [])] if marker is not None else list(postprocessors or [])
