"""``contextkit usage LOG``: the summary of a usage log, as a table or JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from contextkit.cli import app
from contextkit.errors import LLMCallError
from contextkit.llm import AlertRule, ReliableLLM, UsageMonitor, read_usage_log
from tests.llm._fakes import FlakyLLM, Sleeps

runner = CliRunner()


@pytest.fixture()
def log(tmp_path):
    path = tmp_path / "usage.jsonl"
    monitor = UsageMonitor([AlertRule("tokens_per_request", 20)], log=path, on_alert=lambda alert: None)
    mini = ReliableLLM(FlakyLLM(name="gpt-4o-mini", usage={"prompt_tokens": 20, "completion_tokens": 5}),
                       monitor=monitor)
    flaky = ReliableLLM(FlakyLLM(name="local", script=["ok", RuntimeError("x"), RuntimeError("x")]),
                        retries=1, sleep=Sleeps(), monitor=monitor)
    mini.run("a")
    flaky.run("b")
    with pytest.raises(LLMCallError):
        flaky.run("c")
    mini.run("d" * 200)
    return path, monitor


class TestUsageCommand:
    def test_json_round_trips_the_monitors_summary(self, log):
        path, monitor = log
        result = runner.invoke(app, ["usage", str(path), "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        expected = json.loads(monitor.summary().model_dump_json())
        assert data == expected
        assert (data["requests"], data["successes"], data["failures"]) == (4, 3, 1)
        assert {row["model"] for row in data["models"]} == {"gpt-4o-mini", "local"}

    def test_table_has_a_row_per_model_and_the_alerts(self, log):
        path, _ = log
        result = runner.invoke(app, ["usage", str(path)], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert any(line.strip("│ ").startswith("gpt-4o-mini") for line in lines)
        assert any(line.strip("│ ").startswith("local") for line in lines)
        assert any(line.strip("│ ").startswith("all") for line in lines)
        assert "alert: tokens_per_request" in result.stdout

    def test_a_missing_log_is_a_usage_error(self, tmp_path):
        result = runner.invoke(app, ["usage", str(tmp_path / "nope.jsonl")])
        assert result.exit_code == 2 and "no such file" in result.output

    def test_a_corrupt_log_names_the_line_and_exits_1(self, log):
        path, _ = log
        bad_line = len(path.read_text().splitlines()) + 1
        with path.open("a") as handle:
            handle.write("{oops\n")
        result = runner.invoke(app, ["usage", str(path)])
        assert result.exit_code == 1 and f"line {bad_line}:" in result.output and "Traceback" not in result.output

    def test_the_library_and_the_command_agree(self, log):
        path, _ = log
        data = json.loads(runner.invoke(app, ["usage", str(path), "--json"]).stdout)
        assert data == json.loads(read_usage_log(path).model_dump_json())
