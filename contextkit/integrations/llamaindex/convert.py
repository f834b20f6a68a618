"""Conversions between contextkit records and LlamaIndex documents and nodes.

One mapping, used by the node parser, the retriever and the helpers below, so a
chunk looks the same in LlamaIndex wherever it comes from:

* ``TextNode.text`` is ``Chunk.text`` and ``start_char_idx``/``end_char_idx`` are
  its offsets in the document text (``doc.text[start:end] == text``);
* the SOURCE relationship names the document (``node.ref_doc_id == chunk.doc_id``);
* ``metadata`` is the document's metadata plus contextkit's bookkeeping under the
  keys below. The bookkeeping is hidden from the embedding model (ids and counts
  carry no meaning and would shift the vector) and, except ``source`` (useful for
  citing), from the LLM too.

Decisions on incomplete input, the same everywhere: a document or node **without
text** is skipped with a logged warning (it has nothing to chunk, embed or cite,
and LlamaIndex pipelines routinely carry image-only nodes); **missing metadata**
is derived where that is exact (ids from the node and its SOURCE, token counts
by re-counting) and is a clear :class:`ConversionError` where it is not (a node
that points at a document but has no offsets, and whose document was not given).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    ObjectType,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilters,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from contextkit.chunking import HeaderTooLargeError
from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import ConversionError
from contextkit.core.records import Chunk, Document, ScoredChunk
from contextkit.core.tokenizers import Tokenizer, get_tokenizer
from contextkit.embedders import Embedder
from contextkit.index import Index
from contextkit.ingestion import FileFailure, IngestConfig, IngestReport
from contextkit.ingestion._steps import Records, embed_batch, open_index, write_records
from contextkit.retrievers import Filters

__all__ = [
    "CHUNK_ID_KEY",
    "CONTEXTKIT_KEYS",
    "ConversionError",
    "DOC_ID_KEY",
    "HEADER_KEY",
    "NODE_KEY",
    "ORDINAL_KEY",
    "SOURCE_KEY",
    "TOKENS_KEY",
    "TOTAL_TOKENS_KEY",
    "chunks_from_nodes",
    "document_from_llamaindex",
    "documents_from_llamaindex",
    "filters_from_llamaindex",
    "ingest_llamaindex_documents",
    "link_neighbours",
    "mark_similarity",
    "node_from_chunk",
    "nodes_from_chunks",
    "scored_chunks_from_nodes",
    "stored_node",
]

log = logging.getLogger(__name__)

#: Metadata keys contextkit adds to a node (and strips again in :func:`chunks_from_nodes`). Namespaced, so a
#: user's own ``doc_id``, ``chunk_id`` or ``token_count`` is never overwritten, nor hidden from the LLM.
CHUNK_ID_KEY = "contextkit_chunk_id"
DOC_ID_KEY = "contextkit_doc_id"
ORDINAL_KEY = "contextkit_chunk_ordinal"
TOKENS_KEY = "contextkit_token_count"
TOTAL_TOKENS_KEY = "contextkit_total_tokens"  # only when a header was embedded with the chunk
HEADER_KEY = "contextkit_chunk_header"  # only when non-empty
SOURCE_KEY = "source"  # only on retrieved nodes, from the index's documents table, unless the document has one
#: Set by ``ContextKitRetriever`` on the nodes it returns (hidden from the LLM and the embedding model):
#: each node's query similarity (the dense cosine) and the index's off-topic bar, so the plug-in's
#: relevance gate can tell an off-topic question as ``ContextAssembler`` does (see :func:`mark_similarity`).
SIMILARITY_KEY = "contextkit_similarity"
MIN_SIMILARITY_KEY = "contextkit_min_similarity"

CONTEXTKIT_KEYS = (CHUNK_ID_KEY, DOC_ID_KEY, ORDINAL_KEY, TOKENS_KEY, TOTAL_TOKENS_KEY, HEADER_KEY, SOURCE_KEY,
                   SIMILARITY_KEY, MIN_SIMILARITY_KEY)
_PER_CHUNK_KEYS = frozenset(CONTEXTKIT_KEYS) - {SOURCE_KEY}  # ``source`` may be the document's own metadata

#: Chunk metadata key under which ``ContextKitVectorStore`` keeps the whole LlamaIndex node (metadata of every
#: JSON type, relationships, templates, excluded keys) as LlamaIndex serialises it for vector stores.
NODE_KEY = "_llamaindex_node"

#: Hidden from the embedding model: everything but the header, which contextkit embeds on purpose.
EMBED_EXCLUDED = (CHUNK_ID_KEY, DOC_ID_KEY, ORDINAL_KEY, TOKENS_KEY, TOTAL_TOKENS_KEY, SOURCE_KEY)
#: Hidden from the LLM: bookkeeping, and the header (it repeats document metadata). ``source`` stays.
LLM_EXCLUDED = (CHUNK_ID_KEY, DOC_ID_KEY, ORDINAL_KEY, TOKENS_KEY, TOTAL_TOKENS_KEY, HEADER_KEY)

#: Metadata keys LlamaIndex readers use for a document's origin, in order of preference.
_SOURCE_FIELDS = ("file_path", "file_name", "source", "url")


# --------------------------------------------------------------- documents
def _text_of(node: BaseNode) -> str:
    """The node's own text, without metadata (works for Document, TextNode and subclasses)."""
    return node.get_content(metadata_mode=MetadataMode.NONE) or ""


