"""Short versions of bench/bench_load.py and bench/bench_memory.py on a small real index.

Many threads share one opened index: every answer must equal the single-threaded one.
Many assemblies in one process: memory must not grow by anything like a prompt per call.
The long runs (10,000 requests, 10,000 assemblies) are ``python bench/bench_load.py`` and
``python bench/bench_memory.py``; performance itself is never asserted here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench(name: str):
    if name not in sys.modules:
        sys.path.insert(0, str(BENCH))  # bench_memory imports bench_load
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def pep_index(tmp_path_factory, peps, embedder) -> Path:
    """12 PEPs cut to 3,000 characters, chunks of 128 tokens: ~100 chunks, quick to embed."""
    from contextkit.ingestion import ingest

    folder = tmp_path_factory.mktemp("load") / "peps"
    folder.mkdir()
    for path in peps[:12]:
        (folder / path.name).write_text(path.read_text(encoding="utf-8")[:3000], encoding="utf-8")
    ingest([folder], folder.parent / "ix", embedder=embedder, chunk_size=128, chunk_overlap=16)
    return folder.parent / "ix"


def test_eight_threads_answer_like_one(pep_index, embedder):
    load = _bench("bench_load")
    res = load.load_test(pep_index, embedder, requests=300, threads=8)
    assert res["errors"] == 0, res["error_examples"]
    assert res["mismatches"] == 0, res["mismatch_examples"]
    assert res["served"] == 300 and all(n == 75 for n in res["kinds"].values())


def test_the_comparison_sees_every_kind_of_difference():
    load = _bench("bench_load")
    a = load.Outcome(hits=[("c1", 0.9), ("c2", 0.8)])
    assert load.differs(a, load.Outcome(hits=[("c1", 0.9), ("c2", 0.8 + 1e-7)]), 1e-5) is None
    assert "ids" in load.differs(a, load.Outcome(hits=[("c2", 0.8), ("c1", 0.9)]), 1e-5)
    assert "scores" in load.differs(a, load.Outcome(hits=[("c1", 0.9), ("c2", 0.7)]), 1e-5)
    assert "character 3" in load.differs(load.Outcome(prompt="<a>x"), load.Outcome(prompt="<a>y"), 1e-5)
    assert "error" in load.differs(a, load.Outcome(error="RuntimeError: Already borrowed"), 1e-5)


def test_memory_stays_flat_over_many_assemblies(pep_index, embedder):
    pytest.importorskip("psutil", reason="psutil reads the RSS (comes with the dev tools; pip install psutil)")
    mem = _bench("bench_memory")
    n, warmup = 500, 150
    res = mem.memory_curve(pep_index, embedder, n=n, warmup=warmup, every=50, budget=4_000)
    assert res["errors"] == 0, res["error_examples"]
    # A leak of one prompt per call grows by about n prompts (checked with --leak: the slope is
    # then ~1 byte per character); a quarter of that is the bound, far above the noise (~0 MB).
    leak = n * res["mean_prompt_chars"]
    grown = res["samples"][-1][1] - dict(res["samples"])[warmup]
    print(f"RSS growth {grown / 1e6:+.2f} MB, slope {res['slope_bytes_per_assembly']:+.0f} B per assembly, "
          f"prompt {res['mean_prompt_chars']:.0f} chars")
    assert grown < 0.25 * leak, res["samples"]
    assert res["slope_bytes_per_assembly"] < 0.25 * res["mean_prompt_chars"], res["samples"]
def test_short_lived_threads_leave_no_connections_behind(pep_index):
    import threading

    from contextkit.index import Index
    from contextkit.retrievers import BM25Retriever

    me = pytest.importorskip("psutil", reason="psutil counts open files (pip install psutil)").Process()
    with Index.open(pep_index, read_only=True) as index:
        retriever = BM25Retriever(index)
        retriever.retrieve("python", 3)
        before = me.num_fds()
        for i in range(60):  # what ThreadingHTTPServer or a threaded dev server does: a thread per request
            thread = threading.Thread(target=retriever.retrieve, args=(f"import statement {i}", 3))
            thread.start()
            thread.join()
        assert me.num_fds() - before < 10
