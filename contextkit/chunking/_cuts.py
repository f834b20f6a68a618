"""The greedy cut: where chunks of a text begin and end, from one encoding of it.

A leaf of the chunking package (it imports only numpy and the tokenizer protocol), shared by
:class:`~contextkit.chunking.TokenChunker` (whole texts) and :mod:`contextkit.chunking._stream`
(windows of a text too large to hold). Cut candidates are ranked by boundary level
(paragraph > sentence > line > word > token) and by stability: at a *stable* cut the tokens of
``text[a:b]`` are exactly a slice of the whole encoding, so no count needs a re-encode.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import lru_cache
from typing import Any, NamedTuple

from contextkit.core.errors import ChunkTooSmallError
from contextkit.core.tokenizers import Tokenizer

PARAGRAPH, SENTENCE, LINE, WORD, TOKEN = 4, 3, 2, 1, 0
_SENTENCE_END = [ord(c) for c in ".!?。！？"]
_CLOSERS = [ord(c) for c in "\"')]»”’"]


class Candidates(NamedTuple):
    """Every place a text may be cut, as parallel arrays (what the walk reads, never changes)."""

    pos: Any  # character offsets of the candidates (numpy int64), ascending
    tix: Any  # tokens of the text before each candidate
    level: Any  # rank of each: boundary level and stability (see ``_ranks``)
    stable: Any  # bool: the encoding restarts there, so counts need no re-encode


class CutRule(NamedTuple):
    """How chunks are cut: at most ``budget`` tokens, ``overlap`` shared, a boundary kept only if it
    leaves a chunk ``min_fill`` full."""

    budget: int
    overlap: int
    min_fill: float


def _stable_junction(before: str, here: str) -> bool:
    """Whether a cut between the characters ``before`` and ``here`` is a stable boundary (see tokenizers)."""
    return here == " " and not before.isspace() or (before == "\n" and not here.isspace() and here != "/")


def _candidates(tokenizer: Tokenizer, text: str, cp: Any, ends: Any) -> Candidates:
    """Every possible cut: position, tokens before it, boundary level, stability."""
    import numpy as np

    pos, tix = _positions(ends)
    at = tokenizer.stable_at(text, pos, cp)
    stable = np.zeros(len(pos), dtype=bool) if at is None else at
    stable[0] = True
    stable[pos == len(text)] = True
    return Candidates(pos, tix, _ranks(_levels(cp, pos), stable), stable)


def _positions(ends):
    """Cut positions (0, then each token end that falls between characters) and the tokens before each."""
    import numpy as np

    valid = ends >= 0
    return np.concatenate(([0], ends[valid])), np.concatenate(([0], np.flatnonzero(valid) + 1))


def _ranks(lv, stable):
    """What the greedy cut ranks candidates by, as float32: stable cuts 1 + level (paragraph highest),
    unstable ones level / 10, so an unstable cut still prefers a newline or a sentence end over a
    bare token cut but ranks below every stable one.

    Looked up in a table rather than computed with ``np.where``: two float64 temporaries of a
    million-token window cost more, and the values are the same."""
    import numpy as np

    top = int(lv.max()) + 1 if len(lv) else 1
    if len(lv) == 0 or int(lv.min()) < 0 or top > 64:
        return np.where(stable, 1.0 + lv, lv / 10.0).astype(np.float32)
    levels = np.arange(top, dtype=np.int8)
    table = np.concatenate((levels / 10.0, 1.0 + levels)).astype(np.float32)
    return table[lv.astype(np.intp) + top * stable]


@lru_cache(maxsize=1)
def _tables():
    """Lookup tables over the Basic Multilingual Plane (other planes map to "no")."""
    import numpy as np

    sentence_end = np.zeros(0x10000, dtype=bool)
    closer = np.zeros(0x10000, dtype=bool)
    sentence_end[_SENTENCE_END] = True
    closer[_CLOSERS] = True
    return sentence_end, closer


def _levels(cp, pos):
    """Boundary level of each cut position (paragraph > sentence > line > word).

    Most cuts are between words: the three characters before a cut and the one after
    it are looked at only where the character before is a newline or ends a sentence.
    """
    import numpy as np

    sentence_end, closer = _tables()
    level = np.full(len(pos), WORD, dtype=np.int8)
    n = len(cp)
    if n == 0 or len(pos) == 0:
        return level
    prev1 = np.where(pos > 0, cp[np.maximum(pos - 1, 0)], 0)
    bmp1 = np.minimum(prev1, 0xFFFF)
    newline = prev1 == 0x0A
    maybe = np.flatnonzero(newline | sentence_end[bmp1] | closer[bmp1])
    if len(maybe) == 0:
        return level
    at = pos[maybe]

    def char(offset: int):
        where = at + offset
        ok = (where >= 0) & (where < n)
        return np.where(ok, cp[np.clip(where, 0, n - 1)], 0)

    p1, p2, p3, here = prev1[maybe], char(-2), char(-3), char(0)
    b1, b2 = np.minimum(p1, 0xFFFF), np.minimum(p2, 0xFFFF)
    nl = p1 == 0x0A
    paragraph = nl & ((p2 == 0x0A) | ((p2 == 0x0D) & (p3 == 0x0A)))
    ends = sentence_end[b1] | (closer[b1] & sentence_end[b2])
    sentence = ends & ((here == 0x20) | (here == 0x0A) | (p1 >= 0x3000))
    sub = np.full(len(maybe), WORD, dtype=np.int8)
    sub[nl] = LINE
    sub[sentence] = SENTENCE
    sub[paragraph] = PARAGRAPH
    level[maybe] = sub
    return level


def _greedy(tok: Tokenizer, text: str, cands: Candidates, n_tok: int, rule: CutRule) -> list[tuple[int, int, int]]:
    spans = list(_walk(tok, text, cands, n_tok, rule))
    return [sp for sp in spans if not text[sp[0] : sp[1]].isspace()]


def _walk(tok: Tokenizer, text: str, cands: Candidates, n_tok: int, rule: CutRule, s: int = 0,
          complete: bool = True) -> Generator[tuple[int, int, int], None, int | None]:
    """The greedy cut, chunk by chunk from candidate ``s``: yields ``(start, end, tokens)`` spans.

    ``complete=False`` means ``text`` is a window of a longer text that ends on a
    stable boundary: the walk then stops, returning the candidate where the next
    chunk starts, as soon as a decision would need candidates beyond the window
    (every decision looks at most ``budget`` tokens ahead). Returns None when the
    text is done. Whitespace-only spans are yielded; the caller drops them.
    """
    pos, tix, level, stable = cands
    budget, overlap, min_fill = rule
    last = len(pos) - 1
    min_gain = max(1, int(budget * min_fill))
    while True:
        s_tok = int(tix[s])
        rest = n_tok - s_tok
        if not complete and rest <= budget:
            return s  # the chunk may reach past the window: decide in the next one
        if rest <= budget and stable[s]:
            yield int(pos[s]), len(text), rest
            return None
        hi = int(tix.searchsorted(s_tok + budget, "right")) - 1
        hi = max(min(hi, last), s + 1)
        lo = max(int(tix.searchsorted(s_tok + min_gain, "left")), s + 1)
        window = level[lo : hi + 1] if lo <= hi else level[s + 1 : hi + 1]
        base = lo if lo <= hi else s + 1
        if window.max() < 1.0 and lo > s + 1 and stable[s + 1 : hi + 1].any():
            window, base = level[s + 1 : hi + 1], s + 1  # no stable cut in the preferred zone: any stable cut
        e = base + int(len(window) - 1 - window[::-1].argmax())
        e, count = _fit(tok, text, pos, tix, stable, s, e, budget)
        yield int(pos[s]), int(pos[e]), count
        if e >= last or int(pos[e]) >= len(text):
            return None
        s = _next_start(tok, text, pos, tix, level, stable, s, e, overlap)


def _fit(tok, text, pos, tix, stable, s, e, budget) -> tuple[int, int]:
    """Exact token count of the span ``s..e``, moving ``e`` back until it fits."""
    while True:
        if stable[s] and stable[e]:
            return e, int(tix[e] - tix[s])
        count = tok.count(text[int(pos[s]) : int(pos[e])])
        if count <= budget or e <= s + 1:
            if count > budget:
                raise ChunkTooSmallError(f"the character at offset {int(pos[s])} needs {count} tokens, more than "
                                         f"the {budget} a chunk has room for; raise chunk_size or shorten the header")
            return e, count
        e -= max(1, (count - budget) // 2)
        e = max(e, s + 1)


#: The level of a stable cut that starts a sentence (or a paragraph), as :func:`_candidates` ranks it.
_SENTENCE_START = 1.0 + SENTENCE


def _next_start(tok, text, pos, tix, level, stable, s, e, overlap) -> int:
    """Where the next chunk starts: as far back as ``overlap`` allows, at the best boundary.

    A chunk should start where a sentence does, so it reads on its own. When no
    sentence starts inside the overlap but the previous chunk ends at one, the next
    chunk starts there, with no overlap, rather than on a sentence's last words (as
    LlamaIndex's SentenceSplitter builds its overlap from whole sentences). Sentence
    and paragraph starts rank alike here: the earliest gives the largest overlap.
    """

    import numpy as np

    if overlap <= 0:
        return e
    lo = max(int(tix.searchsorted(tix[e] - overlap, "left")), s + 1)
    if lo >= e:
        return e
    window = np.minimum(level[lo:e], _SENTENCE_START)
    k = lo + int(window.argmax())  # earliest cut of the best level: the largest overlap
    if window[k - lo] < _SENTENCE_START <= level[e]:
        return e
    while k < e:
        if stable[k] and stable[e]:
            return k
        if tok.count(text[int(pos[k]) : int(pos[e])]) <= overlap:
            return k
        k += 1
    return e
