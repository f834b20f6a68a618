"""Chunking throughput: contextkit's TokenChunker against its peers, in one run.

What it measures: MB/s (UTF-8 bytes of input / wall seconds, best of ``--repeats``)
of chunking the Python PEPs corpus (``shared/data/python_peps/peps/*.rst``, 703
files, ~13.9 MB) into chunks of at most 512 cl100k_base tokens with 64 tokens of
overlap, single thread, one document at a time, for:

* a bare tiktoken pass (``encode_ordinary`` and ``encode(disallowed_special=())``):
  the floor any exact token chunker pays;
* contextkit ``TokenChunker(512, 64).chunk``;
* chonkie ``TokenChunker`` and ``SentenceChunker``, semchunk, LangChain
  ``RecursiveCharacterTextSplitter`` (tiktoken length) and LlamaIndex
  ``SentenceSplitter``, all given the same ``tiktoken.Encoding``;
* contextkit ``chunk_many(workers=2)`` (process pool started per call, start-up
  included), on the corpus and on the corpus repeated 3x so start-up amortises.

Each chunker is built fresh before every repeat, outside the clock (semchunk
memoises token counts per chunker). The "<=512" column, computed outside the
clock, is the share of a method's chunks whose ``len(enc.encode_ordinary(text))``
is at most 512: whether the token bound really held.

Goals: contextkit is token-exact (<=512 share 100%), at least as fast as every
peer and as LlamaIndex's SentenceSplitter, within a small factor of the bare
tiktoken pass, and ``workers=2`` beats one process on the 3x corpus.

Run: ``python bench/bench_chunking.py`` (add ``--limit 100 --repeats 1`` for a
quick run, ``--json out.json`` to keep the numbers).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contextkit.chunking import TokenChunker
from contextkit.records import Document
from contextkit.tokenizers import TiktokenTokenizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"
SIZE, OVERLAP = 512, 64

ChunkFn = Callable[[str], list[Any]]  # one document's text -> its chunks (str or objects with .text)
Factory = Callable[[], ChunkFn]  # builds a fresh chunker; called outside the clock


def load_corpus(limit: int | None) -> list[tuple[str, str]]:
    files = sorted(PEPS.glob("*.rst"))[:limit]
    if not files:
        raise SystemExit(f"no PEP files under {PEPS}")
    return [(f.name, f.read_bytes().decode("utf-8")) for f in files]


def methods(enc: Any) -> dict[str, Factory]:
    """Every method to time; peers that fail to import are reported and skipped."""
    found: dict[str, Factory] = {
        "tiktoken encode_ordinary": lambda: enc.encode_ordinary,
        "tiktoken encode(disallowed=())": lambda: lambda t: enc.encode(t, disallowed_special=()),
    }

    def contextkit() -> ChunkFn:
        chunker = TokenChunker(SIZE, OVERLAP)
        return lambda t: chunker.chunk(Document(id="doc", text=t))

    found["contextkit TokenChunker"] = contextkit
    try:
        import chonkie
    except ImportError as exc:
        print(f"skipped chonkie: {exc}")
    else:
        found["chonkie TokenChunker"] = lambda: chonkie.TokenChunker(
            tokenizer=enc, chunk_size=SIZE, chunk_overlap=OVERLAP).chunk
        found["chonkie SentenceChunker"] = lambda: chonkie.SentenceChunker(
            tokenizer=enc, chunk_size=SIZE, chunk_overlap=OVERLAP).chunk
    try:
        import semchunk
    except ImportError as exc:
        print(f"skipped semchunk: {exc}")
    else:
        def semchunker() -> ChunkFn:
            chunker = semchunk.chunkerify(enc, SIZE)
            return lambda t: chunker(t, overlap=OVERLAP)  # an int >= 1 is a token count, not a ratio

        found["semchunk"] = semchunker
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter
    except ImportError as exc:
        print(f"skipped langchain: {exc}")
    else:
        # from_tiktoken_encoder() calls tiktoken.get_encoding(name), which downloads. This
        # length function is exactly what it builds (TextSplitter._tiktoken_length_function,
        # langchain-text-splitters 1.1): enc.encode with allowed_special=set() and
        # disallowed_special="all". Counts equal len(enc.encode_ordinary(s)) on text without
        # special tokens; the "all" check adds one regex scan per call, as in LangChain itself.
        found["langchain Recursive(tiktoken)"] = lambda: RecursiveCharacterTextSplitter(
            chunk_size=SIZE, chunk_overlap=OVERLAP,
            length_function=lambda s: len(enc.encode(s, allowed_special=set(), disallowed_special="all")),
        ).split_text
    try:
        from llama_index.core.node_parser import SentenceSplitter
    except ImportError as exc:
        print(f"skipped llama-index: {exc}")
    else:
        found["llamaindex SentenceSplitter"] = lambda: SentenceSplitter(
            chunk_size=SIZE, chunk_overlap=OVERLAP, tokenizer=enc.encode).split_text
    return found


def best_time(prepare: Callable[[], Callable[[], Any]], repeats: int) -> tuple[float, Any]:
    """Best wall seconds of ``repeats`` runs, and the last run's output.

    ``prepare`` runs off the clock before each repeat and returns the thing to time.
    """
    best, out = float("inf"), None
    for _ in range(repeats):
        run = prepare()
        t0 = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - t0)
    return best, out


def texts_of(chunks: list[Any]) -> list[str]:
    return [c if isinstance(c, str) else c.text for c in chunks]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="first N PEP files only")
    ap.add_argument("--repeats", type=int, default=3, help="best of N (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="processes for chunk_many (default 2)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()

    enc = TiktokenTokenizer("cl100k_base").encoding  # a real tiktoken.Encoding, loaded offline
    corpus = load_corpus(args.limit)
    texts = [t for _, t in corpus]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"corpus: {len(texts)} PEP files, {mb:.2f} MB; cl100k_base, chunk_size {SIZE}, overlap {OVERLAP}; "
          f"best of {args.repeats}; single thread, one document at a time")

    rows: dict[str, dict[str, Any]] = {}
    for name, factory in methods(enc).items():
        factory()(texts[0])  # first-call costs (lazy imports, nltk data) stay off the clock

        def prepare(factory: Factory = factory) -> Callable[[], list[list[Any]]]:
            fn = factory()
            return lambda: [fn(t) for t in texts]

        secs, outs = best_time(prepare, args.repeats)
        row: dict[str, Any] = {"mb_s": mb / secs, "seconds": secs}
        if not name.startswith("tiktoken"):
            counts = [len(enc.encode_ordinary(s)) for chunks in outs for s in texts_of(chunks)]
            row.update(chunks=len(counts), max_tokens=max(counts, default=0),
                       within_bound=sum(c <= SIZE for c in counts) / max(len(counts), 1))
        rows[name] = row
        print(f"  measured {name}: {row['mb_s']:.2f} MB/s")

    # The parallel path: chunk_many spawns its pool on every call, so start-up is in the time.
    chunker = TokenChunker(SIZE, OVERLAP)
    single = [[c.text for c in chunker.chunk(Document(id=f"d{i}", text=t))] for i, t in enumerate(texts)]
    for times in (1, 3):
        docs = [Document(id=f"r{r}-d{i}", text=t) for r in range(times) for i, t in enumerate(texts)]
        secs, outs = best_time(lambda docs=docs: lambda: chunker.chunk_many(docs, workers=args.workers),
                               args.repeats)
        same = all([c.text for c in chunks] == single[i % len(texts)] for i, chunks in enumerate(outs))
        counts = [c.token_count for chunks in outs for c in chunks]
        rows[f"contextkit chunk_many w={args.workers} x{times}"] = {
            "mb_s": mb * times / secs, "seconds": secs, "chunks": len(counts), "max_tokens": max(counts),
            "within_bound": sum(c <= SIZE for c in counts) / len(counts), "same_as_single": same}

    ck = rows["contextkit TokenChunker"]["mb_s"]
    print(f"\n{'method':38} {'MB/s':>8} {'best s':>8} {'chunks':>7} {'max tok':>7} {'<=512':>7} {'ck/this':>8}")
    for name, r in rows.items():
        bound = f"{100 * r['within_bound']:.1f}%" if "within_bound" in r else "-"
        print(f"{name:38} {r['mb_s']:8.2f} {r['seconds']:8.3f} {r.get('chunks', '-'):>7} "
              f"{r.get('max_tokens', '-'):>7} {bound:>7} {ck / r['mb_s']:8.2f}x")

    ratios: dict[str, float] = {}
    for name, r in rows.items():
        if not name.startswith("contextkit"):
            ratios[f"contextkit / {name}"] = ck / r["mb_s"]
    for times in (1, 3):
        key = f"contextkit chunk_many w={args.workers} x{times}"
        ratios[f"parallel (w={args.workers}, corpus x{times}) / single"] = rows[key]["mb_s"] / ck
    print("\nratios (MB/s over MB/s; > 1 means the left side is faster):")
    for name, value in ratios.items():
        print(f"  {name:58} {value:6.2f}")
    if "llamaindex SentenceSplitter" in rows:
        print(f"  contextkit is {ratios['contextkit / llamaindex SentenceSplitter']:.2f}x LlamaIndex SentenceSplitter "
              f"and runs at {1 / ratios['contextkit / tiktoken encode_ordinary']:.2f}x the bare encode_ordinary time")
    for times in (1, 3):
        same = rows[f"contextkit chunk_many w={args.workers} x{times}"]["same_as_single"]
        print(f"  chunk_many x{times} output identical to chunk(): {same}")

    if args.json:
        result = {"corpus": {"files": len(texts), "mb": mb, "limit": args.limit}, "repeats": args.repeats,
                  "chunk_size": SIZE, "chunk_overlap": OVERLAP, "methods": rows, "ratios": ratios}
        args.json.write_text(json.dumps(result, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
