"""Evidence compression on SciFact: are the rationale sentences kept?

SciFact claims (``shared/data/beir_scifact/queries.jsonl``) carry, in ``metadata``,
the cited abstracts that support or contradict them and, per abstract, the indices of
the rationale sentences. For every claim with rationales (split by ``qrels/``: BEIR's
``test`` is SciFact's dev set, held out; ``train`` is what the learned scorer is fitted
on), the query is the claim and the evidence items are *all* its cited abstracts (every
``qrels`` document of the claim, in file order, also the ones without rationales: 38
claims cite such an abstract too) as their ``text`` only: the rationale indices count
SciFact's sentences of the abstract, the title is not one (``--title`` adds it as a first
paragraph). Each method compresses the items to a ratio of 2x and 3x (output tokens at
most input tokens / ratio, cl100k_base, all cited abstracts together) and a rationale
sentence counts as kept when its whole text is in the output item of its abstract.

Methods, all on the same sentence units (``split_sentences``) and the same budget:

* ``evidence``: :class:`EvidenceCompressor` with its defaults (the learned scorer);
* ``evidence-v0``: the previous defaults (0.7 MiniLM cosine + 0.3 lexical coverage);
* ``query-sim``: the MiniLM cosine with the claim alone, same global fill;
* ``lead``: truncation, each abstract keeps its leading sentences within its tokens / ratio;
* ``random``: each abstract keeps sentences in a seeded random order, skipping those that
  do not fit, until its share is full;
* ``oracle``: the claim's budget filled with the rationale sentences first, shortest first
  (the most rationale sentences any sentence selection can keep), then the rest.
* with ``--ablations``: ``evidence`` with the other selection rule (``score`` where the
  weights file says ``density``: best score first instead of best score per token).

Where the rationale indices point. BEIR's SciFact ``text`` is the original sentence list
(scispaCy) joined by single spaces; the list itself is not in BEIR. ``split_sentences``
rebuilds it (like scispaCy it does not split at ``et al.``, ``P. falciparum``, ``e.g.``);
for an abstract where a cited index is past its end, a plain split at every ``[.?!]`` +
space is used. The script prints how many rationale sentences were located, and a
shift check: the mean rank of the located sentence's MiniLM similarity to the claim
within its abstract, against the sentences just before and after it (a mapping shifted
by one would make a neighbour rank higher on average).

Run: ``python bench/bench_compress_evidence.py`` (all claims, a few minutes on 2 busy
cores; embedding is most of it); ``--limit 50``; ``--split test``; ``--json FILE``.
Refit the learned weights with ``python bench/fit_evidence_scorer.py``.
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
SEPARATOR = " … "


# ---------------------------------------------------------------------- data
def load(folder: Path, split: str, limit: int | None, title: bool = False,
         rationale_docs_only: bool = False) -> tuple[list[dict], dict[str, int]]:
    """Claims with rationales, their evidence items and located rationale sentences, and alignment stats."""
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            corpus[doc["_id"]] = doc
    splits: dict[str, str] = {}
    cited: dict[str, list[str]] = {}
    for name in ("train", "test"):
        path = folder / "qrels" / f"{name}.tsv"
        for line in path.read_text(encoding="utf-8").splitlines()[1:] if path.is_file() else []:
            qid, doc_id = line.split("\t")[:2]
            splits.setdefault(qid, name)
            if doc_id in corpus and doc_id not in cited.setdefault(qid, []):
                cited[qid].append(doc_id)
    claims = []
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            sets = {d: [r["sentences"] for r in rs] for d, rs in (q.get("metadata") or {}).items()
                    if d in corpus and rs}
            if not sets or q["_id"] not in splits or split not in ("all", splits[q["_id"]]):
                continue
            docs = list(sets) if rationale_docs_only else [*cited[q["_id"]],
                                                           *(d for d in sets if d not in cited[q["_id"]])]
            claims.append({"id": q["_id"], "text": q["text"], "split": splits[q["_id"]], "sets": sets, "docs": docs})
    claims = claims[:limit] if limit else claims
    return claims, _locate(corpus, claims, title)


def _locate(corpus: dict[str, dict], claims: list[dict], title: bool) -> dict[str, int]:
    """Map rationale indices to sentence texts (``claim["rationales"]``) and build ``claim["items"]``."""
    stats = {"rationale_sentences": 0, "located": 0, "plain_split_docs": 0, "docs": 0, "docs_splits_disagree": 0}
    top = {}
    for c in claims:
        for d, ss in c["sets"].items():
            top[d] = max([top.get(d, -1), *(i for s in ss for i in s)])
    sentences_of: dict[str, list[str]] = {}
    for doc_id, cited in top.items():
        text = corpus[doc_id]["text"]
        smart = [text[a:b] for a, b in split_sentences(text)]
        plain = [s for s in _PLAIN.split(text) if s.strip()]
        stats["docs"] += 1
        stats["docs_splits_disagree"] += len(smart) != len(plain)
        use_plain = len(smart) <= cited < len(plain)
        stats["plain_split_docs"] += use_plain
        sentences_of[doc_id] = plain if use_plain else smart
    for claim in claims:
        claim["rationales"] = []  # (doc_id, index, text)
        for doc_id, sets in claim["sets"].items():
            sents = sentences_of[doc_id]
            for index in sorted({i for s in sets for i in s}):
                stats["rationale_sentences"] += 1
                if index < len(sents):
                    stats["located"] += 1
                    claim["rationales"].append((doc_id, index, sents[index]))
        claim["items"] = [
            EvidenceItem(id=d, text=(corpus[d]["title"].strip() + "\n\n" if title and corpus[d]["title"].strip()
                                     else "") + corpus[d]["text"], source="scifact", doc_id=d)
            for d in claim["docs"]]
    return stats


def shift_check(claims: list[dict], embedder: Any) -> dict[str, float]:
    """Mean within-abstract rank (0 = most similar to the claim) of the sentence at the rationale
    index and at index - 1 / + 1: a correct mapping ranks the located sentence best."""
    ranks: dict[int, list[float]] = {-1: [], 0: [], 1: []}
    for claim in claims:
        for doc_id, _, rationale in claim["rationales"]:
            item = next(it for it in claim["items"] if it.id == doc_id)
            sents = [item.text[a:b] for a, b in split_sentences(item.text)]
            pos = next((k for k, s in enumerate(sents) if rationale in s or s in rationale), None)
            if pos is None or len(sents) < 2:
                continue
            vec = embedder.embed([claim["text"], *sents])
            sims = (vec[1:] @ vec[0]).tolist()
            order = sorted(range(len(sims)), key=lambda i: -sims[i])
            rank = {i: r / (len(sims) - 1) for r, i in enumerate(order)}
            for shift in ranks:
                if 0 <= pos + shift < len(sents):
                    ranks[shift].append(rank[pos + shift])
    return {f"shift_{k:+d}": statistics.mean(v) for k, v in ranks.items() if v}


class FileCache:
    """An embedding cache kept in one ``.npz`` (texts' keys and vectors; no pickle), so reruns of
    this bench and of ``fit_evidence_scorer.py`` embed each sentence once. Not for the package."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._data: dict[str, Any] = {}
        if path is not None and path.is_file():
            import numpy as np

            with np.load(path, allow_pickle=False) as z:
                self._data = dict(zip(z["keys"].tolist(), z["vectors"]))
        self._new = 0

    def get_vectors(self, keys: list[str]) -> dict[str, Any]:
        return {k: self._data[k] for k in keys if k in self._data}

    def put_vectors(self, items: dict[str, Any]) -> None:
        self._data.update(items)
        self._new += len(items)
        if self._new >= 2000:
            self.save()

    def save(self) -> None:
        if self.path is None or not self._new:
            return
        import numpy as np

        keys = list(self._data)
        np.savez(self.path, keys=np.asarray(keys), vectors=np.stack([self._data[k] for k in keys]))
        self._new = 0


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
    """The claim's budget filled with rationale sentences first, shortest first (most kept), then the rest."""
    budget = int(sum(tok.count(it.text) for it in items) / ratio)
    spans = {it.id: split_sentences(it.text) for it in items}
    order = []
    for k, it in enumerate(items):
        for i, (a, b) in enumerate(spans[it.id]):
            has = any(r in it.text[a:b] or it.text[a:b] in r for r in rationales)
            order.append((not has, tok.count(it.text[a:b]) if has else 0, k, i))
    keep: dict[str, list[int]] = {it.id: [] for it in items}
    counts = dict.fromkeys(keep, 0)
    for _, _, k, i in sorted(order):
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
            if tok.count(_join(item.text, spans, keep + [i])) <= budget:
                keep.append(i)
            elif order == "lead":
                break
        if keep:
            out[item.id] = _join(item.text, spans, keep)
    return out


def run_method(name: str, claims: list[dict], ratio: float, tok, compressor: EvidenceCompressor | None,
               seed: int) -> dict[str, Any]:
    """Rationale sentences (and whole rationale sets) kept by one method at one ratio."""
    kept = total = sets_kept = sets_total = tokens_in = tokens_out = sentences = 0
    claim_ms: list[float] = []
    for claim in claims:
        items = claim["items"]
        tokens_in += sum(tok.count(it.text) for it in items)
        if compressor is not None:
            t0 = time.perf_counter()
            out_items, report = compressor.compress(items, claim["text"], target_ratio=ratio)
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


HEADER = ("split  ratio  method            rationale kept     sets kept     achieved   speed\n" + "-" * 104)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=SCIFACT, help=f"BEIR SciFact folder (default {SCIFACT})")
    ap.add_argument("--split", choices=("all", "test", "train"), default="all")
    ap.add_argument("--limit", type=int, default=None, help="first N claims with rationales (after --split)")
    ap.add_argument("--ratios", type=float, nargs="+", default=[2.0, 3.0])
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--title", action="store_true", help="prefix each abstract with its title (a paragraph)")
    ap.add_argument("--rationale-docs-only", action="store_true",
                    help="only the cited abstracts that hold rationales (the previous measurement)")
    ap.add_argument("--weights", default=None, help="a weights JSON for the learned scorer (default: shipped)")
    ap.add_argument("--ablations", action="store_true", help="also the learned scorer with the other selection")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="an .npz embedding cache shared by reruns")
    args = ap.parse_args()

    claims, stats = load(args.data, args.split, args.limit, args.title, args.rationale_docs_only)
    n_split = {s: sum(c["split"] == s for c in claims) for s in ("test", "train")}
    n_docs = sum(len(c["items"]) for c in claims)
    print(f"SciFact: {len(claims)} claims with rationales ({n_split['test']} test = held out, {n_split['train']} "
          f"train = the scorer's fit), {n_docs} cited abstracts as items "
          f"({'rationale ones only' if args.rationale_docs_only else 'all qrels documents'}), "
          f"title {'on' if args.title else 'off'}")
    print(f"rationale sentences located: {stats['located']}/{stats['rationale_sentences']} "
          f"(plain [.?!] split used for {stats['plain_split_docs']} abstracts; the two splits disagree on "
          f"{stats['docs_splits_disagree']} of {stats['docs']})")

    from contextkit.embedders import Embedder

    tok = get_tokenizer("cl100k_base")
    embedder = Embedder(cache=FileCache(None))
    t0 = time.perf_counter()
    embedder.embed(["warm-up: the model loads and runs once outside the clock"])
    print(f"model: {embedder.model_name} ({embedder.active_backend}), loaded in {time.perf_counter() - t0:.1f} s")
    cache = embedder.cache = FileCache(args.cache)  # starts empty unless --cache names a filled one
    embedder.report = type(embedder.report)()
    methods: dict[str, EvidenceCompressor | None] = {
        "evidence": EvidenceCompressor(embedder, tokenizer=tok, weights=args.weights),
        "evidence-v0": EvidenceCompressor(embedder, tokenizer=tok, scorer="linear"),
        "query-sim": EvidenceCompressor(embedder, tokenizer=tok, scorer="linear", weight_embedding=1.0,
                                        weight_lexical=0.0),
        "lead": None, "random": None, "oracle": None}
    if args.ablations:  # the other selection rule than the weights file's (density for the shipped one)
        other = "score" if methods["evidence"].selection == "density" else "density"
        methods[f"evidence-{other}"] = EvidenceCompressor(embedder, tokenizer=tok, weights=args.weights,
                                                          selection=other)

    results: list[dict[str, Any]] = []
    splits = [s for s in ("test", "train") if n_split[s]]
    print()
    print(HEADER)
    for ri, ratio in enumerate(args.ratios):
        for split in splits:
            part = [c for c in claims if c["split"] == split]
            for name, comp in methods.items():
                r = run_method(name, part, ratio, tok, comp, args.seed)
                r["split"] = split
                results.append(r)
                print(_row(r, split), flush=True)
        if ri == 0:
            rep = embedder.report
            print(f"   (first pass: {rep.texts} texts asked for, {rep.cache_hits} from the cache; the first "
                  f"'evidence' row's speed includes embedding unless --cache was filled, later rows hit the cache)")
    shift = shift_check(claims, embedder)
    cache.save()
    print("\nshift check (mean rank of the claim similarity within the abstract, 0 = best): "
          + ", ".join(f"{k} {v:.3f}" for k, v in shift.items()))
    print()
    for split in splits:
        at2 = {r["method"]: r for r in results if r["split"] == split and r["ratio"] == 2.0}
        if "evidence" in at2:
            e, o = at2["evidence"]["share"], at2["oracle"]["share"]
            print(f"goal (>= 95% of rationale sentences kept at 2x), {split}{' (fit split)' * (split == 'train')}: "
                  f"{e:.1%} -> {'met' if e >= 0.95 else 'NOT met'}; oracle ceiling {o:.1%}; "
                  f"vs evidence-v0 {e / max(at2['evidence-v0']['share'], 1e-9):.2f}x, "
                  f"vs query-sim {e / max(at2['query-sim']['share'], 1e-9):.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"alignment": stats, "shift_check": shift, "results": results}, indent=2))


if __name__ == "__main__":
    main()
