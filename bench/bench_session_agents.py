"""1,000 random agent runs per provider style through a ``Session``: is every request valid and within budget?

Each run (``tests/session/trajectories.py``: user turns, assistant answers, one or several parallel
tool calls, failures with tracebacks, outputs of 2,000-4,000 lines with one line that matters,
several user messages in a row) arrives in one style's shapes, is added message by message, and at
every point where the application calls the model (after a user message, after the last result of a
round of calls) ``session.prompt()`` builds the request, which is rendered in all three styles and
checked by ``contextkit.session.validate_messages`` (each provider's documented rules). Budgets are
drawn from 1,200, 2,000 and 8,000 tokens so most runs condense. Printed per input style: runs,
requests, requests invalid in any style (must be 0), requests over budget (must be 0), compactions,
and the share of requests right after a long output that hold its planted line (with the append-only
baseline: the whole output sent as is, over the budget whenever it does not fit).

Run: ``python bench/bench_session_agents.py`` (about 6 minutes on 2 cores); ``--runs N``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "session"))
from trajectories import STYLES, call_points, random_trajectory  # noqa: E402

from contextkit.session import Session, validate_messages  # noqa: E402

PLANTED = ("ERROR worker-3 batch 1867 failed", '"id": 4242, "status": "failed"', "test_unicode_paths FAILED")
BUDGETS = (1_200, 2_000, 8_000)


def _planted(message: Any) -> str | None:
    text = json.dumps(message, default=lambda o: getattr(o, "model_dump", lambda: str(o))(), ensure_ascii=False)
    return next((p for p in PLANTED if p.replace('"', '\\"') in text or p in text), None)


def run_style(style: str, runs: int) -> dict[str, Any]:
    row = {"runs": runs, "requests": 0, "invalid": 0, "over": 0, "compactions": 0, "long": 0, "kept": 0}
    for seed in range(runs):
        rng = random.Random(seed)
        run = random_trajectory(rng, style, rng.randint(3, 30))
        points = set(call_points(run, style))
        session = Session(rng.choice(BUDGETS), instructions="You are a careful coding agent.", chat=style)
        waiting: str | None = None
        for i, message in enumerate(run):
            session.add(message)
            waiting = _planted(message) or waiting
            if i not in points:
                continue
            result = session.prompt()
            row["requests"] += 1
            row["invalid"] += any(validate_messages(result.messages(s), s) for s in STYLES)
            assert result.report.session is not None
            row["over"] += result.report.session.total_tokens > session.limit
            if waiting is not None:
                row["long"] += 1
                row["kept"] += waiting in result.prompt or waiting.replace('"', "&quot;") in result.prompt
                waiting = None
        row["compactions"] += session.compactions
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=1_000)
    args = ap.parse_args()
    print(f"{args.runs} random agent runs per style; budgets {', '.join(f'{b:,}' for b in BUDGETS)} tokens")
    print(f"{'style':11} {'requests':>9} {'invalid':>8} {'over budget':>12} {'compactions':>12} "
          f"{'long outputs':>13} {'planted line kept':>18} {'seconds':>8}")
    for style in STYLES:
        started = time.perf_counter()
        row = run_style(style, args.runs)
        kept = row["kept"] / row["long"] if row["long"] else float("nan")
        print(f"{style:11} {row['requests']:9,} {row['invalid']:8,} {row['over']:12,} {row['compactions']:12,} "
              f"{row['long']:13,} {kept:18.3f} {time.perf_counter() - started:8.1f}")


if __name__ == "__main__":
    main()
