"""Retrieval benchmarks: SciFact quality and latency, hybrid tuning, and FAISS ANN at scale.

Subcommands (``--json FILE`` on each writes every number):

* ``quality``: ``contextkit.evaluation.evaluate`` on a BEIR split (default SciFact test):
  nDCG@10, Recall@10, Recall@100, MRR@10 and latency for dense, bm25 and hybrid, with
  the retrievers' defaults or ``--option MODE.NAME=VALUE``. ``--bm25-stemmer`` /
  ``--bm25-stopwords`` evaluate another BM25 configuration through a copy of the index.
* ``latency``: per-query latency over the test queries at ``k=10`` (what a user asks),
  dense / bm25 / hybrid, p50 and p95, query embedding included, plus where the time of
  a hybrid query goes (embedding, FAISS, BM25, fusion, reading the chunks).
  Goal: hybrid p50 <= 15 ms on 2 CPU cores.
* ``tune``: the hybrid settings grid (RRF k, dense/BM25 weights, depth, RRF vs weighted
  score fusion) and BM25 variants (stemming, stop words, title handling) on the TRAIN
  split, over candidate lists computed once (dense and BM25 top-200 per query; queries
  embedded once); the fusion is ``contextkit.retrievers.rrf_fuse`` / ``weighted_fuse``,
  the very functions ``HybridRetriever`` calls. Prints the best settings; ``--test``
  then scores them once on the test split with the real retrievers.
* ``ann``: N random 384-d unit vectors (default 1,000,000), FAISS exact flat vs HNSW vs
  IVF built as contextkit builds them (same classes, M / efConstruction / efSearch from
  ``IndexManifest``'s defaults, IVF nlist and nprobe by contextkit's formula): build
  time, memory, query latency and Recall@10 against exact search, then the smallest
  efSearch / nprobe reaching Recall@10 >= 0.95. Random vectors are the hardest case for
  ANN (no cluster structure, every neighbour is almost as far as every other): real
  embeddings reach a given recall with far less search effort.

Run: ``python bench/bench_retrieval.py quality|latency|tune|ann [--json FILE]``. The
SciFact index is ``/tmp/scifact.ck-index`` (built by ``contextkit ingest
../shared/data/beir_scifact/corpus.jsonl --index /tmp/scifact.ck-index`` when missing).
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SCIFACT = DATA / "beir_scifact"
INDEX = Path("/tmp/scifact.ck-index")
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
TUNE_METRICS = (*METRICS, "recall@100 docs")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def table(rows: list[dict[str, Any]], cols: list[str], title: str = "") -> None:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(cols)]
    if title:
        print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for x in cells:
        print("  ".join(v.rjust(w) for v, w in zip(x, widths)))


def parse_options(items: list[str]) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = {}
    for item in items or []:
        key, _, value = item.partition("=")
        mode, _, name = key.partition(".")
        try:
            options.setdefault(mode, {})[name] = json.loads(value)
        except ValueError:
            options.setdefault(mode, {})[name] = value
    return options


def index_with_bm25(index: Path, stemmer: str | None, stopwords: str | None) -> Path:
    """A copy of the index whose manifest asks for another BM25 configuration (rebuilt on open)."""
    from contextkit.index._bm25 import BM25Config

    target = Path(tempfile.mkdtemp(prefix="ck-bm25-")) / "index"
    shutil.copytree(index, target, ignore=shutil.ignore_patterns("bm25", ".lock"))
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["bm25"] = BM25Config(stemmer=stemmer, stopwords=stopwords).model_dump()
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return target


def print_report(report: Any, label: str) -> list[dict[str, Any]]:
    rows = [{"mode": r.mode, **r.metrics, "p50 ms": r.latency_ms["p50"], "p95 ms": r.latency_ms["p95"],
             "docs/q": r.docs_per_query, "options": json.dumps(r.options) if r.options else ""}
            for r in report.results]
    table(rows, ["mode", *METRICS, "p50 ms", "p95 ms", "docs/q", "options"],
          f"{label}: {report.beir} {report.split}, {report.queries} queries, top {report.k} chunks "
          f"({report.metrics_library})")
    return rows


# ----------------------------------------------------------------------- quality
def cmd_quality(args: argparse.Namespace) -> dict[str, Any]:
    from contextkit.evaluation import evaluate

    index = args.index
    if args.bm25_stemmer is not None or args.bm25_stopwords is not None:
        from contextkit.index._bm25 import BM25Config

        base = BM25Config()
        stem = base.stemmer if args.bm25_stemmer is None else (args.bm25_stemmer or None)
        stop = base.stopwords if args.bm25_stopwords is None else (args.bm25_stopwords or None)
        index = index_with_bm25(args.index, stem, stop)
        log(f"BM25 stemmer={stem!r} stopwords={stop!r} through {index}")
    options = parse_options(args.option)
    try:
        report = evaluate(index, args.beir, args.split, args.mode or ("dense", "bm25", "hybrid"), args.k,
                          options=options, progress=_progress())
    finally:
        if index != args.index:
            shutil.rmtree(index.parent, ignore_errors=True)
    print_report(report, "quality")
    return report.model_dump()


def _progress():
    last = [0.0]

    def show(event: Any) -> None:
        if event.kind == "mode":
            log(f"{event.mode}: {event.total} queries")
        elif event.kind == "ingest" and time.time() - last[0] > 10:
            last[0] = time.time()
            log(f"ingesting: {event.event.kind} {event.event.chunks} chunks")

    return show


# ----------------------------------------------------------------------- latency
def cmd_latency(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from contextkit.embedders import Embedder
    from contextkit.evaluation import evaluate, load_beir
    from contextkit.index import Index
    from contextkit.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, rrf_fuse, weighted_fuse

    res: dict[str, Any] = {"torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "k": args.k}
    report = evaluate(args.index, args.beir, args.split, ("dense", "bm25", "hybrid"), args.k, progress=_progress(),
                      options=parse_options(args.option), warmup=10)
    rows = [{"mode": r.mode, "p50 ms": r.latency_ms["p50"], "p95 ms": r.latency_ms["p95"],
             "mean ms": r.latency_ms["mean"], "max ms": r.latency_ms["max"]} for r in report.results]
    table(rows, ["mode", "p50 ms", "p95 ms", "mean ms", "max ms"],
          f"latency per query, k={args.k}, {report.queries} {args.split} queries, query embedding included "
          f"(torch threads: {res['torch_threads']})")
    res["latency"] = rows
    hybrid = report.result("hybrid").latency_ms["p50"]
    print(f"hybrid p50 {hybrid:.1f} ms: goal <= 15 ms {'met' if hybrid <= 15 else 'NOT met'}")

    # Where a hybrid query's time goes (the same steps HybridRetriever takes).
    data = load_beir(args.beir, args.split)
    queries = list(data.queries.values())
    with Index.open(args.index, read_only=True) as index:
        embedder = Embedder(index.manifest.model, long_text=index.manifest.embedder.get("long_text", "window"))
        dense, sparse = DenseRetriever(index, embedder), BM25Retriever(index)
        hyb = HybridRetriever(index, embedder, **parse_options(args.option).get("hybrid", {}))
        for q in queries[:10]:
            hyb.retrieve(q, args.k)
        steps: dict[str, list[float]] = {s: [] for s in ("embed", "faiss", "bm25", "fuse", "read chunks")}
        res["backend"] = embedder.active_backend
        if embedder.active_backend != "torch":  # the same step on PyTorch, for the ratio
            torch_embedder = Embedder(index.manifest.model, backend="torch")
            torch_embedder.embed(queries[:10])
            steps["embed on torch (not in total)"] = []
            for q in queries:
                t0 = time.perf_counter()
                torch_embedder.embed([q])
                steps["embed on torch (not in total)"].append((time.perf_counter() - t0) * 1000)
        for q in queries:
            t0 = time.perf_counter()
            vec = embedder.embed([q])[0]
            t1 = time.perf_counter()
            d = dense.search_vector(vec, hyb.depth)
            t2 = time.perf_counter()
            s = sparse._candidates(q, hyb.depth, None)
            t3 = time.perf_counter()
            runs = [d, s]
            fused = (rrf_fuse(runs, hyb.weights, hyb.rrf_k) if hyb.fusion == "rrf"
                     else weighted_fuse(runs, hyb.weights))[: args.k]
            t4 = time.perf_counter()
            index.store.chunks_by_rowid(r for r, _ in fused)
            t5 = time.perf_counter()
            for name, a, b in zip(steps, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5)):
                steps[name].append((b - a) * 1000)
        parts = [{"step": name, "p50 ms": float(np.percentile(v, 50)), "p95 ms": float(np.percentile(v, 95)),
                  "mean ms": float(np.mean(v))} for name, v in steps.items()]
        table(parts, ["step", "p50 ms", "p95 ms", "mean ms"],
              f"hybrid query, step by step ({hyb.fusion} fusion, depth {hyb.depth}, embedder on {res['backend']})")
        res["hybrid_steps"] = parts
        res["chunks"] = len(index)
    return res


# -------------------------------------------------------------------------- tune
def _chunk_texts(index: Any, title: str) -> tuple[np.ndarray, list[str]]:
    """Chunk texts for a BM25 variant: ``default`` (title inside the first chunk only),
    ``every`` (the title also above every later chunk) or ``none`` (title removed)."""
    rows = index.store.db.execute(
        "SELECT rowid, header || text, ordinal, json_extract(metadata, '$.title') FROM chunks ORDER BY rowid")
    ids, texts = [], []
    for rowid, text, ordinal, doc_title in rows:
        doc_title = doc_title or ""
        if title == "every" and ordinal > 0 and doc_title:
            text = f"{doc_title}\n\n{text}"
        elif title == "none" and ordinal == 0 and doc_title and text.startswith(doc_title + "\n\n"):
            text = text[len(doc_title) + 2:]
        ids.append(rowid)
        texts.append(text)
    return np.asarray(ids, dtype=np.int64), texts


def _dense_titled(index: Any, embedder: Any, queries: list[str], depth: int) -> tuple[list, int]:
    import faiss

    ids, vecs = zip(*index.store.iter_chunk_vectors())
    ids, vecs = np.concatenate(ids), np.concatenate(vecs).copy()
    pos = {int(r): i for i, r in enumerate(ids)}
    rows = index.store.db.execute(
        "SELECT rowid, header || text, json_extract(metadata, '$.title') FROM chunks WHERE ordinal > 0")
    todo = [(pos[r], f"{title}\n\n{text}") for r, text, title in rows if title]
    vecs[[i for i, _ in todo]] = embedder.embed([t for _, t in todo])
    flat = faiss.IndexFlatIP(vecs.shape[1])
    flat.add(vecs)
    scores, found = flat.search(embedder.embed(queries), depth)
    lists = [[(int(ids[j]), float(sc)) for sc, j in zip(srow, frow) if j >= 0] for srow, frow in zip(scores, found)]
    return lists, len(todo)


def _score(cands: Any, qrels: dict, mode: str, memo: dict | None = None, **params: Any) -> dict[str, float]:
    """Metrics of the fused top-``depth`` lists, cut to 100 chunks (the top of ``retrieve(k)`` for
    any ``k <= depth``; the retriever itself fuses ``max(k, depth)``, so a 50-deep hybrid asked
    for 100 chunks would fuse 100), and "recall@100 docs": Recall@100 over the top 100
    *documents* of ``retrieve(k=cache depth)`` (100 chunks hold only ~80 SciFact documents)."""
    from contextkit.evaluation import compute_metrics, fused_rankings

    main, _ = compute_metrics(qrels, fused_rankings(cands, mode, k=100, exact_depth=True, **params), METRICS)
    wide = {k: v for k, v in params.items() if k != "depth"}
    key = (id(cands), mode, tuple(sorted(wide.items())))
    if memo is None or key not in memo:
        docs, _ = compute_metrics(qrels, fused_rankings(cands, mode, k=cands.depth, depth=cands.depth, **wide),
                                  ("recall@100",))
        if memo is None:
            return {**main, "recall@100 docs": docs["recall@100"]}
        memo[key] = docs["recall@100"]
    return {**main, "recall@100 docs": memo[key]}


def _grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    grid = []
    for rrf_k, (dw, bw), depth in itertools.product(
            args.rrf_k, [(1.0, 1.0), (1.0, 0.5), (1.0, 0.67), (1.0, 0.8), (0.8, 1.0), (0.67, 1.0), (0.5, 1.0)],
            args.depth):
        grid.append({"fusion": "rrf", "rrf_k": rrf_k, "dense_weight": dw, "bm25_weight": bw, "depth": depth})
    for dw, depth in itertools.product([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], args.depth):
        grid.append({"fusion": "weighted", "dense_weight": dw, "bm25_weight": round(1 - dw, 2), "depth": depth})
    return grid


def cmd_tune(args: argparse.Namespace) -> dict[str, Any]:
    from contextkit.embedders import Embedder
    from contextkit.evaluation import CandidateLists, collect_candidates, load_beir
    from contextkit.index import Index
    from contextkit.index._bm25 import BM25Config, BM25Index

    data = load_beir(args.beir, args.split)
    qrels = data.qrels
    queries = {q: data.queries[q] for q in qrels}
    res: dict[str, Any] = {"split": args.split, "queries": len(queries), "cache_depth": args.cache_depth}
    log(f"{args.split}: {len(queries)} queries")
    with Index.open(args.index, read_only=True) as index:
        embedder = Embedder(index.manifest.model, long_text=index.manifest.embedder.get("long_text", "window"))
        t0 = time.perf_counter()
        cands = collect_candidates(index, embedder, queries, depth=args.cache_depth)
        res["cache_seconds"] = time.perf_counter() - t0
        log(f"candidates cached in {res['cache_seconds']:.1f} s (dense + BM25 top-{args.cache_depth})")
        chunks_per_doc = len(cands.corpus_ids) / max(1, len(set(cands.corpus_ids.values())))
        res["chunks"], res["chunks_per_doc"] = len(cands.corpus_ids), chunks_per_doc

        # BM25 variants: stemming x stop words, and title handling (no re-embedding needed).
        variants: dict[str, Any] = {}
        base = BM25Config(**index.manifest.bm25)
        for stem, stop, title in [(base.stemmer, base.stopwords, "default"), (None, base.stopwords, "default"),
                                  (base.stemmer, None, "default"), (None, None, "default"),
                                  (base.stemmer, base.stopwords, "every"), (base.stemmer, base.stopwords, "none")]:
            name = f"stem={stem or 'off'} stop={stop or 'off'} title={title}"
            if (stem, stop, title) == (base.stemmer, base.stopwords, "default"):
                variants[name] = cands  # exactly the index's own BM25
                continue
            t0 = time.perf_counter()
            bm25 = BM25Index(BM25Config(**{**base.model_dump(), "stemmer": stem, "stopwords": stop}))
            ids, texts = _chunk_texts(index, title)
            bm25.build(ids, texts, generation=0)
            variants[name] = cands.with_bm25(bm25, queries)
            log(f"{name}: built and searched in {time.perf_counter() - t0:.1f} s")

        if args.dense_titles:
            # Dense with the title above every chunk, not only the first (re-embeds the later chunks only).
            t0 = time.perf_counter()
            saved = args.dense_titles_cache
            if saved and saved.is_file():  # JSON, never pickle: a cache file is still a file someone loads
                dense_lists, n_embedded = json.loads(saved.read_text())
                dense_lists = [[(int(r), float(s)) for r, s in run] for run in dense_lists]
            else:
                dense_lists, n_embedded = _dense_titled(index, embedder, [queries[q] for q in cands.query_ids],
                                                        args.cache_depth)
                if saved:
                    saved.write_text(json.dumps([dense_lists, n_embedded]))
            res["dense_titles_seconds"], res["dense_titles_embedded"] = time.perf_counter() - t0, n_embedded
            log(f"dense with titles on every chunk: {n_embedded} chunks re-embedded in {res['dense_titles_seconds']:.0f} s")
            for name in [n for n in variants if n.endswith("title=default") or n.endswith("title=every")]:
                c = variants[name]
                variants[f"{name} +dense titles"] = CandidateLists(c.query_ids, dense_lists, c.bm25, c.corpus_ids,
                                                                    c.depth)

    default_hybrid = {"fusion": "rrf", "rrf_k": 60, "dense_weight": 1.0, "bm25_weight": 1.0, "depth": 100}
    grid = _grid(args)
    rows: list[dict[str, Any]] = []
    memo: dict = {}
    t0 = time.perf_counter()
    for name, c in variants.items():
        if "+dense" not in name:
            rows.append({"bm25": name, "mode": "bm25", **_score(c, qrels, "bm25")})
        if name == next(iter(variants)) or name.endswith("title=default +dense titles"):
            rows.append({"bm25": "-", "mode": "dense" + (" +titles" if "+dense" in name else ""),
                         **_score(c, qrels, "dense")})
        for params in grid:
            rows.append({"bm25": name, "mode": "hybrid", **params, **_score(c, qrels, "hybrid", memo, **params)})
        log(f"{name}: {len(grid)} hybrid settings scored ({time.perf_counter() - t0:.0f} s so far)")
    res["grid_seconds"] = time.perf_counter() - t0
    res["rows"] = rows
    cols = ["bm25", "mode", "fusion", "rrf_k", "dense_weight", "bm25_weight", "depth", *TUNE_METRICS]

    base_name = next(iter(variants))
    on_base = [r for r in rows if r["bm25"] == base_name and r["mode"] == "hybrid"]
    singles = [r for r in rows if r["mode"] != "hybrid"]
    table(singles, cols, f"{args.split}: dense and each BM25 variant alone ({len(queries)} queries)")
    is_default = lambda r: all(r.get(k) == v for k, v in default_hybrid.items())  # noqa: E731
    table([r for r in rows if r["mode"] == "hybrid" and is_default(r)], cols,
          f"{args.split}: hybrid with today's defaults (RRF k=60, 1:1, depth 100), per BM25 variant")
    best_base = sorted(on_base, key=lambda r: (-r["ndcg@10"], -r["recall@100"]))
    table(best_base[: args.top], cols, f"{args.split}: best {args.top} hybrid settings with the index's BM25, "
                                       f"by nDCG@10 (of {len(on_base)})")
    for fusion in ("rrf", "weighted"):
        by_depth = [max((r for r in on_base if r["fusion"] == fusion and r["depth"] == d), key=lambda r: r["ndcg@10"])
                    for d in args.depth]
        table(by_depth, cols, f"{args.split}: best {fusion} setting at each depth")
    rrf_by_k = [max((r for r in on_base if r["fusion"] == "rrf" and r["rrf_k"] == kk), key=lambda r: r["ndcg@10"])
                for kk in args.rrf_k]
    table(rrf_by_k, cols, f"{args.split}: best RRF setting for each k")
    best_any = sorted((r for r in rows if r["mode"] == "hybrid"), key=lambda r: (-r["ndcg@10"], -r["recall@100"]))
    table(best_any[: args.top], cols, f"{args.split}: best {args.top} over every BM25 variant")
    chosen = {k: best_base[0][k] for k in ("fusion", "rrf_k", "dense_weight", "bm25_weight", "depth")
              if k in best_base[0]}
    res["chosen_hybrid"] = chosen
    res["best_overall"] = best_any[0]
    print(f"\nchosen hybrid settings (train nDCG@10 {best_base[0]['ndcg@10']:.4f}): {chosen}")
    print(f"best over BM25 variants: {best_any[0]['bm25']} {json.dumps({k: best_any[0].get(k) for k in chosen})} "
          f"nDCG@10 {best_any[0]['ndcg@10']:.4f}")

    if args.test:
        from contextkit.evaluation import evaluate

        log("scoring the chosen settings once on the test split")
        # k=100: HybridRetriever fuses max(k, depth) per side, so a larger k would not score the chosen depth.
        report = evaluate(args.index, args.beir, "test", ("dense", "bm25", "hybrid"), 100, options={"hybrid": chosen},
                          progress=_progress())
        res["test"] = report.model_dump()
        print_report(report, "test, chosen hybrid settings")
    return res


# --------------------------------------------------------------------------- ann
def index_mb(index: Any) -> float:
    """The index's own size: FAISS's serialised form, which is what it holds in memory
    (vectors, graph links or inverted lists, ids)."""
    import faiss

    return faiss.serialize_index(index).nbytes / 2**20


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    _, ids = index.search(queries, k)
    return ids, (time.perf_counter() - t0) * 1000 / len(queries)


def _one_by_one(index: Any, queries: np.ndarray, k: int, n: int = 200) -> float:
    """Median latency (ms) of single-query searches, as a retriever issues them."""
    ms = []
    for q in queries[:n]:
        t0 = time.perf_counter()
        index.search(q[None, :], k)
        ms.append((time.perf_counter() - t0) * 1000)
    return float(np.median(ms))


def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def cmd_ann(args: argparse.Namespace) -> dict[str, Any]:
    import faiss

    from contextkit.index import IndexManifest
    from contextkit.index._faiss_kinds import ivf_nprobe

    defaults = {name: IndexManifest.model_fields[name].default
                for name in ("hnsw_m", "hnsw_ef_search", "hnsw_ef_construction")}
    n, d, nq, k = args.n, args.dim, args.queries, 10
    res: dict[str, Any] = {"n": n, "dim": d, "queries": nq, "k": k, "faiss": faiss.__version__,
                           "threads": faiss.omp_get_max_threads(), "contextkit_hnsw": defaults}
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    if args.vectors == "random":
        what = f"random {d}-d unit vectors"
        print("WARNING: random unit vectors are the hardest case for ANN search (no clusters; the 10th neighbour "
              "is barely nearer than the 1000th); real embeddings reach the same recall with much less effort.")
        x, q = _random_unit(rng, n, d), _random_unit(rng, nq, d)
    else:
        what = f"embedding-like {d}-d vectors (mixture fit to {args.index.name})"
        x, q = _embedding_like(args.index, rng, n, nq, d)
    res["vectors"] = what
    log(f"{n:,} {what}, {nq} queries, faiss {faiss.__version__}, {res['threads']} threads")
    res["generate_seconds"] = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []

    def build(name: str, make) -> Any:
        t0 = time.perf_counter()
        index = make()
        seconds = time.perf_counter() - t0
        mem = index_mb(index)
        log(f"{name}: built in {seconds:.1f} s, {mem:.0f} MB")
        return index, seconds, mem

    flat, flat_s, flat_mb = build("flat", lambda: _flat(x))
    truth, flat_ms = _search(flat, q, k)
    rows.append({"index": "flat (exact)", "setting": "-", "build s": flat_s, "memory MB": flat_mb,
                 "recall@10": 1.0, "ms/query batch": flat_ms, "ms/query single": _one_by_one(flat, q, k)})
    log(f"flat: {flat_ms:.2f} ms/query")

    if not args.skip_hnsw:
        hnsw, hnsw_s, hnsw_mb = build("hnsw", lambda: _hnsw(x, defaults))
        res["hnsw_build_seconds"] = hnsw_s
        reached = None
        efs = list(args.ef_search)
        for ef in _effort(efs, args.max_ef_search, lambda: reached):  # noqa: B023 - read late on purpose: has recall been reached yet?
            faiss.ParameterSpace().set_index_parameter(hnsw, "efSearch", ef)
            found, ms = _search(hnsw, q, k)
            r = _recall(found, truth)
            default = " (contextkit default)" if ef == defaults["hnsw_ef_search"] else ""
            rows.append({"index": f"hnsw M={defaults['hnsw_m']} efC={defaults['hnsw_ef_construction']}",
                         "setting": f"efSearch={ef}{default}", "build s": hnsw_s, "memory MB": hnsw_mb,
                         "recall@10": r, "ms/query batch": ms, "ms/query single": _one_by_one(hnsw, q, k)})
            log(f"hnsw efSearch={ef}: recall@10 {r:.3f}, {ms:.2f} ms/query")
            if r >= 0.95 and reached is None:
                reached = ef
            if r >= args.stop_recall:
                break
        res["hnsw_ef_search_for_0.95"] = reached
        del hnsw

    if not args.skip_ivf:
        nlist = int(min(4 * np.sqrt(n), n // 39))  # contextkit's formula (VectorFiles.rebuild)
        default_nprobe = ivf_nprobe(nlist)
        ivf, ivf_s, ivf_mb = build(f"ivf nlist={nlist}", lambda: _ivf(x, nlist, args.train_size))
        res["ivf_build_seconds"], res["ivf_nlist"] = ivf_s, nlist
        reached = None
        probes = sorted({p for p in args.nprobe if p <= nlist} | {default_nprobe})
        for nprobe in _effort(probes, nlist, lambda: reached):  # noqa: B023 - read late on purpose
            faiss.ParameterSpace().set_index_parameter(ivf, "nprobe", nprobe)
            found, ms = _search(ivf, q, k)
            r = _recall(found, truth)
            default = " (contextkit default)" if nprobe == default_nprobe else ""
            rows.append({"index": f"ivf-flat nlist={nlist}", "setting": f"nprobe={nprobe}{default}", "build s": ivf_s,
                         "memory MB": ivf_mb, "recall@10": r, "ms/query batch": ms,
                         "ms/query single": _one_by_one(ivf, q, k)})
            log(f"ivf nprobe={nprobe}: recall@10 {r:.3f}, {ms:.2f} ms/query")
            if r >= 0.95 and reached is None:
                reached = nprobe
            if r >= args.stop_recall:
                break
        res["ivf_nprobe_for_0.95"] = reached

    for r in rows:
        r["speed-up vs flat"] = rows[0]["ms/query single"] / r["ms/query single"]
    table(rows, ["index", "setting", "build s", "memory MB", "recall@10", "ms/query batch", "ms/query single",
                 "speed-up vs flat"],
          f"{n:,} {what}, {nq} queries, Recall@10 against exact search "
          f"(batch: all queries in one call; single: one query per call, median)")
    res["peak_rss_mb"] = peak_rss_mb()
    print(f"raw vectors: {n * d * 4 / 2**20:.0f} MB; process peak RSS {res['peak_rss_mb']:.0f} MB "
          f"(the vectors, the ground truth and every index built)")
    print(f"HNSW efSearch for recall@10 >= 0.95: {res.get('hnsw_ef_search_for_0.95')}; "
          f"IVF nprobe for recall@10 >= 0.95: {res.get('ivf_nprobe_for_0.95')}")
    res["rows"] = rows
    return res


def _random_unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = np.empty((n, d), dtype=np.float32)
    for lo in range(0, n, 100_000):
        part = rng.standard_normal((min(100_000, n - lo), d), dtype=np.float32)
        x[lo: lo + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return x


def fit_mixture(index_dir: Path, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 256-Gaussian mixture fit to a real index: centroids (spherical k-means, seed 1),
    weights, and ``mix`` with ``z @ mix ~ N(0, cov of the residuals)``."""
    import faiss

    from contextkit.index import Index

    with Index.open(index_dir, read_only=True) as index:
        inner = faiss.downcast_index(index._faiss.index)
        real = inner.reconstruct_n(0, inner.ntotal).astype(np.float32)
    if real.shape[1] != d:
        raise SystemExit(f"{index_dir} holds {real.shape[1]}-d vectors, not {d}-d")
    km = faiss.Kmeans(d, 256, niter=20, seed=1, spherical=True)
    km.train(real)
    _, assign = km.index.search(real, 1)
    assign = assign.ravel()
    resid = real - km.centroids[assign]
    eigval, eigvec = np.linalg.eigh(np.cov(resid, rowvar=False))
    mix = np.sqrt(np.clip(eigval, 0, None))[:, None] * eigvec.T
    weights = np.bincount(assign, minlength=256) / len(assign)
    return km.centroids.astype(np.float32), weights, mix.astype(np.float32)


