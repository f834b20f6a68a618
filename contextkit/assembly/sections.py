"""What a prompt is made of: sections, and the evidence items inside them.

:class:`~contextkit.core.records.EvidenceItem` lives with the other records (compressors take it
too); it is re-exported here.

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

from contextkit.assembly._states import Role
from contextkit.core.errors import SectionError
from contextkit.core.records import EvidenceItem, Message

__all__ = ["ROLES", "EvidenceItem", "Role", "Section", "SectionError"]

#: Known roles in prompt order (key instructions lead); any other name is a custom role,
#: placed after domain knowledge.
#: (:class:`Role` names them; a role given as a plain string compares equal to its member.)
ROLES: tuple[str, ...] = tuple(r.value for r in Role if r is not Role.REMINDER)
_DEFAULT_PRIORITY: dict[str, int] = {
    Role.SYSTEM: 100, Role.KEY_INSTRUCTIONS: 100, Role.QUESTION: 100, Role.TASK: 90, Role.TOOL_RESULT: 80,
    Role.EVIDENCE: 75, Role.HISTORY: 70, Role.DOMAIN_KNOWLEDGE: 60, Role.CUSTOM: 55}
_DEFAULT_PINNED: set[str] = {Role.SYSTEM, Role.KEY_INSTRUCTIONS, Role.QUESTION}
_DEFAULT_TAG: dict[str, str] = {
    Role.SYSTEM: "system", Role.KEY_INSTRUCTIONS: "instructions", Role.TASK: "task", Role.DOMAIN_KNOWLEDGE: "knowledge",
    Role.EVIDENCE: "evidence", Role.TOOL_RESULT: "tool_output", Role.HISTORY: "history", Role.QUESTION: "question"}
_TAG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(slots=True)
class Section:
    """A named part of the prompt.

    Exactly one of ``content`` (text), ``items`` (evidence) or ``messages``
    (history) carries the material. ``min_share``/``max_share`` are fractions of
    the prompt budget. ``tag`` overrides the XML tag (default from the role).
    """

    name: str
    role: str = Role.CUSTOM.value
    content: str | None = None
    items: list[EvidenceItem] | None = None
    messages: list[Message] | None = None
    priority: int | None = None
    pinned: bool | None = None
    min_share: float | None = None
    max_share: float | None = None
    tag: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    #: Evidence: the score from which ``fill="relevant"`` measures its floor (the retriever's score at rank
    #: :data:`~contextkit.assembly.relevance.ANCHOR_RANK`; ``ContextAssembler`` sets it). None: from 0.
    relevance_anchor: float | None = None

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.content, self.items, self.messages)]
        if sum(given) != 1:
            raise SectionError(f"section {self.name!r}: give exactly one of content, items or messages")
        if self.role not in ROLES:
            self.role = Role.CUSTOM.value if self.role in ("", None) else self.role
        if self.priority is None:
            self.priority = _DEFAULT_PRIORITY.get(self.role, _DEFAULT_PRIORITY[Role.CUSTOM])
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
        return ROLES.index(self.role) if self.role in ROLES else ROLES.index(Role.CUSTOM)


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