def _source_from_metadata(metadata: Mapping[str, Any]) -> str:
    for key in _SOURCE_FIELDS:
        value = metadata.get(key)
        if isinstance(value, (str, Path)) and str(value):
            return str(value)
    return ""


def document_from_llamaindex(doc: BaseNode) -> Document | None:
    """One LlamaIndex document (or any node) as a contextkit :class:`Document`; ``None`` if it has no text."""
    text = _text_of(doc)
    if not text.strip():
        log.warning("LlamaIndex document %r has no text; skipped", doc.node_id)
        return None
    metadata = dict(doc.metadata or {})
    return Document(id=doc.node_id, text=text, source=_source_from_metadata(metadata), metadata=metadata)


def documents_from_llamaindex(docs: Iterable[BaseNode]) -> list[Document]:
    """LlamaIndex documents as contextkit documents.

    ``id`` is ``doc.id_`` (what ``doc.doc_id`` returns), ``text`` the document text
    without metadata, ``metadata`` a copy, and ``source`` the first of the metadata
    fields ``file_path``, ``file_name``, ``source``, ``url`` that is set (readers such
    as ``SimpleDirectoryReader`` fill ``file_path``). Documents without text are
    skipped with a warning.
    """
    return [d for d in (document_from_llamaindex(doc) for doc in docs) if d is not None]


