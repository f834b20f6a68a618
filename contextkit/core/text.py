"""Sentences: the one sentence splitter of contextkit, and cutting a text at a sentence end.

Every part that needs sentences uses this module, so a sentence is the same unit
wherever it is scored, kept or cut: evidence pruning (exact spans, so kept text is a
slice of the passage), the history summariser (sentence texts), and the assembler,
the LLM history summariser and the LlamaIndex postprocessor (a text over its budget
is cut at a sentence end). :class:`Deduplicator` (exact and near duplicates by their sets of
sentences) serves the assembler and evidence pruning alike. It imports nothing of contextkit.

The rules are tuned for prose, chat and scientific abstracts (the evidence scorer
was fitted on these sentences; SciFact's own scispaCy sentence lists are the
reference). A sentence ends

* at ``.``, ``!``, ``?`` or ``…`` (with closing quotes and brackets) followed by
  white space and something that can open a sentence: a capital, a digit, a quote or
  bracket, or a word that is not all lower case (``mRNA``, ``p53``);
* at a CJK full stop ``。！？`` (no space needed), and at a blank line (a paragraph);
* at a single line break after a short line (a heading), a colon or a semicolon, or
  before a list entry; hard-wrapped prose keeps its sentences whole.

It never ends inside a token: a mark must be followed by white space, so decimals
and versions (``2.5 mg``, ``v1.2.3``, ``Python 3.11``), dates and times
(``12.05.2024``, ``10:30``), URLs and e-mail addresses, file names and code
(``setup.py``, ``os.path.join()``) stay whole. Nor after a known abbreviation
(``Dr.``, ``Mr.``, ``e.g.``, ``i.e.``, ``vs.``, ``Fig.``; ``No. 5``, ``Jan. 2020``,
``p. 12`` before a number; ``etc.``, ``et al.``, ``p.m.``, ``U.S.`` only before a
typical sentence opener), nor after an initial (``J. R. R. Tolkien``,
``John F. Kennedy``; but ``hepatitis C. The`` ends).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

__all__ = ["Deduplicator", "normalise_text", "sentence_ends", "sentence_set", "sentence_texts", "split_sentences",
           "truncate_at_sentence"]

# A candidate end: terminal punctuation (with closing quotes/brackets) then white
# space, a CJK full stop (no space needed), or a line break.
_END = re.compile(r"[.!?…]+['\"”’)\]]*(?=\s)|[。！？]+['\"”’)\]」』]*|\n")
_NEXT_WORD = re.compile(r"\s*(\S*)")
_LIST_START = re.compile(r"[ \t]*(?:[-*•+>#|]|\d{1,3}[.)]|[a-zA-Z][.)]\s|```)")
_INITIAL = re.compile(r"[A-Z]\.")
_DOTTED = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # "U.S", "a.m" (the final period is the mark)

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
_OPENING = "(['\"“‘"
_SHORT_LINE = 40  # a line this short, ended by a line break, is a heading or a list entry
_WINDOW = 50_000  # truncate_at_sentence looks this many characters back for a sentence end


class _OffsetTokenizer(Protocol):
    """What :func:`truncate_at_sentence` needs of a tokenizer (``contextkit.tokenizers.Tokenizer`` has it)."""

    def encode_with_offsets(self, text: str) -> tuple[Sequence[int], Any]: ...


# ------------------------------------------------------------------ public
def split_sentences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character offsets of the sentences of ``text`` (see the module docstring).

    Every span is an exact slice (``text[start:end]``) with its white space trimmed;
    spans are in order and disjoint, and together hold every non-space character.
    """
    spans: list[tuple[int, int]] = []
    begin = 0
    for cut in [*sentence_ends(text), len(text)]:
        if cut <= begin:
            continue
        span = _trimmed(text, begin, cut)
        if span is not None:
            spans.append(span)
        begin = cut
    return spans


def sentence_texts(text: str) -> list[str]:
    """The sentences of ``text`` as strings, stripped, none empty."""
    return [text[a:b] for a, b in split_sentences(text)]


def sentence_ends(text: str, start: int = 0, stop: int | None = None) -> Iterator[int]:
    """Offsets where a sentence of ``text`` ends, in order, for the marks that begin in ``[start, stop)``.

    An end is just after its punctuation (and closing quotes), or at the line break
    that ends it; white space after it belongs to no sentence. Looking ahead (at the
    next word) reads past ``stop``, so a window gives the same ends as the whole text.
    """
    stop = len(text) if stop is None else stop
    line_start = text.rfind("\n", 0, start) + 1
    for m in _END.finditer(text, start):
        if m.start() >= stop:
            return
        if m.group() == "\n":
            if _line_break_ends(text, line_start, m.start()):
                yield m.start()
            line_start = m.end()
        elif _punct_ends(text, m):
            yield m.end()


def truncate_at_sentence(text: str, max_tokens: int, tokenizer: _OffsetTokenizer, *,
                         min_tokens: int = 8) -> str | None:
    """The longest prefix of ``text`` that ends at a sentence (or paragraph) end and lies
    within the first ``max_tokens`` tokens; ``text`` itself when it fits, None when no
    sentence end fits or ``max_tokens < min_tokens`` (a shorter remnant is not worth its tags).

    The prefix is a slice of the first ``max_tokens`` tokens' characters, so it counts
    at most about ``max_tokens`` (re-encoding a prefix can merge differently at its end).
    """
    if max_tokens < min_tokens:
        return None
    ids, ends = tokenizer.encode_with_offsets(text)
    if len(ids) <= max_tokens:
        return text
    limit = _char_limit(ends, max_tokens)
    cut = -1
    for end in sentence_ends(text, max(0, limit - _WINDOW), limit + 1):  # a line break at limit ends there
        if end > limit:
            break
        cut = end
    if cut <= 0:
        return None
    return text[:cut].rstrip()


