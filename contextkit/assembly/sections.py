"""What a prompt is made of: sections, and the evidence items inside them.

A section has a *role* (which decides where it sits in the prompt), a
*priority* (which decides what gives way when the budget is short; by default
evidence for the current question, 75, comes ahead of the history, 70, whose recent
turns the assembler keeps a minimum share for), optional
minimum and maximum shares of the budget, and a ``pinned`` flag: a pinned
section is never cut. Position and priority are separate on purpose: the
question sits at the end of a prompt yet must never be dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from contextkit.errors import SectionError
from contextkit.records import Message, ScoredChunk

__all__ = ["ROLES", "EvidenceItem", "Section", "SectionError"]

#: Known roles in prompt order (key instructions lead); any other name is a custom role,
#: placed after domain knowledge.
ROLES = ("key_instructions", "system", "task", "domain_knowledge", "custom", "evidence", "tool_result", "history",
         "question")
_DEFAULT_PRIORITY = {"system": 100, "key_instructions": 100, "question": 100, "task": 90,
                     "tool_result": 80, "evidence": 75, "history": 70, "domain_knowledge": 60, "custom": 55}
_DEFAULT_PINNED = {"system", "key_instructions", "question"}
_DEFAULT_TAG = {"system": "system", "key_instructions": "instructions", "task": "task",
                "domain_knowledge": "knowledge", "evidence": "evidence", "tool_result": "tool_output", "history": "history",
                "question": "question"}
_TAG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


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


@dataclass(slots=True)
class Section:
    """A named part of the prompt.

    Exactly one of ``content`` (text), ``items`` (evidence) or ``messages``
    (history) carries the material. ``min_share``/``max_share`` are fractions of
    the prompt budget. ``tag`` overrides the XML tag (default from the role).
    """

    name: str
    role: str = "custom"
    content: str | None = None
    items: list[EvidenceItem] | None = None
    messages: list[Message] | None = None
    priority: int | None = None
    pinned: bool | None = None
    min_share: float | None = None
    max_share: float | None = None
    tag: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.content, self.items, self.messages)]
        if sum(given) != 1:
            raise SectionError(f"section {self.name!r}: give exactly one of content, items or messages")
        if self.role not in ROLES:
            self.role = "custom" if self.role in ("", None) else self.role
        if self.priority is None:
            self.priority = _DEFAULT_PRIORITY.get(self.role, _DEFAULT_PRIORITY["custom"])
        if self.pinned is None:
            self.pinned = self.role in _DEFAULT_PINNED
        self._check_shares()
        if self.tag is None:
            self.tag = _DEFAULT_TAG.get(self.role) or _slug(self.name)
        if not _TAG_NAME.match(self.tag) or self.tag.lower().startswith("xml"):
            raise SectionError(f"section {self.name!r}: {self.tag!r} is not a valid XML tag name")
        for key in self.attributes:  # written into the tag as they are: a key must not be able to forge markup
            if not isinstance(key, str) or not _TAG_NAME.match(key) or key.lower().startswith("xml"):
                raise SectionError(f"section {self.name!r}: attribute name {key!r} is not a valid XML name "
                                   "(letters, digits, '_', '-', '.'; not starting with a digit or 'xml')")
        self._coerce_material()

    def _check_shares(self) -> None:
        """Each share a fraction of the budget, the minimum not above the maximum."""
        for share in ("min_share", "max_share"):
            value = getattr(self, share)
            if value is not None and not 0.0 <= value <= 1.0:
                raise SectionError(f"section {self.name!r}: {share} must be between 0 and 1, not {value}")
        if self.min_share is not None and self.max_share is not None and self.min_share > self.max_share:
            raise SectionError(f"section {self.name!r}: min_share {self.min_share} exceeds max_share {self.max_share}")

    def _coerce_material(self) -> None:
        """Items and messages in their own types, and every text valid UTF-8: bad input fails here, named."""
        if self.content is not None:
            _check_text(self.content, f"section {self.name!r}")
        if self.items is not None:
            self.items = [EvidenceItem.coerce(v, i) for i, v in enumerate(self.items)]
            for item in self.items:
                _check_text(item.text, f"evidence item {item.id!r}")
        if self.messages is not None:
            self.messages = [m if isinstance(m, Message) else _message(m, i) for i, m in enumerate(self.messages)]
            for m in self.messages:
                _check_text(m.content, f"message {m.id or m.role!r}")

    @property
    def layout_rank(self) -> int:
        return ROLES.index(self.role) if self.role in ROLES else ROLES.index("custom")


def _slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name.strip()).strip("_") or "section"
    return slug if re.match(r"[A-Za-z_]", slug) else f"s_{slug}"


def _message(value: Any, position: int) -> Message:
    if not isinstance(value, dict):
        raise SectionError(f"message #{position}: expected a dict with role and content, not {type(value).__name__}")
    try:
        return Message.from_dict(value)
    except (TypeError, ValueError) as exc:
        raise SectionError(f"message #{position}: {exc}") from None


def _check_text(text: Any, where: str) -> None:
    """Text must be a str and encodable as UTF-8 (no lone surrogates from bad decoding)."""
    if not isinstance(text, str):
        raise SectionError(f"{where}: expected text, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SectionError(f"{where}: invalid UTF-8 at character {exc.start} (a lone surrogate)") from None
