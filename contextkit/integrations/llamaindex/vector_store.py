"""``ContextKitVectorStore``: a contextkit index folder as a LlamaIndex vector store.

Why: ``VectorStoreIndex.from_vector_store(ContextKitVectorStore(path))`` and
``StorageContext.from_defaults(vector_store=...)`` then keep their vectors in a
contextkit folder, with its guarantees: every ``add``/``delete`` is one
transaction (committed whole or not at all), the folder can be checked with
``contextkit verify`` and searched by ``contextkit search --mode bm25`` too, and
updates are incremental. The store keeps the node text (``stores_text``), so the
index needs no docstore to answer.

Vectors are LlamaIndex's (its ``embed_model`` made them; they are normalised to
unit length, so dense scores are cosines). The folder records ``model`` (default
``"llamaindex"``) and the dimension of the first vectors added; vectors of another
dimension are refused. Queries: ``DEFAULT`` (dense) and ``HYBRID`` (dense and BM25
over ``query_str``, fused by reciprocal rank); ``mode="hybrid"`` makes hybrid the
default. Filters: every operator and condition of LlamaIndex's ``SimpleVectorStore``
(``==``, ``!=``, ``>``, ``>=``, ``<``, ``<=``, ``in``, ``nin``, ``contains``, ``any``,
``all``, ``text_match``, ``text_match_insensitive``, ``is_empty``; AND, OR, NOT), with
its semantics, evaluated by LlamaIndex's own per-operator code on the metadata it
filters on; ``MetadataFilters`` may nest too (SimpleVectorStore refuses that). The
filters select the allowed chunks *before* the nearest ones are taken, so
``similarity_top_k`` hits come back whenever that many match. String equalities under
AND first narrow the candidates in the index (SQL), the rest is checked per chunk.
``delete_nodes``, ``get_nodes`` and ``clear`` take the same filters and write through
the index's API, one transaction each.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import (
    build_metadata_filter_fn,
    node_to_metadata_dict,
)

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError, RetrievalError
from contextkit.core.records import Chunk
from contextkit.core.tokenizers import Tokenizer, get_tokenizer
from contextkit.index import Index, location_name
from contextkit.integrations.llamaindex.convert import NODE_KEY, stored_node
from contextkit.retrievers import Filters
from contextkit.retrievers.hybrid import rrf_fuse

__all__ = ["NODE_KEY", "ContextKitVectorStore"]

_MODES = {VectorStoreQueryMode.DEFAULT: "dense", VectorStoreQueryMode.HYBRID: "hybrid"}

#: The operators SimpleVectorStore's filter function evaluates (``build_metadata_filter_fn``); one LlamaIndex
#: adds later is refused by name rather than passed through to an "Invalid operator" deep in a query.
_OPERATORS = frozenset({
    FilterOperator.EQ, FilterOperator.NE, FilterOperator.GT, FilterOperator.GTE, FilterOperator.LT,
    FilterOperator.LTE, FilterOperator.IN, FilterOperator.NIN, FilterOperator.CONTAINS, FilterOperator.ANY,
    FilterOperator.ALL, FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE, FilterOperator.IS_EMPTY,
})
#: Keys LlamaIndex sets itself in the metadata it filters on (over a user's own key of the same name).
_LI_KEYS = frozenset({"doc_id", "ref_doc_id", "document_id", "_node_type", "_node_content"})
_SCAN_BATCH = 2048  # chunks read at a time when filters are checked chunk by chunk


class ContextKitVectorStore(BasePydanticVectorStore):
    """LlamaIndex's vector-store interface over a contextkit index folder (created on the first ``add``)."""

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False
    path: str
    mode: Literal["dense", "hybrid"] = "dense"
    model: str = "llamaindex"
    tokenizer: str = DEFAULT_TOKENIZER

    _index: Index | None = PrivateAttr(default=None)
    _location: str = PrivateAttr(default="")  # the folder, or the DSN with its password if it has one
    _tok: Tokenizer | None = PrivateAttr(default=None)

    def __init__(self, path: str | Path, *, mode: Literal["dense", "hybrid"] = "dense", model: str = "llamaindex",
                 tokenizer: str = DEFAULT_TOKENIZER, **kwargs: Any) -> None:
        if mode not in ("dense", "hybrid"):
            raise InvalidArgumentError(f"mode must be 'dense' or 'hybrid', not {mode!r}")
        # The pydantic mypy plugin types the parent's __init__ with the parent's fields only; these are ours.
        # A DSN's password stays out of the ``path`` field, which LlamaIndex serialises with the store
        # (``to_dict``, ``persist``): the field names the database without it, the connection uses it.
        location = str(path)
        shown = location_name(location)
        super().__init__(path=shown, mode=mode, model=model, tokenizer=tokenizer,  # type: ignore[call-arg]
                         **kwargs)
        self._location = location
        if Index.exists(self._location):
            self._index = Index.open(self._location)

    @classmethod
    def class_name(cls) -> str:
        return "ContextKitVectorStore"

    @property
    def client(self) -> Index | None:
        """The open contextkit :class:`~contextkit.index.Index` (None before the first ``add``)."""
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    def _open(self, dim: int) -> Index:
        if self._index is None:
            self._index = Index.create(self._location, model=self.model, dim=dim, tokenizer=self.tokenizer)
        if self._index.manifest.dim != dim:
            raise InvalidArgumentError(f"{self.path}: the index holds {self._index.manifest.dim}-d vectors; these "
                                       f"nodes have {dim}-d embeddings (another embed_model?)")
        return self._index

    # ---------------------------------------------------------------- writes
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add nodes with their embeddings, in one transaction; a node id already stored is replaced."""
        if not nodes:
            return []
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise InvalidArgumentError(f"nodes without embeddings cannot be added to a vector store: {missing[:3]} "
                                       "(embed them first, as VectorStoreIndex does)")
        vectors = np.asarray([n.embedding for n in nodes], dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        index = self._open(vectors.shape[1])
        if self._tok is None:
            self._tok = get_tokenizer(self.tokenizer)
        chunks = [self._chunk(n, i) for i, n in enumerate(nodes)]
        keys = [f"{c.id}@{hashlib.sha256(v.tobytes()).hexdigest()}" for c, v in zip(chunks, vectors)]
        by_doc: dict[str, int] = defaultdict(int)
        for c in chunks:
            by_doc[c.doc_id] += 1
        with index.transaction():
            self._drop_ids(index, [c.id for c in chunks])
            known = set(index.documents())
            for doc_id in by_doc:
                if doc_id not in known:
                    digest = hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).hexdigest()
                    index.store.put_document(doc_id, None, doc_id, digest, 0, {})
            index.add_chunks(chunks, vectors, keys)
        index.save()
        return [n.node_id for n in nodes]

    def _chunk(self, node: BaseNode, position: int) -> Chunk:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        start = getattr(node, "start_char_idx", None)  # TextNode's; BaseNode has none
        if start is None:
            start = 0
        # Every metadata value, as JSON (lists and nested values too: contextkit's search and CLI see them);
        # the node whole under NODE_KEY, from which LlamaIndex gets it back as it was.
        meta: dict[str, Any] = node.model_dump(mode="json", include={"metadata"}).get("metadata") or {}
        meta[NODE_KEY] = node_to_metadata_dict(node, remove_text=True, flat_metadata=False)
        assert self._tok is not None
        return Chunk(id=node.node_id, doc_id=str(node.ref_doc_id or node.node_id), ordinal=position, text=text,
                     start=int(start), end=int(start) + len(text), token_count=self._tok.count(text), metadata=meta)

    @staticmethod
    def _drop_ids(index: Index, ids: list[str]) -> None:
        """Chunks of these node ids out (an add of a stored node id replaces it), through the index's own
        deletion: their rows retire, FAISS and BM25 drop them (inside the caller's transaction)."""
        index.delete_chunks(ids)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of one source document (one transaction)."""
        if self._index is not None:
            self._index.delete(ref_doc_id)
            self._index.save()

    def delete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                     **delete_kwargs: Any) -> None:
        """Delete the nodes among ``node_ids`` (all when None) that match ``filters``, in one transaction.

        As SimpleVectorStore's: neither argument deletes every node. Chunks go through the index's
        :meth:`~contextkit.index.Index.delete_chunks`; a document left without chunks goes too."""
        index = self._index
        if index is None:
            return
        doomed = [c for _, c in self._matching(index, node_ids, filters)]
        if not doomed:
            return
        with index.transaction():
            index.delete_chunks([c.id for c in doomed])
            for doc_id in sorted({c.doc_id for c in doomed}):
                if len(index.rowids_matching(doc_ids=[doc_id])) == 0:
                    index.delete_document(doc_id)
        index.save()

    def get_nodes(self, node_ids: list[str] | None = None,
                  filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The stored nodes among ``node_ids`` (all when None) that match ``filters``, with their text.

        Order: that of ``node_ids`` when given, else the order they were added."""
        if self._index is None:
            return []
        found = [c for _, c in self._matching(self._index, node_ids, filters)]
        if node_ids is not None:
            position = {node_id: i for i, node_id in reversed(list(enumerate(node_ids)))}
            found.sort(key=lambda c: position[c.id])
        return [_node(c) for c in found]

    def clear(self) -> None:
        """Delete every node and document, in one transaction (the folder and its settings stay)."""
        index = self._index
        if index is None:
            return
        with index.transaction():
            for doc_id in index.documents():
                index.delete_document(doc_id)
        index.save()

    def _matching(self, index: Index, node_ids: list[str] | None,
                  filters: MetadataFilters | None) -> list[tuple[int, Chunk]]:
        """``(rowid, chunk)`` of the stored nodes among ``node_ids`` (all when None) matching ``filters``."""
        rowids = _prefiltered(index, None, filters)
        wanted = None if node_ids is None else set(node_ids)
        match = _matcher(filters)
        return [(r, c) for r, c in _scan(index, rowids)
                if (wanted is None or c.id in wanted) and match(_filter_metadata(c))]

    # ----------------------------------------------------------------- query
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        mode = self._mode(query)
        if self._index is None or len(self._index) == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if query.query_embedding is None:
            raise InvalidArgumentError("ContextKitVectorStore needs query_embedding (LlamaIndex embeds the query)")
        index, k = self._index, query.similarity_top_k
        allowed = self._allowed(query, index)
        if allowed is not None and len(allowed) == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        vector = np.asarray(query.query_embedding, dtype=np.float32)
        vector /= max(float(np.linalg.norm(vector)), 1e-12)
        hits = index.nearest_rowids(vector, k if mode == "dense" else 4 * k, allowed)
        if mode == "hybrid":
            query_str = query.query_str or ""
            if not query_str.strip():
                raise InvalidArgumentError("hybrid queries need query_str (the BM25 half searches its words)")
            rowids, scores = index.bm25.search(query_str, 4 * k, allowed)
            hits = rrf_fuse([hits, [(int(r), float(s)) for r, s in zip(rowids, scores)]], [1.0, 1.0])
        hits = hits[:k]
        found = index.store.chunks_by_rowid({r for r, _ in hits})
        nodes, sims = [], []
        for rowid, score in hits:
            if rowid in found:
                nodes.append(_node(found[rowid]))
                sims.append(float(score))
        return VectorStoreQueryResult(nodes=nodes, similarities=sims, ids=[n.node_id for n in nodes])

    def _mode(self, query: VectorStoreQuery) -> str:
        mode = _MODES.get(query.mode)
        if mode is None:
            raise InvalidArgumentError(f"query mode {query.mode.value!r} is not supported by ContextKitVectorStore "
                                       "(default, hybrid)")
        return "hybrid" if self.mode == "hybrid" else mode

    @staticmethod
    def _allowed(query: VectorStoreQuery, index: Index) -> np.ndarray | None:
        """The rowids a query may return (None: any). Computed before the nearest are taken, so a
        filter never leaves fewer than ``similarity_top_k`` hits when more match."""
        doc_ids = [str(d) for d in query.doc_ids] if query.doc_ids else None
        # VectorStoreIndex.as_retriever passes node_ids=[] (its index struct lists no nodes when the store keeps
        # the text): an empty list means no restriction here, as in the text-storing stores LlamaIndex ships.
        node_ids = query.node_ids or None
        has_filters = query.filters is not None and bool(query.filters.filters)
        if doc_ids is None and node_ids is None and not has_filters:
            return None
        rowids = _prefiltered(index, doc_ids, query.filters)
        if node_ids is None and not has_filters:
            return rowids
        wanted = None if node_ids is None else set(node_ids)
        match = _matcher(query.filters)
        keep = [r for r, c in _scan(index, rowids)
                if (wanted is None or c.id in wanted) and match(_filter_metadata(c))]
        return np.asarray(sorted(keep), dtype=np.int64)


# --------------------------------------------------------------- filters
def _check_filters(filters: MetadataFilters) -> None:
    """Refuse, by name, an operator or condition SimpleVectorStore's evaluation does not know."""
    if filters.condition not in (FilterCondition.AND, FilterCondition.OR, FilterCondition.NOT, None):
        raise NotImplementedError(f"filter condition {filters.condition!r} is not supported by ContextKitVectorStore")
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            _check_filters(f)
        elif f.operator not in _OPERATORS:
            name = getattr(f.operator, "value", f.operator)
            raise NotImplementedError(f"filter operator {name!r} (on {f.key!r}) is not supported by "
                                      "ContextKitVectorStore (it supports SimpleVectorStore's operators: "
                                      f"{', '.join(sorted(o.value for o in _OPERATORS))})")


def _matcher(filters: MetadataFilters | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate on a node's filter metadata meaning what ``filters`` mean to SimpleVectorStore.

    Each single filter is LlamaIndex's own ``build_metadata_filter_fn`` (so ``None`` matches only
    ``!=``/``nin``, ``text_match`` needs strings...); AND/OR/NOT combine them as it does (NOT: none
    matches), and a nested ``MetadataFilters`` is one more term, evaluated the same way."""
    if filters is None or not filters.filters:
        return lambda _meta: True
    _check_filters(filters)
    terms = [_matcher(f) if isinstance(f, MetadataFilters) else _leaf(f) for f in filters.filters]
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.OR:
        return lambda meta: any(t(meta) for t in terms)
    if condition == FilterCondition.NOT:
        return lambda meta: not any(t(meta) for t in terms)
    return lambda meta: all(t(meta) for t in terms)


def _leaf(f: MetadataFilter) -> Callable[[Mapping[str, Any]], bool]:
    """One filter, evaluated by LlamaIndex's code (its lookup is given the metadata itself as the "id")."""
    fn = build_metadata_filter_fn(lambda meta: cast(Mapping[str, Any], meta), MetadataFilters(filters=[f]))
    return lambda meta: fn(cast(str, meta))


def _sql_equalities(filters: MetadataFilters | None) -> dict[str, str]:
    """The string equalities on the user's metadata that every match must meet (top-level AND): the
    index applies these in SQL, exactly (a JSON string equals only that string), before the rest."""
    if filters is None or (filters.condition or FilterCondition.AND) != FilterCondition.AND:
        return {}
    out: dict[str, str] = {}
    for f in filters.filters:
        if (isinstance(f, MetadataFilter) and f.operator == FilterOperator.EQ and isinstance(f.value, str)
                and f.key not in _LI_KEYS and f.key != NODE_KEY and '"' not in f.key and f.key not in out):
            out[f.key] = f.value
    return out


def _prefiltered(index: Index, doc_ids: list[str] | None, filters: MetadataFilters | None) -> np.ndarray:
    """Rowids of the chunks of ``doc_ids`` (all when None) meeting the filters' exact SQL part."""
    equalities = _sql_equalities(filters)
    try:
        return Filters(doc_ids=doc_ids, metadata=dict(equalities)).allowed_rowids(index)
    except RetrievalError:  # a field no chunk has: to LlamaIndex an equality on it matches nothing
        if not equalities:
            raise
        return np.zeros(0, dtype=np.int64)


def _scan(index: Index, rowids: np.ndarray) -> Iterator[tuple[int, Chunk]]:
    """``(rowid, chunk)`` for these rowids in ascending order, read a batch at a time."""
    ordered = np.sort(np.asarray(rowids, dtype=np.int64))
    for start in range(0, len(ordered), _SCAN_BATCH):
        part = [int(r) for r in ordered[start:start + _SCAN_BATCH]]
        found = index.store.chunks_by_rowid(part)
        yield from ((r, found[r]) for r in part if r in found)


def _filter_metadata(chunk: Chunk) -> dict[str, Any]:
    """The metadata SimpleVectorStore filters a node on: its own, with ``doc_id``/``ref_doc_id``/
    ``document_id`` (the SOURCE document, ``"None"`` without one) and ``_node_type`` set by LlamaIndex."""
    stored = chunk.metadata.get(NODE_KEY)
    if isinstance(stored, str):
        stored = json.loads(stored)
    if isinstance(stored, dict):
        return {k: v for k, v in stored.items() if k != "_node_content"}
    meta = dict(chunk.metadata)  # a chunk contextkit ingested itself
    meta.update(_node_type="TextNode", document_id=chunk.doc_id, doc_id=chunk.doc_id, ref_doc_id=chunk.doc_id)
    return meta


def _node(chunk: Chunk) -> BaseNode:
    """The LlamaIndex node a stored chunk was made from (its text from the chunk)."""
    node = stored_node(chunk)
    if node is not None:
        return node
    from llama_index.core.schema import TextNode

    meta = {k: v for k, v in chunk.metadata.items() if k != NODE_KEY}
    return TextNode(id_=chunk.id, text=chunk.text, metadata=meta)
