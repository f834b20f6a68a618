"""Chunking throughput: contextkit's TokenChunker against its peers, in one run.

What it measures: MB/s (UTF-8 bytes of input / wall seconds, best of ``--repeats``)
of chunking the Python PEPs corpus (``shared/data/python_peps/peps/*.rst``, 703
files, ~13.9 MB) into chunks of at most 512 cl100k_base tokens with 64 tokens of
overlap, single thread, one document at a time, for:

* a bare tiktoken pass (``encode_ordinary`` and ``encode(disallowed_special=())``):
  the floor any exact token chunker pays; in the one-text section also
  ``encode_ordinary`` over N parts of the text at once on N threads, what the machine's
  cores give any N-way parallel pass (on the 2-core VM this was written on, 1.06x-1.56x
  one pass: the two vCPUs do not make two cores' worth);
* contextkit ``TokenChunker(512, 64).chunk``;
* chonkie ``TokenChunker`` and ``SentenceChunker``, semchunk, LangChain
  ``RecursiveCharacterTextSplitter`` (tiktoken length) and LlamaIndex
  ``SentenceSplitter``, all given the same ``tiktoken.Encoding``;
* contextkit ``chunk_many(workers=2)``: "cold" is a fresh chunker's first call, so
  the spawn of its worker pool is in the time (on the corpus, and on the corpus
  repeated 3x so start-up amortises); "warm" is a second call on the same chunker,
  whose pool is kept between calls.

Each chunker is built fresh before every repeat, outside the clock (semchunk
memoises token counts per chunker), and each pass starts after ``gc.collect()``.
Repeats go round-robin over the methods, so load from other processes spreads
over all of them. The "<=512" column, computed outside the clock, is the share of
a method's chunks whose ``len(enc.encode_ordinary(text))`` is at most 512 (">512":
how many are not): whether the token bound really held.

"One text" (the issue-22 figure): the corpus joined into one 13.9 MB text, chunked
in this process by every method above plus semantic-text-splitter, and contextkit with
``TokenChunker(workers=1)`` and ``workers=N`` (processes: this one walks the text from
its start while ``N - 1`` spawned workers cut segments, starting at provable restart
boundaries, from its end; their chains of chunks are joined where they meet, see
``contextkit/chunking/_parallel.py``; the chunks are checked identical to one
process's). The workers are shared by every chunker of a process and kept between
calls: the first call of a process, which starts them, is timed once on its own
("w=N cold", before the repeats); for the repeats they are up, as in any process that
chunks more than one text. Then "whole process": each method as ``python
bench/_chunk_peers.py METHOD FILE [WORKERS]``, interpreter start, imports and (for
``workers=N``) the workers' start in the time; contextkit's runner starts them
(``TokenChunker.start_workers()``) before reading the file. Goals there: ``workers=2``
at least 1.7x one bare tiktoken pass (bar 1.3x) in process, and the whole process at
least 8x LlamaIndex's SentenceSplitter. On a 2-core machine the first figure is bounded
by 2x (two cores, one encoding pass over the text in all), and by less when other
processes share the cores: compare the ratios of one run, not figures across runs.

Goals: contextkit is token-exact (<=512 share 100%), at least as fast as every
peer and as LlamaIndex's SentenceSplitter, within a small factor of the bare
tiktoken pass, and ``workers=2`` beats one process on the 3x corpus.

Run: ``python bench/bench_chunking.py`` (add ``--limit 100 --repeats 1`` for a
quick run, ``--section one-text`` for the one-text figures alone, ``--section whole-process
--repeats 7`` for the whole-process figure alone, ``--json out.json``
to keep the numbers). Peers come from the ``bench`` extra plus ``semantic-text-splitter``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _chunk_peers import OVERLAP, SIZE, Factory, contextkit, peers

from contextkit.chunking import TokenChunker, _processes
from contextkit.records import Document
from contextkit.tokenizers import TiktokenTokenizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"
RUNNER = Path(__file__).resolve().parent / "_chunk_peers.py"


def load_corpus(limit: int | None) -> list[tuple[str, str]]:
    files = sorted(PEPS.glob("*.rst"))[:limit]
    if not files:
        raise SystemExit(f"no PEP files under {PEPS}")
    return [(f.name, f.read_bytes().decode("utf-8")) for f in files]


def methods(enc: Any) -> dict[str, Factory]:
    """Every method to time, per document: the peers of ``_chunk_peers`` and contextkit on one thread."""
    found = peers(enc)
    found["contextkit TokenChunker"] = contextkit(1)
    return found


def bound_stats(counts: list[int]) -> dict[str, Any]:
    over = sum(c > SIZE for c in counts)
    return {"chunks": len(counts), "max_tokens": max(counts, default=0), "over_bound": over,
            "within_bound": 1 - over / max(len(counts), 1)}


def texts_of(chunks: list[Any]) -> list[str]:
    return [c if isinstance(c, str) else c.text for c in chunks]


def best_of(found: dict[str, Factory], texts: list[str], repeats: int, warm: str,
            on_last: Callable[[str, list[Any]], None]) -> dict[str, float]:
    """Best wall seconds per method over ``repeats`` round-robin passes; ``on_last(name, out)``
    sees each method's chunks of the last pass (measured there, off the clock, then dropped).

    Round-robin: each repeat times every method once, so a burst of load from another
    process hits all methods alike instead of one method's every repeat."""
    for factory in found.values():
        factory()(warm)  # first-call costs (lazy imports, nltk data) stay off the clock
    best: dict[str, float] = dict.fromkeys(found, float("inf"))
    for rep in range(repeats):
        print(f"  repeat {rep + 1}/{repeats}: {', '.join(found)}", flush=True)
        for name, factory in found.items():
            fn = factory()  # a fresh chunker, off the clock
            gc.collect()  # start each pass from the same small heap
            t0 = time.perf_counter()
            out = [fn(t) for t in texts]
            best[name] = min(best[name], time.perf_counter() - t0)
            if rep == repeats - 1:
                on_last(name, out)
            del out
    return best


