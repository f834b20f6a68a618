"""The worker processes that cut segments of one long text for :mod:`contextkit.chunking._parallel`.

Why processes: the cut of a segment (tiktoken's ``encode_to_numpy``, the candidate
arrays, the greedy walk) holds the GIL, so threads run it one at a time. Why one
pool per process, shared by every chunker: a worker needs nothing but the tokenizer's
name (sent with each task), so a chunker built for one call (a request, a benchmark
repeat) finds the workers already started. Workers are *spawned*, never forked (a fork
is unsafe once torch has started threads), and kept until the interpreter exits or
:func:`shutdown` is called; the first call pays their start-up, which the calling
process overlaps with its own share of the text. A worker receives only its window
of the text and returns only ``(start, end, tokens)`` spans.

No future is ever cancelled: Python 3.11's pool marks the futures of a broken pool failed
without looking, and one already cancelled kills its manager thread (the interpreter then
hangs at exit). A segment nobody needs any more is just cut, in a worker that is idle anyway.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from contextkit.core.tokenizers import (
    _STABLE_ENCODINGS,
    TiktokenTokenizer,
    Tokenizer,
    get_tokenizer,
)

__all__ = ["can_share", "shutdown", "text_pool", "walk_window", "warm_up"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_size = 0
_pings: list[Future[Any]] = []
_tokenizers: dict[str, Tokenizer] = {}  # in a worker: the tokenizers it has loaded, by name
_failed = False  # workers died before any came up: not tried again in this process


def can_share(tok: Tokenizer) -> bool:
    """Whether a worker rebuilds exactly ``tok`` from its name (a tiktoken encoding with stable boundaries)."""
    # By name, not by asking for a mask: that imports numpy, which start_workers() would then
    # pay before the spawn rather than while the workers boot.
    return not _failed and type(tok) is TiktokenTokenizer and tok.name in _STABLE_ENCODINGS


def text_pool(size: int, tokenizer: str) -> ProcessPoolExecutor:
    """The shared pool of ``size`` processes, started now if need be.

    Starting returns at once: the workers boot (interpreter, imports, ``tokenizer``)
    while the caller works. A pool of another size is replaced.
    """
    global _pool, _size, _pings
    with _lock:
        if _pool is not None and _size != size:
            _pool.shutdown(wait=False)
            _pool = None
        if _pool is None:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            _pool = ProcessPoolExecutor(size, mp_context=ctx, initializer=_load, initargs=(tokenizer,))
            _stop_at_exit_once()
            _size = size
            _pings = [_pool.submit(_ping) for _ in range(size)]  # one per worker: each submit starts one
        return _pool


def warm_up(size: int, tokenizer: str, timeout: float | None = None) -> bool:
    """Start the shared pool and wait (up to ``timeout`` seconds) until its workers are up."""
    from concurrent.futures import wait

    text_pool(size, tokenizer)
    done, _ = wait(list(_pings), timeout=timeout)
    return len(done) == len(_pings)


def discard(pool: ProcessPoolExecutor) -> None:
    """Forget ``pool`` if it is the shared one (it broke: a worker died); the next call starts another.

    Unless none of its workers ever came up: a spawned worker imports the main module
    again, and one that starts work at import (no ``if __name__ == "__main__":``) kills
    every worker, so this process then cuts long texts alone, with one warning."""
    global _pool, _failed
    with _lock:
        if _pool is pool:
            if not any(map(_up, _pings)):
                _failed = True
                log.warning("chunking worker processes could not start (does the main module start work "
                            "outside `if __name__ == '__main__':`?); long texts are cut in this process")
            _pool.shutdown(wait=False)
            _pool = None


def shutdown() -> None:
    """Stop the shared workers (they are otherwise kept until the interpreter exits)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=True)
            _pool = None


_exit_hook = False


def _stop_at_exit_once() -> None:
    """At exit, stop the workers first: one may still be cutting a segment the caller finished
    itself, and the interpreter would wait for it. (Registered where the pool's own exit hook is,
    to run before it: threading's exit hooks, which run before atexit's, in reverse order.)"""
    global _exit_hook
    if not _exit_hook:
        # A private hook of CPython's (3.9 on, where concurrent.futures registers its own); without
        # it, atexit's runs after the pool's join: exit then waits for a segment in flight, no more.
        register = getattr(threading, "_register_atexit", None)
        if register is None:  # pragma: no cover - every CPython we support has it
            import atexit

            register = atexit.register
        register(_stop_workers)
        _exit_hook = True


def _stop_workers() -> None:
    pool = _pool
    if pool is not None:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()


def _load(tokenizer: str) -> None:
    """Worker start-up: the imports and the encoding a first task needs, ahead of it; and a watch on
    the parent, since a pool's worker outlives a parent that was killed (it waits for work forever)."""
    import os

    import numpy  # noqa: F401

    import contextkit.chunking._stream  # noqa: F401

    parent = os.getppid()

    def watch() -> None:
        import time

        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="contextkit-parent-watch", daemon=True).start()
    _tokenizer(tokenizer)


def _ping() -> bool:
    return True


def _up(ping: Future[Any]) -> bool:
    return ping.done() and not ping.cancelled() and ping.exception() is None


def _tokenizer(name: str) -> Tokenizer:
    tok = _tokenizers.get(name)
    if tok is None:
        tok = _tokenizers[name] = get_tokenizer(name)
    return tok


def walk_window(name: str, window: str, lo: int, before: str, after: str, complete: bool, budget: int,
                overlap: int, min_fill: float) -> list[tuple[int, int, int]]:
    """The greedy cut of ``window`` (the text from ``lo``) as if a chunk started at its first character.

    ``before`` (up to three characters) and ``after`` (one) are its neighbours in the
    text; ``complete`` says the window ends the text. Offsets returned are the text's.
    The walk stops before any decision that would look past the window's end.
    """
    from contextkit.chunking._cuts import CutRule, _walk
    from contextkit.chunking._stream import _window_candidates

    tok = _tokenizer(name)
    ends = tok.token_ends(window)
    cands = _window_candidates(tok, window, ends, before, after)
    walk = _walk(tok, window, cands, len(ends), CutRule(budget, overlap, min_fill), 0, complete=complete)
    return [(lo + a, lo + b, count) for a, b, count in walk]
