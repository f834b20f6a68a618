"""Windowed chunking for :meth:`TokenChunker.chunk_stream`: the greedy cut of
:mod:`contextkit.chunking._cuts`, walked over a text too large to encode at once.

Why the result equals chunking the whole text: each window starts and ends on a
stable boundary (the pre-tokenizer always restarts there), so its encoding is
exactly a slice of the whole text's; boundary levels at its edges are computed
with the neighbouring characters; and the walk stops before any decision that
would look past the window's end (a decision looks at most one chunk ahead).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from contextkit.chunking._cuts import Candidates, CutRule, _levels, _positions, _ranks, _stable_junction, _walk
from contextkit.core.tokenizers import Tokenizer, _code_points

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def stream_spans(tok: Tokenizer, blocks: Iterable[str], budget: int, overlap: int, min_fill: float,
                  window_chars: int, *, first: int = 0, before: str = "") -> Iterator[tuple[int, str, int, str]]:
    """``(start, text, tokens, char before start)`` of each span of the joined ``blocks``.

    ``raw`` holds the text from ``base`` (a stable boundary) on; each round encodes
    a window of it that ends on a stable boundary, walks the greedy cut as far as
    the window allows, then drops the text before the last stable boundary at or
    before the next chunk's start.

    ``blocks`` may also be the rest of a longer text from one of its stable boundaries
    (:mod:`contextkit.chunking._parallel` resumes a cut that way): ``before`` is then the
    (up to three) characters ahead of it and ``first`` the offset of a chunk start of
    the whole text's cut; the spans from there on are those of the whole text's cut.
    """
    import numpy as np

    it = iter(blocks)
    raw, base, s_at, eof, want = "", 0, first, False, window_chars
    before = before[-3:]
    while True:
        while not eof and len(raw) - s_at < want:
            block = next(it, None)
            if block is None:
                eof = True
            else:
                raw += block
        if eof:
            w_end = len(raw)
        else:
            last = _last_restart(tok, raw, s_at + 1)
            if last is None:  # no stable boundary or restart after the chunk start yet: read more
                want *= 2
                continue
            w_end = last
        window = raw[:w_end]
        ends = tok.token_ends(window)
        cands = _window_candidates(tok, window, ends, before, raw[w_end : w_end + 1])
        pos, stable = cands.pos, cands.stable
        s = int(np.searchsorted(pos, s_at))
        walk = _walk(tok, window, cands, len(ends), CutRule(budget, overlap, min_fill), s, complete=eof)
        moved = False
        while True:
            try:
                a, b, count = next(walk)
            except StopIteration as stop:
                stopped = stop.value
                break
            moved = True
            yield base + a, window[a:b], count, window[a - 1] if a else before[-1:]
        if stopped is None:
            return
        want = window_chars if moved else want * 2
        behind = np.flatnonzero(stable[: stopped + 1])  # stable boundaries at or before it (the window's start
        keep = _keep(tok, window, int(pos[behind[-1]]) if len(behind) else 0, int(pos[stopped]))  # is a restart)
        before = (before + raw[max(0, keep - 3) : keep])[-3:]
        raw, base, s_at = raw[keep:], base + keep, int(pos[stopped]) - keep


def _keep(tok: Tokenizer, window: str, stable: int, stop: int) -> int:
    """Where the next window starts: the last stable boundary or restart of ``window`` at or before
    ``stop`` (the next chunk's start). A restart (:meth:`Tokenizer.restarts`) lets a text with no
    stable boundary for long drop what it has walked, so its memory stays a few windows. Prose and
    code have a stable boundary every few characters: no look for restarts (an earlier restart than
    the last is always a right start, only a longer one)."""
    limit = tok.stretch_limit()
    if limit is None or stop - stable <= limit:
        return stable
    cuts = [c for c in tok.restarts(window) if stable < c <= stop]
    return cuts[-1] if cuts else stable


def _last_restart(tok: Tokenizer, text: str, lo: int) -> int | None:
    """The last stable boundary or restart ``p`` of ``text`` with ``lo <= p < len(text)``.

    ``text`` starts at one of them, so its restarts are the whole text's (those of a stretch cut
    short by the end of ``text`` are the first ones of the whole stretch)."""
    last = _last_stable(tok, text, lo)
    limit = tok.stretch_limit()
    if limit is None or (last is not None and len(text) - last <= limit):
        return last  # the stretch after it is too short to hold a restart
    cuts = [c for c in tok.restarts(text) if lo <= c < len(text)]
    if cuts and (last is None or cuts[-1] > last):
        return cuts[-1]
    return last


def _last_stable(tok: Tokenizer, text: str, lo: int) -> int | None:
    """The last stable boundary ``p`` of ``text`` with ``lo <= p < len(text)`` (the mask needs ``text[p]``)."""
    import numpy as np

    tail = 1 << 16
    while True:
        start = max(lo, len(text) - tail)
        if start >= len(text):
            return None
        piece = text[start - 1 :]  # one character before: the mask at p looks at text[p - 1]
        hits = np.flatnonzero(stable_mask(tok, piece)[1 : len(piece)])
        if len(hits):
            return start + int(hits[-1])
        if start == lo:
            return None
        tail *= 4


def stable_mask(tok: Tokenizer, text: str) -> np.ndarray:
    """``tok.stable_mask(text)``, for the callers that checked ``tok`` has stable boundaries."""
    mask = tok.stable_mask(text)
    if mask is None:
        raise _unstable(tok)
    return mask


def _unstable(tok: Tokenizer) -> ValueError:
    return ValueError(f"tokenizer {tok.name!r} has no stable boundaries: a text cannot be cut window by window")


def _window_candidates(tok: Tokenizer, window: str, ends: Any, before: str, after: str) -> Candidates:
    """:func:`_candidates` for a window of a longer text: ``before`` (up to three characters) and
    ``after`` (one) are its neighbours, so boundary levels at its edges are those of the whole text."""
    import numpy as np

    # The code points of the window with its neighbours, joined as arrays: joining the
    # strings first would copy a long non-ASCII window once more, for nothing.
    cp_all = np.concatenate((_code_points(before), _code_points(window), _code_points(after)))
    cp = cp_all[len(before) : len(before) + len(window)]
    pos, tix = _positions(ends)
    stable = tok.stable_at(window, pos, cp)
    if stable is None:
        raise _unstable(tok)
    # The window's start: stable where the text starts there or it is a stable boundary; a restart
    # that is not one (see _keep) ranks as the whole text ranks it.
    stable[0] = not before or not window or _stable_junction(before[-1], window[0])
    stable[pos == len(window)] = True
    lv = _levels(cp_all, pos + len(before))
    return Candidates(pos, tix, _ranks(lv, stable), stable)