def _embedding_like(index_dir: Path, rng: np.random.Generator, n: int, nq: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectors drawn like real embeddings: a mixture of 256 Gaussians fit to a real index.

    Centroids and cluster weights come from spherical k-means over the index's
    vectors; each draw is a centroid plus noise with the covariance of the real
    residuals (their full 384-d spectrum), normalised. Queries are separate draws.
    """
    centroids, weights, mix = fit_mixture(index_dir, d)

    def draw(m: int) -> np.ndarray:
        out = np.empty((m, d), dtype=np.float32)
        for lo in range(0, m, 100_000):
            size = min(100_000, m - lo)
            part = centroids[rng.choice(256, size, p=weights)] + rng.standard_normal((size, d)) @ mix
            out[lo: lo + size] = part / np.linalg.norm(part, axis=1, keepdims=True)
        return out

    return draw(n), draw(nq)


def _effort(values: list[int], cap: int, reached) -> Any:
    """The given settings, then x1.414 steps (up to ``cap``) while recall 0.95 is not reached."""
    yield from values
    value = values[-1]
    while reached() is None and value < cap:
        value = min(cap, int(value * 1.414))
        yield value


def _flat(x: np.ndarray) -> Any:
    import faiss

    index = faiss.IndexIDMap2(faiss.IndexFlatIP(x.shape[1]))
    index.add_with_ids(x, np.arange(len(x), dtype=np.int64))
    return index


def _hnsw(x: np.ndarray, p: dict[str, int]) -> Any:
    import faiss

    hnsw = faiss.IndexHNSWFlat(x.shape[1], p["hnsw_m"], faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = p["hnsw_ef_construction"]
    hnsw.hnsw.efSearch = p["hnsw_ef_search"]
    index = faiss.IndexIDMap2(hnsw)
    step = 100_000
    for lo in range(0, len(x), step):
        index.add_with_ids(x[lo: lo + step], np.arange(lo, min(lo + step, len(x)), dtype=np.int64))
        if len(x) > step:
            log(f"  hnsw: {min(lo + step, len(x)):,} added")
    return index


def _ivf(x: np.ndarray, nlist: int, train_size: int | None) -> Any:
    import faiss

    quantizer = faiss.IndexFlatIP(x.shape[1])
    ivf = faiss.IndexIVFFlat(quantizer, x.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    sample = x if not train_size or train_size >= len(x) else x[np.random.default_rng(1).choice(
        len(x), train_size, replace=False)]
    ivf.train(sample)
    index = faiss.IndexIDMap2(ivf)
    index.add_with_ids(x, np.arange(len(x), dtype=np.int64))
    return index


# -------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser, split: str) -> None:
        p.add_argument("--index", type=Path, default=INDEX, help=f"index folder (default {INDEX})")
        p.add_argument("--beir", type=Path, default=SCIFACT, help="BEIR folder (default shared SciFact)")
        p.add_argument("--split", default=split, help=f"qrels split (default {split})")
        p.add_argument("--option", action="append", default=[], help="MODE.NAME=VALUE retriever option")
        p.add_argument("--json", type=Path, default=None, help="write the results here")

    p = sub.add_parser("quality", help="metrics and latency on a BEIR split")
    common(p, "test")
    p.add_argument("--mode", action="append", choices=("dense", "bm25", "hybrid"))
    p.add_argument("-k", type=int, default=300, help="chunks per query (default 300, as contextkit eval)")
    p.add_argument("--bm25-stemmer", default=None, help="'' for none (default: the index's)")
    p.add_argument("--bm25-stopwords", default=None, help="'' for none (default: the index's)")
    p = sub.add_parser("latency", help="per-query latency at k=10, with a step breakdown")
    common(p, "test")
    p.add_argument("-k", type=int, default=10)
    p = sub.add_parser("tune", help="hybrid grid and BM25 variants on the train split")
    common(p, "train")
    p.add_argument("--rrf-k", type=int, nargs="+", default=[5, 10, 20, 30, 60, 100])
    p.add_argument("--depth", type=int, nargs="+", default=[50, 100, 200])
    p.add_argument("--cache-depth", type=int, default=300, help="candidates cached per side (default 300)")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--test", action="store_true", help="then score the chosen settings once on the test split")
    p.add_argument("--dense-titles", action="store_true",
                   help="also try dense with the title above every chunk (re-embeds ~4,200 chunks: ~6 min on 2 cores)")
    p.add_argument("--dense-titles-cache", type=Path, default=None,
                   help="keep those dense lists in this file and reuse them (same index, split and cache depth)")
    p = sub.add_parser("ann", help="FAISS flat vs HNSW vs IVF on synthetic vectors")
    p.add_argument("--vectors", choices=("embedding-like", "random"), default="embedding-like",
                   help="embedding-like: a mixture fit to --index's real vectors (default); random: the worst case")
    p.add_argument("--index", type=Path, default=INDEX, help=f"real index to fit (default {INDEX})")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--ef-search", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    p.add_argument("--nprobe", type=int, nargs="+", default=[1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    p.add_argument("--stop-recall", type=float, default=0.99, help="stop raising effort past this recall")
    p.add_argument("--max-ef-search", type=int, default=32768,
                   help="past the listed values, efSearch grows by x1.414 up to this until recall 0.95 (nprobe: up to nlist)")
    p.add_argument("--train-size", type=int, default=None, help="IVF k-means sample (default: all, as contextkit)")
    p.add_argument("--skip-hnsw", action="store_true")
    p.add_argument("--skip-ivf", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    if args.cmd in ("quality", "latency", "tune") and not args.beir.is_dir():
        sys.exit(f"{args.beir}: BEIR folder not found")
    started = time.perf_counter()
    res = {"quality": cmd_quality, "latency": cmd_latency, "tune": cmd_tune, "ann": cmd_ann}[args.cmd](args)
    res["seconds"] = time.perf_counter() - started
    print(f"\n{args.cmd}: {res['seconds']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
