"""``ContextKitNodeParser``: contextkit's token-exact chunker as a LlamaIndex node parser.

Why not a LlamaIndex splitter: their chunks are sized by an estimate and their
offsets are recovered afterwards by searching the document for the chunk text,
which lands on the wrong place when text repeats. Here every node is a
:class:`~contextkit.chunking.TokenChunker` chunk: at most ``chunk_size`` tokens
under the named tokenizer (header included), cut at the best boundary, with
``doc.text[node.start_char_idx:node.end_char_idx] == node.text`` by construction.

It is a pydantic ``TextSplitter`` (a ``NodeParser``), so it works in
``IngestionPipeline(transformations=[...])``, as ``Settings.node_parser`` (whose
``chunk_size``/``chunk_overlap`` setters it follows) and wherever a text splitter
is taken. Its settings are plain fields: ``to_dict``/``from_dict`` round-trip and
the pipeline's cache key (a hash of ``to_dict()``) is equal for equal settings
and differs otherwise. (That key also hashes each document's text and metadata
but not its id, in LlamaIndex itself: two documents identical but for their ids
share a cache entry, and the second gets the first's node ids and SOURCE.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Annotated, Any

from llama_index.core.bridge.pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    PrivateAttr,
    WithJsonSchema,
    model_validator,
)
from llama_index.core.node_parser.interface import MetadataAwareTextSplitter
from llama_index.core.node_parser.node_utils import default_id_func
from llama_index.core.schema import BaseNode
from llama_index.core.schema import Document as LIDocument
from llama_index.core.utils import get_tqdm_iterable

from contextkit.chunking import ChunkerConfig, TokenChunker
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Chunk, Document
from contextkit.core.tokenizers import Tokenizer, get_tokenizer
from contextkit.integrations.llamaindex._parser_defaults import parser_defaults
from contextkit.integrations.llamaindex.convert import (
    document_from_llamaindex,
    link_neighbours,
    node_from_chunk,
)

__all__ = ["ContextKitNodeParser", "chunk_id_func"]

log = logging.getLogger(__name__)

_DEFAULTS = ChunkerConfig()


def chunk_id_func(i: int, doc: BaseNode) -> str:
    """Node id = contextkit chunk id, ``"{doc id}::{ordinal}"``.

    Deterministic, unlike LlamaIndex's default (a random UUID): re-parsing a
    document gives the same node ids, so docstore upserts replace instead of
    duplicating, and a node id found by a ``ContextKitRetriever`` over an index of
    the same documents is the id the parser gave.
    """
    return f"{doc.node_id}::{i}"


#: Id functions that can be restored by name from ``to_dict()`` output.
_KNOWN_ID_FUNCS: dict[str, Callable[[int, BaseNode], str]] = {
    "chunk_id_func": chunk_id_func,
    "default_id_func": default_id_func,
}


def _resolve_id_func(value: Any) -> Any:
    """``None`` -> :func:`chunk_id_func`; the dict ``to_dict()`` writes -> the function it names.

    LlamaIndex serialises ``id_func`` as ``{"id_func_name": ...}`` but cannot read
    that back (``SentenceSplitter.from_dict(s.to_dict())`` fails in 0.14); this
    closes the loop for the functions above and says what to do for others.
    """
    if value is None:
        return chunk_id_func
    if isinstance(value, dict):
        name = value.get("id_func_name")
        if name in _KNOWN_ID_FUNCS:
            return _KNOWN_ID_FUNCS[name]
        raise InvalidArgumentError(f"id_func {name!r} cannot be restored from its name; pass it again: "
                         "ContextKitNodeParser.from_dict(data, id_func=your_function)")
    return value


def _serialize_id_func(func: Callable[..., str]) -> dict[str, str]:
    return {"id_func_name": getattr(func, "__name__", type(func).__name__), "title": "id_func"}


IdFunc = Annotated[
    Callable,
    BeforeValidator(_resolve_id_func),
    WithJsonSchema({"type": "string"}, mode="serialization"),
    WithJsonSchema({"type": "string"}, mode="validation"),
    PlainSerializer(_serialize_id_func),
]


def _stripped(chunk: Chunk, tok: Tokenizer) -> Chunk:
    """``chunk`` narrowed to its text without leading and trailing whitespace (counts recounted)."""
    text = chunk.text.strip()
    if text == chunk.text:
        return chunk
    start = chunk.start + len(chunk.text) - len(chunk.text.lstrip())
    count = tok.count(text)
    total = tok.count(chunk.header + text) if chunk.header else count
    return replace(chunk, text=text, start=start, end=start + len(text), token_count=count, total_tokens=total)


class ContextKitNodeParser(MetadataAwareTextSplitter):
    """Split documents into token-exact contextkit chunks, one ``TextNode`` each.

    Each node has the chunk's text and offsets, a SOURCE relationship to its
    document, PREVIOUS/NEXT to its neighbours (``include_prev_next_rel``), the
    document's metadata (``include_metadata``), never overwritten, and contextkit's
    own ``contextkit_chunk_id``, ``contextkit_doc_id``, ``contextkit_chunk_ordinal``
    and ``contextkit_token_count`` (plus ``contextkit_chunk_header`` and
    ``contextkit_total_tokens`` with a header), which are kept out of the embedding
    and LLM text. ``chunk_size`` bounds what is embedded and shown to the LLM, as
    SentenceSplitter's does: the chunk text, the rendered header, and the metadata
    LlamaIndex prepends (the longer of its EMBED and LLM strings) when
    ``include_metadata`` is on (:meth:`split_text_metadata_aware`). Chunk texts are
    stripped of the whitespace at their ends, as LlamaIndex's splitters' are, unless
    ``keep_whitespaces=True`` (then consecutive chunks tile the document exactly).

    A node that is itself a span of a document (it has ``start_char_idx`` and a
    SOURCE) is split in the coordinates of that document: the new nodes' offsets
    and SOURCE refer to the original document, not to the intermediate node.
    Nodes without text give no nodes (logged as a warning).
    """

    chunk_size: int = Field(default=_DEFAULTS.chunk_size, ge=1,
                            description="maximum tokens per chunk, header included")
    chunk_overlap: int = Field(default=_DEFAULTS.chunk_overlap, ge=0,
                               description="maximum tokens shared by consecutive chunks")
    tokenizer: str = Field(default=_DEFAULTS.tokenizer,
                           description="cl100k_base, o200k_base, 'model' or a Hugging Face tokenizer name")
    header: str | None = Field(default=None, description="template embedded above each chunk, e.g. '{title}\\n'; "
                                                         "fields come from the document's metadata")
    min_fill: float = Field(default=_DEFAULTS.min_fill, ge=0.0, le=1.0,
                            description="a preferred boundary must leave the chunk this full")
    id_func: IdFunc = Field(default=chunk_id_func, description="node id of chunk i of a document")
    keep_whitespaces: bool = Field(default=False, description="keep the whitespace at the ends of each chunk "
                                                              "(TokenTextSplitter's option); stripped by default")

    _chunker: TokenChunker | None = PrivateAttr(default=None)
    _sized: dict[str, TokenChunker] = PrivateAttr(default_factory=dict)
    _tok: Tokenizer | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "ContextKitNodeParser"

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> ContextKitNodeParser:
        """LlamaIndex's usual constructor name; same arguments as the fields."""
        return cls(**kwargs)

    @model_validator(mode="before")
    @classmethod
    def _follow_app_settings(cls, data: Any) -> Any:
        """Without ``chunk_size``: the app's ``Settings.chunk_size``/``chunk_overlap``, capped by the window of an
        embedding model that truncates (see ``_parser_defaults``)."""
        if not isinstance(data, dict) or "chunk_size" in data:
            return data
        chosen = parser_defaults(data, (_DEFAULTS.chunk_size, _DEFAULTS.chunk_overlap))
        extra = {"tokenizer": chosen.tokenizer} if chosen.tokenizer else {}
        return {**data, "chunk_size": chosen.chunk_size, "chunk_overlap": chosen.chunk_overlap, **extra}

    @model_validator(mode="after")
    def _check_settings(self) -> ContextKitNodeParser:
        _ = self.chunker_config  # overlap < size, and the rest of contextkit's checks
        return self

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._get_chunker()  # a bad tokenizer name fails here, not on the first document

    @property
    def chunker_config(self) -> ChunkerConfig:
        """These settings as contextkit's :class:`ChunkerConfig` (what an index records)."""
        return ChunkerConfig(chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap, tokenizer=self.tokenizer,
                             header=self.header, min_fill=self.min_fill)

    def _get_chunker(self) -> TokenChunker:
        """The chunker for the current settings, rebuilt when a field was reassigned.

        Fields are reassigned in place by ``Settings.chunk_size = ...``, so the
        chunker is keyed by the settings rather than built once.
        """
        config = self.chunker_config
        if self._chunker is None or self._chunker.config != config:
            self._chunker = TokenChunker.from_dict(config.model_dump())
        return self._chunker

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only (pipelines with ``num_workers`` send parsers to processes)."""
        state = super().__getstate__()
        private = state.get("__pydantic_private__")
        if private:
            state["__pydantic_private__"] = {**private, "_chunker": None, "_sized": {}, "_tok": None}
        return state

    # ------------------------------------------------------- metadata aware
    def _tokenizer_obj(self) -> Tokenizer:
        if self._tok is None or self._tok.name != self._get_chunker().config.tokenizer:
            self._tok = get_tokenizer(self.tokenizer)
        return self._tok

    def metadata_tokens(self, metadata_str: str) -> int:
        """Tokens LlamaIndex's ``"{metadata_str}\\n\\n{content}"`` adds to a chunk (one spare for the seam)."""
        return self._tokenizer_obj().count(metadata_str + "\n\n") + 1 if metadata_str else 0

    def _chunker_for(self, metadata_str: str) -> TokenChunker:
        """The chunker whose chunks, with this metadata prepended, stay within ``chunk_size``."""
        chunker = self._get_chunker()
        used = self.metadata_tokens(metadata_str)
        if not used:
            return chunker
        size = self.chunk_size - used
        if size <= 0:
            raise InvalidArgumentError(
                f"Metadata length ({used}) is longer than chunk size ({self.chunk_size}). Consider increasing the "
                "chunk size or decreasing the size of your metadata (or exclude keys from the EMBED and LLM modes).")
        overlap = min(self.chunk_overlap, size // 2)
        config = ChunkerConfig(**{**self.chunker_config.model_dump(), "chunk_size": size, "chunk_overlap": overlap})
        key = config.model_dump_json()
        if key not in self._sized:
            if len(self._sized) > 64:
                self._sized.clear()
            self._sized[key] = TokenChunker.from_dict(config.model_dump())
        return self._sized[key]

    def split_text_metadata_aware(self, text: str, metadata_str: str) -> list[str]:
        """The chunk texts of a string that will be embedded with ``metadata_str`` in front of it."""
        if text == "":
            return [""]  # LlamaIndex's splitters' contract
        chunks = self._chunker_for(metadata_str).chunk(Document(id="text", text=text), header="")
        return [c.text for c in self._trim(chunks)]

    def _trim(self, chunks: list[Chunk]) -> list[Chunk]:
        """The chunks without the whitespace at their ends, unless ``keep_whitespaces``.

        LlamaIndex's splitters strip each chunk (``TokenTextSplitter`` keeps it only
        with ``keep_whitespaces=True``), and apps compare or display chunk texts as
        such; contextkit's chunks keep it so that consecutive chunks tile the
        document. Offsets move with the text (``doc.text[start:end] == text`` still
        holds) and token counts are recounted, so they stay exact.
        """
        if self.keep_whitespaces:
            return chunks
        return [_stripped(c, self._tokenizer_obj()) for c in chunks]

    # ------------------------------------------------------------ splitting
    def split_text(self, text: str) -> list[str]:
        """The chunk texts of a bare string (no document, so no header); ``[""]`` for ``""``, as LlamaIndex's."""
        return self.split_text_metadata_aware(text, "")

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Parsing nodes"):
            doc = document_from_llamaindex(node)
            if doc is None:
                continue
            chunker = self._chunker_for(self._get_metadata_str(node) if self.include_metadata else "")
            chunks = self._trim(chunker.chunk(doc))
            start = getattr(node, "start_char_idx", None)
            root = node.source_node
            if not isinstance(node, LIDocument) and start is not None and root is not None:
                # a span of a document: chunk it in that document's coordinates
                chunks = [replace(c, doc_id=root.node_id, start=c.start + start, end=c.end + start) for c in chunks]
                info = root
            else:
                info = node.as_related_node_info()  # LlamaIndex hashes the whole document: once, not per chunk
            parsed = [
                node_from_chunk(c, node_id=self.id_func(c.ordinal, node), base=node, base_info=info,
                                include_metadata=self.include_metadata)
                for c in chunks
            ]
            if self.include_prev_next_rel:
                link_neighbours(parsed)
            out.extend(parsed)
        return out

    def _postprocess_parsed_nodes(self, nodes: list[BaseNode], parent_doc_map: dict[str, LIDocument]) -> list[BaseNode]:
        """Nothing left to do: :meth:`_parse_nodes` sets offsets, metadata and relationships.

        The base class would re-derive offsets with ``doc.text.find(node.text)``,
        which picks an earlier occurrence of repeated text, and re-link
        PREVIOUS/NEXT across the nodes of different inputs sharing a SOURCE.
        """
        return nodes
