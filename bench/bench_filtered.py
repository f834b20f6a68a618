"""Filtered dense search: Recall@10 and latency per index type, the library against a plain FAISS selector.

Why: an approximate index (HNSW, IVF, IVF-PQ) visits about as many vectors with a filter as
without, so a selective filter leaves it few of the allowed chunks to return. The library
(``Index.nearest_rowids``) scores filters of up to 4,096 chunks exactly over their vectors
and widens the search for wider ones; the peer is what it did before, and what a FAISS user
writes: ``SearchParameters(sel=IDSelectorBatch(allowed))`` on the index as it is.

Workload: ``--n`` embedding-like 384-d vectors (a mixture of 64 directions plus noise, as in
``tests/index/test_index.py``), one index per type, 50 queries, allowed sets drawn at random at
each ``--shares`` value; Recall@10 against exact search over the allowed vectors.
Run: ``python bench/bench_filtered.py [--n 20000]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _synthetic import clustered  # noqa: E402

from contextkit.index import Index  # noqa: E402
from contextkit.index._faiss_kinds import search_faiss  # noqa: E402
from contextkit.records import Chunk  # noqa: E402


def build(path: Path, kind: str, vecs: np.ndarray) -> None:
    chunks = [Chunk(id=f"a::{i}", doc_id="a", ordinal=i, text=f"t{i:07d}", start=8 * i, end=8 * i + 8,
                    token_count=1) for i in range(len(vecs))]
    with Index.create(path, model="m", dim=vecs.shape[1], index_type=kind) as index:
        index.begin()
        index.store.put_document("a", "a", "a", "sha", 10, {})
        index.add_chunks(chunks, vecs, [f"a-{i}" for i in range(len(vecs))])
        index.commit()


def plain_selector(index: Index, query: np.ndarray, allowed: np.ndarray) -> set[int]:
    """The peer: FAISS's selector on the index as built (raises on IVF, which wants SearchParametersIVF)."""
    import faiss

    params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
    _, ids = search_faiss(index._faiss, query.reshape(1, -1), 10, params)
    return {int(i) for i in ids[0] if i >= 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--shares", type=float, nargs="+", default=[0.005, 0.02, 0.1, 0.25, 0.5])
    ap.add_argument("--kinds", nargs="+", default=["flat", "hnsw", "ivf", "ivfpq"])
    args = ap.parse_args()
    vecs = clustered(np.random.default_rng(1), args.n)
    queries = clustered(np.random.default_rng(2), 50)
    work = Path(tempfile.mkdtemp(prefix="ck-filtered-"))
    print(f"{args.n:,} vectors, 50 queries; Recall@10 against exact search over the allowed chunks")
    print(f"{'index':>6}  {'allowed':>14}  {'library':>8}  {'ms':>6}  {'selector':>8}  {'ms':>6}")
    try:
        for kind in args.kinds:
            build(work / kind, kind, vecs)
            with Index.open(work / kind, read_only=True) as index:
                rowids = np.asarray([r[0] for r in index.store.db.execute("SELECT rowid FROM chunks ORDER BY rowid")])
                for share in args.shares:
                    allowed = np.sort(np.random.default_rng(3).choice(rowids, int(args.n * share), replace=False))
                    exact = np.argsort(-(queries @ vecs[np.searchsorted(rowids, allowed)].T), axis=1)[:, :10]
                    want = [set(allowed[row].tolist()) for row in exact]
                    t0 = time.perf_counter()
                    ours = [{r for r, _ in index.nearest_rowids(q, 10, allowed)} for q in queries]
                    ours_ms = (time.perf_counter() - t0) / len(queries) * 1000
                    ours_recall = np.mean([len(g & w) / 10 for g, w in zip(ours, want)])
                    try:
                        t0 = time.perf_counter()
                        peer = [plain_selector(index, q, allowed) for q in queries]
                        peer_ms = (time.perf_counter() - t0) / len(queries) * 1000
                        peer_cell = f"{np.mean([len(g & w) / 10 for g, w in zip(peer, want)]):8.3f}  {peer_ms:6.2f}"
                    except RuntimeError as exc:
                        peer_cell = f"{'error':>8}  {'':>6}  ({str(exc).splitlines()[0][:40]}...)"
                    print(f"{kind:>6}  {share:6.1%} ({len(allowed):5d})  {ours_recall:8.3f}  {ours_ms:6.2f}  {peer_cell}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
