"""Held-out retrieval: contextkit's default retrieval against plain dense and whole-document BM25.

For each BEIR-format set, nDCG@10 in one run of:

* **plain dense**: all-MiniLM-L6-v2 through sentence-transformers over whole documents (title and
  text, truncated as the model truncates: 256 word pieces), exact cosine search;
* **whole-doc BM25**: bm25s over whole documents, with contextkit's BM25 settings (Lucene scoring,
  English stemmer and stop words);
* **contextkit dense / bm25 / hybrid** (``contextkit.evaluation.evaluate``: the retrievers as
  ``search_index`` builds them, over an index ingested with the defaults: 128-token chunks, a
  document ranked by its best chunk), the hybrid with its default (adaptive) fusion and, for
  comparison, the fixed 50/50 weighted fusion that was the default before issue 29.

Ratios to the better baseline and a paired randomisation test over queries (10,000 sign flips) are
printed for the hybrid. Sets: SciFact (``../shared/data/beir_scifact``; ``--split``, default test),
XQuAD-en as BEIR (``--xquad``, default ``../extdata/xquad/xquad.en.json``: 240 paragraphs, 1,190
questions, the paragraph holding a question its one relevant document), and any other BEIR folder
(``--beir NAME=DIR[:SPLIT]``). What tuned what: the fusion (adaptive weighting, 0.5/0.5 base
weights, depth 100) and the BM25 title setting were chosen on SciFact TRAIN only (``tune``);
SciFact test and XQuAD were not used for any choice.

    python bench/bench_heldout_retrieval.py [run] [--work DIR] [--json FILE]
    python bench/bench_heldout_retrieval.py tune            # SciFact train: fusion settings

Indexes and the plain-dense document vectors are cached under ``--work`` (default
``/tmp/ck-heldout``); a first run embeds every corpus twice (about 20 minutes on 2 cores).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _beir_sets import xquad_as_beir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "beir_scifact"
XQUAD = ROOT.parent / "extdata" / "xquad" / "xquad.en.json"
WORK = Path("/tmp/ck-heldout")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _sets(args: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """(name, BEIR folder, split) of every set asked for; exit 2 naming what is missing."""
    sets = []
    if args.scifact is not None:
        if not (args.scifact / "corpus.jsonl").is_file():
            print(f"SciFact not found at {args.scifact}: put BEIR's scifact folder there (see ../shared/data/README.md) "
                  "or pass --scifact DIR (--scifact '' to skip)", file=sys.stderr)
            sys.exit(2)
        sets.append(("scifact", args.scifact, args.split))
    if args.xquad is not None:
        if not args.xquad.is_file():
            print(f"XQuAD not found at {args.xquad}: download xquad.en.json from github.com/google-deepmind/xquad "
                  "(CC BY-SA 4.0) or pass --xquad FILE (--xquad '' to skip)", file=sys.stderr)
            sys.exit(2)
        sets.append(("xquad", xquad_as_beir(args.xquad, args.work / "xquad-beir"), "test"))
    for item in args.beir:
        name, _, rest = item.partition("=")
        folder, _, split = rest.partition(":")
        if not (Path(folder) / "corpus.jsonl").is_file():
            print(f"--beir {item}: no corpus.jsonl in {folder}", file=sys.stderr)
            sys.exit(2)
        sets.append((name, Path(folder), split or "test"))
    return sets


def _documents(beir: Path) -> tuple[list[str], list[str]]:
    """Corpus ids and whole-document texts (title, blank line, text: as contextkit's JSONL loader builds them)."""
    ids, texts = [], []
    with open(beir / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            ids.append(str(d["_id"]))
            texts.append(f"{d['title']}\n\n{d['text']}" if d.get("title") else d["text"])
    return ids, texts


def plain_dense(name: str, beir: Path, queries: list[str], work: Path, depth: int = 100) -> list[list[str]]:
    """sentence-transformers over whole documents (vectors cached as .npy), exact cosine."""
    from sentence_transformers import SentenceTransformer

    from contextkit.embedders import default_model_path

    ids, texts = _documents(beir)
    model = SentenceTransformer(str(default_model_path()), device="cpu")
    cache = work / f"{name}.plain-dense.npy"
    if cache.is_file():
        docs = np.load(cache)
    else:
        log(f"{name}: plain dense over {len(texts):,} whole documents ...")
        docs = model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
        np.save(cache, docs)
    q = model.encode(queries, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    sims = q @ docs.T
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:depth]] for row in sims]


