"""``contextkit session replay FILE.jsonl``: a logged conversation or agent run, call by call, through a Session.

What a user checks: the calls are where the application calls the model (after a user message,
after the last result of a round of tool calls), in OpenAI, Anthropic and LlamaIndex shapes and in
logged requests; the totals add up and compare with sending every message as is; a bad line is
named by file and line and the replay goes on (exit 1); a usage error is one line (exit 2); the
saved session resumes.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextkit.cli import app
from contextkit.session import Session
from tests.session.trajectories import call_points, random_trajectory

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "session_example.jsonl"
SYSTEM = "You are a coding agent. Use the tools before answering."


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
                    encoding="utf-8")
    return path


def _replay(path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(app, ["session", "replay", str(path), *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout), result.stderr


def _log(lines: int, planted: str) -> str:
    rows = [f"[{i:05d}] PASSED tests/test_mod_{i % 31}.py::test_case_{i} in 0.0{i % 9}s" for i in range(lines)]
    rows[lines // 2] = planted
    return "\n".join(rows)


# ------------------------------------------------------------------ agent runs, both shapes


def _openai_agent(steps: int) -> list[dict[str, Any]]:
    """A user asks, the agent calls tools (some in parallel, some with long outputs), then answers."""
    out: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    call = 0
    for step in range(steps):
        out.append({"role": "user", "content": f"Task {step}: why does test_case_{step} fail?"})
        for _round in range(2):
            ids = [f"call_{call + i}" for i in range(1 + step % 2)]
            call += len(ids)
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "run_tests", "arguments": json.dumps({"k": i})}}
                for i in ids]})
            out += [{"role": "tool", "tool_call_id": i, "content": _log(400, f"FAILED test_case_{step} ({i})")}
                    for i in ids]
        out.append({"role": "assistant", "content": f"test_case_{step} fails on an assertion. " * 8})
    return out


def _anthropic_agent(steps: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    call = 0
    for step in range(steps):
        out.append({"role": "user", "content": [{"type": "text", "text": f"Task {step}: read the parser."}]})
        ids = [f"toolu_{call + i:04d}" for i in range(1 + step % 3)]
        call += len(ids)
        out.append({"role": "assistant", "content": [{"type": "text", "text": "Reading."}] + [
            {"type": "tool_use", "id": i, "name": "read_file", "input": {"path": f"src/p{i}.py"}} for i in ids]})
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": i, "content": _log(300, f"def parse_{i}(): ...")} for i in ids]})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"Step {step} done. " * 10}]})
    return out


def test_an_openai_agent_run_calls_the_model_where_the_application_does(tmp_path: Path) -> None:
    run = _openai_agent(12)
    code, data, _ = _replay(_write(tmp_path / "run.jsonl", run), "--budget", "6000")
    assert code == 0
    # after each user message and after the last result of each round (the system line is the instructions)
    expected = [i + 1 for i, m in enumerate(run) if m["role"] in ("user", "tool")
                and (i + 1 == len(run) or run[i + 1]["role"] == "assistant")]
    assert [r["line"] for r in data["rows"]] == expected and data["calls"] == 12 * 3
    assert all(r["tokens"] <= 6_000 for r in data["rows"])
    s, plain = data["session"], data["append_only"]
    assert s["tokens"] == sum(r["tokens"] for r in data["rows"])
    assert s["compactions"] >= 1 and s["condensed_turns"] > 0 and s["turns"] == len(run) - 1
    assert plain["tokens"] > 3 * s["tokens"] and plain["over_budget_calls"] > 0
    assert data["messages"] == len(run) - 1 and data["bad_lines_total"] == 0


def test_an_anthropic_agent_run_with_tool_use_blocks(tmp_path: Path) -> None:
    run = _anthropic_agent(10)
    code, data, _ = _replay(_write(tmp_path / "run.jsonl", run), "--model", "claude-sonnet-4-5", "--chat",
                            "anthropic", "--instructions", SYSTEM)
    assert code == 0
    assert [r["line"] for r in data["rows"]] == [i + 1 for i, m in enumerate(run) if m["role"] == "user"]
    assert data["session"]["cost_usd"] is not None and data["append_only"]["cost_usd"] is not None
    assert data["session"]["cached_tokens"] > 0
    assert data["model"] == "claude-sonnet-4-5" and data["chat"] == "anthropic"


@pytest.mark.parametrize("style", ["openai", "anthropic", "llamaindex"])
def test_random_runs_call_the_model_at_the_tests_call_points(tmp_path: Path, style: str) -> None:
    """The runs the session tests use (parallel calls, errors, long outputs, several user messages in a
    row), written as a log: one call per call point, none elsewhere."""
    if style == "llamaindex":
        pytest.importorskip("llama_index.core")
    for seed in range(4):
        rng = random.Random(seed)
        run = random_trajectory(rng, style, rng.randint(4, 14))
        lines = [m.model_dump_json() if style == "llamaindex" else m for m in run]
        code, data, err = _replay(_write(tmp_path / f"{style}{seed}.jsonl", lines), "--budget", "3000",
                                  "--chat", style)
        assert code == 0, err
        assert [r["line"] for r in data["rows"]] == [i + 1 for i in call_points(run, style)], seed


# ------------------------------------------------------------------ the example, the table, the totals


def test_the_example_through_the_real_command(tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    done = subprocess.run([sys.executable, "-m", "contextkit", "session", "replay", str(EXAMPLE), "--model",
                           "gpt-4o", "--save", str(saved)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"replay of {EXAMPLE}: budget 111,616 tokens, openai requests")
    assert lines[1].split() == ["call", "line", "turn", "tokens", "of", "budget", "cached", "cached", "%",
                                "compacted", "cost", "$", "append-only"]
    assert [row.split()[1] for row in lines[2:7]] == ["2", "4", "6", "8", "11"]
    text = done.stdout
    assert "5 calls over 11 messages (12 lines)" in text and "append-only:" in text and "condensed: 0 of 11" in text
    assert "predicted input cost" in text and f"saved: {saved}" in text
    session = Session.from_json(saved)
    assert session.options.instructions and session.options.instructions.startswith("You are a coding agent")
    assert len(session.turns) == 11


def test_totals_add_up_and_the_cache_is_predicted(tmp_path: Path) -> None:
    code, data, _ = _replay(EXAMPLE, "--model", "gpt-4o")
    rows = data["rows"]
    assert code == 0 and data["calls"] == len(rows) == 5
    assert data["session"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in rows))
    assert data["append_only"]["tokens"] == sum(r["append_only_tokens"] for r in rows)
    assert rows[0]["cached_tokens"] == 0 and rows[-1]["cached_share"] > 0.8  # the prefix repeats
    assert all(0 < r["budget_share"] < 0.05 for r in rows)


def test_a_budget_without_a_price_prints_no_cost_column(tmp_path: Path) -> None:
    result = runner.invoke(app, ["session", "replay", str(EXAMPLE), "--budget", "2000"])
    assert result.exit_code == 0, result.output
    assert "cost $" not in result.stdout and "predicted input cost" not in result.stdout


# ------------------------------------------------------------------ logged requests


def test_logged_requests_replay_like_their_messages(tmp_path: Path) -> None:
    """A log of the requests an app sent ({"messages": the whole conversation so far}) gives the calls of
    the messages themselves; the request's system message is the instructions."""
    run = _openai_agent(5)
    requests: list[Any] = []
    for i, message in enumerate(run):
        if message["role"] == "assistant":
            requests.append({"model": "gpt-4o", "messages": run[:i]})
    requests.append({"model": "gpt-4o", "messages": run})  # the last request sees the answer too
    _, from_messages, _ = _replay(_write(tmp_path / "m.jsonl", run), "--budget", "6000")
    code, from_requests, _ = _replay(_write(tmp_path / "r.jsonl", requests), "--budget", "6000")
    assert code == 0 and from_requests["messages"] == from_messages["messages"]
    strip = ("line",)
    assert [{k: v for k, v in r.items() if k not in strip} for r in from_requests["rows"][:-1]] == [
        {k: v for k, v in r.items() if k not in strip} for r in from_messages["rows"][:-1]]


