"""Plain typed records that flow between the stages of contextkit.

They are frozen dataclasses rather than pydantic models on purpose: a corpus
yields hundreds of thousands of chunks and these records sit on the hot path of
the chunker. Configuration and reports, which are few, are pydantic models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from contextkit.errors import InvalidArgumentError

__all__ = ["Chunk", "Document", "Message", "ScoredChunk"]


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
