"""A 70-turn chat replayed call by call: how much of each request a provider's cache serves, and what it costs.

Each chat has 35 user turns (Topical-Chat's ``agent_1`` messages, conversations joined until there
are 35) answered by an assistant whose replies are long, as a model's are (``agent_2``'s message
followed by PEP paragraphs up to ``--reply-tokens``), and each question comes with six PEP paragraphs
of evidence. Every call is built by three policies from the same turns and evidence:

* ``assembler``: ``ContextAssembler(budget, chat="openai").assemble(q, instructions=..., history=...,
  evidence=...)`` then ``.messages("openai")``: how most users call contextkit today;
* ``session``: ``Session(budget, instructions=..., chat="openai")``: ``prompt(q, evidence=...)`` then
  ``add`` of the reply;
* ``append-only``: the system message, every turn as it was, the evidence and question last; when over
  the budget, the oldest half of the turns is dropped (no summary): the simple cache-friendly policy.

Each request is scored as OpenAI's cache scores it: the token ids of its messages (role and content,
in order) against the previous request of the same policy; cached = 0 below 1,024 shared tokens, else
1,024 plus whole steps of 128 (``contextkit.core.prompt_cache``). Printed per budget and policy, over
the *near-budget* turns (those where the whole history, evidence and question no longer fit, so a
policy must cut): the cacheable share of input tokens, the input spend relative to list price with
cache reads at 10% of it, the mean request, and requests over the budget (must be 0).

**Facts** (``--facts N``, 40 by default): chats of 70 turns from held-out Topical-Chat conversations
with five planted facts, one or two corrected later (``bench/_session_chats.py``, facts in
``data/history_paraphrase.json`` and ``data/history_corrections.json``), the same long replies and
evidence, replayed by each policy with a budget of a quarter of the whole chat (4x compression); the
last call asks for one fact in other words (half the time a corrected one). Printed: the asked fact's
values in the last request (kept), the corrected value shown (newest), the first statement shown
as if it still held (older as current: must be 0), and the compression.

Run: ``python bench/bench_session.py`` (about 8 minutes on 2 cores); ``--chats N``, ``--budgets``,
``--reply-tokens``, ``--facts N`` (0: no facts table).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.core.profiles import CacheRule
from contextkit.core.prompt_cache import cached_prefix_tokens
from contextkit.core.tokenizers import Tokenizer, get_tokenizer
from contextkit.session import Session

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TOPICAL = SHARED / "topical_chat" / "test_freq.json"
PEPS = SHARED / "python_peps" / "peps"
INSTRUCTIONS = ("You are a helpful assistant for Python developers. Answer from the documents when they bear "
                "on the question; say so when they do not. Keep the user's own facts in mind.")
OPENAI = CacheRule(kind="prefix", min_tokens=1_024, step=128)
POLICIES = ("assembler", "session", "append-only")


def paragraphs(tok: Tokenizer, limit: int = 4_000) -> list[str]:
    """PEP paragraphs of 40-300 tokens (the evidence and the long replies are made of them)."""
    out: list[str] = []
    for path in sorted(PEPS.glob("pep-*.rst")):
        for para in path.read_text(encoding="utf-8").split("\n\n"):
            para = para.strip()
            if 40 <= tok.count(para) <= 300:
                out.append(para)
        if len(out) >= limit:
            break
    return out


def user_turns(start: int, count: int) -> tuple[list[str], list[str]]:
    """``count`` user messages and the other side's replies, from conversations ``start``, ``start+1``..."""
    data = list(json.loads(TOPICAL.read_text(encoding="utf-8")).values())
    users: list[str] = []
    replies: list[str] = []
    for conv in data[start:]:
        turns = conv["content"]
        for a, b in zip(turns, turns[1:], strict=False):
            if a["agent"] == "agent_1" and b["agent"] == "agent_2":
                users.append(a["message"])
                replies.append(b["message"])
        if len(users) >= count:
            break
    return users[:count], replies[:count]


def chat(rng: random.Random, paras: list[str], tok: Tokenizer, start: int, reply_tokens: int,
         exchanges: int) -> Iterator[tuple[str, list[str], str]]:
    """(question, evidence, reply) per exchange."""
    users, others = user_turns(start, exchanges)
    for question, other in zip(users, others, strict=True):
        evidence = rng.sample(paras, 6)
        reply = [other]
        while tok.count("\n\n".join(reply)) < reply_tokens:
            reply.append(rng.choice(paras))
        yield question, evidence, "\n\n".join(reply)


def request_ids(messages: list[dict[str, Any]], tok: Tokenizer) -> list[int]:
    ids: list[int] = []
    for m in messages:
        ids += tok.encode(f"<|{m['role']}|>") + tok.encode(m.get("content") or "")
    return ids