def whole_doc_bm25(beir: Path, queries: list[str], depth: int = 100) -> list[list[str]]:
    """bm25s over whole documents with contextkit's BM25 settings (only documents sharing a term come back)."""
    import bm25s
    import Stemmer

    from contextkit.index._bm25 import BM25Config

    config = BM25Config()
    stemmer = Stemmer.Stemmer(config.stemmer) if config.stemmer else None
    ids, texts = _documents(beir)
    model = bm25s.BM25(method=config.method, k1=config.k1, b=config.b)
    model.index(bm25s.tokenize(texts, stopwords=config.stopwords, stemmer=stemmer, show_progress=False),
                show_progress=False)
    q = bm25s.tokenize(queries, stopwords=config.stopwords, stemmer=stemmer, show_progress=False)
    found, scores = model.retrieve(q, k=min(depth, len(ids)), show_progress=False, n_threads=1)
    return [[ids[j] for j, s in zip(row, srow) if s > 0] for row, srow in zip(found, scores)]


def paired_p(a: np.ndarray, b: np.ndarray, n: int = 10_000, seed: int = 0) -> float:
    """Two-sided paired randomisation test over queries (sign flips of the per-query differences)."""
    diff = a - b
    flips = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n, len(diff)))
    return float((np.abs((flips * diff).mean(1)) >= abs(diff.mean()) - 1e-12).mean())


def run_set(name: str, beir: Path, split: str, work: Path) -> dict[str, Any]:
    from contextkit.evaluation import compute_metrics, evaluate, load_beir

    data = load_beir(beir, split)
    qids = sorted(data.qrels, key=lambda q: (len(q), q))
    texts = [data.queries[q] for q in qids]
    per: dict[str, np.ndarray] = {}

    def score(label: str, rankings: list[list[str]]) -> None:
        _, by = compute_metrics(data.qrels, dict(zip(qids, rankings)), ("ndcg@10",))
        per[label] = np.array([by[q]["ndcg@10"] for q in qids])

    score("plain dense", plain_dense(name, beir, texts, work))
    score("whole-doc bm25", whole_doc_bm25(beir, texts))
    index = work / f"{name}.ck-index"
    log(f"{name}: contextkit dense / bm25 / hybrid over {index} (ingested with the defaults when missing) ...")
    report = evaluate(index, beir, split, ("dense", "bm25", "hybrid"), k=100, per_query=True)
    old = evaluate(index, beir, split, ("hybrid",), k=100, per_query=True,
                   options={"hybrid": {"fusion": "weighted"}})
    for label, result in (("contextkit dense", report.result("dense")), ("contextkit bm25", report.result("bm25")),
                          ("contextkit hybrid (default)", report.result("hybrid")),
                          ("contextkit hybrid, weighted 0.5/0.5", old.result("hybrid"))):
        assert result.per_query is not None
        per[label] = np.array([result.per_query[q]["ndcg@10"] for q in qids])
    return _summary(name, split, per)


