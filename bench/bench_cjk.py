"""BM25 in Chinese, Japanese and Korean: a word of a sentence planted in an index, found or not; SciFact unchanged.

Cases (500 by default): a document is one sentence, and a case is a word of it, asked alone:

* Chinese (300): sentences of XQuAD-zh's paragraphs (``--xquad-zh``, 240 paragraphs cut at 。！？;
  the spaces its translators put around many answers, 安装了 由特斯拉设计的, taken out, as Chinese
  prose has none; ``--keep-spaces`` keeps them),
  the word an XQuAD answer of 2-4 Han characters (answers are spans marked by people: names,
  places, nouns; no segmenter chooses them), the document the sentence holding that span;
  drawn at random (``--seed``) from all such answers;
* Japanese (100) and Korean (100): ``data/cjk_sentences.jsonl``, 50 sentences each that we wrote,
  two words of each marked by hand (Japanese: kanji, kana and mixed words such as 飲みながら;
  Korean: words with a particle attached in the text, 도서관에서, 검색은).

Every sentence of the three languages goes into one real index (``ingest`` with the default
settings, then ``search_index(..., mode="bm25")``). A case is a hit when its document is in the
top m, m the number of documents holding the word (top 1 when the word is the document's alone).
Baseline in the same run: the same index as an index saved before analyzers were recorded (its
manifest with no ``analyzer``: bm25s's cut, a run of CJK characters one term), brought up to date
by this code. Goal (issue 29): hit rate >= 0.99 with the new cut.

SciFact unchanged (``--scifact``, BEIR SciFact): BM25 over all 5,183 abstracts with the old and the
new analyzer, every test query's score of every abstract compared bit for bit (and the top 10); and
through real indexes, ``--scifact-docs`` abstracts (default 300: the test queries' gold ones first; 0: skip)
ingested once, the old-settings copy beside it, ``--scifact-queries`` test queries' top 10 (ids and
scores) from ``search_index(..., mode="bm25")`` compared.

    python bench/bench_cjk.py [--xquad-zh FILE] [--scifact DIR] [--zh 300] [--keep-spaces]
                              [--scifact-docs 300] [--scifact-queries 100] [--json FILE]
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
XQUAD_ZH = REPO.parent / "extdata" / "xquad" / "xquad.zh.json"
SCIFACT = REPO.parent / "shared" / "data" / "beir_scifact"
OWN = REPO / "data" / "cjk_sentences.jsonl"
_SENTENCE = re.compile(r"[^。！？]*[。！？]?")
_HAN_WORD = re.compile(r"[\u4e00-\u9fff]{2,4}")
#: A space between two CJK characters: XQuAD-zh's translators set many answers apart with spaces
#: (安装了 由特斯拉设计的), which Chinese prose does not; taken out unless ``--keep-spaces``.
_CJK_SPACE = re.compile(r"(?<=[\u3000-\u9fff\uff00-\uffef]) +(?=[\u3000-\u9fff\uff00-\uffef])")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def need(path: Path, how: str) -> Path:
    if not path.exists():
        print(f"{path}: not found; {how}", file=sys.stderr)
        sys.exit(2)
    return path


# ------------------------------------------------------------------ cases
def chinese(path: Path, n: int, seed: int, keep_spaces: bool = False) -> tuple[list[str], list[tuple[int, str]]]:
    """XQuAD-zh's sentences, and ``n`` (sentence, answer) cases whose answer is 2-4 Han characters."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    docs: list[str] = []
    cases: set[tuple[int, str]] = set()
    for article in data:
        for para in article["paragraphs"]:
            spans = []  # (start, end, doc) of each sentence of the paragraph
            for m in _SENTENCE.finditer(para["context"]):
                if m.group().strip():
                    spans.append((m.start(), m.end(), len(docs)))
                    docs.append(m.group().strip() if keep_spaces else _CJK_SPACE.sub("", m.group().strip()))
            for qa in para["qas"]:
                answer = qa["answers"][0]
                word, start = answer["text"], answer["answer_start"]
                if not _HAN_WORD.fullmatch(word):
                    continue
                for lo, hi, doc in spans:
                    if lo <= start and start + len(word) <= hi and word in docs[doc]:
                        cases.add((doc, word))
    picked = sorted(cases)
    random.Random(seed).shuffle(picked)
    if len(picked) < n:
        sys.exit(f"{path}: only {len(picked)} answers of 2-4 Han characters, {n} asked")
    return docs, picked[:n]


