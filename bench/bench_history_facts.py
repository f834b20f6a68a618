"""Planted facts and their corrections through history compression: kept, newest shown, older as current.

Chats of :mod:`bench._session_chats` (70 turns of Topical-Chat, five planted facts, one or two of them
corrected later, a paraphrased question for one; ``--split heldout`` by default: conversations
380-538 and the held-out facts; ``tune`` chose every setting). The first 60 turns are compressed to
1/4 (and 1/10) of their tokens; the last 10 stay verbatim, as a session keeps its recent turns.
The prompt is: what the method keeps of the first 60 turns, then the 10 recent turns, then (the
session) the recall lines placed near the question. Methods:

* recall: ``HistorySummarizer.summarize(first60, query=question, newer=recent)``;
* frozen: ``summarize(first60, query=None)``: made when the turns were compacted, so it neither
  knows the question nor the corrections made after (``newer`` empty);
* session: frozen (3/4 of the budget) + recall (1/4), both with MiniLM;
* newest turns: the newest of the first 60 turns that fit; first+last: half each.

Kept: every current value of the asked fact is in the prompt. Newest shown (asked facts that were
corrected): the corrected values are in it. Older as current: a corrected fact's first statement is
shown on an unmarked line with no correction after it (every corrected fact of the chat, asked or
not). Compression: tokens of the first 60 turns over tokens of what the method kept of them.
Verbatim: share of summary pieces that are spans of their turn.

    python bench/bench_history_facts.py [--split heldout|tune] [--chats 40] [--lexical] [--supersede off]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _session_chats import DATA, FactChat, fact_chats, kept, newest_shown, older_as_current  # noqa: E402

from contextkit.compressors.history import GAP, HistorySummarizer  # noqa: E402
from contextkit.tokenizers import get_tokenizer  # noqa: E402

RECENT = 10
#: A method: (the first turns, the recent turns, question, token budget) -> (text kept of the first turns,
#: text placed after the recent turns).
Method = Callable[[list[dict[str, str]], list[dict[str, str]], str, int], tuple[str, str]]


def verbatim(summary: str, turns: list[dict[str, str]]) -> tuple[int, int]:
    """(pieces, verbatim pieces) of a summary against the turns it summarises."""
    pieces = ok = 0
    for line in summary.splitlines()[1:]:
        head, _, body = line.partition(": ")
        turn = int(head.split("]")[0].removeprefix("- [turn ").split(",")[0]) - 1
        for piece in body.split(GAP):
            pieces += 1
            ok += 0 <= turn < len(turns) and piece in turns[turn]["content"]
    return pieces, ok


def methods(embedder: Any, count: Callable[[str], int], supersede: str = "drop") -> dict[str, Method]:
    summarizer = HistorySummarizer(embedder=embedder, supersede=supersede)

    def fit(turns: list[dict[str, str]], budget: int) -> list[dict[str, str]]:
        out, used = [], 0
        for m in turns:
            used += count(m["content"])
            if used > budget:
                break
            out.append(m)
        return out

    def text(turns: list[dict[str, str]]) -> str:
        return "\n".join(m["content"] for m in turns)

    return {
        "recall": lambda old, new, q, b: (summarizer.summarize(old, q, b, newer=new), ""),
        "frozen": lambda old, new, q, b: (summarizer.summarize(old, None, b), ""),
        "session": lambda old, new, q, b: (summarizer.summarize(old, None, 3 * b // 4),
                                           summarizer.summarize(old, q, b // 4, newer=new)),
        "newest turns": lambda old, new, q, b: (text(fit(old[::-1], b)[::-1]), ""),
        "first+last": lambda old, new, q, b: (text(fit(old, b // 2)) + "\n" + text(fit(old[::-1], b // 2)[::-1]), ""),
    }


def run(chats: list[FactChat], ratio: int, table: dict[str, Method], count: Callable[[str], int]) -> list[dict[str, Any]]:
    rows = []
    for name, method in table.items():
        hits = newest = newest_n = older = corrected = pieces = ok = tokens_in = tokens_out = 0
        started = time.perf_counter()
        for chat in chats:
            old, new = chat.messages[:-RECENT], chat.messages[-RECENT:]
            budget = sum(count(m["content"]) for m in old) // ratio
            head, tail = method(old, new, chat.question, budget)
            prompt = "\n".join([head, *(m["content"] for m in new), tail])
            tokens_in += sum(count(m["content"]) for m in old)
            tokens_out += count(head) + count(tail)
            hits += kept(prompt, chat)
            if chat.asked.correction:
                newest_n += 1
                newest += newest_shown(prompt, chat)
            for fact in chat.facts:
                if fact.correction:
                    corrected += 1
                    older += older_as_current(prompt, chat, fact)
            for part in (head, tail):
                if part.startswith("Earlier ("):
                    p, v = verbatim(part, old)
                    pieces, ok = pieces + p, ok + v
        rows.append({"method": name, "ratio": f"{ratio}x", "kept": hits / len(chats),
                     "newest shown": newest / max(newest_n, 1), "older as current": older / max(corrected, 1),
                     "compression": tokens_in / max(tokens_out, 1),
                     "verbatim": ok / pieces if pieces else float("nan"),
                     "ms/chat": 1000 * (time.perf_counter() - started) / len(chats)})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=["heldout", "tune"], default="heldout")
    p.add_argument("--chats", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ratios", type=int, nargs="+", default=[4, 10])
    p.add_argument("--lexical", action="store_true", help="no embedder (TF-IDF relevance)")
    p.add_argument("--supersede", choices=["drop", "mark", "off"], default="drop", help="'off': the ablation")
    args = p.parse_args()
    if not DATA.is_file():
        print(f"not found: {DATA} (Topical-Chat: bash data/fetch.sh)")
        sys.exit(2)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    embedder = None
    if not args.lexical:
        from contextkit.embedders import Embedder

        embedder = Embedder()
    count = get_tokenizer("cl100k_base").count
    chats = fact_chats(args.chats, seed=args.seed, split=args.split)
    n_corr = sum(c.asked.correction is not None for c in chats)
    print(f"{len(chats)} chats, split {args.split!r}, seed {args.seed}: asked fact corrected in {n_corr}; "
          f"{sum(f.correction is not None for c in chats for f in c.facts)} corrections in all; "
          f"{'lexical' if args.lexical else 'MiniLM'}, supersede={args.supersede!r}")
    header = ["method", "ratio", "kept", "newest shown", "older as current", "compression", "verbatim", "ms/chat"]
    print("  ".join(f"{h:>16}" for h in header))
    table = methods(embedder, count, args.supersede)
    for ratio in args.ratios:
        for row in run(chats, ratio, table, count):
            print("  ".join(f"{row[h]:>16.3f}" if isinstance(row[h], float) else f"{row[h]:>16}" for h in header))


if __name__ == "__main__":
    main()
