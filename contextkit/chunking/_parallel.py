"""One long text cut by several processes, into exactly the chunks of one.

Why it is exact. The text is split into segments at *stable* boundaries, where the
pre-tokenizer provably restarts (see :meth:`Tokenizer.stable_boundaries`): the tokens
of a segment are then exactly a slice of the whole text's tokens, so a segment can be
encoded on its own. A worker process (:mod:`contextkit.chunking._processes`) runs the
greedy cut over a segment plus a tail reaching into the next one, as if a chunk started
at the segment's first character; the walk stops, as the streaming chunker's windows
do, before any decision would look past the tail.

The cut is a chain: where a chunk starts decides where it ends and where the next one
starts. The true chain and a segment's speculative chain meet as soon as both start a
chunk at the same position: from there on they are the same chain, because every
decision depends only on the text ahead of that start. Chunk boundaries prefer
paragraphs and sentences, so chains meet within a chunk or two on prose.

Who does what. The calling process walks the true chain from the start of the text,
window by window (:func:`~contextkit.chunking._stream.stream_spans`); the workers take
segments from the end, one after another, never one the caller has reached. When the
caller's chain reaches a segment a worker has done and the two chains meet, the
caller takes the worker's chain from there, then the next segments' chains joined the
same way, to the end of the text. Where chains do not meet (a text with no boundary
better than a word) or a worker failed, the caller walks on itself from the last chunk
it knows to be true: the result is always the serial cut, only the time changes. So
the work balances itself: a worker still starting (the first call spawns them) or a
busy machine just leaves more of the text to the caller.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Literal, NamedTuple

from contextkit.chunking import _processes
from contextkit.chunking._stream import stable_mask, stream_spans
from contextkit.core.tokenizers import Tokenizer

__all__ = ["MIN_PARALLEL_CHARS", "split_parallel"]

#: Texts shorter than this are cut by one process: below it, workers cost more than they save.
MIN_PARALLEL_CHARS = 1 << 20
#: How far (in characters, at least) a segment's walk reaches into the next segment. On the PEPs
#: chains mostly meet within one tail, and within a few at worst: where they have not met by the
#: end of a tail, the caller walks on from there (a little serial work), which a longer tail
#: trades for more work in the workers.
TAIL_CHARS = 1 << 15
#: The smallest segment handed to a worker (characters).
SEGMENT_CHARS = 1 << 18
#: The windows the calling process encodes at a time on its own share (characters); a walk
#: resumed where two chains did not meet starts with smaller ones, as it usually needs little.
WINDOW_CHARS = 1 << 18
RESUME_CHARS = 1 << 15
#: The most characters one look for a stable boundary reads at a time (bounds its arrays on a text
#: with none for long: a run of ``=``).
SCAN_CHARS = 1 << 20
#: Segments handed out ahead, beyond one per worker: one spares a worker the wait for its next.
QUEUED = 1
#: Whether the caller waits for a worker's segment rather than walking it meanwhile. Off: a worker
#: slowed down (by its start, or a busy machine) then only leaves more of the text to the caller.
#: The tests turn it on, so that every worker's chain is joined (or found not to meet).
WAIT = False

Span = tuple[int, int, int]
#: A character ``str.isspace`` refuses (the same test, in place): whitespace-only chunks are dropped.
_NON_SPACE = re.compile(r"\S")


class _Segment(NamedTuple):
    lo: int  # where the segment (and its speculative chain) starts
    end: int  # where its window ends: a stable boundary past the next segment's start, or the text's end


def split_parallel(tok: Tokenizer, text: str, budget: int, overlap: int, min_fill: float,
                   workers: int) -> list[Span] | None:
    """``(start, end, tokens)`` of every chunk, as :func:`_greedy` gives them, or None.

    None means the text is not worth splitting (too short, one worker, a tokenizer a
    worker cannot rebuild or without stable boundaries): cut it in this process.
    """
    if workers <= 1 or len(text) < MIN_PARALLEL_CHARS or not _processes.can_share(tok):
        return None
    count = max(2, min(8 * workers, len(text) // SEGMENT_CHARS))
    segments = _segments(tok, text, count, tail=max(TAIL_CHARS, budget * 64))
    if len(segments) < 2:
        return None
    pool = _processes.text_pool(workers - 1, tok.name)
    cut = _Cut(tok, text, segments, pool, (budget, overlap, min_fill), depth=workers - 1 + QUEUED)
    spans = cut.run()
    return [span for span in spans if _NON_SPACE.search(text, span[0], span[1]) or span[0] == span[1]]


class _Cut:
    """One call's bookkeeping: segments claimed by the workers (from the end), their walks, the chain."""

    def __init__(self, tok: Tokenizer, text: str, segments: list[_Segment], pool: ProcessPoolExecutor,
                 settings: tuple[int, int, float], depth: int) -> None:
        self.tok, self.text, self.segments, self.pool = tok, text, segments, pool
        self.settings, self.depth, self.wait = settings, depth, WAIT
        self.los = [seg.lo for seg in segments]
        self.futures: dict[int, Future[list[Span]]] = {}
        self.running: deque[Future[list[Span]]] = deque()  # handed out, oldest first, maybe done
        self.walks: dict[int, list[Span] | None] = {}  # None: of no use (the worker failed)
        self.starts: dict[int, dict[int, int]] = {}  # a walk's chunk starts -> their index in it
        self.next_back = len(segments) - 1  # the next segment a worker may claim
        self.low = 0  # segments below this are joined or passed

    # ------------------------------------------------------------ workers
    def claim(self, here: int) -> None:
        """Hand workers segments from the end, never the caller's segment ``here`` or one before it;
        ``depth`` tasks at most in flight (one more than the workers: none waits for its next)."""
        running = self.running
        while running and running[0].done():  # a worker takes its segments in the order handed out
            running.popleft()
        while self.next_back > here and len(running) < self.depth:
            i = self.next_back
            seg = self.segments[i]
            args = (self.text[seg.lo : seg.end], seg.lo, self.text[max(0, seg.lo - 3) : seg.lo],
                    self.text[seg.end : seg.end + 1], seg.end >= len(self.text), *self.settings)
            try:
                self.futures[i] = future = self.pool.submit(_processes.walk_window, self.tok.name, *args)
            except RuntimeError:  # the pool broke or was shut down: the caller does the rest
                _processes.discard(self.pool)
                self.next_back = -1
                return
            self.next_back -= 1
            running.append(future)

    def walk(self, i: int) -> list[Span] | None | Literal[False]:
        """Segment ``i``'s chain: its spans, None if of no use, False if not done yet (unless ``wait``)."""
        if i in self.walks:
            return self.walks[i]
        future = self.futures.get(i)
        if future is None:  # never handed out (the pool broke first)
            self.walks[i] = None
            return None
        if not self.wait and not future.done():
            return False
        try:
            walk = self.walks[i] = future.result() or None
        except Exception:  # noqa: BLE001 - a dead worker (BrokenProcessPool) or a failed walk: cut it here
            _processes.discard(self.pool)
            walk = self.walks[i] = None
        self.starts[i] = {span[0]: k for k, span in enumerate(walk or ())}
        return walk

    # -------------------------------------------------------------- chain
    def run(self) -> list[Span]:
        chain: list[Span] = []
        start = 0
        self.claim(0)  # the workers start on the end now, not after this process's first window
        while True:
            joined = self.follow(self.stream_from(start), chain)
            if joined is None or self.join_rest(chain, joined):
                return chain
            start = chain.pop()[0]  # chains parted: walk on from the last chunk known to be true

    def follow(self, stream: Iterator[Span], chain: list[Span]) -> int | None:
        """Extend ``chain`` with the caller's spans until it meets a worker's chain (whose segment is
        returned, its spans joined) or the text ends (None). Never waits for a worker (unless ``wait``):
        a segment not done yet is walked here meanwhile, and its chain taken over if it comes in time."""
        for n, span in enumerate(stream):
            if n % 8 == 0:  # a look at the workers every few chunks is enough (one is queued ahead)
                self.claim(bisect.bisect_right(self.los, span[0]) - 1)
            t = max(self.next_back + 1, self.low)
            while t < len(self.segments) and span[0] >= self.los[t]:
                walk = self.walk(t)
                if walk and span[0] in self.starts[t]:
                    chain.extend(walk[self.starts[t][span[0]] :])
                    self.low = t + 1
                    return t
                if walk is None or (walk and span[0] > walk[-1][0]):
                    self.walks[t] = None  # past this walk's chunks: they cannot meet ours any more
                elif walk:
                    break  # not met yet: perhaps at one of the next spans
                t += 1  # not done (or of no use): a later segment may be
            chain.append(span)
        return None

    def join_rest(self, chain: list[Span], joined: int) -> bool:
        """Join the next segments' chains to ``chain`` (which ends with segment ``joined``'s);
        True when the chain reaches the end of the text."""
        i = joined
        while self.segments[i].end < len(self.text):
            i += 1
            walk = self.walk(i)
            if not walk or not _join_into(chain, walk, self.los[i]):
                return False  # not done, of no use or not met: the caller walks on from the chain's end
            self.low = i + 1
        return True

    def stream_from(self, start: int) -> Iterator[Span]:
        """The serial cut's spans from its chunk start ``start`` on, window by window (small windows,
        growing, where a walk resumes: it usually meets a worker's chain soon)."""
        base = _stable_at_or_before(self.tok, self.text, start)
        text, size = self.text, WINDOW_CHARS if start == 0 else RESUME_CHARS

        def blocks() -> Iterator[str]:
            at, step = base, size
            while at < len(text):
                yield text[at : at + step]
                at, step = at + step, min(WINDOW_CHARS, step * 2)

        budget, overlap, min_fill = self.settings
        spans = stream_spans(self.tok, blocks(), budget, overlap, min_fill, size,
                             first=start - base, before=text[max(0, base - 3) : base])
        for a, piece, count, _ in spans:
            yield base + a, base + a + len(piece), count


