"""Evidence compression on SciFact and on XQuAD prose: are the sentences that matter kept?

SciFact claims (``shared/data/beir_scifact/queries.jsonl``) carry, in ``metadata``,
the cited abstracts that support or contradict them and, per abstract, the indices of
the rationale sentences. For every claim with rationales (split by ``qrels/``: BEIR's
``test`` is SciFact's dev set, held out; ``train`` is what the learned scorer is fitted
on and the fused scorer's gate was chosen on), the query is the claim and the evidence
items are *all* its cited abstracts (every ``qrels`` document of the claim, in file
order, also the ones without rationales: 38 claims cite such an abstract too) as their
``text`` only: the rationale indices count SciFact's sentences of the abstract, the
title is not one (``--title`` adds it as a first paragraph). Each method compresses the
items to each ratio (output tokens at most input tokens / ratio, cl100k_base, all cited
abstracts together) and a rationale sentence counts as kept when its whole text is in
the output item of its abstract.

XQuAD-en (``--xquad``, default ``../extdata/xquad/xquad.en.json``; :func:`load_xquad`):
each question's paragraph plus the two nearest other paragraphs of its article, the
target the sentence holding the answer; ``dev`` (every fourth article) was looked at
while the fused scorer was designed, ``test`` (the other 36 articles) is held out.

SQuAD (``--sets squad``, ``--squad FILE``, default ``../extdata/squad/dev-v2.0.json``): the same
measurement on another SQuAD-format file, prose that no scorer was designed or tuned on; its
unanswerable questions are passed by, and so are questions on one of XQuAD's paragraphs (XQuAD
took its 240 from SQuAD's dev set). Measured on the first five articles of SQuAD 2.0 dev (the copy
in github.com/VinACE/san_mrc, ``dev-v1.1.json``; 607 answerable questions once XQuAD's 24
paragraphs are left out); the whole dev set is at https://rajpurkar.github.io/SQuAD-explorer/.

Methods, all on the same sentence units (``split_sentences``) and the same budget:

* ``evidence``: :class:`EvidenceCompressor` with its defaults (the fused scorer);
* ``bm25-sent``: BM25 sentence ranking with ``bm25s`` (:func:`bm25_sentences`);
* ``evidence-learned``: the learned scorer with the defaults it had before issue 29;
* ``evidence-v0``: the linear mix (0.7 MiniLM cosine + 0.3 lexical), old defaults;
* ``query-sim``: the MiniLM cosine with the query alone, one ranking;
* on SciFact: ``lead`` (truncation), ``random`` (seeded order, same fill) and
  ``oracle`` (the budget filled with the rationale sentences first, shortest first:
  the most rationale sentences any sentence selection can keep);
* with ``--ablations``: ``evidence`` without cut sentences, with ``min_sentences=1``,
  the learned scorer with one ranking, and with the other selection rule.

Where the rationale indices point. BEIR's SciFact ``text`` is the original sentence list
(scispaCy) joined by single spaces; the list itself is not in BEIR. ``split_sentences``
rebuilds it (like scispaCy it does not split at ``et al.``, ``P. falciparum``, ``e.g.``);
for an abstract where a cited index is past its end, a plain split at every ``[.?!]`` +
space is used. The script prints how many rationale sentences were located, and a
shift check: the mean rank of the located sentence's MiniLM similarity to the claim
within its abstract, against the sentences just before and after it (a mapping shifted
by one would make a neighbour rank higher on average).

Run: ``python bench/bench_compress_evidence.py`` (both sets, a few minutes on 2 busy
cores; embedding is most of it); ``--sets scifact``; ``--limit 50``; ``--split test``;
``--json FILE``.
Refit the learned weights with ``python bench/fit_evidence_scorer.py``.
"""

from __future__ import annotations

import argparse
import json
import math
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
XQUAD = Path(__file__).resolve().parents[2] / "extdata" / "xquad" / "xquad.en.json"
SQUAD = Path(__file__).resolve().parents[2] / "extdata" / "squad" / "dev-v2.0.json"
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


