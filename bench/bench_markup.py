"""Markup's share of the evidence block: ``markup="full"`` against ``markup="lean"`` on the PEPs.

Method. The PEPs (``/work/shared/data/python_peps/peps``, or ``--peps-dir``; the first ``--limit``
files in name order, all by default) are ingested into a temporary index in 128-token chunks
(``--chunk-size``; the default overlap), read in place: nothing is copied into the repository.
Retrieval is contextkit's BM25 retriever over that index, so the vectors are never searched and
the index is built with a small word-hashing embedder defined here (no model: MiniLM embeds about
15 chunks a second on two cores, over half an hour for the 32,000 chunks, and no figure here
depends on the vectors). The questions are derived from ``manifest.tsv``: every ``len/--questions``-th PEP among those ingested
(in file order) gives "What does the PEP on <title> propose?". Each question is assembled by
``ContextAssembler`` at each budget (default 2,000 and 8,000 tokens) with a one-line instruction,
``fill="budget"`` (the evidence fills the room, so both markups get the same room), in XML
(``--format``), once per markup. The report's own figures are used: ``markup_tokens`` of the
evidence section (its tokens less those of the texts it carries, counted with the prompt's
tokenizer), its ``tokens``, and the chunks shown (included, cut, or merged into a shown passage).

Figures per budget and markup, summed over the questions: the markup share of the evidence block
(markup tokens / evidence tokens), markup tokens per chunk shown, evidence text tokens fitted
(evidence tokens less markup, mean per prompt), elements and chunks per prompt, and lean's ratio
to full for the share and for the text fitted. Every prompt is checked against its budget.

    python bench/bench_markup.py [--peps-dir DIR] [--limit N] [--questions 20] [--budgets 2000 8000]
        [--chunk-size 128] [--format xml|markdown] [--cache DIR] [--json FILE]

The index is built once under ``--cache`` (default: a folder in the system temp dir) and reused.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import csv
import hashlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEPS = Path("/work/shared/data/python_peps")
INSTRUCTIONS = "Answer from the documents only; cite the document id you use."
MARKUPS = ("full", "lean")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def hashing_embedder(buckets: int = 64) -> Any:
    """Words hashed into ``buckets`` dimensions: deterministic and instant; only BM25 is searched here."""
    import numpy as np

    from contextkit.embedders.base import BaseEmbedder

    class HashingEmbedder(BaseEmbedder):
        model_name = f"bench-hashing-{buckets}"

        @property
        def dim(self) -> int:
            return buckets

        def _encode(self, texts: list[str]) -> Any:
            out = np.zeros((len(texts), buckets), dtype=np.float32)
            for row, text in enumerate(texts):
                for word in re.findall(r"\w+", text.lower()):
                    out[row, int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % buckets] += 1.0
            return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

        def _settings(self) -> dict[str, Any]:
            return {"buckets": buckets}

    return HashingEmbedder()


def pep_files(peps_dir: Path, limit: int | None) -> list[Path]:
    files = sorted(peps_dir.glob("pep-*.*"))
    return files[:limit] if limit else files


def questions(manifest: Path, files: list[Path], n: int) -> list[str]:
    """Every ``len/n``-th ingested PEP's title, as a question (deterministic: file order)."""
    names = {f.name for f in files}
    with manifest.open(encoding="utf-8") as fh:
        titles = [row["title"] for row in csv.DictReader(fh, delimiter="\t") if row["file"] in names]
    step = max(1, len(titles) // n)
    return [f"What does the PEP on {t} propose?" for t in titles[::step][:n]]


def build_index(files: list[Path], cache: Path, chunk_size: int, embedder: Any) -> Path:
    """The index of ``files`` (one folder of links to them, so ids read ``peps/pep-0008.rst::3``)."""
    from contextkit.ingestion import ingest

    key = hashlib.sha256("\n".join([str(chunk_size), *map(str, files)]).encode()).hexdigest()[:12]
    index_dir = cache / f"ix-{key}"
    if (index_dir / "manifest.json").exists():
        return index_dir
    src = cache / f"src-{key}" / "peps"
    src.mkdir(parents=True, exist_ok=True)
    for f in files:  # symbolic links: the data stays where it is
        link = src / f.name
        if not link.exists():
            link.symlink_to(f)
    started = time.perf_counter()
    report = ingest([src], index_dir, embedder=embedder, chunk_size=chunk_size, follow_symlinks=True)
    log(f"ingested {len(files)} PEPs into {report.chunks_added:,} chunks "
        f"in {time.perf_counter() - started:.0f} s")
    return index_dir


def run(args: argparse.Namespace) -> dict[str, Any]:
    from contextkit.assembly.context_assembler import ContextAssembler
    from contextkit.index import Index
    from contextkit.retrievers import BM25Retriever

    files = pep_files(args.peps_dir / "peps", args.limit)
    asked = questions(args.peps_dir / "manifest.tsv", files, args.questions)
    cache = Path(args.cache or Path(tempfile.gettempdir()) / "contextkit-bench-markup")
    cache.mkdir(parents=True, exist_ok=True)
    index_dir = build_index(files, cache, args.chunk_size, hashing_embedder())
    rows: dict[str, Any] = {}
    with Index.open(index_dir, read_only=True) as index:
        retriever = BM25Retriever(index)
        log(f"{len(index):,} chunks, {len(asked)} questions")
        for budget in args.budgets:
            for markup in MARKUPS:
                assembler = ContextAssembler(budget, retriever=retriever, fill="budget", markup=markup,
                                             format=args.format)
                tally = {"markup": 0, "tokens": 0, "chunks": 0, "elements": 0, "prompts": 0, "over": 0}
                for q in asked:
                    prompt, report = assembler.assemble(q, instructions=INSTRUCTIONS)
                    tally["over"] += report.tokens > budget
                    ev = next(s for s in report.sections if s.role == "evidence")
                    shown = [i for i in report.items if i.section == ev.name and i.status in ("included", "truncated")]
                    merged = [i for i in report.items if i.section == ev.name and i.status == "merged"]
                    tally["markup"] += ev.markup_tokens
                    tally["tokens"] += ev.tokens
                    tally["chunks"] += len(shown) + len(merged)
                    tally["elements"] += len(report.citations) if markup == "lean" else len(shown)
                    tally["prompts"] += 1
                rows[f"{budget}/{markup}"] = tally
    return {"budgets": args.budgets, "questions": asked, "chunks": len(index), "chunk_size": args.chunk_size,
            "format": args.format, "rows": rows}


def table(result: dict[str, Any]) -> str:
    lines = [f"{result['chunks']:,} chunks of {result['chunk_size']} tokens, {len(result['questions'])} questions, "
             f"BM25, fill='budget', {result['format']}; sums over the questions",
             "| budget | markup | markup share of evidence | markup tokens / chunk | evidence text tokens (mean) "
             "| elements (mean) | chunks (mean) | over budget |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rows = result["rows"]
    for budget in result["budgets"]:
        for markup in MARKUPS:
            t = rows[f"{budget}/{markup}"]
            n = t["prompts"] or 1
            text = (t["tokens"] - t["markup"]) / n
            lines.append(f"| {budget:,} | {markup} | {t['markup'] / max(t['tokens'], 1):.1%} | "
                         f"{t['markup'] / max(t['chunks'], 1):.1f} | {text:,.0f} | {t['elements'] / n:.1f} | "
                         f"{t['chunks'] / n:.1f} | {t['over']} |")
    lines += ["", "| budget | lean/full markup share | lean/full markup tokens | lean/full text fitted |",
              "| ---: | ---: | ---: | ---: |"]
    for budget in result["budgets"]:
        full, lean = rows[f"{budget}/full"], rows[f"{budget}/lean"]
        share = (lean["markup"] / max(lean["tokens"], 1)) / max(full["markup"] / max(full["tokens"], 1), 1e-9)
        fitted = (lean["tokens"] - lean["markup"]) / max(full["tokens"] - full["markup"], 1)
        lines.append(f"| {budget:,} | {share:.2f} | {lean['markup'] / max(full['markup'], 1):.2f} | {fitted:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peps-dir", type=Path, default=PEPS, help="holds peps/ and manifest.tsv")
    parser.add_argument("--limit", type=int, default=None, help="the first N PEP files (default: all)")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--budgets", type=int, nargs="+", default=[2_000, 8_000])
    parser.add_argument("--chunk-size", type=int, default=128)
    parser.add_argument("--format", choices=["xml", "markdown"], default="xml")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    result = run(args)
    print(table(result))
    log(f"{time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
