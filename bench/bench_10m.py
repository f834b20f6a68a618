"""Ten million chunk vectors on one small machine: IVF-PQ on disk, exact re-ranking, Recall@10.

Goal (the scale issue): an index of 10,000,000 chunks (384-d) built and searched on a
2-core, 24 GiB machine, opened from disk in under 5 s, with Recall@10 >= 0.9 against
exact search and a query p50 <= 20 ms.

What it builds (never holding the 15.4 GB of float32 vectors in memory):

* **Vectors**: embedding-like 384-d unit vectors, drawn in seeded batches of
  ``--batch`` (default 100,000): batch ``b`` comes from ``default_rng([seed, b])``, so
  any batch can be drawn again on its own. The generator is the mixture of
  ``bench_retrieval.py ann`` (``_embedding_like``): 256 spherical k-means centroids and
  cluster weights fit to the real SciFact index (``--index``, all-MiniLM-L6-v2), plus
  Gaussian noise with the full 384-d covariance of the real residuals, normalised.
  That function draws all vectors at once, so the fit is repeated here (same steps, same
  seed) and the draw streams. Without the real index, ``--vectors synthetic`` draws from
  a documented stand-in (256 random centroids, residual spectrum decaying as 1/i, same
  norm ratio); ``random`` gives uniform unit vectors (the worst case for any ANN index).
  The queries are separate draws from the same distribution (their own seed).
* **Index**: ``IndexIVFPQ`` (inner product; coarse quantizer = flat, k-means on a
  sample: the first ``max(65,536, --train-per-list x nlist)`` vectors; product quantizer of ``m``
  sub-vectors x ``nbits`` on the residuals), filled batch by batch, written with
  ``faiss.write_index`` and reopened with ``faiss.read_index(path, IO_FLAG_MMAP |
  IO_FLAG_READ_ONLY)``: the inverted lists stay in the file (OnDiskInvertedLists over a
  memory map), only the quantizer and codebooks are read.
* **Exact re-ranking** (``refine k``): the raw vectors are also written, as float16, to a
  memory-mapped ``raw.npy`` (768 bytes a vector). A query asks IVF-PQ for ``refine k``
  candidates, reads their raw rows from the map and re-scores them exactly (float32 dot
  products with the float16 rows); ``refine k = 0`` is IVF-PQ alone. (FAISS's
  ``IndexRefineFlat`` does the same but keeps float32 vectors in RAM.)
* **Ground truth**: the exact top-10 (float32 inner product) of ``--queries`` queries,
  kept up to date *during the same streaming pass* that fills the index: each batch is
  scored against the queries while it is in memory (so no second pass and nothing
  stored).

Then: a sweep of nprobe x refine k (each query searched alone on one thread, as a
retriever does, through ``contextkit.index._faiss_kinds.search_faiss``), the default picked
(the lowest p50 with Recall@10 >= ``--target-recall``), and the final figures for it
measured from a *cold* open: the benchmark's own files are evicted from the page cache
(``posix_fadvise(DONTNEED)``; nothing else on the machine is touched) before the index
is opened and the queries run, then run once more warm.

Run: ``python bench/bench_10m.py --quick`` (1,000,000 vectors, ~3 minutes) or
``python bench/bench_10m.py`` (10,000,000; see bench/README.md for the time). Files go to
``--dir`` (default ``/tmp/ck-bench-10m``, ~0.83 GB per million vectors) and are deleted at
the end unless ``--keep``.
"""

from __future__ import annotations

import os

# Idle OpenMP threads sleep instead of spinning: on a busy 2-core machine, spinning threads
# made FAISS's PQ training 6x slower (34.5 s -> 5.8 s) and k-means assignment 2x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_retrieval import INDEX, _recall, log, table  # noqa: E402  (the ann bench's helpers)

from contextkit.index._faiss_kinds import RefinedIVFPQ, search_faiss  # noqa: E402


