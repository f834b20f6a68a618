"""The states an assembly moves items and sections through, and the section roles it knows.

They are :class:`enum.StrEnum` s: a member *is* its string (``ItemStatus.DROPPED == "dropped"``,
``Role.EVIDENCE == "evidence"``), so roles given as plain strings compare equal to them and the
reports, whose fields hold the plain values, serialise exactly as before.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

__all__ = ["SUMMARY_ROLE", "ItemStatus", "Role", "SectionStatus"]


class ItemStatus(StrEnum):
    """What became of an evidence item or a history message. ``PENDING`` only while choosing:
    a report shows an item still pending as dropped."""

    PENDING = "pending"
    INCLUDED = "included"
    TRUNCATED = "truncated"
    DROPPED = "dropped"
    MERGED = "merged"  # absorbed into an overlapping passage (detail: into which)
    SUMMARIZED = "summarized"  # an older turn, now in the history's summary


#: Items that reach the prompt, whole or cut.
TAKEN: Final = (ItemStatus.INCLUDED, ItemStatus.TRUNCATED)
#: Items a report lists as left out.
LEFT_OUT: Final = (ItemStatus.DROPPED, ItemStatus.MERGED, ItemStatus.SUMMARIZED)


class SectionStatus(StrEnum):
    """What became of a section. ``PENDING`` only while choosing: a report shows it as included."""

    PENDING = "pending"
    INCLUDED = "included"
    TRUNCATED = "truncated"
    DROPPED = "dropped"


class Role(StrEnum):
    """The section roles contextkit knows, in prompt order (key instructions lead). A section may
    have any other role: it is a custom one, placed with ``CUSTOM``. ``REMINDER`` is the assembler's
    own restatement of the key instructions, appended last."""

    KEY_INSTRUCTIONS = "key_instructions"
    SYSTEM = "system"
    TASK = "task"
    DOMAIN_KNOWLEDGE = "domain_knowledge"
    CUSTOM = "custom"
    EVIDENCE = "evidence"
    TOOL_RESULT = "tool_result"
    HISTORY = "history"
    QUESTION = "question"
    REMINDER = "reminder"


#: The role of the entry that stands for the history's summarised older turns (not a message's own role).
SUMMARY_ROLE: Final = "summary"
