"""Tool output cut by the task against head and tail: is the line that answers kept?

200 generated tool outputs (``bench/tool_samples.py``: CI logs, server logs, JSON records, noisy runs
where every line says "error"), each with one planted line at 30-70% of its depth and a question in a
user's own words. Each goes through ``ContextAssembler(budget).assemble(question, tool_results=[...])``
(contextkit's cut: head, tail and the lines that bear on the question) and through the head-and-tail
cut alone (``head_and_tail``, what contextkit did before) at the same room; printed per kind: the share
of prompts holding the planted line, and the compression (tokens of the output / tokens kept).

Run: ``python bench/bench_tool_output.py`` (about 2 minutes on 2 cores); ``--cases``, ``--budget``,
``--lines MIN MAX``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tool_samples import tool_cases  # noqa: E402

from contextkit.assembly._prune import head_and_tail  # noqa: E402
from contextkit.assembly.context_assembler import ContextAssembler  # noqa: E402
from contextkit.tokenizers import get_tokenizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--budget", type=int, default=4_000)
    ap.add_argument("--lines", type=int, nargs=2, default=(8_000, 20_000))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tok = get_tokenizer("cl100k_base")
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for case in tool_cases(args.cases, seed=args.seed, lines=tuple(args.lines)):
        prompt, report = ContextAssembler(args.budget).assemble(case.question, tool_results=[("tool", case.text)])
        section = next(s for s in report.sections if s.role == "tool_result")
        whole = tok.count(case.text)
        baseline = head_and_tail(case.text, section.tokens, tok) or ""
        for kind in (case.kind, "all"):
            row = rows[kind]
            row["task"].append(case.planted in prompt)
            row["head+tail"].append(case.planted in baseline)
            row["ratio"].append(whole / section.tokens)
            row["over"].append(report.tokens > args.budget)
    print(f"{args.cases} tool outputs of {args.lines[0]:,}-{args.lines[1]:,} lines, a question and a budget of "
          f"{args.budget:,} tokens; head+tail gets the room contextkit's cut took")
    print(f"{'kind':14} {'cases':>5} {'kept: task cut':>15} {'kept: head+tail':>16} {'compression (median)':>21} "
          f"{'over budget':>12}")
    for kind, row in sorted(rows.items(), key=lambda kv: kv[0] == "all"):
        print(f"{kind:14} {len(row['task']):5d} {statistics.mean(row['task']):15.3f} "
              f"{statistics.mean(row['head+tail']):16.3f} {statistics.median(row['ratio']):20.1f}x "
              f"{int(sum(row['over'])):12d}")


if __name__ == "__main__":
    main()
