"""History compression on real conversations: planted-fact retention and speed.

Topical-Chat (``../shared/data/topical_chat/test_freq.json``, 539 human-human
conversations) carries the talk; into the first six turns of each conversation
we plant four facts (a name, a number, a date, a preference; templates and
values drawn with a seeded RNG), then at the end the fact's owner asks about
one of them. The history (all turns, planted sentences included) is compressed
to 1/2, 1/4 and 1/8 of its tokens by

* contextkit: the newest turns verbatim up to half the budget, the older turns
  summarised by ``HistorySummarizer`` into the rest (the question is given);
* the baseline: the newest turns that fit (what a chat window does).

Retention = share of planted values still present verbatim in the compressed
history. Goals (issue): >= 90% at 4x, and >= 2x the baseline's retention at 8x.

Faithfulness: every summary line names its turn (``- [turn N] role: ...``) and its
pieces (sentences, or runs of neighbouring sentences, split at the `` … `` gap mark)
must be verbatim spans of that turn's message. ``verbatim`` is the share of pieces
that are (goal 100%); ``altered facts`` counts pieces with a digit that are not.

    python bench/bench_history.py [--limit 200] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from contextkit.compressors.history import GAP, HistorySummarizer
from contextkit.records import Message
from contextkit.tokenizers import get_tokenizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "topical_chat" / "test_freq.json"

NAMES = ["Priya", "Tomasz", "Aoife", "Kwame", "Lucia", "Mateo", "Yuki", "Farah", "Emeka", "Ingrid", "Rafael", "Mei"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
FAVOURITES = {"colour": ["teal", "mustard yellow", "burgundy", "lavender"],
              "band": ["Radiohead", "Fleetwood Mac", "Khruangbin", "the Pixies"],
              "food": ["pierogi", "pad thai", "shakshuka", "jollof rice"],
              "city": ["Lisbon", "Kyoto", "Montreal", "Cape Town"]}
FACTS = {
    "name": [("By the way, my name is {v}.", "Do you remember my name?"),
             ("Oh, I never introduced myself, I'm {v}.", "Sorry, what did I say my name was?")],
    "number": [("My apartment number is {v}, funny enough.", "What was my apartment number again?"),
               ("I have {v} cousins living in Ohio.", "How many cousins did I say live in Ohio?")],
    "date": [("My sister's wedding is on {v}.", "When did I say my sister's wedding is?"),
             ("I start my new job on {v}.", "When do I start my new job?")],
    "preference": [("My favourite {c} is {v}.", "What did I say my favourite {c} is?")],
}


def log(msg: str) -> None:
    print(msg, flush=True)


def plant(conv: list[dict[str, Any]], rng: random.Random) -> tuple[list[Message], list[dict[str, str]], str, str]:
    msgs = [Message("user" if t["agent"] == "agent_1" else "assistant", t["message"], id=f"t{i}")
            for i, t in enumerate(conv)]
    turns = rng.sample(range(min(6, len(msgs) - 2)), 4)
    facts = []
    for kind, turn in zip(FACTS, turns):
        template, question = rng.choice(FACTS[kind])
        c = ""
        if kind == "name":
            value = rng.choice(NAMES)
        elif kind == "number":
            value = str(rng.randint(12, 987))
        elif kind == "date":
            value = f"{rng.randint(1, 28)} {rng.choice(MONTHS)}"
        else:
            c = rng.choice(sorted(FAVOURITES))
            value = rng.choice(FAVOURITES[c])
        sentence = template.format(v=value, c=c)
        m = msgs[turn]
        msgs[turn] = Message(m.role, f"{m.content.rstrip()} {sentence}", id=m.id)
        facts.append({"kind": kind, "value": value, "owner": m.role, "question": question.format(c=c)})
    asked = rng.choice(facts)
    return msgs, facts, asked["question"], asked["value"]


def faithfulness(summary: str | None, older: list[Message]) -> tuple[int, int, int]:
    """(pieces, verbatim pieces, altered facts) of one summary against the turns it summarises."""
    pieces = verbatim = altered = 0
    for line in (summary or "").splitlines()[1:]:
        head, _, body = line.partition(": ")
        turn = int(head.split("]")[0].removeprefix("- [turn ")) - 1
        for piece in body.split(GAP):
            pieces += 1
            ok = 0 <= turn < len(older) and piece in older[turn].content
            verbatim += ok
            altered += (not ok) and any(ch.isdigit() for ch in piece)
    return pieces, verbatim, altered


def newest_that_fit(msgs: list[Message], budget: int, count) -> list[Message]:
    kept, used = [], 0
    for m in reversed(msgs):
        n = count(m.content)
        if used + n > budget:
            break
        kept.append(m)
        used += n
    return kept[::-1]


def run(args: argparse.Namespace) -> dict[str, Any]:
    tok = get_tokenizer("cl100k_base")
    convs = list(json.loads(DATA.read_text(encoding="utf-8")).values())[: args.limit]
    rng = random.Random(args.seed)
    planted = [plant(c["content"], rng) for c in convs]
    log(f"{len(planted)} Topical-Chat conversations, 4 planted facts each, seed {args.seed}")
    rows = []
    summarizer = HistorySummarizer()
    for ratio in args.ratios:
        stats = {"ck_asked": 0, "ck_all": 0, "base_asked": 0, "base_all": 0, "facts": 0, "in": 0, "ck_out": 0,
                 "base_out": 0, "seconds": 0.0, "pieces": 0, "verbatim": 0, "altered": 0}
        for msgs, facts, question, value in planted:
            total = sum(tok.count(m.content) for m in msgs)
            budget = total // ratio
            recent = newest_that_fit(msgs, budget // 2, tok.count)
            started = time.perf_counter()
            result = summarizer.compress(msgs, question, keep_last=len(recent),
                                         max_tokens=budget - sum(tok.count(m.content) for m in recent))
            stats["seconds"] += time.perf_counter() - started
            pieces, verbatim, altered = faithfulness(result.summary, result.summarized)
            stats["pieces"] += pieces
            stats["verbatim"] += verbatim
            stats["altered"] += altered
            ck_text = "\n".join([result.summary or ""] + [m.content for m in result.recent])
            base = newest_that_fit(msgs, budget, tok.count)
            base_text = "\n".join(m.content for m in base)
            stats["in"] += total
            stats["ck_out"] += tok.count(result.summary or "") + sum(tok.count(m.content) for m in result.recent)
            stats["base_out"] += sum(tok.count(m.content) for m in base)
            stats["ck_asked"] += value in ck_text
            stats["base_asked"] += value in base_text
            stats["ck_all"] += sum(f["value"] in ck_text for f in facts)
            stats["base_all"] += sum(f["value"] in base_text for f in facts)
            stats["facts"] += len(facts)
        n = len(planted)
        rows.append({
            "ratio": f"{ratio}x", "achieved": stats["in"] / max(stats["ck_out"], 1),
            "asked: contextkit": stats["ck_asked"] / n, "asked: newest turns": stats["base_asked"] / n,
            "all facts: contextkit": stats["ck_all"] / stats["facts"],
            "all facts: newest turns": stats["base_all"] / stats["facts"],
            "verbatim": stats["verbatim"] / max(stats["pieces"], 1), "altered facts": stats["altered"],
            "ms/conversation": 1000 * stats["seconds"] / n})
    header = list(rows[0])
    widths = [max(len(h), 10) for h in header]
    log("\nplanted-fact retention (share of values present verbatim after compression)")
    log("  ".join(h.rjust(w) for h, w in zip(header, widths)))
    for r in rows:
        log("  ".join((f"{v:.3f}" if isinstance(v, float) else str(v)).rjust(w) for v, w in zip(r.values(), widths)))
    four = next((r for r in rows if r["ratio"] == "4x"), None)
    eight = next((r for r in rows if r["ratio"] == "8x"), None)
    log(f"summary pieces verbatim in their turn: {min(r['verbatim'] for r in rows):.3f} (goal 1.000); altered facts: "
        f"{sum(r['altered facts'] for r in rows)} (goal 0)")
    if four:
        log(f"4x: asked-fact retention {four['asked: contextkit']:.3f} (goal >= 0.90: "
            f"{'met' if four['asked: contextkit'] >= 0.9 else 'NOT met'})")
    if eight:
        base = eight["asked: newest turns"]
        log(f"8x: contextkit {eight['asked: contextkit']:.3f} vs newest turns {base:.3f} "
            f"(goal >= 2x: {'met' if eight['asked: contextkit'] >= 2 * base else 'NOT met'})")

    # Speed: one long history of about 100,000 tokens, cold (no cached features) and with one new turn.
    long: list[Message] = []
    n_tokens = 0
    for msgs, *_ in planted * 20:
        long.extend(msgs)
        n_tokens += sum(tok.count(m.content) for m in msgs)
        if n_tokens > 100_000:
            break
    fresh = HistorySummarizer(summary_max_tokens=2000)
    fresh.tokenizer.count("warm up")
    t0 = time.perf_counter()
    fresh.compress(long, "What is my apartment number?")
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    fresh.compress([*long, Message("user", "And one more thing about the wedding.")], "When is the wedding?")
    warm = time.perf_counter() - t0
    log(f"\nspeed: {n_tokens:,}-token history ({len(long)} turns): {cold:.3f} s cold, {warm:.3f} s with one new turn "
        f"(features cached); goal < 1 s: {'met' if cold < 1 else 'NOT met'}")
    return {"conversations": len(planted), "rows": rows, "speed": {"tokens": n_tokens, "turns": len(long),
                                                                   "cold_s": cold, "incremental_s": warm}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=539, help="conversations (default: all 539)")
    p.add_argument("--ratios", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if not DATA.is_file():
        raise SystemExit(f"Topical-Chat not found at {DATA}")
    t0 = time.time()
    res = run(args)
    log(f"\nhistory bench: {time.time() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