def load_xquad(path: Path, embedder: Any, limit: int | None = None, exclude: frozenset[str] = frozenset(),
               split: str | None = None) -> list[dict]:
    """XQuAD-en questions as claims of the SciFact kind: the question's paragraph and two distractors.

    Distractors (the rule, fixed before any measurement): the two other paragraphs of
    the same article whose MiniLM embedding is nearest (cosine) to the question's
    paragraph: similar text on the same subject, what a retriever returns beside it.
    Items are the three paragraphs in article order. The target (``rationales``) is the
    sentence (``split_sentences``) that holds the start of the first gold answer span.
    ``split`` is ``dev`` for every fourth article (0, 4, 8, ...: looked at while the fused
    scorer was designed) and ``test`` for the other 36 (never looked at before the figures).

    Any SQuAD-format file loads the same way (``--squad``): ``split`` then labels every question,
    questions without an answer (SQuAD 2.0) are passed by, and so are those whose paragraph is in
    ``exclude`` (XQuAD's paragraphs, taken from SQuAD's dev set and already looked at).
    """
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    claims: list[dict] = []
    for a, article in enumerate(data):
        paras = [p["context"] for p in article["paragraphs"]]
        vec = embedder.embed(paras)
        sims = vec @ vec.T
        for k, para in enumerate(article["paragraphs"]):
            if para["context"] in exclude:
                continue
            near = sorted((j for j in range(len(paras)) if j != k), key=lambda j: (-float(sims[k, j]), j))[:2]
            docs = sorted([k, *near])
            items = [EvidenceItem(id=f"{a}:{j}", text=paras[j], source="xquad", doc_id=f"{a}:{j}") for j in docs]
            spans = split_sentences(paras[k])
            for qa in para["qas"]:
                if not qa.get("answers"):
                    continue
                start = qa["answers"][0]["answer_start"]
                hit = next(((s, e) for s, e in spans if s <= start < e), spans[-1])
                claims.append({"id": qa["id"], "text": qa["question"], "split": split or ("dev" if a % 4 == 0 else "test"),
                               "items": items, "rationales": [(f"{a}:{k}", 0, paras[k][hit[0]:hit[1]])],
                               "sets": {}})
    return claims[:limit] if limit else claims


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
    return _fill(items, spans, [(k, i) for _, _, k, i in sorted(order)], budget, tok)


def bm25_sentences(items: list[EvidenceItem], query: str, ratio: float, tok) -> dict[str, str]:
    """The baseline to beat on prose: every sentence of the items is a document of a bm25s
    index (Lucene BM25, English stop words, Snowball stems: bm25s's own tokenizer, not
    contextkit's), the query ranks them, and the budget (input tokens / ratio over all
    items) is filled best first with whole sentences that fit, counted exactly."""
    import bm25s
    import Stemmer

    spans = {it.id: split_sentences(it.text) for it in items}
    units = [(k, i) for k, it in enumerate(items) for i in range(len(spans[it.id]))]
    texts = [items[k].text[slice(*spans[items[k].id][i])] for k, i in units]
    stem = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)
    scores = retriever.get_scores(bm25s.tokenize(query, stopwords="en", stemmer=stem, show_progress=False,
                                                 return_ids=False)[0])
    order = sorted(range(len(units)), key=lambda u: (-float(scores[u]), u))
    return _fill(items, spans, [units[u] for u in order], int(sum(tok.count(it.text) for it in items) / ratio), tok)


def _fill(items: list[EvidenceItem], spans: dict[str, list[tuple[int, int]]], order: list[tuple[int, int]],
          budget: int, tok) -> dict[str, str]:
    """Whole sentences in ``order`` ((item, sentence) pairs) while the joined texts fit ``budget``."""
    keep: dict[str, list[int]] = {it.id: [] for it in items}
    counts = dict.fromkeys(keep, 0)
    for k, i in order:
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
    per_claim: list[int] = []
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
        elif name == "bm25-sent":
            out = bm25_sentences(items, claim["text"], ratio, tok)
        else:
            out = baseline(items, ratio, tok, name, random.Random(f"{seed}:{claim['id']}"))
        tokens_out += sum(tok.count(t) for t in out.values())
        located = {(d, i): s in out.get(d, "") for d, i, s in claim["rationales"]}
        kept += sum(located.values())
        total += len(located)
        per_claim.append(sum(located.values()))
        for doc_id, sets in claim["sets"].items():
            for s in sets:
                if all((doc_id, i) in located for i in s):
                    sets_total += 1
                    sets_kept += all(located[(doc_id, i)] for i in s)
    result = {"method": name, "ratio": ratio, "kept": kept, "total": total, "share": kept / total if total else 0.0,
              "sets_kept": sets_kept, "sets_total": sets_total, "tokens_in": tokens_in, "tokens_out": tokens_out,
              "achieved_ratio": tokens_in / tokens_out if tokens_out else float("inf"), "per_claim": per_claim}
    if claim_ms:
        seconds = sum(claim_ms) / 1000
        result.update(sentences=sentences, seconds=seconds, sentences_per_s=sentences / seconds,
                      ms_per_claim=statistics.mean(claim_ms), ms_per_claim_p50=statistics.median(claim_ms))
    return result