def own(path: Path) -> dict[str, tuple[list[str], list[tuple[int, str]]]]:
    """Our Japanese and Korean sentences and their marked words, by language."""
    out: dict[str, tuple[list[str], list[tuple[int, str]]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        docs, cases = out.setdefault(row["lang"], ([], []))
        cases.extend((len(docs), w) for w in row["words"])
        docs.append(row["text"])
    return out


# ------------------------------------------------------------------ indexes
def build(docs: Sequence[str], folder: Path) -> tuple[Path, Path]:
    """``(new, old)``: the documents ingested with the defaults, and a copy saved as before analyzers."""
    from contextkit.ingestion import ingest

    src = folder / "docs"
    src.mkdir(parents=True)
    for i, text in enumerate(docs):
        (src / f"d{i:06d}.txt").write_text(text + "\n", encoding="utf-8")
    t0 = time.perf_counter()
    ingest([src], folder / "new")
    log(f"  ingested {len(docs):,} documents in {time.perf_counter() - t0:.0f} s")
    return folder / "new", as_before_analyzers(folder / "new", folder / "old")


def as_before_analyzers(new: Path, old: Path) -> Path:
    """A copy of ``new`` whose manifest records no analyzer (as every index saved before them), its BM25
    brought up to date by this code: what a user's existing index answers."""
    from contextkit.index import Index

    shutil.copytree(new, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["bm25"]["analyzer"]
    for name in ("manifest.json", f"manifest.{manifest['generation']}.json"):
        (old / name).write_text(json.dumps(manifest, indent=2))
    with Index.open(old) as index:
        assert index.bm25.config.analyzer == "bm25s"  # rebuilt with bm25s's cut, saved at close
    return old


def ranked(index: Path, query: str, k: int) -> list[tuple[int, float]]:
    from contextkit.search import search_index

    return [(int(Path(h.chunk.doc_id).stem[1:]), h.score) for h in search_index(index, query, k=k, mode="bm25")]


# ------------------------------------------------------------------ runs
def planted(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    zh_docs, zh_cases = chinese(args.xquad_zh, args.zh, args.seed, args.keep_spaces)
    langs = {"zh": (zh_docs, zh_cases), **own(args.own)}
    docs: list[str] = []
    cases: list[tuple[str, int, str]] = []
    for lang, (lang_docs, lang_cases) in langs.items():
        cases += [(lang, len(docs) + d, w) for d, w in lang_cases]
        docs += lang_docs
    log(f"planted: {len(cases)} cases ({', '.join(f'{lang} {len(c)}' for lang, (_, c) in langs.items())}) "
        f"over {len(docs):,} sentences")
    new, old = build(docs, tmp / "cjk")
    out: dict[str, Any] = {"cases": len(cases), "documents": len(docs), "by_language": {}}
    hits: dict[str, dict[str, list[bool]]] = {}
    misses: list[str] = []
    for lang, doc, word in cases:
        m = sum(word in d for d in docs)  # documents holding the word: the case's document is one of them
        for name, index in (("new", new), ("old", old)):
            top = [d for d, _ in ranked(index, word, max(10, m))][:m]
            hits.setdefault(lang, {}).setdefault(name, []).append(doc in top)
            if name == "new" and doc not in top:
                misses.append(f"{lang} {word!r} (in {m} documents) not in the top {m} of {docs[doc][:40]!r}")
    for lang, by in hits.items():
        out["by_language"][lang] = {name: sum(h) / len(h) for name, h in by.items()} | {"cases": len(by["new"])}
    out["all"] = {name: sum(sum(by[name]) for by in hits.values()) / len(cases) for name in ("new", "old")}
    out["misses"] = misses
    return out


def scifact_terms(args: argparse.Namespace) -> dict[str, Any]:
    """BM25 over every abstract, old analyzer against new: every test query's scores compared bit for bit."""
    import numpy as np

    from contextkit.index._bm25 import BM25Config, BM25Index

    corpus, queries = scifact(args.scifact)
    texts = [f"{d['title']}\n{d['text']}" for d in corpus]
    out: dict[str, Any] = {"documents": len(texts), "queries": len(queries)}
    indexes = {}
    for name in ("bm25s", "cjk-bigram"):
        t0 = time.perf_counter()
        indexes[name] = BM25Index(BM25Config(analyzer=name))
        indexes[name].build(np.arange(len(texts)), texts, 0)
        out[f"build_s_{name}"] = round(time.perf_counter() - t0, 2)
    same_scores = same_top = 0
    for query in queries.values():
        old, new = (indexes[n].scores(query) for n in ("bm25s", "cjk-bigram"))
        same_scores += bool(np.array_equal(old, new))
        same_top += bool(np.array_equal(indexes["bm25s"].search(query, 10)[0], indexes["cjk-bigram"].search(query, 10)[0]))
    out |= {"scores_identical": same_scores, "top10_identical": same_top}
    return out


def scifact_index(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """``--scifact-docs`` abstracts in a real index and its old-settings copy: top 10 ids and scores compared."""
    corpus, queries = scifact(args.scifact)
    qrels = _qrels(args.scifact / "qrels" / "test.tsv")
    asked = list(queries)[: args.scifact_queries]
    gold = {d for q in asked for d in qrels.get(q, ())}
    chosen = [d for d in corpus if d["_id"] in gold]
    chosen += [d for d in corpus if d["_id"] not in gold][: max(0, args.scifact_docs - len(chosen))]
    new, old = build([f"{d['title']}\n{d['text']}" for d in chosen], tmp / "scifact")
    same = sum(ranked(new, queries[q], 10) == ranked(old, queries[q], 10) for q in asked)
    return {"documents": len(chosen), "queries": len(asked), "top10_ids_and_scores_identical": same}


def scifact(folder: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The corpus, and the test queries (those with test judgements) by id."""
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    tested = _qrels(folder / "qrels" / "test.tsv")
    queries = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["_id"] in tested:
            queries[row["_id"]] = row["text"]
    return corpus, queries


def _qrels(path: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        query, doc, score = line.split("\t")
        if int(score) > 0:
            out.setdefault(query, set()).add(doc)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--xquad-zh", type=Path, default=XQUAD_ZH)
    parser.add_argument("--own", type=Path, default=OWN, help="our Japanese and Korean sentences (JSON lines)")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    parser.add_argument("--zh", type=int, default=300, help="Chinese cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-spaces", action="store_true", help="keep XQuAD-zh's spaces between CJK characters")
    parser.add_argument("--scifact-docs", type=int, default=300, help="abstracts in the real-index check (0: skip)")
    parser.add_argument("--scifact-queries", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    need(args.xquad_zh, "git clone https://github.com/google-deepmind/xquad ../extdata/xquad")
    need(args.scifact / "corpus.jsonl", "bash data/fetch.sh (downloads BEIR SciFact into ../shared/data)")
    need(args.own, "data/cjk_sentences.jsonl is part of the repository")
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cjk-") as tmp:
        result["planted"] = planted(args, Path(tmp))
        report_planted(result["planted"])
        result["scifact_bm25"] = scifact_terms(args)
        if args.scifact_docs:
            result["scifact_index"] = scifact_index(args, Path(tmp))
        report_scifact(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False))


def report_planted(p: dict[str, Any]) -> None:
    print(f"\nplanted CJK words: {p['cases']} cases over {p['documents']:,} sentences, hit = the word's document in "
          "the top m (m: documents holding the word)")
    print(f"{'language':10} {'cases':>6} {'old cut':>8} {'new cut':>8} {'new/old':>8}")
    rows = [*p["by_language"].items(), ("all", p["all"] | {"cases": p["cases"]})]
    for lang, r in rows:
        ratio = f"{r['new'] / r['old']:.1f}x" if r["old"] else "inf"
        print(f"{lang:10} {r['cases']:>6} {r['old']:>8.3f} {r['new']:>8.3f} {ratio:>8}", flush=True)
    for miss in p["misses"]:
        print(f"  missed: {miss}")


def report_scifact(result: dict[str, Any]) -> None:
    s = result["scifact_bm25"]
    print(f"\nSciFact BM25, {s['documents']:,} abstracts, {s['queries']} test queries, old analyzer vs new: scores "
          f"identical for {s['scores_identical']}/{s['queries']}, top 10 identical for {s['top10_identical']}/"
          f"{s['queries']}")
    if "scifact_index" in result:
        r = result["scifact_index"]
        print(f"SciFact through real indexes ({r['documents']:,} abstracts, {r['queries']} test queries, "
              f"search_index bm25): top 10 ids and scores identical for {r['top10_ids_and_scores_identical']}/"
              f"{r['queries']}")


if __name__ == "__main__":
    main()
