"""Invisible and deceptive characters, taken out of untrusted text before it reaches a prompt.

Why: a model reads characters a person reviewing the prompt cannot see. Unicode tag
characters (U+E0000-E007F) and variation selectors (U+FE00-FE0F, U+E0100-E01EF) spell out
hidden ASCII instructions ("ASCII smuggling"); bidi controls and marks (U+202A-202E,
U+2066-2069, U+200E-200F, U+061C) make text display in another order than it is read;
zero-width characters and invisible operators (U+200B-200D, U+2060-2064) hide words inside
words; C0 and C1 controls (ESC among them) reach terminals. Removed: every code point with
Unicode's ``Default_Ignorable_Code_Point`` property (the list below, held equal to the property
by a test that asks the ``regex`` module), and the C0 controls but tab, line feed, carriage
return and form feed, DEL and the C1 controls. Document text, ids, sources, history, tool output
and the question lose them (``AssemblyOptions.keep_invisible`` keeps them), counted in the
report. What emoji need stays: the zero-width joiner between two emoji, tag characters inside a
flag sequence (U+1F3F4 ... U+E007F), the emoji presentation selectors (U+FE0E, U+FE0F) after an
emoji, and the zero-width non-joiner between two letters of a script that uses it.
"""

from __future__ import annotations

import re
from dataclasses import replace as copy_with

from contextkit.assembly.sections import Section
from contextkit.core.records import Message

__all__ = ["strip_invisible", "without_invisible"]

#: Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt), as ranges.
DEFAULT_IGNORABLE = (
    "\u00ad\u034f\u061c\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
#: Controls no prompt needs: C0 but tab, line feed, form feed and carriage return; DEL; C1.
CONTROLS = "\x00-\x08\x0b\x0e-\x1f\x7f-\x9f"
_CANDIDATES = re.compile(f"[{DEFAULT_IGNORABLE}{CONTROLS}]")
_FLAG = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
_UNTRUSTED_TEXT_ROLES = ("tool_result", "question")


def _emoji(ch: str) -> bool:
    o = ord(ch)
    return o >= 0x1F000 or 0x2600 <= o <= 0x27BF or o == 0xFE0F or 0x1F3FB <= o <= 0x1F3FF


def strip_invisible(text: str) -> tuple[str, int]:
    """``text`` without the invisible characters of the module docstring, and how many went."""
    if not _CANDIDATES.search(text):
        return text, 0
    keep = {i for m in _FLAG.finditer(text) for i in range(m.start(), m.end())}
    out: list[str] = []
    removed = 0
    last = 0
    for m in _CANDIDATES.finditer(text):
        i, ch = m.start(), m.group()
        before, after = text[i - 1:i], text[i + 1:i + 2]
        if i in keep or (ch == "\u200d" and before and after and _emoji(before) and _emoji(after)) or (
                ch in "\ufe0e\ufe0f" and before and _emoji(before)) or (
                ch == "\u200c" and before.isalpha() and after.isalpha() and ord(before) > 0x58F and ord(after) > 0x58F):
            continue
        out.append(text[last:i])
        last = i + 1
        removed += 1
    out.append(text[last:])
    return "".join(out), removed


def without_invisible(section: Section) -> tuple[Section, int]:
    """A copy of ``section`` with its untrusted text cleaned (evidence, history, tool output, the question)."""
    total = 0

    def clean(value: str) -> str:
        nonlocal total
        text, n = strip_invisible(value)
        total += n
        return text

    if section.items is not None:
        items = []
        for item in section.items:
            text, ident, source = clean(item.text), clean(item.id), clean(item.source)
            if (text, ident, source) == (item.text, item.id, item.source):
                items.append(item)
            else:
                moved = text != item.text  # offsets and stored counts no longer fit the text
                items.append(copy_with(item, text=text, id=ident, source=source,
                                       token_count=None if moved else item.token_count,
                                       start=None if moved else item.start, end=None if moved else item.end))
        return (copy_with(section, items=items), total) if total else (section, 0)
    if section.messages is not None:
        msgs = [Message(m.role, clean(m.content), m.timestamp, m.id) for m in section.messages]
        return (copy_with(section, messages=msgs), total) if total else (section, 0)
    if section.role in _UNTRUSTED_TEXT_ROLES and section.content:
        content = clean(section.content)
        return (copy_with(section, content=content), total) if total else (section, 0)
    return section, 0