# ------------------------------------------------------------ chunk -> node
def _bookkeeping(chunk: Chunk, source: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {
        CHUNK_ID_KEY: chunk.id, DOC_ID_KEY: chunk.doc_id, ORDINAL_KEY: chunk.ordinal, TOKENS_KEY: chunk.token_count,
    }
    if chunk.header:
        fields[HEADER_KEY] = chunk.header
        fields[TOTAL_TOKENS_KEY] = chunk.total_tokens
    if source and SOURCE_KEY not in chunk.metadata:
        fields[SOURCE_KEY] = source
    return fields


#: The keys SimpleDirectoryReader keeps out of the LLM's and the embedding's view.
_READER_HIDDEN = ("file_name", "file_type", "file_size", "creation_date", "last_modified_date", "last_accessed_date")


def mark_similarity(node: BaseNode, similarity: float, min_similarity: float) -> None:
    """Record on ``node`` its query similarity and the index's off-topic bar, hidden from the LLM and the
    embedding model. Why on the node: a LlamaIndex pipeline hands the synthesizer nodes and scores only,
    and a node's score may be fused or BM25 (no cosine), which no bar can judge."""
    node.metadata[SIMILARITY_KEY] = float(similarity)
    node.metadata[MIN_SIMILARITY_KEY] = float(min_similarity)
    for hidden in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
        _add_missing(hidden, (SIMILARITY_KEY, MIN_SIMILARITY_KEY))


def node_from_chunk(chunk: Chunk, *, source: str | None = None, node_id: str | None = None,
                    base: BaseNode | None = None, base_info: RelatedNodeInfo | None = None,
                    include_metadata: bool = True) -> TextNode:
    """A :class:`TextNode` for one chunk (see the module docstring for the mapping).

    ``base`` is the document the chunk came from, when there is one: its excluded
    keys, templates and separator carry over and SOURCE points at it (pass
    ``base_info=base.as_related_node_info()`` when making many nodes of one
    document: LlamaIndex hashes the whole document for it). A chunk ``ContextKitVectorStore`` wrote
    (:data:`NODE_KEY`) renders as the node it stored: its metadata of every JSON type, templates,
    excluded keys and SOURCE, never the stored copy itself. Bookkeeping keys already
    in the chunk's metadata (a node parsed again) are replaced by this chunk's; the user's own
    keys, whatever their names, are kept as they are.
    """
    stored = stored_node(chunk)
    if base is None:  # a chunk a LlamaIndex vector store wrote renders as the node it was
        base = stored
    own = stored.metadata if stored is not None else chunk.metadata
    meta = {k: v for k, v in own.items() if k not in _PER_CHUNK_KEYS and k != NODE_KEY} if include_metadata else {}
    meta.update(_bookkeeping(chunk, source))
    embed_excluded, llm_excluded = _excluded_keys(meta, base)
    if base_info is None:
        base_info = _source_info(chunk, base, stored)
    return TextNode(
        id_=node_id or chunk.id,
        text=chunk.text,
        start_char_idx=chunk.start,
        end_char_idx=chunk.end,
        metadata=meta,
        excluded_embed_metadata_keys=embed_excluded,
        excluded_llm_metadata_keys=llm_excluded,
        relationships={NodeRelationship.SOURCE: base_info},
        **_style_of(base),
    )


def stored_node(chunk: Chunk) -> BaseNode | None:
    """The LlamaIndex node ``ContextKitVectorStore`` kept with this chunk (its text from the chunk), or None.

    Why: contextkit's own chunk metadata is what SQL filters and BM25 see; the node kept whole
    is what LlamaIndex shows, so a contextkit retriever over a vector-store folder gives the LLM
    the same metadata (lists, booleans, None), templates and excluded keys the node had."""
    stored = chunk.metadata.get(NODE_KEY)
    if isinstance(stored, str):
        stored = json.loads(stored)
    if not isinstance(stored, dict) or "_node_content" not in stored:
        return None
    return metadata_dict_to_node(stored, text=chunk.text)


def _source_info(chunk: Chunk, base: BaseNode | None, stored: BaseNode | None) -> RelatedNodeInfo:
    """SOURCE of a chunk's node: the document given, else the stored node's own, else the chunk's document."""
    if base is not None and base is not stored:
        return base.as_related_node_info()
    if stored is not None and stored.source_node is not None:
        return stored.source_node
    return RelatedNodeInfo(node_id=chunk.doc_id, node_type=ObjectType.DOCUMENT)


def _add_missing(keys: list[str], more: Iterable[str]) -> None:
    keys += [k for k in more if k not in keys]


def _excluded_keys(meta: Mapping[str, Any], base: BaseNode | None) -> tuple[list[str], list[str]]:
    """The metadata keys hidden from the embedding model and from the LLM: the document's, then contextkit's."""
    embed_excluded = list(base.excluded_embed_metadata_keys) if base is not None else []
    llm_excluded = list(base.excluded_llm_metadata_keys) if base is not None else []
    _add_missing(embed_excluded, EMBED_EXCLUDED)
    _add_missing(llm_excluded, LLM_EXCLUDED)
    if base is None:  # no document to inherit from: hide what SimpleDirectoryReader hides by default
        hidden = [k for k in _READER_HIDDEN if k in meta]
        if "file_path" in meta and "source" in meta:
            hidden.append("source")  # the same path again
        _add_missing(embed_excluded, hidden)
        _add_missing(llm_excluded, hidden)
    return embed_excluded, llm_excluded


def _style_of(base: BaseNode | None) -> dict[str, str]:
    """The document's templates and separator, so its nodes render as it does (none without a document)."""
    if base is None:
        return {}
    style = {"metadata_template": base.metadata_template, "metadata_separator": base.metadata_separator}
    text_template = getattr(base, "text_template", None)  # TextNode's; not every BaseNode has one
    if isinstance(text_template, str):
        style["text_template"] = text_template
    return style


def nodes_from_chunks(chunks: Iterable[Chunk | ScoredChunk],
                      sources: Mapping[str, str] | None = None) -> list[TextNode | NodeWithScore]:
    """Chunks as ``TextNode`` and scored chunks as ``NodeWithScore`` (the score kept).

    ``sources`` maps document ids to their source path, added as ``metadata["source"]``.
    Plain chunks that follow each other in the list and share a document are linked
    PREVIOUS/NEXT, as a node parser links them; scored chunks are a ranking, not
    document order, and are not linked.
    """
    items = list(chunks)
    sources = sources or {}
    out: list[TextNode | NodeWithScore] = []
    nodes: list[TextNode] = []
    for item in items:
        chunk = item.chunk if isinstance(item, ScoredChunk) else item
        node = node_from_chunk(chunk, source=sources.get(chunk.doc_id))
        nodes.append(node)
        out.append(NodeWithScore(node=node, score=item.score) if isinstance(item, ScoredChunk) else node)
    if not any(isinstance(item, ScoredChunk) for item in items):  # a ranked list is not document order
        link_neighbours(nodes)
    return out


def link_neighbours(nodes: Sequence[BaseNode]) -> None:
    """PREVIOUS/NEXT between consecutive nodes of the same document, in the order given."""
    for prev, node in zip(nodes, nodes[1:]):
        if prev.ref_doc_id is not None and prev.ref_doc_id == node.ref_doc_id:
            prev.relationships[NodeRelationship.NEXT] = node.as_related_node_info()
            node.relationships[NodeRelationship.PREVIOUS] = prev.as_related_node_info()


# ------------------------------------------------------------ node -> chunk
def _document_texts(documents: Mapping[str, str] | Iterable[BaseNode | Document] | None) -> dict[str, str]:
    if documents is None:
        return {}
    if isinstance(documents, Mapping):
        return dict(documents)
    texts: dict[str, str] = {}
    for doc in documents:
        if isinstance(doc, Document):
            texts[doc.id] = doc.text
        else:
            texts[doc.node_id] = _text_of(doc)
    return texts


def chunks_from_nodes(nodes: Iterable[BaseNode | NodeWithScore],
                      documents: Mapping[str, str] | Iterable[BaseNode | Document] | None = None,
                      tokenizer: str | Tokenizer = DEFAULT_TOKENIZER) -> list[Chunk]:
    """Nodes (or ``NodeWithScore``, unwrapped) as contextkit chunks.

    What each field comes from, when contextkit's metadata keys are missing:

    * ``doc_id``: ``metadata["doc_id"]``, else the SOURCE relationship
      (``node.ref_doc_id``); a node with neither is its own document, so its
      offsets are ``0:len(text)``;
    * ``start``/``end``: ``start_char_idx``/``end_char_idx``. A node with a
      document but no offsets is located in that document's text when
      ``documents`` gives it (ids to texts, or LlamaIndex/contextkit documents),
      searching forward from the previous chunk of that document; otherwise
      :class:`ConversionError`. Offsets that do not span the text exactly (text
      edited after parsing) are a :class:`ConversionError` too: a contextkit chunk
      promises ``doc.text[start:end] == text``;
    * ``id``: ``metadata["chunk_id"]``, else the node id; ``ordinal``:
      ``metadata["chunk_ordinal"]``, else the node's position among the given
      nodes of its document; ``token_count``: ``metadata["token_count"]``, else
      counted with ``tokenizer``.

    Nodes without text are skipped with a warning. contextkit's bookkeeping keys are
    removed from ``metadata``, so ``chunks_from_nodes(nodes_from_chunks(c)) == c``;
    that includes ``source``, which contextkit keeps on the document
    (``Document.source``), not in chunk metadata.
    """
    texts = _document_texts(documents)
    tokenizer_once = functools.cache(lambda: get_tokenizer(tokenizer))  # loaded only if some count is missing
    seen_per_doc: dict[Any, int] = {}
    search_from: dict[Any, int] = {}
    out: list[Chunk] = []
    for item in nodes:
        node = item.node if isinstance(item, NodeWithScore) else item
        text = _text_of(node)
        if not text.strip():
            log.warning("node %r has no text; skipped", node.node_id)
            continue
        meta = dict(node.metadata or {})
        doc_id, start, end = _locate(node, text, meta, texts, search_from)
        ordinal = meta.get(ORDINAL_KEY)
        if ordinal is None:
            ordinal = seen_per_doc.get(doc_id, 0)
        seen_per_doc[doc_id] = int(ordinal) + 1
        header = meta.get(HEADER_KEY) or ""
        tokens, total = _token_counts(text, header, meta, tokenizer_once)
        out.append(Chunk(
            id=str(meta.get(CHUNK_ID_KEY) or node.node_id),
            doc_id=str(doc_id),
            ordinal=int(ordinal),
            text=text,
            start=int(start),
            end=int(end),
            token_count=int(tokens),
            header=header,
            total_tokens=int(total) if total is not None else -1,
            metadata={k: v for k, v in meta.items() if k not in CONTEXTKIT_KEYS},
        ))
    return out


def _locate(node: BaseNode, text: str, meta: Mapping[str, Any], texts: Mapping[str, str],
            search_from: dict[Any, int]) -> tuple[Any, int, int]:
    """``(doc_id, start, end)`` of a node's text (see :func:`chunks_from_nodes` for where each comes from)."""
    doc_id = meta.get(DOC_ID_KEY) or node.ref_doc_id
    start = getattr(node, "start_char_idx", None)
    end = getattr(node, "end_char_idx", None)
    if doc_id is None:
        doc_id = node.node_id
        if start is None or end is None:
            start, end = 0, len(text)
    elif start is None or end is None:
        start, end = _find_in_document(node, text, doc_id, texts, search_from)
    if end - start != len(text):
        raise ConversionError(
            f"node {node.node_id!r}: offsets {start}:{end} do not span its {len(text)} characters of text "
            "(was the text changed after parsing?)")
    return doc_id, start, end


def _find_in_document(node: BaseNode, text: str, doc_id: Any, texts: Mapping[str, str],
                      search_from: dict[Any, int]) -> tuple[int, int]:
    """A node without offsets: its text in its document's, searched forward from the previous chunk found."""
    if doc_id not in texts:
        raise ConversionError(
            f"node {node.node_id!r} has no start_char_idx/end_char_idx and its document {doc_id!r} was not "
            "given: pass documents=[...] (or {doc_id: text}) so its offsets can be found")
    found = texts[doc_id].find(text, search_from.get(doc_id, 0))
    if found < 0:
        raise ConversionError(f"node {node.node_id!r}: its text does not occur in document {doc_id!r}")
    search_from[doc_id] = found + 1
    return found, found + len(text)


def _token_counts(text: str, header: str, meta: Mapping[str, Any],
                  tokenizer: Callable[[], Tokenizer]) -> tuple[Any, Any]:
    """``(token_count, total_tokens)`` from the node's metadata, counted where missing (``total``: None without a header)."""
    tokens = meta.get(TOKENS_KEY)
    total = meta.get(TOTAL_TOKENS_KEY)
    if tokens is None or (header and total is None):
        tok = tokenizer()
        tokens = tok.count(text) if tokens is None else tokens
        total = tok.count(header + text) if header and total is None else total
    return tokens, total


def scored_chunks_from_nodes(nodes: Iterable[NodeWithScore], **options: Any) -> list[ScoredChunk]:
    """``NodeWithScore`` as :class:`ScoredChunk` (a missing score becomes 0.0), for contextkit's assembly.

    ``options`` are those of :func:`chunks_from_nodes`; nodes without text are skipped.
    """
    kept = [n for n in nodes if _text_of(n.node).strip()]
    chunks = chunks_from_nodes(kept, **options)
    return [ScoredChunk(chunk, float(n.score or 0.0)) for chunk, n in zip(chunks, kept)]


# ----------------------------------------------------------------- filters
def filters_from_llamaindex(filters: MetadataFilters) -> Filters:
    """LlamaIndex ``MetadataFilters`` as contextkit :class:`~contextkit.retrievers.Filters`.

    Only what contextkit filters mean exactly: AND of ``==`` conditions on metadata,
    and ``doc_id``/``ref_doc_id`` with ``==`` or ``in``. Anything else (OR, ranges,
    nested filters) is a :class:`ConversionError` rather than a silently wider result.
    """
    if not isinstance(filters, MetadataFilters):
        raise ConversionError(f"expected llama_index MetadataFilters, not {type(filters).__name__}")
    if filters.condition == FilterCondition.NOT or (filters.condition == FilterCondition.OR
                                                    and len(filters.filters) > 1):
        raise ConversionError(f"only AND of filters maps to contextkit, not {filters.condition.value.upper()}")
    doc_ids: list[str] | None = None
    metadata: dict[str, Any] = {}
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            raise ConversionError("nested MetadataFilters do not map to contextkit filters")
        if f.key in ("doc_id", "ref_doc_id") and f.operator in (FilterOperator.EQ, FilterOperator.IN):
            values = [str(v) for v in (f.value if isinstance(f.value, list) else [f.value])]
            doc_ids = values if doc_ids is None else [d for d in doc_ids if d in values]
        elif f.operator == FilterOperator.EQ and isinstance(f.value, (str, int, float, bool)):
            metadata[f.key] = f.value
        else:
            raise ConversionError(f"filter {f.key} {f.operator.value} {f.value!r} has no contextkit equivalent "
                                  "(contextkit filters are metadata equality, doc ids and a source glob)")
    return Filters(doc_ids=doc_ids, metadata=metadata)


# ------------------------------------------------------------------ ingest
def ingest_llamaindex_documents(docs: Iterable[BaseNode], index_dir: str | Path, config: IngestConfig | None = None,
                                embedder: Embedder | None = None, **overrides: Any) -> IngestReport:
    """Add LlamaIndex documents to the contextkit index at ``index_dir`` (created if missing).

    Takes the same settings as :func:`contextkit.ingestion.ingest` (``chunk_size``,
    ``chunk_overlap``, ``tokenizer``, ``header``, ``model``, ``index_type``,
    ``batch_chunks``...; an existing index keeps its own and refuses different
    ones). Each document *replaces* any document of the same id, so running it
    again after an edit leaves no stale chunk; vectors of unchanged chunk texts come
    from the index's vector cache, not the model. Documents are written in
    transactions of about ``batch_chunks`` chunks: a crash leaves whole documents.
    Documents without text are skipped with a warning (counted in
    ``report.empty_documents``); a document whose header does not fit is listed in
    ``report.failures`` under its id. Of a repeated id, the last document wins.
    """
    config = (config or IngestConfig()).with_options("ingest_llamaindex_documents()", **overrides)
    index_dir = Path(index_dir)
    report = IngestReport(index=str(index_dir))
    t0 = time.perf_counter()
    given_docs = list(docs)
    converted = documents_from_llamaindex(given_docs)
    report.empty_documents = len(given_docs) - len(converted)
    unique: dict[str, Document] = {}
    for doc in converted:
        if doc.id in unique:
            log.warning("document id %r appears more than once; the last one is kept", doc.id)
        unique[doc.id] = doc
    # The same opener as file ingestion: the same model, chunk and redaction checks; vectors go to the
    # index through its API (embed_batch), so unchanged chunk texts reuse their stored vectors.
    index, embedder, chunker = open_index(index_dir, config, embedder)
    try:
        batch: list[tuple[Document, list[Chunk]]] = []
        for doc in unique.values():
            try:
                chunks = chunker.chunk(doc)
            except HeaderTooLargeError as exc:
                report.failures.append(FileFailure(path=doc.id, reason=str(exc)))
                continue
            batch.append((doc, chunks))
            if sum(len(c) for _, c in batch) >= config.batch_chunks:
                _write_batch(batch, index, embedder, report)
                batch = []
        if batch:
            _write_batch(batch, index, embedder, report)
        index.save()
    finally:
        chunker.close()
        index.close()
    report.seconds = {"total": time.perf_counter() - t0}
    return report


def _write_batch(batch: list[tuple[Document, list[Chunk]]], index: Index, embedder: Embedder,
                 report: IngestReport) -> None:
    """Embed one batch, then replace its documents in one transaction."""
    chunks = [c for _, cs in batch for c in cs]
    texts = [c.embedding_text for c in chunks]
    vectors = np.zeros((0, index.manifest.dim), np.float32)
    keys: list[str] = []
    if texts:
        vectors, keys, embedding = embed_batch(index, embedder, texts)
        report.embedding.add(embedding)
    # Through ingestion's own writer: each document replaces the one of its id (no file: LlamaIndex
    # documents are their own, so ``contextkit ingest --prune`` never takes them for a vanished file).
    parts = [Records(doc_chunks, [(doc, hashlib.sha256(doc.text.encode("utf-8", "surrogatepass")).hexdigest(),
                                   len(doc.text))], replace_documents=True)
             for doc, doc_chunks in batch]
    report.chunks_removed += write_records(index, parts, vectors, keys)
    report.documents += len(batch)
    report.chunks_added += len(chunks)
    report.tokens += sum(c.token_count for c in chunks)
