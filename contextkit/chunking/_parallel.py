"""One long text cut on several threads, into exactly the chunks of one.

Why it is exact. The text is split into segments at *stable* boundaries, where the
pre-tokenizer provably restarts (see :meth:`Tokenizer.stable_boundaries`): the tokens
of a segment are then exactly a slice of the whole text's tokens, so each segment can
be encoded on its own thread (tiktoken releases the GIL while it encodes). Each thread
also runs the greedy cut over its segment plus a tail reaching into the next one, as
if a chunk started at the segment's first character; :func:`_walk` stops, as the
streaming chunker's windows do, before any decision would look past the tail.

The cut is a chain: where a chunk starts decides where it ends and where the next one
starts. The true chain (from the start of the text) and a segment's speculative chain
meet as soon as both start a chunk at the same position: from there on they are the
same chain, because every decision depends only on the text ahead of that start. The
merge keeps the true chain up to the first shared start and the segment's chain after
it. Chunk boundaries prefer paragraphs and sentences, so chains meet within a chunk or
two on prose; where they never meet within a tail (a text with no boundary better than
a word), :func:`split_parallel` returns None and the caller cuts the text on one
thread. Either way the chunks are those of the serial cut, which the tests check.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from contextkit.chunking._cuts import _walk
from contextkit.chunking._stream import _window_candidates
from contextkit.tokenizers import Tokenizer

__all__ = ["MIN_PARALLEL_CHARS", "split_parallel"]

#: Texts shorter than this are cut on one thread: below it, threads cost more than they save.
MIN_PARALLEL_CHARS = 1 << 20
#: How far (in characters, at least) a segment's walk reaches into the next segment.
TAIL_CHARS = 1 << 16


class _Segment(NamedTuple):
    lo: int  # where the segment (and its speculative chain) starts
    end: int  # where its window ends: a stable boundary past the next segment's start, or the text's end


def split_parallel(tok: Tokenizer, text: str, budget: int, overlap: int, min_fill: float,
                   workers: int) -> list[tuple[int, int, int]] | None:
    """``(start, end, tokens)`` of every chunk, as :func:`_greedy` gives them, or None.

    None means the text is not worth splitting (too short, one worker, a tokenizer
    without stable boundaries) or the chains did not meet: cut it on one thread.
    """
    if workers <= 1 or len(text) < MIN_PARALLEL_CHARS or tok.stable_mask("a b") is None:
        return None
    segments = _segments(tok, text, workers, tail=max(TAIL_CHARS, budget * 64))
    if len(segments) < 2:
        return None
    with ThreadPoolExecutor(len(segments)) as pool:
        walks = list(pool.map(lambda seg: _walk_segment(tok, text, seg, budget, overlap, min_fill), segments))
    chain = walks[0]
    for seg, walk in zip(segments[1:], walks[1:]):
        chain = _join(chain, walk, seg.lo)
        if chain is None:
            return None
    return [span for span in chain if not text[span[0] : span[1]].isspace()]


def _segments(tok: Tokenizer, text: str, workers: int, tail: int) -> list[_Segment]:
    """About equal segments starting at stable boundaries, each window ending ``tail`` past the next start."""
    starts = [0]
    for k in range(1, workers):
        at = _stable_at_or_after(tok, text, k * len(text) // workers)
        if at is None or at <= starts[-1]:
            continue
        starts.append(at)
    segments = []
    for i, lo in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else len(text)
        end = len(text) if nxt >= len(text) else _stable_at_or_after(tok, text, nxt + tail)
        segments.append(_Segment(lo, len(text) if end is None else end))
    return segments


def _stable_at_or_after(tok: Tokenizer, text: str, at: int) -> int | None:
    """The first stable boundary ``p >= at`` with ``p < len(text)``, preferring a line start close by."""
    import numpy as np

    span = 1 << 12
    while at < len(text):
        piece = text[at - 1 : at + span] if at > 0 else text[: at + span]
        offset = at - 1 if at > 0 else 0
        mask = tok.stable_mask(piece)
        hits = np.flatnonzero(mask[1 : len(piece)]) + 1 + offset
        hits = hits[hits >= at]
        if len(hits):
            lines = [int(p) for p in hits if text[int(p) - 1] == "\n"]
            return lines[0] if lines else int(hits[0])
        at, span = at + span, span * 4
    return None


def _walk_segment(tok: Tokenizer, text: str, seg: _Segment, budget: int, overlap: int,
                  min_fill: float) -> list[tuple[int, int, int]]:
    """The greedy cut over one window, from its first character, in the text's offsets."""
    window = text[seg.lo : seg.end]
    ends = tok.token_ends(window)
    before, after = text[max(0, seg.lo - 3) : seg.lo], text[seg.end : seg.end + 1]
    pos, tix, level, stable = _window_candidates(tok, window, ends, before, after)
    complete = seg.end >= len(text)
    walk = _walk(tok, window, pos, tix, level, stable, len(ends), budget, overlap, min_fill, 0, complete=complete)
    return [(seg.lo + a, seg.lo + b, count) for a, b, count in walk]


def _join(chain: list[tuple[int, int, int]], walk: list[tuple[int, int, int]],
          lo: int) -> list[tuple[int, int, int]] | None:
    """``chain`` up to its first chunk start that ``walk`` shares at or after ``lo``, then ``walk``."""
    starts = {span[0]: i for i, span in enumerate(walk)}
    for j, span in enumerate(chain):
        if span[0] >= lo and span[0] in starts:
            return chain[:j] + walk[starts[span[0]] :]
    return None
