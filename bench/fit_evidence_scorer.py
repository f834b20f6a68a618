"""Fit the learned evidence scorer's weights on the SciFact *train* claims (never the test ones).

Every cited abstract of every train claim with rationales (the items the bench builds,
see ``bench_compress_evidence.load``) is split and featurised exactly as
:meth:`EvidenceCompressor.features` does at run time; a sentence is positive when it
holds (or is part of) a rationale sentence. A logistic model with an L2 penalty is
fitted by Newton's method on standardised features (numpy only: the result is a few
numbers, written as JSON, no pickle).

The penalty and the selection rule are chosen by 5-fold cross-validation *by claim*
on the train split, scored the way the bench scores (rationale sentences kept at 2x,
through the real compressor); then the model is refitted on all train claims and
written to ``contextkit/compressors/evidence_scorer.json`` (``--out`` elsewhere), with
its provenance and the cross-validated figures. The test split is not read.

Run: ``python bench/fit_evidence_scorer.py`` (a few minutes on 2 cores: one embedding
pass, then cheap refits); ``--no-cv`` fits once with ``--l2``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from bench_compress_evidence import SCIFACT, FileCache, load, run_method  # noqa: E402

from contextkit.compressors._evidence_features import FEATURES  # noqa: E402
from contextkit.compressors._evidence_score import LinearScorer  # noqa: E402
from contextkit.compressors.evidence import EvidenceCompressor  # noqa: E402
from contextkit.tokenizers import get_tokenizer  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "contextkit" / "compressors" / "evidence_scorer.json"


def featurise(claims: list[dict], compressor: EvidenceCompressor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows, labels and the claim index of every sentence of every cited abstract."""
    rows: list[list[float]] = []
    labels: list[int] = []
    groups: list[int] = []
    for k, claim in enumerate(claims):
        rationales: dict[str, list[str]] = {}
        for doc_id, _, text in claim["rationales"]:
            rationales.setdefault(doc_id, []).append(text)
        for item, spans, feats in compressor.features(claim["text"], claim["items"]):
            for (a, b), row in zip(spans, feats):
                unit = item.text[a:b]
                rows.append(row)
                labels.append(int(any(r in unit or unit in r for r in rationales.get(item.id, []))))
                groups.append(k)
    return np.asarray(rows, dtype=np.float64), np.asarray(labels, dtype=np.float64), np.asarray(groups)


def fit(x: np.ndarray, y: np.ndarray, l2: float, names: tuple[str, ...] = FEATURES,
        iterations: int = 50) -> LinearScorer:
    """L2-penalised logistic regression (Newton / IRLS) on standardised ``x``; the bias is not penalised."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -50, 50)))
        grad = z.T @ (p - y) + penalty * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return LinearScorer(tuple(names), tuple(float(v) for v in w[1:]), tuple(float(v) for v in mean),
                        tuple(float(v) for v in scale), float(w[0]))


def kept_share(scorer: LinearScorer, claims: list[dict], embedder: Any, tok: Any, selection: Any,
               ratio: float = 2.0) -> dict[str, Any]:
    """The bench's measure for ``scorer`` on ``claims`` (through the real compressor, as the
    learned scorer; the fused default mixes these weights in where the text is an abstract)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.json"
        path.write_text(json.dumps(scorer.to_dict()), encoding="utf-8")
        # the learned scorer alone, with the defaults the shipped weights were chosen under
        comp = EvidenceCompressor(embedder, tokenizer=tok, weights=str(path), selection=selection, scorer="learned",
                                  min_sentences=1, cut=False)
        return run_method("evidence", claims, ratio, tok, comp, 0)


def dumps(data: dict[str, Any]) -> str:
    """JSON with one key a line and each list on one line (numbers rounded to 6 significant digits),
    so the file reads as a table of weights and a refit shows as a small diff."""
    def rounded(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.6g}")
        if isinstance(v, list):
            return [rounded(x) for x in v]
        if isinstance(v, dict):
            return {k: rounded(x) for k, x in v.items()}
        return v

    lines = [f"  {json.dumps(k)}: {json.dumps(rounded(v), ensure_ascii=False)}" for k, v in data.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=SCIFACT)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--l2", type=float, nargs="+", default=[0.3, 3.0, 30.0], help="penalties tried by CV")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--cache", type=Path, default=None, help="an .npz embedding cache (shared with the bench)")
    ap.add_argument("--no-cv", action="store_true", help="fit once with the first --l2, selection 'score'")
    args = ap.parse_args()

    from contextkit.embedders import Embedder

    claims, stats = load(args.data, "train", None)
    tok = get_tokenizer("cl100k_base")
    cache = FileCache(args.cache)
    embedder = Embedder(cache=cache)
    t0 = time.perf_counter()
    x, y, groups = featurise(claims, EvidenceCompressor(embedder, tokenizer=tok, scorer="linear"))
    cache.save()
    print(f"train: {len(claims)} claims, {len(y)} sentences, {int(y.sum())} positive "
          f"({stats['located']}/{stats['rationale_sentences']} rationale sentences located); "
          f"features in {time.perf_counter() - t0:.0f} s")

    cv: dict[str, float] = {}
    best = (args.l2[0], "score")
    if not args.no_cv:
        order = list(range(len(claims)))
        random.Random(args.seed).shuffle(order)
        fold_of = {c: i % args.folds for i, c in enumerate(order)}
        fold = np.asarray([fold_of[g] for g in groups])
        for l2 in args.l2:
            for selection in ("score", "density"):
                kept = total = 0
                for f in range(args.folds):
                    scorer = fit(x[fold != f], y[fold != f], l2)
                    r = kept_share(scorer, [c for k, c in enumerate(claims) if fold_of[k] == f], embedder, tok,
                                   selection)
                    kept, total = kept + r["kept"], total + r["total"]
                cv[f"l2={l2} {selection}"] = kept / total
                print(f"  cv l2={l2:<5} selection={selection:<8} kept at 2x: {kept}/{total} = {kept / total:.1%}",
                      flush=True)
        best_key = max(cv, key=lambda k: cv[k])
        best = (float(best_key.split()[0][3:]), best_key.split()[1])
    scorer = replace(fit(x, y, best[0]), selection=best[1], model=embedder.model_name)
    train_fit = kept_share(scorer, claims, embedder, tok, best[1])
    extra = {
        "fitted_on": f"SciFact train (BEIR qrels/train.tsv): {len(claims)} claims with rationales, all their cited "
                     f"abstracts (text only), {len(y)} sentences, {int(y.sum())} positive",
        "l2": best[0], "cv_kept_share_at_2x": {k: round(v, 4) for k, v in cv.items()},
        "train_kept_share_at_2x": round(train_fit["share"], 4),
        "refit": "python bench/fit_evidence_scorer.py",
    }
    args.out.write_text(dumps(scorer.to_dict(**extra)), encoding="utf-8")
    print(f"best by cv: l2={best[0]}, selection={best[1]}; on all train (in-sample): {train_fit['share']:.1%}")
    print(f"wrote {args.out}")
    for name, w in sorted(zip(scorer.features, scorer.weights), key=lambda t: -abs(t[1])):
        print(f"  {name:<16} {w:+.3f}")


if __name__ == "__main__":
    main()