def _row(r: dict[str, Any], split: str) -> str:
    line = (f"{split:<6} {r['ratio']:>4.1f}x  {r['method']:<16} {r['kept']:>5}/{r['total']:<5} {r['share']:>7.1%}   "
            f"{r['sets_kept']:>4}/{r['sets_total']:<4} {r['sets_kept'] / max(r['sets_total'], 1):>6.1%}   "
            f"{r['achieved_ratio']:>5.2f}x   {r.get('vs_bm25', float('nan')):>5.3f}")
    if "sentences_per_s" in r:
        line += f"   {r['sentences_per_s']:>6.0f} sent/s  {r['ms_per_claim']:>6.1f} ms/claim"
    return line


HEADER = ("split  ratio  method            target kept        sets kept     achieved  vs bm25  speed\n" + "-" * 112)


def methods_for(embedder: Any, tok: Any, weights: str | None, ablations: bool) -> dict[str, EvidenceCompressor | None]:
    """The compressors and baselines every set is measured with (the same in both sections).

    ``evidence`` is the default (the fused scorer, a global ranking, cut sentences on);
    ``evidence-learned`` and ``evidence-v0`` are the learned and linear scorers with the
    defaults they had before issue 29 (a best sentence of every item, whole sentences
    only); ``query-sim`` (MiniLM cosine) and ``bm25-sent`` are plain global rankings."""
    methods: dict[str, EvidenceCompressor | None] = {
        "evidence": EvidenceCompressor(embedder, tokenizer=tok, weights=weights),
        "evidence-learned": EvidenceCompressor(embedder, tokenizer=tok, weights=weights, scorer="learned", cut=False,
                                               min_sentences=1),
        "evidence-v0": EvidenceCompressor(embedder, tokenizer=tok, scorer="linear", cut=False, min_sentences=1),
        "query-sim": EvidenceCompressor(embedder, tokenizer=tok, scorer="linear", weight_embedding=1.0,
                                        weight_lexical=0.0, cut=False),
        "bm25-sent": None}
    if ablations:
        methods["evidence-nocut"] = EvidenceCompressor(embedder, tokenizer=tok, weights=weights, cut=False)
        methods["evidence-min1"] = EvidenceCompressor(embedder, tokenizer=tok, weights=weights, min_sentences=1)
        methods["evidence-learned-min0"] = EvidenceCompressor(embedder, tokenizer=tok, weights=weights,
                                                              scorer="learned", cut=False)
        learned = methods["evidence-learned"]
        assert learned is not None
        other = "score" if learned.selection == "density" else "density"
        methods[f"evidence-learned-{other}"] = EvidenceCompressor(embedder, tokenizer=tok, weights=weights,
                                                                  scorer="learned", selection=other, cut=False,
                                                                  min_sentences=1)
    return methods


def measure(claims: list[dict], splits: list[str], ratios: list[float], methods: dict[str, Any], tok: Any,
            seed: int) -> list[dict[str, Any]]:
    """Every method on every split at every ratio, printed as it goes, with the share over BM25's."""
    results: list[dict[str, Any]] = []
    print()
    print(HEADER)
    for ratio in ratios:
        for split in splits:
            part = [c for c in claims if c["split"] == split]
            rows = []
            for name, comp in {"bm25-sent": None, **methods}.items():  # BM25 first: the others are read against it
                r = run_method(name, part, ratio, tok, comp, seed)
                r["split"] = split
                r["vs_bm25"] = r["share"] / max(rows[0]["share"], 1e-9) if rows else 1.0
                rows.append(r)
                print(_row(r, split), flush=True)
            print(f"   evidence against bm25-sent, claim by claim: {paired(rows[1], rows[0])}")
            results.extend(rows)
    return results