def test_a_request_log_of_a_sliding_window_app_follows_the_last_message(tmp_path: Path) -> None:
    run = [{"role": "user", "content": f"question {i}"} if i % 2 == 0 else {"role": "assistant",
                                                                             "content": f"answer {i}"}
           for i in range(20)]
    requests = [{"messages": [{"role": "system", "content": SYSTEM}, *run[max(0, i - 4): i + 1]]}
                for i in range(0, 20, 2)]  # each request: the last 4 messages and the question
    code, data, err = _replay(_write(tmp_path / "w.jsonl", requests), "--budget", "4000")
    assert code == 0, err
    assert data["messages"] == 19 and data["calls"] == 10  # the final answer was never logged


def test_an_anthropic_request_log_with_its_system(tmp_path: Path) -> None:
    run = _anthropic_agent(3)
    requests = [{"system": [{"type": "text", "text": SYSTEM}], "messages": run[: i + 1]}
                for i, m in enumerate(run) if m["role"] == "user"]
    saved = tmp_path / "s.json"
    code, data, _ = _replay(_write(tmp_path / "a.jsonl", requests), "--budget", "5000", "--chat", "anthropic",
                            "--save", str(saved))
    assert code == 0 and data["calls"] == 6
    assert Session.from_json(saved).options.instructions == SYSTEM