def _summary(name: str, split: str, per: dict[str, np.ndarray]) -> dict[str, Any]:
    means = {k: float(v.mean()) for k, v in per.items()}
    best = max(("plain dense", "whole-doc bm25"), key=lambda k: means[k])
    hybrid = per["contextkit hybrid (default)"]
    out = {"set": name, "split": split, "queries": len(hybrid), "ndcg@10": means, "better baseline": best,
           "hybrid / better baseline": means["contextkit hybrid (default)"] / means[best],
           "p hybrid vs better baseline": paired_p(hybrid, per[best]),
           "p hybrid vs weighted 0.5/0.5": paired_p(hybrid, per["contextkit hybrid, weighted 0.5/0.5"]),
           "contextkit bm25 / whole-doc bm25": means["contextkit bm25"] / means["whole-doc bm25"]}
    print(f"\n{name} ({split}, {len(hybrid)} queries), nDCG@10")
    for label, value in means.items():
        print(f"  {label:38s} {value:.4f}")
    print(f"  hybrid / {best}: {out['hybrid / better baseline']:.3f} (p = {out['p hybrid vs better baseline']:.4f}); "
          f"hybrid vs weighted 0.5/0.5: p = {out['p hybrid vs weighted 0.5/0.5']:.4f}; "
          f"contextkit bm25 / whole-doc bm25: {out['contextkit bm25 / whole-doc bm25']:.3f}")
    return out


def cmd_tune(args: argparse.Namespace) -> dict[str, Any]:
    """SciFact train: nDCG@10 of the fusion choices over candidates cached once (the retriever's own fusion)."""
    from contextkit.embedders import embedder_for
    from contextkit.evaluation import collect_candidates, compute_metrics, fused_rankings, load_beir
    from contextkit.index import Index

    data = load_beir(args.scifact, "train")
    queries = {q: data.queries[q] for q in data.qrels}
    index_dir = args.work / "scifact.ck-index"
    if not Index.exists(index_dir):
        from contextkit.evaluation import evaluate

        evaluate(index_dir, args.scifact, "train", ("bm25",), k=10, limit=1)  # ingests with the defaults
    with Index.open(index_dir, read_only=True) as index:
        cands = collect_candidates(index, embedder_for(index), queries, depth=100)
    rows = {}
    for fusion in ("weighted", "adaptive"):
        for dense_weight in (0.3, 0.4, 0.5, 0.6, 0.7):
            ranked = fused_rankings(cands, fusion=fusion, dense_weight=dense_weight, bm25_weight=1 - dense_weight,
                                    depth=100, k=100, exact_depth=True)
            rows[f"{fusion} dense_weight={dense_weight}"] = compute_metrics(data.qrels, ranked, ("ndcg@10",))[0]["ndcg@10"]
    rows["rrf k=60"] = compute_metrics(data.qrels, fused_rankings(cands, fusion="rrf", depth=100, k=100,
                                                                  exact_depth=True), ("ndcg@10",))[0]["ndcg@10"]
    print(f"\nSciFact train ({len(queries)} queries), nDCG@10 of the hybrid over the cached candidates")
    for label, value in sorted(rows.items(), key=lambda kv: -kv[1]):
        print(f"  {label:32s} {value:.4f}")
    return {"split": "train", "queries": len(queries), "ndcg@10": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", nargs="?", default="run", choices=("run", "tune"))
    ap.add_argument("--scifact", type=lambda s: Path(s) if s else None, default=SCIFACT,
                    help="SciFact BEIR folder ('' to skip in `run`)")
    ap.add_argument("--split", default="test", help="SciFact qrels split for `run` (default test)")
    ap.add_argument("--xquad", type=lambda s: Path(s) if s else None, default=XQUAD,
                    help="XQuAD SQuAD-format JSON ('' to skip)")
    ap.add_argument("--beir", action="append", default=[], help="NAME=DIR[:SPLIT], another BEIR folder")
    ap.add_argument("--work", type=Path, default=WORK, help=f"indexes and cached vectors (default {WORK})")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.command == "tune":
        if args.scifact is None:
            ap.error("tune needs SciFact (--scifact DIR)")
        result: Any = cmd_tune(args)
    else:
        result = [run_set(name, beir, split, args.work) for name, beir, split in _sets(args)]
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