def paired(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Claims where ``a`` keeps more target sentences than ``b`` and fewer, and the two-sided
    sign-test p of that split (exact binomial): is a difference more than chance?"""
    more = sum(x > y for x, y in zip(a["per_claim"], b["per_claim"]))
    fewer = sum(x < y for x, y in zip(a["per_claim"], b["per_claim"]))
    n, k = more + fewer, min(more, fewer)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return f"{more} better, {fewer} worse (sign test p = {p:.2f})"


def run_scifact(args: argparse.Namespace, methods: dict[str, Any], tok: Any, embedder: Any) -> dict[str, Any]:
    claims, stats = load(args.data, args.split, args.limit, args.title, args.rationale_docs_only)
    n_split = {s: sum(c["split"] == s for c in claims) for s in ("test", "train")}
    n_docs = sum(len(c["items"]) for c in claims)
    print(f"\nSciFact: {len(claims)} claims with rationales ({n_split['test']} test = held out, {n_split['train']} "
          f"train = the learned scorer's fit and the fused gate's tuning), {n_docs} cited abstracts as items "
          f"({'rationale ones only' if args.rationale_docs_only else 'all qrels documents'}), "
          f"title {'on' if args.title else 'off'}")
    print(f"rationale sentences located: {stats['located']}/{stats['rationale_sentences']} "
          f"(plain [.?!] split used for {stats['plain_split_docs']} abstracts; the two splits disagree on "
          f"{stats['docs_splits_disagree']} of {stats['docs']})")
    splits = [s for s in ("test", "train") if n_split[s]]
    methods = {**methods, "lead": None, "random": None, "oracle": None}
    results = measure(claims, splits, args.ratios, methods, tok, args.seed)
    shift = shift_check(claims, embedder)
    print("\nshift check (mean rank of the claim similarity within the abstract, 0 = best): "
          + ", ".join(f"{k} {v:.3f}" for k, v in shift.items()))
    for split in splits:
        at2 = {r["method"]: r for r in results if r["split"] == split and r["ratio"] == 2.0}
        if "evidence" in at2:
            e = at2["evidence"]["share"]
            print(f"issue 29 (>= 0.80 of rationale sentences kept at 2x), {split}"
                  f"{' (fit/tuning split)' * (split == 'train')}: {e:.3f} -> {'met' if e >= 0.80 else 'NOT met'}; "
                  f"old default (learned) {at2['evidence-learned']['share']:.3f}, bm25-sent "
                  f"{at2['bm25-sent']['share']:.3f}, oracle {at2['oracle']['share']:.3f}")
    return {"alignment": stats, "shift_check": shift, "results": results}


def run_xquad(args: argparse.Namespace, methods: dict[str, Any], tok: Any, embedder: Any) -> dict[str, Any]:
    claims = load_xquad(args.xquad, embedder, args.limit)
    n_split = {s: sum(c["split"] == s for c in claims) for s in ("dev", "test")}
    print(f"\nXQuAD-en: {len(claims)} questions, items = the question's paragraph + the 2 nearest other "
          f"paragraphs of its article (MiniLM); target = the sentence holding the answer's start; "
          f"{n_split['test']} test (36 articles, held out), {n_split['dev']} dev (every 4th article: the fused "
          f"gate's tuning)")
    results = measure(claims, [s for s in ("test", "dev") if n_split[s]], args.xquad_ratios, methods, tok, args.seed)
    for ratio in args.xquad_ratios if n_split["test"] else []:
        at = {r["method"]: r for r in results if r["split"] == "test" and r["ratio"] == ratio}
        e, b = at["evidence"]["share"], at["bm25-sent"]["share"]
        print(f"issue 29 (at least BM25 sentence ranking on held-out prose), test {ratio:g}x: evidence {e:.3f} vs "
              f"bm25-sent {b:.3f} -> {'met' if e >= b else 'NOT met'}; achieved {at['evidence']['achieved_ratio']:.2f}x")
    return {"results": results}


def run_squad(args: argparse.Namespace, methods: dict[str, Any], tok: Any, embedder: Any) -> dict[str, Any]:
    """The XQuAD measurement on another SQuAD-format file (``--squad``): prose never looked at while the
    scorers were designed, XQuAD's own paragraphs left out."""
    seen = frozenset(p["context"] for a in json.loads(args.xquad.read_text(encoding="utf-8"))["data"]
                     for p in a["paragraphs"]) if args.xquad.exists() else frozenset()
    claims = load_xquad(args.squad, embedder, args.limit, exclude=seen, split="new")
    print(f"\nSQuAD-format {args.squad.name}: {len(claims)} answerable questions whose paragraph is not one of "
          f"XQuAD's {len(seen)} (items and target as for XQuAD)")
    results = measure(claims, ["new"], args.xquad_ratios, methods, tok, args.seed)
    for ratio in args.xquad_ratios:
        at = {r["method"]: r for r in results if r["ratio"] == ratio}
        e, b = at["evidence"]["share"], at["bm25-sent"]["share"]
        print(f"issue 29 (at least BM25 sentence ranking on prose not tuned on), {ratio:g}x: evidence {e:.3f} vs "
              f"bm25-sent {b:.3f} -> {'met' if e >= b else 'NOT met'}; achieved {at['evidence']['achieved_ratio']:.2f}x")
    return {"results": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", choices=("scifact", "xquad", "squad"), default=["scifact", "xquad"])
    ap.add_argument("--data", type=Path, default=SCIFACT, help=f"BEIR SciFact folder (default {SCIFACT})")
    ap.add_argument("--xquad", type=Path, default=XQUAD, help=f"xquad.en.json (default {XQUAD})")
    ap.add_argument("--squad", type=Path, default=SQUAD, help=f"a SQuAD-format JSON for --sets squad (default "
                    f"{SQUAD})")
    ap.add_argument("--split", choices=("all", "test", "train"), default="all")
    ap.add_argument("--limit", type=int, default=None, help="first N claims / questions (after --split)")
    ap.add_argument("--ratios", type=float, nargs="+", default=[2.0, 3.0, 4.0], help="SciFact ratios")
    ap.add_argument("--xquad-ratios", type=float, nargs="+", default=[2.0, 4.0])
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--title", action="store_true", help="prefix each abstract with its title (a paragraph)")
    ap.add_argument("--rationale-docs-only", action="store_true",
                    help="only the cited abstracts that hold rationales (the previous measurement)")
    ap.add_argument("--weights", default=None, help="a weights JSON for the learned scorer (default: shipped)")
    ap.add_argument("--ablations", action="store_true", help="also the fused scorer without cut sentences, with "
                    "min_sentences=1, and the learned scorer with the other selection")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="an .npz embedding cache shared by reruns")
    args = ap.parse_args()
    missing = [(p, how) for s, p, how in (
        ("scifact", args.data, "see ../shared/data/README.md (BEIR SciFact)"),
        ("xquad", args.xquad, "git clone https://github.com/google-deepmind/xquad ../extdata/xquad"),
        ("squad", args.squad, "a SQuAD dev file, e.g. https://rajpurkar.github.io/SQuAD-explorer/"))
        if s in args.sets and not p.exists()]
    for path, how in missing:
        print(f"missing data: {path}; get it with: {how} (or pass its path)", file=sys.stderr)
    if missing:
        sys.exit(2)

    from contextkit.embedders import Embedder

    tok = get_tokenizer("cl100k_base")
    embedder = Embedder(cache=FileCache(None))
    t0 = time.perf_counter()
    embedder.embed(["warm-up: the model loads and runs once outside the clock"])
    print(f"model: {embedder.model_name} ({embedder.active_backend}), loaded in {time.perf_counter() - t0:.1f} s; "
          "the first method of a set pays for embedding unless --cache was filled")
    cache = embedder.cache = FileCache(args.cache)  # starts empty unless --cache names a filled one
    methods = methods_for(embedder, tok, args.weights, args.ablations)
    out: dict[str, Any] = {}
    try:
        if "scifact" in args.sets:
            out["scifact"] = run_scifact(args, methods, tok, embedder)
        if "xquad" in args.sets:
            out["xquad"] = run_xquad(args, methods, tok, embedder)
        if "squad" in args.sets:
            out["squad"] = run_squad(args, methods, tok, embedder)
    finally:
        cache.save()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
