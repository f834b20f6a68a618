"""Plain typed records that flow between the stages of contextkit.

``Document`` (loaders), ``Chunk`` (chunking, the index), ``ScoredChunk`` (retrievers),
``Message`` (history) and ``EvidenceItem`` (one passage of evidence, as compressors and the
assembler take it).

They are frozen dataclasses rather than pydantic models on purpose: a corpus
yields hundreds of thousands of chunks and these records sit on the hot path of
the chunker. Configuration and reports, which are few, are pydantic models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from contextkit.core.errors import InvalidArgumentError, SectionError

__all__ = ["Chunk", "Document", "EvidenceItem", "Message", "ScoredChunk"]


@dataclass(frozen=True, slots=True)
class Document:
    """One loaded document.

    ``id`` is stable across runs (derived from the source path, plus the record id
    for multi-document files such as JSONL), so re-ingestion can find what changed.
    """

    id: str
    text: str
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Document:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span of a document, with exact offsets and an exact token count.

    ``doc.text[start:end] == text`` always holds. ``token_count`` is the number of
    tokens of ``text`` under the chunker's tokenizer; ``header`` is the metadata
    prefix embedded with the chunk (empty by default) and ``total_tokens`` counts
    ``header + text``, which is what the chunk size bounds.
    """

    id: str
    doc_id: str
    ordinal: int
    text: str
    start: int
    end: int
    token_count: int
    header: str = ""
    total_tokens: int = -1
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.end - self.start != len(self.text):
            raise InvalidArgumentError(
                f"chunk {self.id!r}: offsets {self.start}:{self.end} do not match text length {len(self.text)}"
            )
        if self.total_tokens < 0:
            object.__setattr__(self, "total_tokens", self.token_count)

    @property
    def embedding_text(self) -> str:
        """The text given to the embedding model: the header, then the chunk."""
        return self.header + self.text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    """A chunk returned by a search, with its score (higher is better)."""

    chunk: Chunk
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, **self.chunk.to_dict()}


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of a conversation: ``role`` (user, assistant, system, tool, ...) and text."""

    role: str
    content: str
    timestamp: str | None = None
    id: str | None = None

    def __post_init__(self) -> None:
        where = f"message {self.id!r}" if self.id else "message"
        if not isinstance(self.role, str) or not self.role.strip():
            raise InvalidArgumentError(f"{where}: a role is required")
        if not isinstance(self.content, str):
            raise InvalidArgumentError(f"{where} ({self.role}): content must be text, not {type(self.content).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """A message from a mapping with ``role`` and ``content`` (``timestamp``, ``id`` optional).

        Other keys are ignored: chat exports carry names, tool calls and the like that
        a turn does not need. A non-mapping is a TypeError, a missing key a ValueError naming what
        is wrong (callers prefix where the message was: a line, a position).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a dict with role and content, not {type(data).__name__}")
        missing = [k for k in ("role", "content") if k not in data]
        if missing:
            raise InvalidArgumentError(f"missing {', '.join(missing)}")
        return cls(**{k: data[k] for k in _MESSAGE_KEYS if k in data})


_MESSAGE_KEYS = ("role", "content", "timestamp", "id")


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """One passage of evidence: text plus where it came from.

    ``doc_id``, ``start`` and ``end`` (character offsets in the document) let the
    assembler merge overlapping passages of one document. ``token_count`` is a
    count of ``text`` under ``tokenizer``; when that is the assembler's tokenizer
    it saves a count while choosing (the final prompt is always recounted).
    """

    id: str
    text: str
    source: str = ""
    score: float | None = None
    doc_id: str | None = None
    start: int | None = None
    end: int | None = None
    token_count: int | None = None
    tokenizer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The query-passage similarity (dense cosine) when the retriever knows it; the relevance gate's
    #: off-topic check reads it (``score`` may be a fused, relative score that cannot tell).
    similarity: float | None = None

    @classmethod
    def from_scored_chunk(cls, hit: ScoredChunk, tokenizer: str | None = None) -> EvidenceItem:
        c = hit.chunk
        source = str(c.metadata.get("source") or c.metadata.get("path") or c.doc_id)
        return cls(id=c.id, text=c.text, source=source, score=hit.score, doc_id=c.doc_id, start=c.start,
                   end=c.end, token_count=c.token_count, tokenizer=tokenizer, metadata=dict(c.metadata))

    @classmethod
    def coerce(cls, value: Any, position: int) -> EvidenceItem:
        """Accept an item, a scored chunk, a plain string or a dict with ``text``."""
        if isinstance(value, EvidenceItem):
            return value
        if isinstance(value, ScoredChunk):
            return cls.from_scored_chunk(value)
        if isinstance(value, str):
            return cls(id=f"item-{position}", text=value)
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            data = {"id": f"item-{position}", **value}
            unknown = set(data) - set(cls.__dataclass_fields__)
            if unknown:
                raise SectionError(f"evidence item {data['id']!r}: unknown fields {sorted(unknown)}")
            return cls(**data)
        raise SectionError(f"evidence item #{position}: expected text, a dict with 'text', a ScoredChunk "
                           f"or an EvidenceItem, not {type(value).__name__}")