# --------------------------------------------------------------- internals
def _char_limit(ends: Any, max_tokens: int) -> int:
    """The character offset where the first ``max_tokens`` tokens end (stepping back
    over tokens that end inside a character, which report -1)."""
    back = max_tokens - 1
    limit = int(ends[back])
    while limit < 0 and back > 0:
        back -= 1
        limit = int(ends[back])
    return max(limit, 0)


def _trimmed(text: str, a: int, b: int) -> tuple[int, int] | None:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return (a, b) if b > a else None


def _line_break_ends(text: str, line_start: int, pos: int) -> bool:
    """Whether the line break at ``pos`` ends a sentence: a paragraph, a heading, a list entry."""
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
    """Whether the punctuation ``m`` (followed by white space, or CJK) ends a sentence."""
    mark = m.group()
    if mark[0] in "。！？":
        return True
    word = _NEXT_WORD.match(text, m.end())
    assert word is not None  # r"\s*(\S*)" matches anywhere, if only the empty string
    nxt = word.group(1)
    if not nxt:
        return True  # end of text
    if nxt[0].islower() and not any(c.isupper() or c.isdigit() for c in nxt):
        return False  # "e.g. the", "vs. control", "approx. two" ("mRNA", "p53" may open a sentence)
    if mark != ".":
        return True  # ! ? … "..." or a closing quote or bracket: the next word opens a new sentence
    return _period_ends(text, m.start(), nxt)


def _period_ends(text: str, pos: int, nxt: str) -> bool:
    """Whether the lone period at ``pos``, followed by the word ``nxt``, ends a sentence."""
    word, word_start = _word_before(text, pos)
    word = word.lstrip(_OPENING)
    if not word:
        return True
    key = word.lower()
    if key in _NEVER_END:
        return False
    if key in _BEFORE_NUMBER and (nxt[0].isdigit() or nxt[0] in "(["):
        return False
    if key in _MAYBE_END or _DOTTED.fullmatch(word):
        return nxt.lower().strip("\"“'(") in _OPENERS  # "U.S. Army" vs "in the U.S. The"
    if len(word) == 1 and word.isupper():  # an initial, or a one-letter name ("vitamin D.")
        return _initial_ends(text, word_start, nxt)
    return True


def _initial_ends(text: str, word_start: int, nxt: str) -> bool:
    """Whether a period after a capital letter ends a sentence ("J. R. R. Tolkien" vs "hepatitis C. The")."""
    if _INITIAL.fullmatch(nxt):
        return False  # another initial follows
    prev, _ = _word_before(text, word_start - 1) if word_start > 0 else ("", 0)
    if not prev or prev.lower() in _CONNECTORS or prev[:1].isupper() or _INITIAL.fullmatch(prev):
        return not nxt[0].isupper() or nxt.lower() in _OPENERS
    return True


# ------------------------------------------------------------------ duplicates
_MIN_SENTENCE = 16  # characters; shorter pieces ("Yes.", "1.") say nothing about duplication


def normalise_text(text: str) -> str:
    """Case-folded, white space collapsed: the form duplicates are compared in."""
    return " ".join(text.casefold().split())


def sentence_set(normalised: str) -> set[int]:
    """Hashes of the text's sentences (normalised): the unit of near-duplicate detection."""
    pieces = normalised.replace("? ", ". ").replace("! ", ". ").replace("; ", ". ").split(". ")
    return {hash(piece.rstrip(".!?;")) for piece in pieces if len(piece) >= _MIN_SENTENCE}


class Deduplicator:
    """Remembers accepted passages; says whether a new one repeats one of them.

    Exact: the same text up to case and white space. Near: at least
    ``near_threshold`` Jaccard similarity of their sets of sentences (so a copy
    with a changed title, a reflowed paragraph or an extra line is caught, while
    two passages that share a stock sentence are not), or at least
    ``containment`` of the new passage's sentences inside one kept passage (a
    chunk of a mirrored copy that a longer merged passage already holds). Sentences are cheap to
    hash: checking a million tokens of evidence costs tens of milliseconds.
    """

    def __init__(self, near_threshold: float | None = 0.8, containment: float | None = 0.9) -> None:
        self.near_threshold = near_threshold
        self.containment = containment
        self._exact: dict[bytes, str] = {}
        self._postings: dict[int, list[int]] = defaultdict(list)
        self._sizes: list[int] = []
        self._ids: list[str] = []

    def check(self, item_id: str, text: str) -> tuple[str, str] | None:
        """``("duplicate" | "near_duplicate", id of the kept passage)`` or None; accepts it when None."""
        normalised = normalise_text(text)
        key = hashlib.blake2b(normalised.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if key in self._exact:
            return "duplicate", self._exact[key]
        sentences = sentence_set(normalised) if self.near_threshold is not None else set()
        if len(sentences) >= 3:
            shared = Counter(j for h in sentences for j in self._postings.get(h, ()))
            for j, common in shared.most_common(3):
                if (
                    self.near_threshold is not None  # always: sentences is empty without it
                    and common / (len(sentences) + self._sizes[j] - common) >= self.near_threshold
                ):
                    return "near_duplicate", self._ids[j]
                if self.containment is not None and common / len(sentences) >= self.containment:
                    return "near_duplicate", self._ids[j]  # nearly all of it is inside a kept passage
        self._exact[key] = item_id
        if len(sentences) >= 3:
            j = len(self._ids)
            for h in sentences:
                self._postings[h].append(j)
            self._sizes.append(len(sentences))
            self._ids.append(item_id)
        return None
