"""Saving a small change to an ``ivfpq`` or ``hnsw`` index: changes kept, against rebuilding the structure.

Why: an IVF-PQ build of N vectors costs a pass over all of them (assign to lists, PQ-encode,
write the float16 rows), an HNSW graph inserting every vector again; before, adding or
removing one file paid that at every save. Now ``ivfpq`` keeps small changes beside its
build (added chunks searched exactly, removed rowids skipped), and ``hnsw`` adds to its graph
in place and skips removed rowids; both rebuild only past a tenth of the structure.

Workload: an ``Index(index_type=--kind)`` of ``--n`` embedding-like 384-d vectors (a mixture
of 64 directions plus noise, as in ``tests/index/test_index.py``) in documents of 100 chunks, built
and saved once. Then, on two copies of that folder, the same change: one document removed
and ``--add`` new documents of 100 chunks added, then ``save()``:

* ``kept`` the library's default;
* ``rebuilt`` the previous behaviour, forced with ``index._vectors.rebuild_ivfpq(fold=False)`` (ivfpq)
  or ``index._vectors.rebuild()`` (hnsw).

Printed: seconds to bring the vectors up to date and of the whole save (which also rebuilds
BM25 over every text, whatever the change), their ratios, bytes written to the folder, and
Recall@10 of 200 queries against exact search over the vectors after the change (half of
the queries near the added vectors). Run: ``python bench/bench_index_update.py [--kind ivfpq|hnsw] [--n 100000] [--add 2]``.
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
from contextkit.records import Chunk  # noqa: E402

DOC = 100  # chunks a document


def add_doc(index: Index, doc_id: str, vecs: np.ndarray) -> None:
    chunks = [Chunk(id=f"{doc_id}::{i}", doc_id=doc_id, ordinal=i, text=f"t{i:05d}", start=6 * i, end=6 * i + 6,
                    token_count=1) for i in range(len(vecs))]
    index.begin()
    index.store.put_document(doc_id, doc_id, doc_id, "sha", 10, {})
    index.add_chunks(chunks, vecs, [f"{doc_id}-{i}" for i in range(len(vecs))])
    index.commit()


def folder_bytes(path: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir() if p.is_file()}


def change_and_save(path: Path, new: np.ndarray, fold: bool, kind: str) -> tuple[float, float, int]:
    """Seconds from the change to vectors up to date (the change's store writes included), seconds
    to the end of the save (that + writing every derived file: the vector files, BM25 rebuilt
    over all texts, the manifest), bytes written."""
    before = folder_bytes(path)
    with Index.open(path) as index:
        if not fold and kind == "hnsw":
            index._vectors.rebuild_needed = True  # the previous behaviour: the graph rebuilt at the next save
        t0 = time.perf_counter()  # the change itself (store writes, in-place adds) counts on both sides
        index.delete("d0")
        for j in range(0, len(new), DOC):
            add_doc(index, f"new{j // DOC}", new[j: j + DOC])
        if kind == "ivfpq":
            index._vectors.rebuild_ivfpq(fold=fold)  # fold=False: the previous behaviour, every change re-encoded
        elif index._vectors.rebuild_needed:
            index._vectors.rebuild()
        vectors = time.perf_counter() - t0
        index.save()
        seconds = time.perf_counter() - t0
    after = folder_bytes(path)
    written = sum(size for name, (size, mtime) in after.items()
                  if name != "store.sqlite" and before.get(name) != (size, mtime))
    return vectors, seconds, written


def recall(path: Path, queries: np.ndarray, exact: list[set[str]]) -> float:
    with Index.open(path, read_only=True) as index:
        hits = index.search(queries, 10)
    return float(np.mean([len({h.chunk.id for h in got} & want) / 10 for got, want in zip(hits, exact)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="vectors in the build (multiple of 100)")
    ap.add_argument("--add", type=int, default=2, help="documents of 100 chunks added by the change")
    ap.add_argument("--kind", choices=["ivfpq", "hnsw"], default="ivfpq")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    vecs = clustered(rng, args.n)
    new = clustered(rng, args.add * DOC)
    work = Path(tempfile.mkdtemp(prefix="ck-ivfpq-update-"))
    try:
        base = work / "base.ck-index"
        t0 = time.perf_counter()
        with Index.create(base, model="m", dim=384, index_type=args.kind) as index:
            for j in range(0, args.n, DOC):
                add_doc(index, f"d{j // DOC}", vecs[j: j + DOC])
            index.save()
        print(f"build: {args.n:,} vectors, {args.kind}, {time.perf_counter() - t0:.1f} s")
        kept = vecs[DOC:]  # d0 removed
        kept_ids = [f"d{j // DOC}::{j % DOC}" for j in range(DOC, args.n)]
        all_vecs = np.concatenate([kept, new])
        all_ids = kept_ids + [f"new{j // DOC}::{j % DOC}" for j in range(len(new))]
        queries = np.concatenate([new[rng.integers(0, len(new), 100)] + 0.02 * rng.standard_normal((100, 384)),
                                  clustered(rng, 100)]).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        top = np.argsort(-(queries @ all_vecs.T), axis=1)[:, :10]
        exact = [{all_ids[i] for i in row} for row in top]
        rows = []
        for name, fold in (("kept", True), ("rebuilt", False)):
            path = work / f"{name.replace(' ', '-')}.ck-index"
            shutil.copytree(base, path)
            vectors, seconds, written = change_and_save(path, new, fold, args.kind)
            rows.append((name, vectors, seconds, written, recall(path, queries, exact)))
        print(f"change: 1 document of {DOC} chunks removed, {args.add} of {DOC} added, then save()")
        print(f"{'vectors':>12}  {'vector s':>8}  {'save s':>7}  {'MB written':>10}  {'Recall@10':>9}")
        for name, vectors, seconds, written, rec in rows:
            print(f"{name:>12}  {vectors:8.2f}  {seconds:7.2f}  {written / 1e6:10.1f}  {rec:9.3f}")
        (_, v_kept, s_kept, _, _), (_, v_full, s_full, _, _) = rows
        print(f"kept / rebuilt: vectors {v_kept / v_full:.3f}x the time ({v_full / v_kept:.1f}x faster); "
              f"whole save {s_kept / s_full:.3f}x (the rest is BM25, rebuilt over every text at each save)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