def _join_into(chain: list[Span], walk: list[Span], lo: int) -> bool:
    """Replace ``chain``'s spans from its first start at or after ``lo`` that ``walk`` shares by ``walk``'s."""
    starts = {span[0]: k for k, span in enumerate(walk)}
    for j in range(bisect.bisect_left(chain, lo, key=lambda span: span[0]), len(chain)):
        k = starts.get(chain[j][0])
        if k is not None:
            del chain[j:]
            chain.extend(walk[k:])
            return True
    return False


def _segments(tok: Tokenizer, text: str, count: int, tail: int) -> list[_Segment]:
    """About equal segments starting at stable boundaries, each window ending ``tail`` past the next start."""
    starts = [0]
    for k in range(1, count):
        # Within the segment's own share: a text with no stable boundary for long has fewer segments.
        at = _stable_at_or_after(tok, text, k * len(text) // count, limit=len(text) // count)
        if at is None or at <= starts[-1]:
            continue
        starts.append(at)
    segments = []
    for i, lo in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else len(text)
        end = len(text) if nxt >= len(text) else _stable_at_or_after(tok, text, nxt + tail)
        segments.append(_Segment(lo, len(text) if end is None else end))
    return segments


def _stable_at_or_after(tok: Tokenizer, text: str, at: int, limit: int | None = None) -> int | None:
    """The first stable boundary ``p >= at`` with ``p < len(text)``, preferring a line start close by;
    with ``limit``, None when there is none in the next ``limit`` characters or so (the scan stops there)."""
    import numpy as np

    span = 1 << 12
    stop = len(text) if limit is None else min(len(text), at + limit)
    while at < stop:
        piece = text[at - 1 : at + span] if at > 0 else text[: at + span]
        offset = at - 1 if at > 0 else 0
        mask = stable_mask(tok, piece)
        hits = np.flatnonzero(mask[1 : len(piece)]) + 1 + offset
        hits = hits[hits >= at]
        if len(hits):
            lines = [int(p) for p in hits if text[int(p) - 1] == "\n"]
            return lines[0] if lines else int(hits[0])
        at, span = at + span, min(span * 4, SCAN_CHARS)
    return None


def _stable_at_or_before(tok: Tokenizer, text: str, at: int) -> int:
    """The last stable boundary ``p <= at`` (0, the start of the text, at worst): a walk may resume there."""
    import numpy as np

    span = 1 << 12
    while at > 0:
        lo = max(1, at - span)
        piece = text[lo - 1 : at + 1]  # the mask at p looks at text[p - 1] and text[p]
        hits = np.flatnonzero(stable_mask(tok, piece)[1 : len(piece)])
        hits = hits[hits + lo <= at]
        if len(hits):
            return lo + int(hits[-1])
        if lo == 1:
            return 0
        at, span = lo - 1, min(span * 4, SCAN_CHARS)  # positions lo..at have none: look before them
    return 0