# ------------------------------------------------------------------ memory
def proc_status() -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process, in MB."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) / 1024
    return out


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (``/proc/self/clear_refs``), so a later peak is this phase's."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def evict(*paths: Path) -> None:
    """Drop these files (only these) from the page cache, so the next read is cold."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# --------------------------------------------------------------- vectors
class Generator:
    """Seeded, batch-addressable draws of ``d``-dimensional unit vectors."""

    def __init__(self, kind: str, d: int, seed: int, batch: int, index_dir: Path) -> None:
        self.kind, self.d, self.seed, self.batch = kind, d, seed, batch
        if kind == "embedding-like":
            self.centroids, self.weights, self.mix = self._fit(index_dir, d)
            self.what = f"embedding-like {d}-d vectors (256-Gaussian mixture fit to {index_dir})"
        elif kind == "synthetic":
            rng = np.random.default_rng([seed, 7])
            c = rng.standard_normal((256, d))
            self.centroids = (c / np.linalg.norm(c, axis=1, keepdims=True)).astype(np.float32)
            self.weights = rng.dirichlet(np.full(256, 2.0))
            spectrum = 1.0 / np.arange(1, d + 1)  # residual variance decaying as 1/i
            # residual norm about 0.8x the centroid's, as in the real SciFact fit
            scale = 0.8 / np.sqrt(spectrum.sum())
            basis, _ = np.linalg.qr(rng.standard_normal((d, d)))
            self.mix = (np.sqrt(spectrum)[:, None] * basis.T * scale).astype(np.float32)
            self.what = f"synthetic {d}-d mixture (256 random centroids, 1/i residual spectrum)"
        else:
            self.what = f"random {d}-d unit vectors (the worst case for ANN)"

    @staticmethod
    def _fit(index_dir: Path, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The mixture of ``bench_retrieval._embedding_like``, returned instead of drawn from."""
        from bench_retrieval import fit_mixture

        return fit_mixture(index_dir, d)

    def draw(self, rng: np.random.Generator, m: int) -> np.ndarray:
        """``m`` unit vectors, float32 throughout (float64 would double the cost at 10M)."""
        z = rng.standard_normal((m, self.d), dtype=np.float32)
        if self.kind == "random":
            x = z
        else:
            x = z @ self.mix
            x += self.centroids[rng.choice(len(self.weights), m, p=self.weights)]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x

    def batch_at(self, b: int, n: int) -> np.ndarray:
        lo = b * self.batch
        return self.draw(np.random.default_rng([self.seed, b]), min(self.batch, n - lo))

    def queries(self, nq: int) -> np.ndarray:
        return self.draw(np.random.default_rng([self.seed, 2**31 - 1]), nq)


# ------------------------------------------------------------------ build
class TopK:
    """A running exact top-k of inner products, updated batch by batch."""

    def __init__(self, nq: int, k: int) -> None:
        self.k = k
        self.scores = np.full((nq, k), -np.inf, dtype=np.float32)
        self.ids = np.full((nq, k), -1, dtype=np.int64)

    def update(self, queries: np.ndarray, x: np.ndarray, offset: int) -> None:
        s = queries @ x.T
        part = np.argpartition(-s, self.k - 1, axis=1)[:, : self.k]
        cand_s = np.concatenate([self.scores, np.take_along_axis(s, part, 1)], axis=1)
        cand_i = np.concatenate([self.ids, part + offset], axis=1)
        best = np.argsort(-cand_s, axis=1, kind="stable")[:, : self.k]
        self.scores = np.take_along_axis(cand_s, best, 1)
        self.ids = np.take_along_axis(cand_i, best, 1)


