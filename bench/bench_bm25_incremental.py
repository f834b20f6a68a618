"""Saving a change of 100 of 100,000 chunks: BM25 kept as postings, against rebuilding it over every text.

Why: until issue 22 every save rebuilt BM25 (bm25s) over all chunk texts, tokenising each one
again, whatever the change. Now BM25 keeps term counts in a base segment and small delta
segments: a save tokenises the changed chunks only, writes their delta and hard-links the rest,
and queries compute the scores from the counts, bit for bit those of bm25s.

Workload: ``--n`` chunks of real text (paragraph windows of 40-140 words cut from the PEPs in
``shared/data/python_peps``; random words when they are absent) with embedding-like 384-d vectors
(no model: vectors go straight into the ``Index`` API, as in ``bench_index_update.py``), in
documents of 100 chunks, built and saved once. The change: one document's 100 chunks replaced by
100 new ones (``upsert``), then ``save()``, on a fresh copy of the folder each time, best of
``--repeat``:

* ``today``: the code before postings (commit ``--baseline``, default the last one before them,
  read by ``git archive`` into a temporary folder and run in a child process), which rebuilds
  BM25 over every text at each save;
* ``incremental``: this tree.

Printed: seconds of each save and its parts (BM25: load of the saved one, tokenising, matrix or
delta, writing; FAISS writing; the rest: store, manifest, cleanup), the ratio, bytes written,
the cost of the merges the policy runs now and then, and a check on ``--queries`` queries that
the incremental index's scores equal those of bm25s built afresh over the same chunks (bitwise,
and the same top 10). Run: ``python bench/bench_bm25_incremental.py [--n 100000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PEPS = ROOT.parent / "shared" / "data" / "python_peps" / "peps"
BASELINE = "ecaf4fe"  # the last commit whose saves rebuilt BM25 over every text
DOC = 100
PARTS: dict[str, float] = {}



def _top10(scores):
    return np.argsort(-scores, kind="stable")[:10].tolist()

def texts(n: int, seed: int) -> list[str]:
    """``n`` chunk texts: windows of 40-140 words over the PEPs (random words without them)."""
    rng = np.random.default_rng(seed)
    words: list[str] = []
    for path in sorted(PEPS.glob("*.rst"))[:400]:
        words += re.findall(r"\S+", path.read_text(errors="replace"))
    if not words:
        words = [f"w{int(i)}" for i in rng.zipf(1.3, 200_000) % 50_000]
    pool = np.array(words, dtype=object)
    starts, lens = rng.integers(0, len(pool) - 200, n), rng.integers(40, 140, n)
    return [" ".join(pool[s: s + k]) for s, k in zip(starts, lens)]


def timed(owner: object, name: str, label: str) -> None:
    """Wrap ``owner.name`` so its seconds add up under ``label`` (skipped when the code has no such name)."""
    inner = getattr(owner, name, None)
    if inner is None:
        return

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            PARTS[label] = PARTS.get(label, 0.0) + time.perf_counter() - t0

    setattr(owner, name, wrapper)


def instrument() -> None:
    """Timers on the steps of a save, in whichever code is imported (this tree's or the baseline's)."""
    from contextkit.index import _bm25, _index, _vector_files

    timed(_bm25.BM25Index, "terms", "bm25 tokenise")
    timed(_bm25.BM25Index, "_token_ids", "bm25 tokenise")
    timed(_bm25.BM25Index, "build", "bm25 build")
    timed(_bm25.BM25Index, "updated", "bm25 delta+merge")
    timed(_bm25.BM25Index, "save", "bm25 write")
    timed(_index.Index, "_build_bm25", "bm25 full rebuild")
    timed(_index, "saved_bm25", "bm25 load saved")
    timed(_index, "synced_bm25", "bm25 sync")
    timed(_index.Index, "_write_bm25", "bm25 total")
    timed(_vector_files.VectorFiles, "write", "faiss write")


def build(path: Path, n: int, kind: str) -> float:
    from _synthetic import clustered

    from contextkit.index import Index
    from contextkit.records import Chunk

    corpus, vectors = texts(n, 1), clustered(np.random.default_rng(2), n)
    t0 = time.perf_counter()
    with Index.create(path, model="m", dim=384, index_type=kind) as index:
        for j in range(0, n, DOC):
            d = f"d{j // DOC}"
            chunks = [Chunk(id=f"{d}::{i}", doc_id=d, ordinal=i, text=corpus[j + i], start=0, end=len(corpus[j + i]),
                            token_count=1) for i in range(DOC)]
            index.begin()
            index.store.put_document(d, d, d, "sha", 10, {})
            index.add_chunks(chunks, vectors[j: j + DOC], [f"{d}-{i}" for i in range(DOC)])
            index.commit()
        index.save()
    return time.perf_counter() - t0


def change_and_save(path: Path, seed: int) -> tuple[float, dict[str, float], int]:
    """Replace document d7's 100 chunks, then save: seconds of the save, its parts, bytes of new files."""
    from _synthetic import clustered

    from contextkit.index import Index
    from contextkit.records import Chunk, Document

    new = texts(DOC, 100 + seed)
    chunks = [Chunk(id=f"d7::{i}", doc_id="d7", ordinal=i, text=t, start=0, end=len(t), token_count=1)
              for i, t in enumerate(new)]
    before = {p.stat().st_ino for p in path.rglob("*") if p.is_file()}
    with Index.open(path) as index:
        index.upsert(Document(id="d7", text="changed", source="d7"), chunks, clustered(np.random.default_rng(seed), DOC))
        PARTS.clear()
        t0 = time.perf_counter()
        index.save()
        seconds = time.perf_counter() - t0
        parts = dict(PARTS)
    new = [p for p in path.rglob("*") if p.is_file() and p.stat().st_ino not in before
           and not p.name.startswith("store.sqlite")]
    parts["bytes bm25"] = float(sum(p.stat().st_size for p in new if p.parent.name.startswith("bm25")))
    return seconds, parts, sum(p.stat().st_size for p in new)


