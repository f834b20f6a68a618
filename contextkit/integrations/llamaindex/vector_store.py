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
default. Filters: AND-ed equalities on metadata and ``doc_id``/``ref_doc_id``
(:func:`~.convert.filters_from_llamaindex`); anything else is refused, not widened.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import (
    metadata_dict_to_node,
    node_to_metadata_dict,
)

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Chunk
from contextkit.core.tokenizers import Tokenizer, get_tokenizer
from contextkit.index import Index, location_name
from contextkit.integrations.llamaindex.convert import filters_from_llamaindex
from contextkit.retrievers import Filters
from contextkit.retrievers.hybrid import rrf_fuse

__all__ = ["NODE_KEY", "ContextKitVectorStore"]

#: Chunk metadata key holding the LlamaIndex node (relationships, templates, ids) as LlamaIndex serialises it.
NODE_KEY = "_llamaindex_node"

_MODES = {VectorStoreQueryMode.DEFAULT: "dense", VectorStoreQueryMode.HYBRID: "hybrid"}


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
        meta: dict[str, Any] = {k: v for k, v in (node.metadata or {}).items() if isinstance(v, str | int | float | bool) or v is None}
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

    # ----------------------------------------------------------------- query
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        mode = self._mode(query)
        if self._index is None or len(self._index) == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if query.query_embedding is None:
            raise InvalidArgumentError("ContextKitVectorStore needs query_embedding (LlamaIndex embeds the query)")
        if query.node_ids:
            raise InvalidArgumentError("ContextKitVectorStore does not restrict queries to node_ids; filter by "
                                       "doc_id or metadata instead")
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
        filters = filters_from_llamaindex(query.filters) if query.filters is not None else Filters()
        if query.doc_ids:
            ids = [str(d) for d in query.doc_ids]
            filters.doc_ids = ids if filters.doc_ids is None else [d for d in filters.doc_ids if d in ids]
        return None if filters.is_empty() else filters.allowed_rowids(index)


def _node(chunk: Chunk) -> BaseNode:
    """The LlamaIndex node a stored chunk was made from (its text from the chunk)."""
    meta = dict(chunk.metadata)
    stored = meta.pop(NODE_KEY, None)
    if isinstance(stored, str):
        stored = json.loads(stored)
    if not isinstance(stored, dict):
        from llama_index.core.schema import TextNode

        return TextNode(id_=chunk.id, text=chunk.text, metadata=meta)
    node = metadata_dict_to_node(stored, text=chunk.text)
    return node
