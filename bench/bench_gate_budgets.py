"""The relevance gate against the budget: evidence tokens for the same questions from 2,000 tokens to a 2M window.

Issue 31: the same question sent 1,895 tokens of evidence at a 5,000 budget and 61,107 under the
``gemini-1.5-pro`` profile. For each question of ``data/python_doc_questions.json`` (written for a
documentation assistant over Python's docs; a question with no answer there is off topic), each
retriever (hybrid, the default; dense; BM25) and each budget, ``ContextAssembler(budget,
index=...).assemble(question)`` with the defaults; printed: evidence tokens, whether an answer string
is in the prompt, and each budget's evidence as a ratio of the 5,000 budget's.

    python bench/bench_gate_budgets.py --index PYDOC.ck-index [--modes hybrid,dense,bm25] [--json FILE]
        [--relevant-max-tokens N]   (0: no cap, the assembler before it had one)

The index: ``apt-get install python3-doc`` then ``contextkit ingest /usr/share/doc/python3-doc/html
--index pydoc.ck-index`` (the whole folder: a few hours on 2 cores), or any subset of its pages.
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

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "data" / "python_doc_questions.json"
BUDGETS: list[int | str] = [2_000, 5_000, 20_000, "gpt-4o", "gemini-1.5-pro"]


def measure(index_path: Path, modes: list[str], cap: int | None = 5_000) -> list[dict[str, Any]]:
    from contextkit.assembly.context_assembler import ContextAssembler
    from contextkit.index import Index

    questions = json.loads(QUESTIONS.read_text(encoding="utf-8"))["questions"]
    rows = []
    with Index.open(index_path, read_only=True) as index:
        for mode in modes:
            assemblers = {b: ContextAssembler(b, index=index, mode=mode, relevant_max_tokens=cap) for b in BUDGETS}
            for q in questions:
                row: dict[str, Any] = {"mode": mode, "question": q["question"], "budgets": {}}
                for budget, assembler in assemblers.items():
                    result = assembler.assemble(q["question"])
                    relevance = result.report.relevance
                    row["budgets"][str(budget)] = {
                        "evidence_tokens": sum(s.tokens for s in result.report.sections if s.role == "evidence"),
                        "answered": bool(q["answers"]) and any(a in result.prompt for a in q["answers"]),
                        "candidates": relevance.candidates if relevance else 0,
                        "off_topic": bool(relevance and relevance.off_topic),
                    }
                rows.append(row)
                _print_row(row)
    return rows


def _print_row(row: dict[str, Any]) -> None:
    base = row["budgets"]["5000"]["evidence_tokens"] or 1
    cells = [f"{b}: {v['evidence_tokens']:>6,}{'*' if v['answered'] else ' '} ({v['evidence_tokens'] / base:.2f}x)"
             for b, v in row["budgets"].items()]
    print(f"{row['mode']:6} {row['question'][:44]:44} " + "  ".join(cells), flush=True)


def summary(rows: list[dict[str, Any]]) -> None:
    print("\n* an answer string is in the prompt; (x) evidence tokens over the 5,000 budget's")
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        for budget in ("gpt-4o", "gemini-1.5-pro"):
            ratios = [r["budgets"][budget]["evidence_tokens"] / max(1, r["budgets"]["5000"]["evidence_tokens"])
                      for r in mine]
            within = sum(abs(x - 1) <= 0.2 for x in ratios)
            print(f"{mode:6} {budget:15} vs 5,000: within 20% for {within} of {len(mine)} questions; "
                  f"ratios {min(ratios):.2f}-{max(ratios):.2f}")
        answerable = [r for r in mine if r["budgets"]["2000"]["answered"] or any(
            v["answered"] for v in r["budgets"].values())]
        at_2000 = sum(r["budgets"]["2000"]["answered"] for r in mine)
        print(f"{mode:6} answered at 2,000 tokens: {at_2000} of {len(mine)} questions "
              f"({len(answerable)} answered at some budget)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--index", type=Path, required=True, help="an index of Python's HTML docs (see the docstring)")
    p.add_argument("--modes", default="hybrid,dense,bm25")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--relevant-max-tokens", type=int, default=5_000,
                   help="the assembler's relevant_max_tokens (default %(default)s, its default); 0: no cap")
    args = p.parse_args()
    if not (args.index / "manifest.json").is_file() and not str(args.index).startswith("postgresql"):
        sys.exit(f"{args.index}: not an index (see: python bench/bench_gate_budgets.py --help)")
    rows = measure(args.index, args.modes.split(","), args.relevant_max_tokens or None)
    summary(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