def run_side(work: Path, n: int, kind: str, repeat: int) -> dict:
    """Build once, then ``repeat`` changes on fresh copies: the best save and its parts."""
    instrument()
    base = work / "base"
    built = build(base, n, kind)
    runs = []
    for r in range(repeat):
        copy = work / f"copy{r}"
        shutil.copytree(base, copy, ignore=shutil.ignore_patterns(".lock"))
        runs.append(change_and_save(copy, r))
        if r < repeat - 1:
            shutil.rmtree(copy)
    best = min(runs, key=lambda x: x[0])
    return {"build": built, "save": best[0], "parts": best[1], "written": best[2], "all": [x[0] for x in runs],
            "last": str(work / f"copy{repeat - 1}")}


def baseline(rev: str, args: argparse.Namespace, work: Path) -> dict | None:
    """Today's save, in a child process running the code of commit ``rev`` (None when git cannot give it)."""
    src = work / "baseline-src"
    src.mkdir()
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "contextkit"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"(no baseline: git archive {rev} failed: {exc})")
        return None
    out = work / "baseline.json"
    subprocess.run([sys.executable, __file__, "--role", "side", "--src", str(src), "--n", str(args.n), "--kind",
                    args.kind, "--repeat", str(args.repeat), "--work", str(work / "today"), "--out", str(out)],
                   check=True)
    return json.loads(out.read_text())


def check_scores(folder: Path, n_queries: int) -> str:
    """The incremental index's BM25 against bm25s built afresh over the store's texts."""
    from contextkit.index import Index
    from contextkit.index._bm25_legacy import bm25s_model

    with Index.open(folder, read_only=True) as index:
        bm25 = index.bm25
        corpus = [t for _, batch in index.store.iter_chunk_texts() for t in batch]
        changed = [c.text for c in index.store.chunks_of("d7")]
    t0 = time.perf_counter()
    model = bm25s_model(bm25.terms(corpus), bm25.config.k1, bm25.config.b, bm25.config.method)
    rebuild = time.perf_counter() - t0
    rng = np.random.default_rng(9)
    sources = [changed[i % len(changed)] if i % 2 else corpus[int(rng.integers(len(corpus)))] for i in range(n_queries)]
    equal = same_top = 0
    worst = 0.0
    ours, theirs = [], []
    for text in sources:
        words = text.split()
        query = " ".join(rng.choice(words, min(len(words), int(rng.integers(1, 5))))) if words else "python"
        t0 = time.perf_counter()
        got = bm25.scores(query)
        t1 = time.perf_counter()
        known = [t for t in bm25.terms([query])[0] if t in model.vocab_dict]
        want = np.asarray(model.get_scores(known), dtype=np.float32) if known else np.zeros(len(corpus), np.float32)
        ours.append(t1 - t0)
        theirs.append(time.perf_counter() - t1)
        equal += bool(np.array_equal(got, want))
        worst = max(worst, float(np.max(np.abs(got - want))) if len(want) else 0.0)
        same_top += _top10(got) == _top10(want)
    return (f"scores vs bm25s built afresh ({rebuild:.1f} s) on {n_queries} queries (half from the changed chunks): "
            f"{equal}/{n_queries} bitwise equal, max |diff| {worst:.2e}, same top 10 in {same_top}/{n_queries}\n"
            f"query scoring, median: postings {1e3 * np.median(ours):.2f} ms, bm25s's precomputed scores "
            f"{1e3 * np.median(theirs):.2f} ms (both tokenise the query)")


