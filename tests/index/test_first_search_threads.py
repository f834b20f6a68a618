"""Threads whose first search of an index comes at once load its BM25 files once, and never fail.

Found by CI: four threads' first searches of one index (LlamaIndex ``aretrieve`` in event loops of
several threads) each loaded the BM25 postings; numpy parses a ``.npy`` header with ``ast.literal_eval``,
and CPython 3.11 can raise ``SystemError: AST constructor recursion depth mismatch`` when two threads
build ASTs at once (python/cpython#106905). Now one thread loads and the others wait for it, and every
``.npy`` header is parsed under one lock.
"""

from __future__ import annotations

import threading

import contextkit.index._snapshot as snapshot_module
from contextkit.index import Index
from contextkit.ingestion import ingest
from contextkit.retrievers import BM25Retriever


def test_sixteen_first_searches_at_once_load_bm25_once(tmp_path, peps, embedder, monkeypatch):
    ingest(peps[:6], tmp_path / "ix", embedder=embedder)
    loads: list[int] = []
    real = snapshot_module.saved_bm25

    def counted(*args, **kwargs):
        loads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot_module, "saved_bm25", counted)
    with Index.open(tmp_path / "ix", read_only=True) as index:
        retriever = BM25Retriever(index)
        barrier = threading.Barrier(16)
        results: dict[int, list[str]] = {}
        errors: list[BaseException] = []

        def search(n: int) -> None:
            try:
                barrier.wait()
                results[n] = [h.chunk.id for h in retriever.retrieve("type hints for a function's arguments", 5)]
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=search, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert errors == [] and len(results) == 16
    assert len({tuple(r) for r in results.values()}) == 1 and results[0]
    assert len(loads) == 1