def chunk_stats(enc: Any, stats: dict[str, dict[str, Any]]) -> Callable[[str, list[Any]], None]:
    """An ``on_last`` for :func:`best_of`: the token bound of every chunker's chunks (not tiktoken's ids)."""
    def record(name: str, out: list[Any]) -> None:
        if not name.startswith("tiktoken"):
            stats[name] = bound_stats([len(enc.encode_ordinary(s)) for chunks in out for s in texts_of(chunks)])

    return record


def parts_pass(enc: Any, workers: int) -> Factory:
    """``encode_ordinary`` over ``workers`` parts of the text at once, on threads (tiktoken releases
    the GIL there): what this machine's cores give any parallel pass, the ceiling for ``workers``."""
    def build() -> Callable[[str], list[Any]]:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(workers)

        def run(text: str) -> list[Any]:
            cuts = [0] + [text.index("\n", k * len(text) // workers) + 1 for k in range(1, workers)] + [len(text)]
            return list(pool.map(enc.encode_ordinary, [text[a:b] for a, b in itertools.pairwise(cuts)]))

        return run

    return build


def one_text(enc: Any, texts: list[str], repeats: int, workers: int) -> dict[str, dict[str, Any]]:
    """The corpus as one text, in this process: contextkit with 1 and ``workers`` processes against every peer."""
    text = "\n\n".join(texts)
    mb = len(text.encode("utf-8")) / 1e6
    print(f"\none text: the corpus joined, {mb:.2f} MB, in this process")
    found = peers(enc)
    found[f"tiktoken encode_ordinary {workers} parts at once"] = parts_pass(enc, workers)
    found["contextkit TokenChunker w=1"] = contextkit(1)
    found[f"contextkit TokenChunker w={workers}"] = contextkit(workers)
    stats: dict[str, dict[str, Any]] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    record_stats = chunk_stats(enc, stats)

    def on_last(name: str, out: list[Any]) -> None:
        record_stats(name, out)
        if name.startswith("contextkit"):
            spans[name] = [(c.start, c.end) for c in out[0]]

    # The first call in a process starts the shared worker pool: timed once on its own ("cold"),
    # then the pool stays up for the repeats, as in any process that chunks more than one text.
    _processes.shutdown()
    gc.collect()
    t0 = time.perf_counter()
    cold = [(c.start, c.end) for c in contextkit(workers)()(text)]
    cold_s = time.perf_counter() - t0
    _processes.warm_up(workers - 1, "cl100k_base")
    best = best_of(found, [text], repeats, text[:20000], on_last)
    rows = {name: {"mb_s": mb / best[name], "seconds": best[name], **stats.get(name, {})} for name in found}
    rows[f"contextkit TokenChunker w={workers} cold"] = {"mb_s": mb / cold_s, "seconds": cold_s}
    for name in (f"contextkit TokenChunker w={workers}", f"contextkit TokenChunker w={workers} cold"):
        rows[name]["same_as_w1"] = (cold if name.endswith("cold") else spans[name]) == spans["contextkit TokenChunker w=1"]
    return rows


def whole_process(texts: list[str], repeats: int, workers: int, names: list[str]) -> dict[str, dict[str, Any]]:
    """Wall time of ``python bench/_chunk_peers.py METHOD FILE``: interpreter, imports and one text."""
    text = "\n\n".join(texts)
    mb = len(text.encode("utf-8")) / 1e6
    print(f"\nwhole process: the same text from a file, interpreter start and imports in the time ({mb:.2f} MB)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    runs = [(name, 1) for name in names] + [("contextkit TokenChunker", workers)]
    best = {run: float("inf") for run in runs}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.txt"
        path.write_text(text, encoding="utf-8")
        for rep in range(repeats):
            print(f"  repeat {rep + 1}/{repeats}", flush=True)
            for name, w in runs:
                t0 = time.perf_counter()
                done = subprocess.run([sys.executable, str(RUNNER), name, str(path), str(w)], env=env,
                                      capture_output=True, text=True, check=False)
                elapsed = time.perf_counter() - t0
                if done.returncode != 0:
                    print(f"  {name} failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                best[(name, w)] = min(best[(name, w)], elapsed)
    return {(f"{name} w={w}" if name.startswith("contextkit") else name): {"mb_s": mb / t, "seconds": t}
            for (name, w), t in best.items() if t < float("inf")}


def print_rows(rows: dict[str, dict[str, Any]], reference: str, ref_over_this: bool = False) -> None:
    """The table of methods; the last column is each one's MB/s over ``reference``'s, or (``ref_over_this``)
    the reference's over each one's."""
    ref = rows[reference]["mb_s"]
    print(f"\n{'method':38} {'MB/s':>6} {'best s':>7} {'chunks':>6} {'max tok':>7} {'>512':>5} {'<=512':>8} "
          f"{'ck/this' if ref_over_this else 'this/ref':>8}")
    for name, r in rows.items():
        # floored, so 100.00% means every chunk held the bound
        bound = f"{math.floor(10000 * r['within_bound']) / 100:.2f}%" if "within_bound" in r else "-"
        ratio = ref / r["mb_s"] if ref_over_this else r["mb_s"] / ref
        print(f"{name:38} {r['mb_s']:6.2f} {r['seconds']:7.3f} {r.get('chunks', '-'):>6} "
              f"{r.get('max_tokens', '-'):>7} {r.get('over_bound', '-'):>5} {bound:>8} {ratio:7.2f}x")
    if not ref_over_this:
        print(f"(this/ref: MB/s over {reference}'s)")


def one_text_section(enc: Any, texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    w = args.workers
    rows = one_text(enc, texts, args.repeats, w)
    print_rows(rows, "tiktoken encode_ordinary")
    bare = rows["tiktoken encode_ordinary"]["mb_s"]
    ratios = {f"contextkit w={n} / bare tiktoken pass": rows[f"contextkit TokenChunker w={n}"]["mb_s"] / bare
              for n in (1, w)}
    ratios[f"contextkit w={w} first call (pool start) / bare tiktoken pass"] = (
        rows[f"contextkit TokenChunker w={w} cold"]["mb_s"] / bare)
    ceiling = rows[f"tiktoken encode_ordinary {w} parts at once"]["mb_s"]
    ratios[f"bare pass on {w} parts at once / bare tiktoken pass (the cores' ceiling)"] = ceiling / bare
    ratios[f"contextkit w={w} / bare pass on {w} parts at once"] = rows[f"contextkit TokenChunker w={w}"]["mb_s"] / ceiling
    ratios[f"contextkit w={w} / w=1"] = (rows[f"contextkit TokenChunker w={w}"]["mb_s"]
                                        / rows["contextkit TokenChunker w=1"]["mb_s"])
    for name in list(rows):
        if not name.startswith(("contextkit", "tiktoken")):
            ratios[f"contextkit w={w} / {name}"] = rows[f"contextkit TokenChunker w={w}"]["mb_s"] / rows[name]["mb_s"]
    procs = whole_process(texts, args.repeats, w, ["tiktoken encode_ordinary", "contextkit TokenChunker",
                                                   *[n for n in rows if not n.startswith(("contextkit", "tiktoken"))]])
    if "llamaindex SentenceSplitter" in procs:
        print_rows(procs, "llamaindex SentenceSplitter")
        ratios.update(over_llamaindex(procs, w))
    print("\nratios, one text (MB/s over MB/s; > 1 means the left side is faster):")
    for name, value in ratios.items():
        print(f"  {name:64} {value:6.2f}")
    print(f"  chunks of w={w} identical to w=1: {rows[f'contextkit TokenChunker w={w}']['same_as_w1']} "
          f"(first call: {rows[f'contextkit TokenChunker w={w} cold']['same_as_w1']})")
    return {"in_process": rows, "whole_process": procs, "ratios": ratios}


def over_llamaindex(procs: dict[str, dict[str, Any]], workers: int) -> dict[str, float]:
    """Whole process, contextkit w=1 and w=``workers`` in MB/s over LlamaIndex's SentenceSplitter."""
    return {f"whole process: contextkit w={n} / llamaindex SentenceSplitter":
            procs[f"contextkit TokenChunker w={n}"]["mb_s"] / procs["llamaindex SentenceSplitter"]["mb_s"]
            for n in (1, workers)}


def whole_process_section(texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The issue-22 whole-process figure alone: a bare tiktoken pass, contextkit w=1 and w=N and
    LlamaIndex's SentenceSplitter, round-robin, best of ``--repeats`` (more repeats than the full
    run affords, since this machine's noise is the figure's main uncertainty)."""
    procs = whole_process(texts, args.repeats, args.workers,
                          ["tiktoken encode_ordinary", "contextkit TokenChunker", "llamaindex SentenceSplitter"])
    print_rows(procs, "llamaindex SentenceSplitter")
    ratios = over_llamaindex(procs, args.workers)
    ratios[f"whole process: contextkit w={args.workers} / bare tiktoken pass"] = (
        procs[f"contextkit TokenChunker w={args.workers}"]["mb_s"] / procs["tiktoken encode_ordinary"]["mb_s"])
    for name, value in ratios.items():
        print(f"  {name:64} {value:6.2f}")
    return {"whole_process": procs, "ratios": ratios}


def per_document(enc: Any, texts: list[str], mb: float, args: argparse.Namespace) -> dict[str, Any]:
    """Each PEP on its own: every method on one thread, then contextkit's chunk_many over processes."""
    found = methods(enc)
    stats: dict[str, dict[str, Any]] = {}
    best = best_of(found, texts, args.repeats, texts[0], chunk_stats(enc, stats))
    rows = {name: {"mb_s": mb / best[name], "seconds": best[name], **stats.get(name, {})} for name in found}

    # The parallel path. A chunker keeps its worker pool between chunk_many calls: a fresh
    # chunker's first call ("cold") pays the pool start-up, its second ("warm") does not.
    single = [[c.text for c in TokenChunker(SIZE, OVERLAP).chunk(t)] for t in texts]
    for times, warm in ((1, False), (1, True), (3, False)):
        docs = [Document(id=f"r{r}-d{i}", text=t) for r in range(times) for i, t in enumerate(texts)]
        fastest, outs = float("inf"), []
        for _ in range(args.repeats):
            with TokenChunker(SIZE, OVERLAP) as chunker:
                if warm:
                    chunker.chunk_many(docs, workers=args.workers)
                outs = []
                gc.collect()
                t0 = time.perf_counter()
                outs = chunker.chunk_many(docs, workers=args.workers)
                fastest = min(fastest, time.perf_counter() - t0)
        same = all([c.text for c in chunks] == single[i % len(texts)] for i, chunks in enumerate(outs))
        counts = [len(enc.encode_ordinary(c.text)) for chunks in outs for c in chunks]
        rows[f"contextkit chunk_many w={args.workers} x{times} {'warm' if warm else 'cold'}"] = {
            "mb_s": mb * times / fastest, "seconds": fastest, **bound_stats(counts), "same_as_single": same}

    ck = rows["contextkit TokenChunker"]["mb_s"]
    print_rows(rows, "contextkit TokenChunker", ref_over_this=True)

    ratios: dict[str, float] = {}
    for name, r in rows.items():
        if not name.startswith("contextkit"):
            ratios[f"contextkit / {name}"] = ck / r["mb_s"]
    parallel = {name: r for name, r in rows.items() if "chunk_many" in name}
    for name, r in parallel.items():
        ratios[f"parallel ({name.split('chunk_many ')[1]}) / single"] = r["mb_s"] / ck
    print("\nratios (MB/s over MB/s; > 1 means the left side is faster):")
    for name, value in ratios.items():
        print(f"  {name:58} {value:6.2f}")
    if "llamaindex SentenceSplitter" in rows:
        print(f"  contextkit is {ratios['contextkit / llamaindex SentenceSplitter']:.2f}x LlamaIndex SentenceSplitter "
              f"and runs at {1 / ratios['contextkit / tiktoken encode_ordinary']:.2f}x the bare encode_ordinary time")
    print("  chunk_many output identical to chunk(): "
          + ", ".join(f"{name.split('chunk_many ')[1]} {r['same_as_single']}" for name, r in parallel.items()))

    return {"methods": rows, "ratios": ratios}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="first N PEP files only")
    ap.add_argument("--repeats", type=int, default=3, help="best of N (default 3)")
    ap.add_argument("--workers", type=int, default=2,
                    help="processes for one text and for chunk_many (default 2)")
    ap.add_argument("--section", choices=["documents", "one-text", "whole-process", "all"], default="all",
                    help="documents one at a time, the corpus as one text (in process and whole process), "
                         "the whole-process figure alone (bare pass, contextkit, LlamaIndex), or all")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()

    enc = TiktokenTokenizer("cl100k_base").encoding  # a real tiktoken.Encoding, loaded offline
    corpus = load_corpus(args.limit)
    texts = [t for _, t in corpus]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"corpus: {len(texts)} PEP files, {mb:.2f} MB; cl100k_base, chunk_size {SIZE}, overlap {OVERLAP}; "
          f"best of {args.repeats}; single thread, one document at a time")

    result: dict[str, Any] = {}
    if args.section in ("documents", "all"):
        result["documents"] = per_document(enc, texts, mb, args)
    if args.section in ("one-text", "all"):
        result["one_text"] = one_text_section(enc, texts, args)
    if args.section == "whole-process":
        result["whole_process"] = whole_process_section(texts, args)

    if args.json:
        result.update(corpus={"files": len(texts), "mb": mb, "limit": args.limit}, repeats=args.repeats,
                      chunk_size=SIZE, chunk_overlap=OVERLAP)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