def merge_costs(folder: Path) -> str:
    """Seconds of the merges the policy runs now and then, on the incremental index of ``folder``."""
    from contextkit.index import Index
    from contextkit.index._bm25_postings import Postings, merged

    with Index.open(folder, read_only=True) as index:
        postings = index.bm25.postings
    t0 = time.perf_counter()
    if len(postings.segments) > 1:
        Postings(merged(postings, "deltas", "delta.9."), postings.rowids)
    deltas = time.perf_counter() - t0
    t0 = time.perf_counter()
    Postings(merged(postings, "all", ""), postings.rowids)
    full = time.perf_counter() - t0
    return (f"merges (no text tokenised): deltas into one {deltas:.3f} s; all into a new base {full:.2f} s "
            f"(when deltas + removed chunks pass a tenth of the chunks, or more than 8 deltas)")


def breakdown(parts: dict[str, float]) -> dict[str, float]:
    """The BM25 part of a save split into its steps (each timer holds the ones it calls)."""
    def p(k: str) -> float:
        return parts.get(f"bm25 {k}", 0.0)

    if "bm25 sync" in parts or "bm25 load saved" in parts:  # postings: load, compare with the store, delta
        steps = {"load saved": p("load saved"), "diff + fetch texts": p("sync") - p("delta+merge"),
                 "tokenise": p("tokenise"), "delta + merge": p("delta+merge") - p("tokenise"), "write": p("write")}
    else:  # the rebuild over every text
        steps = {"read texts": p("full rebuild") - p("build"), "tokenise": p("tokenise"),
                 "matrix": p("build") - p("tokenise"), "write": p("write")}
    steps["fsync, checksums, other"] = p("total") - sum(steps.values())  # the steps above add up to their timers
    return steps


def show(name: str, side: dict) -> None:
    parts = side["parts"]
    bm25 = parts.get("bm25 total", 0.0)
    faiss = parts.get("faiss write", 0.0)
    rest = side["save"] - bm25 - faiss
    print(f"{name:>12}: save {side['save']:6.3f} s (runs {', '.join(f'{s:.2f}' for s in side['all'])}): "
          f"BM25 {bm25:.3f}, FAISS write {faiss:.3f}, rest (store, manifest, cleanup) {rest:.3f}; "
          f"{side['written'] / 1e6:.1f} MB in new files ({parts.get('bytes bm25', 0) / 1e6:.1f} MB of them BM25's)")
    print(" " * 14 + "BM25: " + ", ".join(f"{k} {v:.3f}" for k, v in breakdown(parts).items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="chunks (a multiple of 100)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--kind", default="flat", choices=["flat", "hnsw", "ivfpq"], help="FAISS index type")
    ap.add_argument("--baseline", default=BASELINE, help="git revision of today's code ('' to skip it)")
    ap.add_argument("--role", default="main", help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, args.src or str(ROOT))
    if args.role == "side":
        Path(args.work).mkdir(parents=True)
        Path(args.out).write_text(json.dumps(run_side(Path(args.work), args.n, args.kind, args.repeat)))
        return
    work = Path(tempfile.mkdtemp(prefix="ck-bm25-incr-"))
    try:
        today = baseline(args.baseline, args, work) if args.baseline else None
        incremental = run_side(work / "incremental", args.n, args.kind, args.repeat)
        print(f"{args.n:,} chunks ({args.kind} FAISS, 384-d), change: {DOC} chunks replaced, then save(); "
              f"best of {args.repeat}")
        if today is not None:
            show("today", today)
        show("incremental", incremental)
        if today is not None:
            print(f"ratio: whole save {today['save'] / incremental['save']:.1f}x faster; BM25 part "
                  f"{today['parts'].get('bm25 total', 0) / max(incremental['parts'].get('bm25 total', 1e-9), 1e-9):.0f}x"
                  f" faster")
        print(merge_costs(Path(incremental["last"])))
        print(check_scores(Path(incremental["last"]), args.queries))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