# ------------------------------------------------------------------ bad lines


def test_bad_lines_are_named_and_the_replay_goes_on(tmp_path: Path) -> None:
    lines: list[Any] = [
        {"role": "user", "content": "hello"},                                           # 1
        "{not json",                                                                     # 2
        "42",                                                                            # 3
        {"foo": "bar"},                                                                  # 4
        {"role": "tool", "tool_call_id": "call_9", "content": "orphan"},                 # 5
        {"role": "narrator", "content": "once upon a time"},                             # 6
        {"role": "assistant", "content": "hi"},                                          # 7
        "",                                                                              # 8: blank, skipped
        {"role": "user", "content": "and?"},                                             # 9
        {"messages": [{"role": "user", "content": "a request of another conversation"}]},  # 10
        {"role": "assistant", "content": "done"},                                        # 11
    ]
    path = _write(tmp_path / "bad.jsonl", lines)
    with path.open("ab") as handle:
        handle.write(b'{"role": "user", "content": "caf\xe9"}\n')                       # 12: not UTF-8
    code, data, err = _replay(path, "--budget", "2000")
    assert code == 1
    bad = {b["line"]: b["why"] for b in data["bad_lines"]}
    assert sorted(bad) == [2, 3, 4, 5, 6, 10, 12] and data["bad_lines_total"] == 7
    assert bad[2].startswith("not JSON") and "not a JSON int" in bad[3] and "keys foo" in bad[4]
    assert "answers no open call" in bad[5] and "narrator" in bad[6] and "does not continue" in bad[10]
    assert "UTF-8" in bad[12]
    for number in bad:
        assert f"{path}:{number}: " in err
    assert "7 bad lines" in err and "Traceback" not in err
    assert [r["line"] for r in data["rows"]] == [1, 9]  # the good lines replayed all the same


def test_a_user_message_before_the_tool_results_is_refused_by_line(tmp_path: Path) -> None:
    lines = [{"role": "user", "content": "list"},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
             {"role": "user", "content": "hurry up"},
             {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
             {"role": "assistant", "content": "a.py"}]
    code, data, err = _replay(_write(tmp_path / "early.jsonl", lines), "--budget", "2000")
    assert code == 1 and [b["line"] for b in data["bad_lines"]] == [3]
    assert "no result yet" in data["bad_lines"][0]["why"]
    assert [r["line"] for r in data["rows"]] == [1, 4]


def test_the_table_run_names_bad_lines_and_exits_1(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [{"role": "user", "content": "hi"}, "[1, 2]",
                                         {"role": "assistant", "content": "hello"}])
    result = runner.invoke(app, ["session", "replay", str(path), "--budget", "1000"])
    assert result.exit_code == 1
    assert f"{path}:2: not a message" in result.stderr and "1 bad line in" in result.stderr
    assert "1 calls over 2 messages" in result.stdout


def test_a_log_with_no_message_exits_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["session", "replay", str(_write(tmp_path / "e.jsonl", [""])), "--budget", "1000"])
    assert result.exit_code == 1 and "no messages" in result.stderr


# ------------------------------------------------------------------ usage errors


@pytest.mark.parametrize("args, says", [
    (["MISSING"], "no such file"),
    (["EXAMPLE", "--model", "gpt-4oo"], "did you mean 'gpt-4o'"),
    (["EXAMPLE"], "give --model PROFILE"),
    (["EXAMPLE", "--model", "gpt-4o", "--budget", "1000"], "not both"),
    (["EXAMPLE", "--budget", "0"], "positive"),
    (["EXAMPLE", "--budget", "1000", "--chat", "gemini"], "--chat is openai"),
    (["EXAMPLE", "--budget", "1000", "--instructions", "@MISSING"], "cannot read"),
    (["EXAMPLE", "--budget", "100000000"], "over the limit"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    args = [str(EXAMPLE) if a == "EXAMPLE" else str(tmp_path / "nope.jsonl") if a == "MISSING" else
            "@" + str(tmp_path / "nope.txt") if a == "@MISSING" else a for a in args]
    result = runner.invoke(app, ["session", "replay", *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_instructions_from_a_file_replace_the_logs(tmp_path: Path) -> None:
    (tmp_path / "rules.txt").write_text("Answer in French.\n", encoding="utf-8")
    saved = tmp_path / "s.json"
    code, _, _ = _replay(EXAMPLE, "--budget", "4000", "--instructions", f"@{tmp_path / 'rules.txt'}",
                         "--save", str(saved))
    assert code == 0 and Session.from_json(saved).options.instructions == "Answer in French."
