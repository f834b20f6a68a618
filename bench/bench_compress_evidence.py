"""Evidence compression on SciFact: are the rationale sentences kept?

SciFact claims (``shared/data/beir_scifact/queries.jsonl``) carry, in ``metadata``,
the abstracts that support or contradict them and, per abstract, the indices of the
rationale sentences. For every claim with rationales (test and train splits, from
``qrels/``), its cited abstracts become the evidence items (``title`` + a blank line +
``text``, in the order cited) and the claim the query; each method compresses them to
a target ratio of 2x and 3x (output tokens at most input tokens / ratio, cl100k_base),
and we count the rationale sentences whose text is fully contained in the output
item of their abstract.

Methods, all on the same sentence units (``split_sentences``) and the same budget:

* ``evidence``: :class:`contextkit.compressors.evidence.EvidenceCompressor` (defaults:
  0.7 embedding + 0.3 lexical, min_sentences=1);
* ``lead``: truncation, each abstract keeps its leading sentences (title first) while
  they fit in its share (its tokens / ratio), counted exactly;
* ``random``: each abstract keeps sentences in a seeded random order, skipping those
  that do not fit, until its share is full;
* ``oracle``: the claim's budget filled with the rationale sentences first: an upper
  bound, since rationales that do not fit in the budget cannot all be kept by any
  method (SciFact's results sentences are long, and some abstracts cite many);
* with ``--ablations``: ``evidence`` with the embedding alone and the lexical score alone.

Where the rationale indices point. BEIR's SciFact ``text`` is the original sentence
list (split by scispaCy) joined by single spaces, so every original boundary is a
space after a sentence end; the list itself is not in BEIR. We rebuild it with
``split_sentences`` (which, like scispaCy, does not split at ``et al.``, ``P.
falciparum``, ``e.g.``), and, for an abstract where a cited index is past the end,
with a plain split at every ``[.?!]`` + space (``(ref. 2)`` was split there). The
script prints how many rationale sentences were located, how many abstracts the two
splits disagree on, and a plausibility check: how often the located sentence is the
abstract's best lexical match for the claim, compared with its neighbours (a shifted
mapping would make a neighbour win).

Tuning (``--tune``): a grid over the embedding/lexical weights (summing to 1) and
``position_weight`` (a prior for later sentences: abstracts put findings last) on the
train claims at 2x; the best is then reported on the test claims (``evidence-tuned``).
The defaults are not tuned on any claim.

Speed: the first ratio's ``evidence`` pass runs with an in-memory embedding cache
that starts empty (abstracts cited by several claims are embedded once: the cache
hits are printed); sentences/s and ms per claim are for that pass, model loading and
warm-up excluded. Later passes hit the cache and show the cost of everything else.

Run: ``python bench/bench_compress_evidence.py`` (all 693 claims, a few minutes on 2
cores); ``--limit 50`` for a quick look; ``--split test``; ``--tune``; ``--json FILE``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contextkit.assembly.sections import EvidenceItem  # noqa: E402
from contextkit.compressors.evidence import EvidenceCompressor, split_sentences  # noqa: E402
from contextkit.tokenizers import get_tokenizer  # noqa: E402

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir_scifact"
_PLAIN = re.compile(r"(?:(?<=[.?!])|(?<=[.?!][)\"\]']))\s+")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = set("the of in and a to is with for are by on was were that as or at an be from".split())
SEPARATOR = " … "


# ---------------------------------------------------------------------- data
def load(folder: Path, split: str, limit: int | None) -> tuple[dict[str, dict], list[dict]]:
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            corpus[doc["_id"]] = doc
    splits: dict[str, str] = {}
    for name in ("train", "test"):
        path = folder / "qrels" / f"{name}.tsv"
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines()[1:]:
                splits.setdefault(line.split("\t")[0], name)
    claims = []
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            meta = q.get("metadata") or {}
            sets = {d: [r["sentences"] for r in rs] for d, rs in meta.items() if d in corpus and rs}
            if not sets or q["_id"] not in splits:
                continue
            if split != "all" and splits[q["_id"]] != split:
                continue
            claims.append({"id": q["_id"], "text": q["text"], "split": splits[q["_id"]], "sets": sets})
    return corpus, claims[:limit] if limit else claims


def _terms(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _STOP


def locate(corpus: dict[str, dict], claims: list[dict], title: bool) -> dict[str, Any]:
    """Map rationale indices to sentence texts; returns the alignment statistics."""
    stats = {"rationale_sentences": 0, "located": 0, "plain_split_docs": 0, "docs": 0, "docs_splits_disagree": 0,
             "best_match_at_index": 0, "best_match_at_neighbour": 0}
    sentences_of: dict[str, list[str]] = {}
    for claim in claims:
        claim["rationales"] = []  # (doc_id, index, text)
        for doc_id, sets in claim["sets"].items():
            text = corpus[doc_id]["text"]
            if doc_id not in sentences_of:
                smart = [text[a:b] for a, b in split_sentences(text)]
                plain = [s for s in _PLAIN.split(text) if s.strip()]
                cited = max(i for c in claims for d, ss in c["sets"].items() if d == doc_id for s in ss for i in s)
                stats["docs"] += 1
                stats["docs_splits_disagree"] += len(smart) != len(plain)
                if cited >= len(smart) and cited < len(plain):
                    sentences_of[doc_id] = plain
                    stats["plain_split_docs"] += 1
                else:
                    sentences_of[doc_id] = smart
            sents = sentences_of[doc_id]
            qt = _terms(claim["text"])
            overlap = [len(qt & _terms(s)) for s in sents]
            for index in sorted({i for s in sets for i in s}):
                stats["rationale_sentences"] += 1
                if index >= len(sents):
                    continue
                stats["located"] += 1
                claim["rationales"].append((doc_id, index, sents[index]))
                if overlap[index] == max(overlap):
                    stats["best_match_at_index"] += 1
                for j in (index - 1, index + 1):
                    if 0 <= j < len(sents) and overlap[j] == max(overlap) and overlap[index] < max(overlap):
                        stats["best_match_at_neighbour"] += 1
                        break
        claim["items"] = [
            EvidenceItem(id=d, text=(corpus[d]["title"].strip() + "\n\n" if title and corpus[d]["title"].strip()
                                     else "") + corpus[d]["text"], source="scifact", doc_id=d)
            for d in claim["sets"]]
    return stats


# ------------------------------------------------------------------ methods
def _join(text: str, spans: list[tuple[int, int]], keep: list[int]) -> str:
    if len(keep) == len(spans):
        return text
    runs: list[list[int]] = []
    for i in sorted(keep):
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return SEPARATOR.join(text[spans[r[0]][0]:spans[r[-1]][1]] for r in runs)


def oracle(items: list[EvidenceItem], ratio: float, tok, rationales: set[str]) -> dict[str, str]:
    """The claim's budget (as the compressor's) filled with rationale sentences first, then the rest."""
    budget = int(sum(tok.count(it.text) for it in items) / ratio)
    spans = {it.id: split_sentences(it.text) for it in items}
    order = [(not any(r in it.text[a:b] for r in rationales), k, i)
             for k, it in enumerate(items) for i, (a, b) in enumerate(spans[it.id])]
    keep: dict[str, list[int]] = {it.id: [] for it in items}
    counts = dict.fromkeys(keep, 0)
    for _, k, i in sorted(order):
        it = items[k]
        new = tok.count(_join(it.text, spans[it.id], keep[it.id] + [i]))
        if sum(counts.values()) - counts[it.id] + new <= budget:
            keep[it.id].append(i)
            counts[it.id] = new
    return {it.id: _join(it.text, spans[it.id], keep[it.id]) for it in items if keep[it.id]}


def baseline(items: list[EvidenceItem], ratio: float, tok, order: str, rng: random.Random) -> dict[str, str]:
    """Per item: sentences in ``order`` (lead stops at the first that does not fit)."""
    out = {}
    for item in items:
        spans = split_sentences(item.text)
        budget = int(tok.count(item.text) / ratio)
        ranked = list(range(len(spans)))
        if order == "random":
            rng.shuffle(ranked)
        keep: list[int] = []
        for i in ranked:
            trial = _join(item.text, spans, keep + [i])
            if tok.count(trial) <= budget:
                keep.append(i)
            elif order == "lead":
                break
        if keep:
            out[item.id] = _join(item.text, spans, keep)
    return out


def run_method(name: str, claims: list[dict], ratio: float, tok, compressor: EvidenceCompressor | None,
               seed: int) -> dict[str, Any]:
    kept = total = sets_kept = sets_total = tokens_in = tokens_out = 0
    claim_ms: list[float] = []
    sentences = 0
    for claim in claims:
        items = claim["items"]
        tokens_in += sum(tok.count(it.text) for it in items)
        if name.startswith("evidence"):
            t0 = time.perf_counter()
            out_items, report = compressor.compress(claim["text"], items, target_ratio=ratio)
            claim_ms.append((time.perf_counter() - t0) * 1000)
            sentences += report.details["sentences_in"]
            out = {it.id: it.text for it in out_items}
            assert report.output_tokens <= int(report.input_tokens / ratio), (claim["id"], report)
        elif name == "oracle":
            out = oracle(items, ratio, tok, {s for _, _, s in claim["rationales"]})
        else:
            out = baseline(items, ratio, tok, name, random.Random(f"{seed}:{claim['id']}"))
        tokens_out += sum(tok.count(t) for t in out.values())
        located = {(d, i): s in out.get(d, "") for d, i, s in claim["rationales"]}
        kept += sum(located.values())
        total += len(located)
        for doc_id, sets in claim["sets"].items():
            for s in sets:
                if all((doc_id, i) in located for i in s):
                    sets_total += 1
                    sets_kept += all(located[(doc_id, i)] for i in s)
    result = {"method": name, "ratio": ratio, "kept": kept, "total": total, "share": kept / total if total else 0.0,
              "sets_kept": sets_kept, "sets_total": sets_total, "tokens_in": tokens_in, "tokens_out": tokens_out,
              "achieved_ratio": tokens_in / tokens_out if tokens_out else float("inf")}
    if claim_ms:
        seconds = sum(claim_ms) / 1000
        result.update(sentences=sentences, seconds=seconds, sentences_per_s=sentences / seconds,
                      ms_per_claim=statistics.mean(claim_ms), ms_per_claim_p50=statistics.median(claim_ms))
    return result


def _row(r: dict[str, Any], split: str) -> str:
    line = (f"{split:<6} {r['ratio']:>4.1f}x  {r['method']:<16} {r['kept']:>5}/{r['total']:<5} {r['share']:>7.1%}   "
            f"{r['sets_kept']:>4}/{r['sets_total']:<4} {r['sets_kept'] / max(r['sets_total'], 1):>6.1%}   "
            f"{r['achieved_ratio']:>5.2f}x")
    if "sentences_per_s" in r:
        line += f"   {r['sentences_per_s']:>6.0f} sent/s  {r['ms_per_claim']:>6.1f} ms/claim"
    return line


HEADER = ("split  ratio  method            rationale kept     sets kept     achieved   speed\n"
          + "-" * 104)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=SCIFACT, help=f"BEIR SciFact folder (default {SCIFACT})")
    ap.add_argument("--split", choices=("all", "test", "train"), default="all")
    ap.add_argument("--limit", type=int, default=None, help="first N claims with rationales (after --split)")
    ap.add_argument("--ratios", type=float, nargs="+", default=[2.0, 3.0])
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--no-title", action="store_true", help="abstract text only, without the title")
    ap.add_argument("--ablations", action="store_true", help="also embedding-only and lexical-only scoring")
    ap.add_argument("--tune", action="store_true", help="grid the weights on train at 2x, report the best on test")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    corpus, claims = load(args.data, args.split, args.limit)
    stats = locate(corpus, claims, title=not args.no_title)
    n_split = {s: sum(c["split"] == s for c in claims) for s in ("test", "train")}
    print(f"SciFact: {len(claims)} claims with rationales ({n_split['test']} test, {n_split['train']} train), "
          f"{stats['docs']} cited abstracts, title {'off' if args.no_title else 'on'}")
    print(f"rationale sentences located: {stats['located']}/{stats['rationale_sentences']} "
          f"(plain [.?!] split used for {stats['plain_split_docs']} abstracts; the two splits disagree on "
          f"{stats['docs_splits_disagree']} of {stats['docs']})")
    print(f"alignment check: the located sentence is the abstract's best lexical match for the claim in "
          f"{stats['best_match_at_index']}/{stats['located']}; a neighbour beats it in "
          f"{stats['best_match_at_neighbour']}/{stats['located']}")

    from contextkit.embedders import Embedder, MemoryCache

    tok = get_tokenizer("cl100k_base")
    embedder = Embedder(cache=MemoryCache())
    t0 = time.perf_counter()
    embedder.embed(["warm-up: the model loads and runs once outside the clock"])
    print(f"model: {embedder.model_name} ({embedder.active_backend}), loaded in {time.perf_counter() - t0:.1f} s; "
          f"torch threads: {_threads()}")
    embedder.cache = MemoryCache()
    embedder.report = type(embedder.report)()
    compressor = EvidenceCompressor(embedder, tokenizer=tok)

    results: list[dict[str, Any]] = []
    splits = [s for s in ("test", "train") if n_split[s]]
    print()
    print(HEADER)
    for ri, ratio in enumerate(args.ratios):
        for split in splits:
            part = [c for c in claims if c["split"] == split]
            methods = ["evidence", "lead", "random", "oracle"]
            for name in methods:
                r = run_method(name, part, ratio, tok, compressor, args.seed)
                r["split"] = split
                results.append(r)
                print(_row(r, split), flush=True)
        if ri == 0:
            rep = embedder.report
            print(f"   (first pass: {rep.texts} texts embedded in the passes above, {rep.cache_hits} cache hits)")
    if args.ablations:
        for name, we, wl in (("evidence-emb", 1.0, 0.0), ("evidence-lex", 0.0, 1.0)):
            ablated = EvidenceCompressor(embedder, tokenizer=tok, weight_embedding=we, weight_lexical=wl)
            for ratio in args.ratios:
                for split in splits:
                    part = [c for c in claims if c["split"] == split]
                    r = run_method(name, part, ratio, tok, ablated, args.seed)
                    r["split"] = split
                    results.append(r)
                    print(_row(r, split), flush=True)
    tuning = None
    if args.tune:
        tuning = tune(claims, tok, embedder, args)
    print()
    for split in splits:
        at2 = [r for r in results if r["method"] == "evidence" and r["split"] == split and r["ratio"] == 2.0]
        if at2:
            print(f"goal (>= 95% of rationale sentences kept at 2x), {split}: {at2[0]['share']:.1%} "
                  f"-> {'met' if at2[0]['share'] >= 0.95 else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps({"alignment": stats, "results": results, "tuning": tuning}, indent=2))


def tune(claims: list[dict], tok, embedder, args: argparse.Namespace) -> dict[str, Any]:
    train = [c for c in claims if c["split"] == "train"]
    test = [c for c in claims if c["split"] == "test"]
    if not train:
        print("--tune needs train claims")
        return {}
    print("\ntuning on train at 2x: weight_embedding (weight_lexical = 1 - it) x position_weight")
    grid: dict[tuple[float, float], float] = {}
    weights = (0.0, 0.3, 0.5, 0.7, 0.9, 1.0)
    positions = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
    print("  weight_embedding " + "".join(f"  pos {p:<4}" for p in positions))
    for we in weights:
        line = f"  {we:<16.1f}"
        for pw in positions:
            comp = EvidenceCompressor(embedder, tokenizer=tok, weight_embedding=we, weight_lexical=round(1 - we, 2),
                                      position_weight=pw)
            grid[(we, pw)] = run_method("evidence", train, 2.0, tok, comp, args.seed)["share"]
            line += f"  {grid[(we, pw)]:>8.1%}"
        print(line, flush=True)
    best = max(grid, key=lambda k: (grid[k], -abs(k[0] - 0.7), -k[1]))
    out: dict[str, Any] = {"grid": {f"{k[0]}/{k[1]}": v for k, v in grid.items()},
                           "best": {"weight_embedding": best[0], "position_weight": best[1]}}
    print(f"  best on train: weight_embedding {best[0]}, position_weight {best[1]} ({grid[best]:.1%})")
    if test:
        comp = EvidenceCompressor(embedder, tokenizer=tok, weight_embedding=best[0],
                                  weight_lexical=round(1 - best[0], 2), position_weight=best[1])
        for ratio in args.ratios:
            r = run_method("evidence", test, ratio, tok, comp, args.seed)
            r.update(split="test", method="evidence-tuned")
            out[f"test_{ratio}"] = r
            print(_row(r, "test"))
    return out


def _threads() -> int:
    try:
        import torch

        return torch.get_num_threads()
    except ImportError:  # pragma: no cover
        return 0


if __name__ == "__main__":
    main()
