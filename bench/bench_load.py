"""Many threads on one opened index: every answer equal to the single-threaded one, and latency.

One ``Index`` is opened read-only and shared, with one retriever of each kind and one
``ContextAssembler`` over it (the way a service holds them). A seeded list of requests
mixes dense, BM25 and hybrid searches with search + assemble (instructions, a short
history, a 1,500-token budget). The list runs twice: on one thread (the baseline, and
the reference answers) and on ``--threads`` threads. Every threaded answer is compared
with the reference for the same request: search results must have the same chunk ids
in the same order and scores within ``--atol``; prompts must be the same string.

Prints requests served, errors, mismatches, p50/p95/p99 latency per kind on both runs,
throughput, and the ratio threaded / single-threaded. Exit status 1 on any error or
mismatch. Queries are word windows drawn from the index's own chunks (seeded), or the
``text`` of a BEIR ``queries.jsonl`` given with ``--queries``.

Run: ``python bench/bench_load.py --index /tmp/scifact.ck-index`` (10,000 requests, 8
threads); without ``--index`` a small index of the first ``--peps`` PEPs is built in a
temporary folder first. ``--requests 300`` is the fast version; the test suite runs one
(tests/test_load.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"
KINDS = ("hybrid", "dense", "bm25", "assemble")
INSTRUCTIONS = "Answer from the documents only and cite their ids. Say so when they do not answer."
HISTORY = [
    {"role": "user", "content": "I am reading about this topic for a review."},
    {"role": "assistant", "content": "Good. Ask a question and I will answer from the documents."},
    {"role": "user", "content": "Keep the answers short, please."},
]


@dataclass(frozen=True)
class Request:
    kind: str
    query: str


@dataclass
class Outcome:
    """One answer: search hits as (chunk id, score), or a prompt; or the error."""

    hits: list[tuple[str, float]] | None = None
    prompt: str | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class RunStats:
    threads: int
    wall_s: float
    outcomes: list[Outcome] = field(default_factory=list)


def build_small_index(folder: Path, peps: int, embedder: Any) -> Path:
    """An index of the first ``peps`` PEP files (chunk size 256, overlap 32)."""
    from contextkit.ingestion import ingest

    files = sorted(PEPS.glob("*.rst"))[:peps]
    if not files:
        raise SystemExit(f"no PEPs under {PEPS}; give --index")
    src = folder / "peps"
    src.mkdir(parents=True, exist_ok=True)
    for f in files:
        (src / f.name).write_bytes(f.read_bytes())
    ingest([src], folder / "ix", embedder=embedder, chunk_size=256, chunk_overlap=32)
    return folder / "ix"


def make_requests(index: Any, n: int, seed: int = 0, queries_file: Path | None = None) -> list[Request]:
    """``n`` requests, kinds in turn, each with its own query (seeded)."""
    rng = random.Random(seed)
    if queries_file is not None:
        pool = [json.loads(line)["text"] for line in queries_file.read_text(encoding="utf-8").splitlines()
                if line.strip()]
    else:
        texts = [t for _, batch in index.store.iter_chunk_texts() for t in batch]
        pool = []
        for _ in range(max(n, 1)):
            words = rng.choice(texts).split()
            length = rng.randint(3, 12)
            lo = rng.randint(0, max(0, len(words) - length))
            pool.append(" ".join(words[lo:lo + length]) or "python")
    return [Request(KINDS[i % len(KINDS)], pool[i % len(pool)]) for i in range(n)]


class Server:
    """What a service holds: one index, one retriever per kind and one assembler, shared by all threads."""

    def __init__(self, index: Any, embedder: Any, k: int = 10, budget: int = 1500) -> None:
        from contextkit.assembly.context_assembler import ContextAssembler
        from contextkit.retrievers import BM25Retriever, DenseRetriever, HybridRetriever

        self.k = k
        self.retrievers = {"dense": DenseRetriever(index, embedder), "bm25": BM25Retriever(index),
                           "hybrid": HybridRetriever(index, embedder)}
        self.assembler = ContextAssembler(budget, retriever=self.retrievers["hybrid"])

    def serve(self, request: Request) -> Outcome:
        started = time.perf_counter()
        try:
            if request.kind == "assemble":
                prompt, report = self.assembler.assemble(request.query, instructions=INSTRUCTIONS, history=HISTORY)
                report.summary()  # what a service logs
                out = Outcome(prompt=prompt)
            else:
                hits = self.retrievers[request.kind].retrieve(request.query, self.k)
                out = Outcome(hits=[(h.chunk.id, h.score) for h in hits])
        except Exception as exc:  # noqa: BLE001 - counted and shown, the run goes on
            out = Outcome(error=f"{type(exc).__name__}: {exc}")
        out.seconds = time.perf_counter() - started
        return out


def run(server: Server, requests: list[Request], threads: int) -> RunStats:
    started = time.perf_counter()
    if threads <= 1:
        outcomes = [server.serve(r) for r in requests]
    else:
        with ThreadPoolExecutor(threads, thread_name_prefix="load") as pool:
            outcomes = list(pool.map(server.serve, requests))
    return RunStats(threads, time.perf_counter() - started, outcomes)


def differs(a: Outcome, b: Outcome, atol: float) -> str | None:
    """Why ``b`` is not the same answer as ``a`` (None when it is)."""
    if a.error or b.error:
        return None if a.error == b.error else f"error {a.error!r} vs {b.error!r}"
    if a.prompt is not None or b.prompt is not None:
        if a.prompt == b.prompt:
            return None
        at = next((i for i, (x, y) in enumerate(zip(a.prompt or "", b.prompt or "")) if x != y),
                  min(len(a.prompt or ""), len(b.prompt or "")))
        return f"prompts differ from character {at}"
    ids_a, ids_b = [i for i, _ in a.hits or []], [i for i, _ in b.hits or []]
    if ids_a != ids_b:
        return f"ids {ids_a[:4]}... vs {ids_b[:4]}..."
    worst = max((abs(x - y) for (_, x), (_, y) in zip(a.hits or [], b.hits or [])), default=0.0)
    return None if worst <= atol else f"scores differ by {worst:.2e}"


def compare(reference: list[Outcome], other: list[Outcome], atol: float = 1e-5) -> list[tuple[int, str]]:
    """``(request number, why)`` for every answer that differs from the reference."""
    return [(i, why) for i, (a, b) in enumerate(zip(reference, other)) if (why := differs(a, b, atol))]


def latency_table(requests: list[Request], stats: RunStats) -> dict[str, dict[str, float]]:
    table = {}
    for kind in (*KINDS, "all"):
        ms = np.array([o.seconds * 1e3 for r, o in zip(requests, stats.outcomes) if kind in ("all", r.kind)])
        if len(ms):
            table[kind] = {"n": len(ms), "p50_ms": float(np.percentile(ms, 50)),
                           "p95_ms": float(np.percentile(ms, 95)), "p99_ms": float(np.percentile(ms, 99))}
    return table


def load_test(index_dir: Path, embedder: Any, requests: int, threads: int, seed: int = 0, k: int = 10,
              budget: int = 1500, atol: float = 1e-5, queries_file: Path | None = None) -> dict[str, Any]:
    """The whole benchmark as a function (the test suite calls it with a few hundred requests)."""
    from contextkit.index import Index

    with Index.open(index_dir, read_only=True) as index:
        server = Server(index, embedder, k=k, budget=budget)
        todo = make_requests(index, requests, seed, queries_file)
        for r in todo[: len(KINDS)]:  # warm-up: model, FAISS, BM25, tokenizers loaded outside the clocks
            server.serve(r)
        alone = run(server, todo, 1)
        together = run(server, todo, threads)
        threads_seen = {t.name for t in threading.enumerate()}
    mismatches = compare(alone.outcomes, together.outcomes, atol)
    errors = [(i, o.error) for i, o in enumerate(together.outcomes) if o.error]
    errors += [(i, o.error) for i, o in enumerate(alone.outcomes) if o.error]
    return {
        "index": str(index_dir), "requests": len(todo), "threads": threads,
        "served": sum(o.error is None for o in together.outcomes),
        "errors": len(errors), "error_examples": [f"#{i}: {e}" for i, e in errors[:5]],
        "mismatches": len(mismatches), "mismatch_examples": [f"#{i}: {w}" for i, w in mismatches[:5]],
        "kinds": {kind: sum(r.kind == kind for r in todo) for kind in KINDS},
        "single": {"wall_s": alone.wall_s, "rps": len(todo) / alone.wall_s, "latency": latency_table(todo, alone)},
        "threaded": {"wall_s": together.wall_s, "rps": len(todo) / together.wall_s,
                     "latency": latency_table(todo, together)},
        "throughput_ratio": alone.wall_s / together.wall_s,
        "threads_alive_after": len(threads_seen),
    }


def print_result(res: dict[str, Any]) -> None:
    print(f"\nindex {res['index']}: {res['requests']:,} requests ({', '.join(f'{k} {v:,}' for k, v in res['kinds'].items())})")
    print(f"served under load: {res['served']:,} of {res['requests']:,} on {res['threads']} threads; "
          f"errors {res['errors']}, answers different from the single-threaded run {res['mismatches']}")
    for line in res["error_examples"] + res["mismatch_examples"]:
        print("   ", line)
    print(f"\n{'kind':<10}{'n':>7} | {'1 thread p50':>13}{'p95':>9}{'p99':>9} | "
          f"{res['threads']} threads p50{'p95':>9}{'p99':>9}   (ms)")
    for kind, one in res["single"]["latency"].items():
        many = res["threaded"]["latency"][kind]
        print(f"{kind:<10}{one['n']:>7,} | {one['p50_ms']:>13.1f}{one['p95_ms']:>9.1f}{one['p99_ms']:>9.1f} | "
              f"{many['p50_ms']:>13.1f}{many['p95_ms']:>9.1f}{many['p99_ms']:>9.1f}")
    print(f"\nthroughput: 1 thread {res['single']['rps']:,.1f} req/s ({res['single']['wall_s']:.1f} s), "
          f"{res['threads']} threads {res['threaded']['rps']:,.1f} req/s ({res['threaded']['wall_s']:.1f} s); "
          f"ratio {res['throughput_ratio']:.2f}x on {os.cpu_count()} CPUs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, help="an index folder (default: build one from the first --peps PEPs)")
    ap.add_argument("--peps", type=int, default=40, help="PEP files for the default index")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--budget", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--atol", type=float, default=1e-5, help="largest score difference taken as equal")
    ap.add_argument("--queries", type=Path, help="a BEIR queries.jsonl to draw queries from")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args()

    from contextkit.embedders import Embedder

    embedder = Embedder()
    _ = embedder.dim  # the model loads here, before any clock
    with tempfile.TemporaryDirectory(prefix="ck-load-") as tmp:
        index_dir = args.index
        if index_dir is None:
            t0 = time.perf_counter()
            index_dir = build_small_index(Path(tmp), args.peps, embedder)
            print(f"built {index_dir} from {args.peps} PEPs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        res = load_test(index_dir, embedder, args.requests, args.threads, args.seed, args.k, args.budget,
                        args.atol, args.queries)
    res["backend"] = embedder.active_backend
    print_result(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    sys.exit(1 if res["errors"] or res["mismatches"] else 0)


if __name__ == "__main__":
    main()
