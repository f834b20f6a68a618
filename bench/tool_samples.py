"""Generated tool outputs with one planted line that answers a question: the test's and the bench's cases.

Four kinds an agent meets, each a few thousand to tens of thousands of lines of realistic noise (passing
tests, access logs, JSON records, warnings that say "error" on every line) with the line that matters at
a random depth between 30% and 70%, and the question a user or an agent step would ask about it, in
its own words (it names the test, the user, the job or the host, never the planted line's wording).
Seeded, so a run is repeatable. Kept in ``bench/`` so the bench and the tests (``tests/assembly/test_tool_output.py``) share it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

__all__ = ["ToolCase", "tool_cases"]


@dataclass(frozen=True)
class ToolCase:
    kind: str
    text: str
    question: str
    planted: str  # the line that must reach the prompt


def tool_cases(n: int, seed: int = 0, lines: tuple[int, int] = (8_000, 20_000)) -> list[ToolCase]:
    """``n`` cases, the kinds in turn, each of ``lines`` lines (a range)."""
    rng = random.Random(seed)
    makers = (_ci_log, _server_log, _json_records, _noisy_run)
    return [makers[i % len(makers)](rng, rng.randint(*lines)) for i in range(n)]


def _planted(rng: random.Random, noise: list[str], line: str) -> str:
    at = rng.randint(int(len(noise) * 0.3), int(len(noise) * 0.7))
    noise.insert(at, line)
    return "\n".join(noise)


def _ci_log(rng: random.Random, n: int) -> ToolCase:
    mods = [f"{w}{rng.randint(1, 99)}" for w in ("parse", "cache", "auth", "io", "net", "db", "cli", "rank")]
    noise = ["$ pytest -q tests/", f"collected {n} items"]
    noise += [f"tests/test_{rng.choice(mods)}.py::test_{rng.choice(mods)}_{i} PASSED [{i * 100 // n:3d}%]"
              for i in range(n)]
    name = f"{rng.choice(mods)}_{rng.randint(1000, 9999)}"
    a, b = rng.randint(1, 50), rng.randint(51, 99)
    line = f"tests/test_{name.split('_')[0]}.py::test_{name} FAILED - AssertionError: assert {a} == {b}"
    noise.append(f"=== 1 failed, {n - 1} passed in {rng.randint(30, 900)}.{rng.randint(0, 99):02d}s ===")
    return ToolCase("ci-log", _planted(rng, noise, line), f"Why did test_{name} fail in this run?", line)


def _server_log(rng: random.Random, n: int) -> ToolCase:
    paths = ["/api/orders", "/api/users", "/health", "/api/search", "/static/app.js"]
    noise = [f"2026-11-30T10:{i // 600 % 60:02d}:{i // 10 % 60:02d}Z INFO {rng.choice(paths)} 200 "
             f"{rng.randint(2, 90)}ms req={rng.getrandbits(32):08x}" for i in range(n)]
    user = f"u{rng.randint(10_000, 99_999)}"
    line = (f"2026-11-30T10:31:07Z ERROR /api/users/{user}/invoices 500 KeyError: 'billing_address' "
            f"req={rng.getrandbits(32):08x}")
    return ToolCase("server-log", _planted(rng, noise, line), f"Why can't user {user} see their invoices?", line)


def _json_records(rng: random.Random, n: int) -> ToolCase:
    noise = [json.dumps({"job": f"job-{rng.randint(100_000, 999_999)}", "status": "done", "took_s": rng.randint(1, 600),
                         "worker": f"w{rng.randint(1, 40)}"}) for _ in range(n)]
    job = f"job-{rng.randint(100_000, 999_999)}"
    line = json.dumps({"job": job, "status": "stopped", "took_s": rng.randint(1, 600), "worker": "w7",
                       "reason": "disk quota exceeded on /scratch"})
    return ToolCase("json-records", _planted(rng, noise, line), f"What happened to {job}?", line)


def _noisy_run(rng: random.Random, n: int) -> ToolCase:
    noise = [f"WARNING deprecated call in module_{rng.randint(1, 300)}.py: error handling will change in 3.0"
             for _ in range(n)]
    host = f"db-{rng.randint(2, 99)}"
    line = f"ERROR could not connect to {host}:5432 (connection refused) after 3 attempts"
    return ToolCase("noisy-run", _planted(rng, noise, line), f"Is {host} reachable from the job?", line)
