"""Sentence splitting for evidence pruning: exact ``(start, end)`` spans, so kept text is a slice.

Split out of :mod:`contextkit.compressors.evidence` (which re-exports
:func:`split_sentences`). Rules are tuned for prose and scientific abstracts: a
period after ``et al.``, ``e.g.``, an initial (``P. falciparum``) or inside a number
does not end a sentence, as in SciFact's own (scispaCy) sentence lists.
"""

from __future__ import annotations

import re

__all__ = ["split_sentences"]

# A candidate end: terminal punctuation (with closing quotes/brackets) then white
# space, a CJK full stop (no space needed), or a line break.
_END = re.compile(r"[.!?…]+['\"”’)\]]*(?=\s)|[。！？]+['\"”’)\]」』]*|\n")
_NEXT_WORD = re.compile(r"\s*(\S*)")
_LIST_START = re.compile(r"[ \t]*(?:[-*•+>#|]|\d{1,3}[.)]|[a-zA-Z][.)]\s|```)")

#: Abbreviations after which a period never ends a sentence (lower case, no final period).
_NEVER_END = frozenset(
    "e.g i.e cf viz vs fig figs eq eqs ref refs approx ca resp incl dr mr mrs ms prof st jr sr rev gen hon "
    "mt sgt capt lt col dept univ suppl".split())
#: Abbreviations that do not end a sentence before a number or a bracket ("No. 5", "p. 12", "Jan. 2020").
_BEFORE_NUMBER = frozenset(
    "no nos vol vols p pp sec secs ch chap tab art para est min max avg approx "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split())
#: Ambiguous abbreviations: they end a sentence only before a typical sentence opener.
_MAYBE_END = frozenset("al etc inc ltd co corp bros ed eds a.m p.m".split())
_OPENERS = frozenset(
    "the this these that those we our in it its a an however thus therefore here there they he she his her "
    "i as for to on at by with after although but and moreover furthermore finally overall results "
    "conclusions conclusion methods background objective objectives design setting participants "
    "interventions measurements main if when while since because one two three all most some many no "
    "both each patients data".split())
_CONNECTORS = frozenset("by and of with to from & et".split())
_CLOSERS = "'\"”’)]"
_SHORT_LINE = 40  # a line this short, ended by a line break, is a heading or a list entry


def split_sentences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character offsets of the sentences of ``text``, white space trimmed.

    A sentence ends at ``.``, ``!``, ``?`` or ``…`` (plus closing quotes and
    brackets) followed by white space and something that can open a sentence (not
    an all-lower-case word; ``mRNA`` or ``p53`` can), at a CJK full stop, at a blank
    line, and at a single line break after a short line (a heading), a colon or a
    semicolon, or before a list entry; hard-wrapped prose keeps its sentences whole.
    A period does not end a sentence after a known abbreviation (``e.g.``,
    ``Fig.``, ``vs.``, ``Dr.``, ``No. 5``, ``et al. (2010)``...), after an initial
    (``J. Smith``, ``John F. Kennedy``; but ``hepatitis C. The`` ends), inside a
    number (``3.5``, ``p < .001``) or before a lower-case word.
    Every span is an exact slice: ``text[start:end]``.
    """
    cuts: list[int] = []
    line_start = 0
    for m in _END.finditer(text):
        if m.group() == "\n":
            if _line_break_ends(text, line_start, m.start()):
                cuts.append(m.start())
            line_start = m.end()
            continue
        if _punct_ends(text, m):
            cuts.append(m.end())
    spans: list[tuple[int, int]] = []
    begin = 0
    for cut in [*cuts, len(text)]:
        if cut <= begin:
            continue
        spans.extend(_trimmed(text, begin, cut))
        begin = cut
    return spans


def _trimmed(text: str, a: int, b: int) -> list[tuple[int, int]]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return [(a, b)] if b > a else []


def _line_break_ends(text: str, line_start: int, pos: int) -> bool:
    line = text[line_start:pos].strip()
    if not line:
        return True  # a blank line: paragraph break
    nl = text.find("\n", pos + 1)
    next_line = text[pos + 1:nl if nl >= 0 else len(text)]
    if not next_line.strip():
        return True  # a blank line follows
    if line.rstrip(_CLOSERS)[-1:] in (".", "!", "?", "…"):
        return False  # the punctuation rule has decided ("e.g.\nthe" goes on)
    if line[-1] in ":;。！？" or _LIST_START.match(next_line):
        return True
    return len(line) < _SHORT_LINE


def _word_before(text: str, pos: int) -> tuple[str, int]:
    """The white-space-delimited word ending at ``pos`` and where it starts."""
    start = pos
    while start > 0 and not text[start - 1].isspace() and pos - start < 64:
        start -= 1
    return text[start:pos], start


def _punct_ends(text: str, m: re.Match[str]) -> bool:
    mark = m.group()
    if mark[0] in "。！？":
        return True
    nxt = _NEXT_WORD.match(text, m.end()).group(1)
    if not nxt:
        return True  # end of text
    first = nxt[0]
    if first.islower() and not any(c.isupper() or c.isdigit() for c in nxt):
        return False  # "e.g. the", "vs. control", "approx. two" ("mRNA", "p53" may open a sentence)
    if mark.rstrip(_CLOSERS) != ".":
        return True  # ! ? … and "...": the next word opens a new sentence
    if mark != ".":
        return True  # a closing quote or bracket after the period
    word, word_start = _word_before(text, m.start())
    word = word.lstrip("(['\"“‘")
    key = word.lower()
    if not word:
        return True
    if key in _NEVER_END:
        return False
    if key in _BEFORE_NUMBER and (first.isdigit() or first in "(["):
        return False
    if key in _MAYBE_END or re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", word):
        return nxt.lower().strip("\"“'(") in _OPENERS  # "U.S. Army" vs "in the U.S. The"
    if len(word) == 1 and word.isupper():  # an initial, or a one-letter name ("vitamin D.")
        prev, _ = _word_before(text, word_start - 1) if word_start > 0 else ("", 0)
        if not prev or prev.lower() in _CONNECTORS or prev[:1].isupper() or re.fullmatch(r"[A-Z]\.", prev):
            return not first.isupper() or nxt.lower() in _OPENERS
    return True