def build(args: argparse.Namespace, gen: Generator, queries: np.ndarray, folder: Path) -> dict[str, Any]:
    """One streaming pass: train on a sample, then per batch: ground truth, raw float16 rows, IVF-PQ codes."""
    import faiss

    n, d = args.n, args.dim
    nlist = args.nlist or default_nlist(n)
    nbatches = -(-n // args.batch)
    res: dict[str, Any] = {"nlist": nlist, "configs": []}

    # --- train: the quantizer once (shared by every m), then each PQ, on the first vectors of the stream
    t0 = time.perf_counter()
    # at least 65,536 (FAISS's PQ sample cap): PQ96 trained 8x *slower* on 25,600 vectors than on
    # 65,536 here (155 s vs 18 s, FAISS 1.15.1, 4-d sub-vectors)
    ntrain = min(n, max(65_536, args.train_per_list * nlist))
    sample = np.concatenate([gen.batch_at(b, n) for b in range(-(-ntrain // args.batch))])[:ntrain]
    res["train_size"] = ntrain
    indexes = []
    quantizer = None
    for m in args.m:
        t1 = time.perf_counter()
        q = faiss.IndexFlatIP(d) if quantizer is None else faiss.clone_index(quantizer)
        ivf = faiss.IndexIVFPQ(q, d, nlist, m, args.nbits, faiss.METRIC_INNER_PRODUCT)
        ivf.cp.seed = args.seed
        ivf.pq.cp.seed = args.seed
        if quantizer is None:  # k-means once; the other PQs reuse these centroids (train skips them)
            ivf.train_q1(ntrain, faiss.swig_ptr(sample), False, ivf.metric_type)
            quantizer = q
            res["quantizer_train_seconds"] = time.perf_counter() - t1
            log(f"k-means nlist={nlist} on {ntrain:,} vectors: {res['quantizer_train_seconds']:.1f} s")
            t1 = time.perf_counter()
        ivf.train(sample)
        pq_s = time.perf_counter() - t1
        log(f"PQ m={m} nbits={args.nbits} trained: {pq_s:.1f} s")
        indexes.append({"m": m, "index": ivf, "pq_train_s": pq_s, "add_s": 0.0})
    del sample
    res["train_seconds"] = time.perf_counter() - t0

    # --- the streaming pass
    # plain appends rather than a writable memory map: written pages stay page cache, not this process's RSS
    raw = open(folder / "raw.npy", "wb")
    np.lib.format.write_array_header_2_0(raw, {"descr": np.dtype(np.float16).str, "fortran_order": False,
                                               "shape": (n, d)})
    truth = TopK(len(queries), 10)
    clocks = {"generate": 0.0, "ground truth": 0.0, "raw write": 0.0, "assign": 0.0}
    t_pass = time.perf_counter()
    for b in range(nbatches):
        lo = b * args.batch
        t = time.perf_counter()
        x = gen.batch_at(b, n)
        clocks["generate"] += time.perf_counter() - t
        t = time.perf_counter()
        truth.update(queries, x, lo)
        clocks["ground truth"] += time.perf_counter() - t
        t = time.perf_counter()
        raw.write(x.astype(np.float16).tobytes())
        clocks["raw write"] += time.perf_counter() - t
        t = time.perf_counter()
        _, assign = quantizer.search(x, 1)
        clocks["assign"] += time.perf_counter() - t
        ids = np.arange(lo, lo + len(x), dtype=np.int64)
        for item in indexes:
            t = time.perf_counter()
            item["index"].add_core(len(x), faiss.swig_ptr(x), faiss.swig_ptr(ids), faiss.swig_ptr(assign.ravel()))
            item["add_s"] += time.perf_counter() - t
        done = lo + len(x)
        if b % max(1, nbatches // 20) == 0 or done == n:
            spent = time.perf_counter() - t_pass
            log(f"  {done:,}/{n:,} vectors, {spent:.0f} s, ~{spent / done * (n - done):.0f} s to go "
                f"(RSS {proc_status()['VmRSS']:.0f} MB)")
    t = time.perf_counter()
    raw.close()
    clocks["raw write"] += time.perf_counter() - t
    res["pass_seconds"] = time.perf_counter() - t_pass
    res["pass_clocks"] = clocks
    res["truth_ids"] = truth.ids

    # --- write each index
    for item in indexes:
        t = time.perf_counter()
        path = folder / f"ivf{nlist}_pq{item['m']}x{args.nbits}.faiss"
        faiss.write_index(item["index"], str(path))
        item["write_s"] = time.perf_counter() - t
        # what building this one index alone costs (the ground truth is measurement, not build)
        build_s = (res["quantizer_train_seconds"] + item["pq_train_s"] + clocks["generate"] + clocks["assign"]
                   + item["add_s"] + item["write_s"] + clocks["raw write"])
        res["configs"].append({"m": item["m"], "nbits": args.nbits, "path": path, "bytes": path.stat().st_size,
                               "pq_train_s": item["pq_train_s"], "add_s": item["add_s"], "write_s": item["write_s"],
                               "build_s": build_s})
        log(f"wrote {path.name}: {path.stat().st_size / 2**20:.0f} MB in {item['write_s']:.1f} s")
    res["raw_bytes"] = (folder / "raw.npy").stat().st_size
    del indexes, quantizer
    return res


def default_nlist(n: int) -> int:
    """About sqrt(n) lists, a power of two, at most 2048 (1M: 1024, 10M: 2048).

    Why the cap: adding a vector compares it with every list's centroid, n x nlist x d
    multiply-adds in all; at 10M vectors and 4096 lists that is 31 TFLOP, ~13 minutes at the
    ~40 GFLOPS two busy cores gave here (19 s per million vectors at 1024 lists)."""
    return int(min(2048, 2 ** round(np.log2(np.sqrt(n)))))


# ----------------------------------------------------------------- search
def open_index(path: Path, raw_path: Path) -> tuple[Any, np.ndarray, float]:
    import faiss

    t0 = time.perf_counter()
    index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    raw = np.load(raw_path, mmap_mode="r")
    return index, raw, time.perf_counter() - t0


def search_one(index: Any, raw: np.ndarray, q: np.ndarray, k: int, nprobe: int, refine: int) -> np.ndarray:
    """Top-``k`` ids of one query: IVF-PQ, then (``refine`` > 0) exact re-scoring of ``refine`` candidates.

    The re-scoring is the library's own (``contextkit.index._faiss_kinds.RefinedIVFPQ``, what
    ``Index(index_type="ivfpq")`` searches with); ids here are the row numbers of ``raw.npy``.
    Ties in the exact scores keep IVF-PQ's order (stable sort)."""
    import faiss

    params = faiss.SearchParametersIVF(nprobe=nprobe)
    if not refine:
        _, ids = search_faiss(index, q[None, :], k, params)
        return ids[0]
    refined = RefinedIVFPQ(faiss.downcast_index(index), raw, _row_ids(len(raw)), nprobe, refine)  # a view: `index` owns
    _, ids = search_faiss(refined, q[None, :], k, params)
    return ids[0]


_ROW_IDS: dict[int, np.ndarray] = {}


def _row_ids(n: int) -> np.ndarray:
    """0..n-1, made once: the rowids of ``raw.npy`` (the library keeps them in ``vectors.ids.npy``)."""
    if n not in _ROW_IDS:
        _ROW_IDS[n] = np.arange(n, dtype=np.int64)
    return _ROW_IDS[n]


def run_queries(index: Any, raw: np.ndarray, queries: np.ndarray, nprobe: int, refine: int
                ) -> tuple[np.ndarray, np.ndarray]:
    found, ms = [], []
    for q in queries:
        t0 = time.perf_counter()
        found.append(search_one(index, raw, q, 10, nprobe, refine))
        ms.append((time.perf_counter() - t0) * 1000)
    return np.array([np.pad(f, (0, 10 - len(f)), constant_values=-1) for f in found]), np.asarray(ms)


def sweep(args: argparse.Namespace, built: dict[str, Any], queries: np.ndarray, raw_path: Path
          ) -> list[dict[str, Any]]:
    rows = []
    truth = built["truth_ids"]
    for cfg in built["configs"]:
        index, raw, open_s = open_index(cfg["path"], raw_path)
        run_queries(index, raw, queries[:20], 16, 0)  # warm the quantizer and the first pages
        for nprobe in args.nprobe:
            if nprobe > built["nlist"]:
                continue
            for refine in args.refine:
                found, ms = run_queries(index, raw, queries, nprobe, refine)
                r = _recall(found, truth)
                rows.append({"nlist": built["nlist"], "m": cfg["m"], "nbits": cfg["nbits"], "nprobe": nprobe,
                             "refine k": refine, "recall@10": r, "p50 ms": float(np.percentile(ms, 50)),
                             "p95 ms": float(np.percentile(ms, 95)), "config": cfg})
                log(f"  m={cfg['m']} nprobe={nprobe} refine={refine}: recall@10 {r:.3f}, "
                    f"p50 {rows[-1]['p50 ms']:.2f} ms")
        del index, raw
    return rows


def pick(rows: list[dict[str, Any]], target: float, goal_ms: float) -> dict[str, Any]:
    """The lowest p50 reaching ``target`` recall; else the best recall within the latency goal."""
    ok = [r for r in rows if r["recall@10"] >= target]
    if ok:
        return min(ok, key=lambda r: (r["p50 ms"], -r["recall@10"]))
    fast = [r for r in rows if r["p50 ms"] <= goal_ms] or rows
    return max(fast, key=lambda r: (r["recall@10"], -r["p50 ms"]))


# ------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="vectors (default 10,000,000)")
    ap.add_argument("--quick", action="store_true", help="1,000,000 vectors and m = 32, 48, 96")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--vectors", choices=("embedding-like", "synthetic", "random"), default="embedding-like")
    ap.add_argument("--index", type=Path, default=INDEX, help=f"real index the mixture is fit to (default {INDEX})")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ck-bench-10m"), help="where the files go")
    ap.add_argument("--keep", action="store_true", help="keep the files (default: delete them at the end)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--nlist", type=int, default=None, help="default: ~sqrt(n), a power of two")
    ap.add_argument("--m", type=int, nargs="+", default=None, help="PQ sub-vectors (default 96; --quick: 32 48 96)")
    ap.add_argument("--nbits", type=int, default=8)
    ap.add_argument("--train-per-list", type=int, default=50,
                    help="training sample = this x nlist, at least 65,536 (default 50)")
    ap.add_argument("--nprobe", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    ap.add_argument("--refine", type=int, nargs="+", default=[0, 100, 200, 500, 1000])
    ap.add_argument("--target-recall", type=float, default=0.95,
                    help="the default setting is the fastest reaching this (default 0.95: margin over the 0.9 goal)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.quick and args.n == ap.get_default("n"):
        args.n = 1_000_000
    if args.m is None:
        args.m = [32, 48, 96] if args.quick else [96]
    if args.vectors == "embedding-like" and not (args.index / "manifest.json").is_file():
        sys.exit(f"{args.index}: no index to fit the mixture to; build it (see bench/README.md) "
                 "or pass --vectors synthetic")
    import faiss

    need = args.n * args.dim * 2 * 1.1 + args.n * (max(args.m) + 8) * len(args.m)
    free = shutil.disk_usage(args.dir.parent).free
    if need > free * 0.9:
        sys.exit(f"{args.dir.parent}: {free / 2**30:.1f} GiB free, this run writes ~{need / 2**30:.1f} GiB")
    if args.dir.exists():
        shutil.rmtree(args.dir)
    args.dir.mkdir(parents=True)
    started = time.perf_counter()
    res: dict[str, Any] = {"n": args.n, "dim": args.dim, "faiss": faiss.__version__, "cpus": os.cpu_count(),
                           "load_average_start": os.getloadavg(),
                           "threads": faiss.omp_get_max_threads(), "queries": args.queries, "seed": args.seed}
    try:
        gen = Generator(args.vectors, args.dim, args.seed, args.batch, args.index)
        queries = gen.queries(args.queries)
        res["vectors"] = gen.what
        log(f"{args.n:,} {gen.what}; {args.queries} queries; faiss {faiss.__version__}, "
            f"{res['threads']} threads; load average {os.getloadavg()[0]:.1f}; files in {args.dir}")
        reset_peak()
        t0 = time.perf_counter()
        built = build(args, gen, queries, args.dir)
        res["build_wall_seconds"] = time.perf_counter() - t0
        res["build_peak_rss_mb"] = proc_status()["VmHWM"]
        raw_path = args.dir / "raw.npy"
        clocks = built["pass_clocks"]
        print(f"\n{args.n:,} {gen.what}")
        print(f"build wall time {res['build_wall_seconds']:.0f} s: training {built['train_seconds']:.0f} s "
              f"(k-means nlist={built['nlist']} on {built['train_size']:,} vectors: "
              f"{built['quantizer_train_seconds']:.0f} s), streaming pass {built['pass_seconds']:.0f} s "
              f"(" + ", ".join(f"{k} {v:.0f} s" for k, v in clocks.items()) + "), peak RSS "
              f"{res['build_peak_rss_mb']:.0f} MB")
        for c in built["configs"]:
            print(f"  m={c['m']}: PQ training {c['pq_train_s']:.0f} s, encoding+adding {c['add_s']:.0f} s, "
                  f"write {c['write_s']:.1f} s, index file {c['bytes'] / 2**20:.0f} MB")
        print(f"  raw float16 vectors {built['raw_bytes'] / 2**30:.2f} GiB (memory-mapped, for re-ranking)")

        # --- sweep (warm page cache)
        reset_peak()
        rows = sweep(args, built, queries, raw_path)
        table(rows, ["nlist", "m", "nbits", "nprobe", "refine k", "recall@10", "p50 ms", "p95 ms"],
              f"IVF-PQ on {args.n:,} vectors, {args.queries} queries one at a time on 1 thread, Recall@10 against "
              "exact search (warm page cache; refine k = candidates re-scored exactly from raw.npy)")
        best = pick(rows, args.target_recall, 20.0)
        cfg = best["config"]
        print(f"\ndefault: nlist={best['nlist']} m={best['m']} nbits={best['nbits']} nprobe={best['nprobe']} "
              f"refine k={best['refine k']} (lowest p50 with Recall@10 >= {args.target_recall})")
        res["sweep"] = [{k: v for k, v in r.items() if k != "config"} for r in rows]

        # --- final: cold open, cold queries, then warm
        evict(cfg["path"], raw_path)
        reset_peak()
        index, raw, open_s = open_index(cfg["path"], raw_path)
        after_open = proc_status()
        found_cold, ms_cold = run_queries(index, raw, queries, best["nprobe"], best["refine k"])
        found, ms = run_queries(index, raw, queries, best["nprobe"], best["refine k"])
        search_mem = proc_status()
        final = {
            "nlist": best["nlist"], "m": best["m"], "nbits": best["nbits"], "nprobe": best["nprobe"],
            "refine_k": best["refine k"], "build_seconds": cfg["build_s"], "build_wall_seconds": res["build_wall_seconds"],
            "index_bytes": cfg["bytes"], "raw_bytes": built["raw_bytes"],
            "build_peak_rss_mb": res["build_peak_rss_mb"], "open_seconds_cold": open_s,
            "rss_after_open_mb": after_open["VmRSS"], "search_peak_rss_mb": search_mem["VmHWM"],
            "search_rss_anon_mb": search_mem["RssAnon"], "search_rss_file_mb": search_mem["RssFile"],
            "p50_ms_cold": float(np.percentile(ms_cold, 50)), "p95_ms_cold": float(np.percentile(ms_cold, 95)),
            "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "recall@10": _recall(found, built["truth_ids"]), "recall@10_cold": _recall(found_cold, built["truth_ids"]),
        }
        res["final"] = final
        gb = (final["index_bytes"] + final["raw_bytes"]) / 2**30
        print(f"\nFINAL ({args.n:,} vectors, {args.dim}-d, default setting above)")
        print(f"  build time        {final['build_seconds']:.0f} s for this index "
              f"(whole run's build phase {final['build_wall_seconds']:.0f} s, {len(built['configs'])} index(es))")
        print(f"  size on disk      {gb:.2f} GiB = index {final['index_bytes'] / 2**20:.0f} MB "
              f"+ raw float16 {final['raw_bytes'] / 2**30:.2f} GiB")
        print(f"  peak RSS          build {final['build_peak_rss_mb']:.0f} MB; search {final['search_peak_rss_mb']:.0f} MB "
              f"(anonymous {final['search_rss_anon_mb']:.0f} MB + mapped file pages {final['search_rss_file_mb']:.0f} MB)")
        print(f"  open (cold)       {final['open_seconds_cold'] * 1000:.1f} ms (RSS after open {final['rss_after_open_mb']:.0f} MB)")
        print(f"  latency cold      p50 {final['p50_ms_cold']:.2f} ms, p95 {final['p95_ms_cold']:.2f} ms "
              f"(first pass after evicting the files from the page cache)")
        print(f"  latency warm      p50 {final['p50_ms']:.2f} ms, p95 {final['p95_ms']:.2f} ms")
        print(f"  Recall@10         {final['recall@10']:.4f} ({args.queries} queries, exact float32 top-10)")
        met = final["recall@10"] >= 0.9 and final["p50_ms"] <= 20 and final["open_seconds_cold"] < 5
        print(f"  goal (Recall@10 >= 0.9, p50 <= 20 ms, open < 5 s): {'met' if met else 'NOT met'}")
        del index, raw
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
            log(f"removed {args.dir}")
    res["seconds"] = time.perf_counter() - started
    res["load_average_end"] = os.getloadavg()
    print(f"\nbench_10m: {res['seconds']:.0f} s (load average 1/5/15 min at the end: "
          + " / ".join(f"{x:.1f}" for x in res["load_average_end"]) + f" on {os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