def request_tokens(messages: list[dict[str, Any]], tok: Tokenizer) -> int:
    """As OpenAI bills a chat request: each message's content, 3 tokens a message, 3 priming the reply."""
    return sum(tok.count(m.get("content") or "") + 3 for m in messages) + 3


class AppendOnly:
    """Every turn as it was; the oldest half dropped when the request would pass the budget."""

    def __init__(self, budget: int, tok: Tokenizer) -> None:
        self.budget, self.tok, self.turns = budget, tok, []  # type: list[dict[str, str]]

    def messages(self, question: str, evidence: list[str]) -> list[dict[str, Any]]:
        tail = {"role": "user", "content": "\n\n".join(evidence) + "\n\n" + question}
        while True:
            msgs = [{"role": "system", "content": INSTRUCTIONS}, *self.turns, tail]
            if request_tokens(msgs, self.tok) <= self.budget or not self.turns:
                return msgs
            self.turns = self.turns[len(self.turns) // 2 + len(self.turns) // 2 % 2:]


def replay(policy: str, budget: int, exchanges: list[tuple[str, list[str], str]], tok: Tokenizer,
           **session_options: Any) -> list[dict[str, Any]]:
    """One row per call: tokens, cached tokens, whether the whole history still fit."""
    rows = []
    previous: list[int] | None = None
    history: list[dict[str, str]] = []
    session = Session(budget, instructions=INSTRUCTIONS, chat="openai", **session_options)
    appender = AppendOnly(budget, tok)
    assembler = ContextAssembler(budget, chat="openai")
    for question, evidence, reply in exchanges:
        full = [{"role": "system", "content": INSTRUCTIONS}, *history,
                {"role": "user", "content": "\n\n".join(evidence) + "\n\n" + question}]
        msgs = _messages(policy, question, evidence, history, session, appender, assembler)
        ids = request_ids(msgs, tok)
        tokens = request_tokens(msgs, tok)
        rows.append({"tokens": tokens, "cached": cached_prefix_tokens(previous, ids, OPENAI) * tokens / len(ids),
                     "near": request_tokens(full, tok) > budget, "over": tokens > budget})
        previous = ids
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
        session.add({"role": "assistant", "content": reply})
        appender.turns += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    return rows


def _messages(policy: str, question: str, evidence: list[str], history: list[dict[str, str]], session: Session,
              appender: AppendOnly, assembler: ContextAssembler) -> list[dict[str, Any]]:
    if policy == "session":
        return list(session.prompt(question, evidence=evidence).messages("openai"))
    if policy == "append-only":
        return appender.messages(question, evidence)
    result = assembler.assemble(question, instructions=INSTRUCTIONS, history=history, evidence=evidence)
    return list(result.messages("openai"))


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    near = [r for r in rows if r["near"]] or rows
    tokens = sum(r["tokens"] for r in near)
    cached = sum(r["cached"] for r in near)
    return {"near_turns": len([r for r in rows if r["near"]]), "cacheable": cached / tokens,
            "spend": (tokens - cached + 0.1 * cached) / tokens, "mean_tokens": statistics.mean(r["tokens"] for r in near),
            "over": sum(r["over"] for r in rows)}


def facts_table(count: int, paras: list[str], tok: Tokenizer, reply_tokens: int, seed: int) -> None:
    """The facts part (see the module docstring)."""
    from _session_chats import fact_chats, kept, newest_shown, older_as_current

    rows: dict[str, list[tuple[bool, bool, bool, float]]] = {p: [] for p in (*POLICIES, "assembler-fit")}
    chats = fact_chats(count, turns=70, seed=seed, split="heldout")
    for i, fact_chat in enumerate(chats):
        rng = random.Random(seed * 1000 + i)
        exchanges = _fact_exchanges(fact_chat.messages, rng, paras, tok, reply_tokens)
        last = {"role": "user", "content": "\n\n".join(evidence_for(rng, paras)) + "\n\n" + fact_chat.question}
        whole = request_tokens([{"role": "system", "content": INSTRUCTIONS},
                                *[m for q, _, r in exchanges for m in (_u(q), _a(r))], last], tok)
        budget = whole // 4
        for policy in rows:
            text = _last_request(policy, budget, exchanges, fact_chat.question, evidence_for(rng, paras), tok)
            rows[policy].append((kept(text, fact_chat), newest_shown(text, fact_chat),
                                 older_as_current(text, fact_chat), whole / budget))
    print(f"\n{count} held-out chats of 70 turns, five planted facts (one or two corrected), the last call asks one; "
          "budget = a quarter of the whole chat")
    print(f"{'policy':14} {'kept':>6} {'newest shown (corrected)':>25} {'older as current':>17} {'compression':>12}")
    for policy, got in rows.items():
        corrected = [r for r, f in zip(got, chats, strict=True) if f.asked.correction]
        print(f"{policy:14} {statistics.mean(r[0] for r in got):6.3f} "
              f"{statistics.mean(r[1] for r in corrected) if corrected else float('nan'):25.3f} "
              f"{sum(r[2] for r in got):17d} {statistics.mean(r[3] for r in got):11.1f}x")


def _u(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _a(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def evidence_for(rng: random.Random, paras: list[str]) -> list[str]:
    return rng.sample(paras, 6)


def _fact_exchanges(messages: list[dict[str, str]], rng: random.Random, paras: list[str], tok: Tokenizer,
                    reply_tokens: int) -> list[tuple[str, list[str], str]]:
    """The chat's user turns, each with evidence and the next assistant turn made as long as a model's."""
    merged: list[dict[str, str]] = []  # joined conversations put two turns of one side together
    for m in messages:
        if merged and merged[-1]["role"] == m["role"]:
            merged[-1] = {"role": m["role"], "content": merged[-1]["content"] + "\n" + m["content"]}
        else:
            merged.append(dict(m))
    if merged and merged[0]["role"] != "user":
        merged.insert(0, {"role": "user", "content": "Hi!"})
    out = []
    for user, reply in zip(merged[0::2], merged[1::2], strict=False):
        text = [reply["content"]]
        while tok.count("\n\n".join(text)) < reply_tokens:
            text.append(rng.choice(paras))
        out.append((user["content"], evidence_for(rng, paras), "\n\n".join(text)))
    return out


def _last_request(policy: str, budget: int, exchanges: list[tuple[str, list[str], str]], question: str,
                  evidence: list[str], tok: Tokenizer) -> str:
    """The chat replayed call by call by ``policy``; the text of the request that asks ``question``."""
    name = "assembler" if policy == "assembler-fit" else policy
    layout = {"history_layout": "fit"} if policy == "assembler-fit" else {}
    session = Session(budget, instructions=INSTRUCTIONS, chat="openai")
    appender = AppendOnly(budget, tok)
    assembler = ContextAssembler(budget, chat="openai", **layout)
    history: list[dict[str, str]] = []
    for q, ev, reply in exchanges:
        if policy != "assembler-fit":  # the fit layout's earlier calls do not change its last request
            _messages(name, q, ev, history, session, appender, assembler)
        history += [_u(q), _a(reply)]
        session.add(_a(reply))
        appender.turns += [_u(q), _a(reply)]
    msgs = _messages(name, question, evidence, history, session, appender, assembler)
    return "\n".join(str(m.get("content") or "") for m in msgs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--chats", type=int, default=4)
    ap.add_argument("--budgets", type=int, nargs="+", default=[16_000, 32_000])
    ap.add_argument("--reply-tokens", type=int, default=450)
    ap.add_argument("--exchanges", type=int, default=70, help="user turns per chat (each answered)")
    ap.add_argument("--high-water", type=float, default=None)
    ap.add_argument("--low-water", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    ap.add_argument("--facts", type=int, default=40, help="chats with planted facts (0: no facts table)")
    args = ap.parse_args()
    if not TOPICAL.exists() or not PEPS.exists():
        sys.exit(f"needs {TOPICAL} and {PEPS} (../shared/data)")
    tok = get_tokenizer("cl100k_base")
    paras = paragraphs(tok)
    print(f"{args.chats} chats of {args.exchanges} questions (replies ~{args.reply_tokens} tokens, 6 paragraphs of evidence a "
          "question); OpenAI's cache rule; near-budget turns only")
    print(f"{'budget':>7} {'policy':12} {'near turns':>10} {'cacheable':>10} {'spend vs list':>14} "
          f"{'mean request':>13} {'over budget':>12} {'seconds':>8}")
    for budget in args.budgets:
        for policy in args.policies:
            started = time.perf_counter()
            options = {k: v for k, v in (("high_water", args.high_water), ("low_water", args.low_water)) if v}
            results = [summarise(replay(policy, budget, list(chat(
                random.Random(args.seed + i), paras, tok, start=40 * i, reply_tokens=args.reply_tokens,
                exchanges=args.exchanges)), tok, **options)) for i in range(args.chats)]
            agg = {k: statistics.mean(r[k] for r in results) for k in results[0]}
            print(f"{budget:7,} {policy:12} {agg['near_turns'] * len(results):10.0f} {agg['cacheable']:10.1%} "
                  f"{agg['spend']:14.1%} {agg['mean_tokens']:13,.0f} {int(agg['over'] * len(results)):12d} "
                  f"{time.perf_counter() - started:8.1f}")
    if args.facts:
        facts_table(args.facts, paras, tok, args.reply_tokens, args.seed)


if __name__ == "__main__":
    main()
