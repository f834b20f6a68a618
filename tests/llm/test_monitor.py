"""UsageMonitor: every rule fires once per breach; the log round-trips; the summary adds up."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.errors import InvalidArgumentError, LLMCallError, UsageLogError
from contextkit.llm import (
    AlertRule,
    ReliableLLM,
    UsageMonitor,
    UsageRecord,
    read_usage_log,
)
from contextkit.llm.monitor import DEFAULT_RULES
from tests.llm._fakes import Clock, FlakyLLM, Sleeps


def record(clock, *, ok=True, tokens=100, cost=0.01, seconds=0.1, model="m"):
    return UsageRecord(at=clock(), model=model, ok=ok, input_tokens=tokens, output_tokens=0, cost_usd=cost,
                       seconds=seconds)


def monitor_with(rule, clock=None, **kw):
    alerts = []
    monitor = UsageMonitor([rule], on_alert=alerts.append, clock=clock or Clock(), **kw)
    return monitor, alerts


class TestAlertRule:
    def test_positional_and_keyword_forms_agree(self):
        assert AlertRule("failure_rate", 0.2, window=50) == AlertRule(metric="failure_rate", threshold=0.2, window=50)

    def test_round_trips_through_a_dict(self):
        rule = AlertRule("p99_latency", 3.0, window=20, min_requests=5)
        assert rule.to_dict()["type"] == "AlertRule" and AlertRule.from_dict(rule.to_dict()) == rule

    @pytest.mark.parametrize("bad", [("tokens_per_day", 5), ("failure_rate", -1)])
    def test_bad_rules_are_refused(self, bad):
        from pydantic import ValidationError

        with pytest.raises(ValidationError):
            AlertRule(*bad)

    def test_rules_must_be_rules(self):
        with pytest.raises(InvalidArgumentError):
            UsageMonitor([("failure_rate", 0.2)])

    def test_the_defaults_are_the_issues(self):
        assert [(r.metric, r.threshold) for r in DEFAULT_RULES] == [
            ("tokens_per_request", 200_000), ("cost_per_hour", 5.0), ("failure_rate", 0.2), ("p99_latency", 3.0)]


class TestRulesFireOncePerBreach:
    def test_tokens_per_request(self):
        clock = Clock()
        monitor, alerts = monitor_with(AlertRule("tokens_per_request", 1000), clock)
        for tokens in (10, 5000, 6000, 10, 7000):  # two breaches: 5000-6000, then 7000
            monitor.add(record(clock, tokens=tokens))
        assert [a.value for a in alerts] == [5000, 7000]
        assert alerts[0].figures["input_tokens"] == 5000 and "over its limit 1000" in alerts[0].message

    def test_cost_per_request(self):
        clock = Clock()
        monitor, alerts = monitor_with(AlertRule("cost_per_request", 0.5), clock)
        for cost in (0.1, 0.9, 0.1, 1.0, 2.0):
            monitor.add(record(clock, cost=cost))
        assert [a.value for a in alerts] == [0.9, 1.0]

    @pytest.mark.parametrize("metric, field", [("cost_per_hour", "cost"), ("tokens_per_hour", "tokens")])
    def test_per_hour(self, metric, field):
        clock = Clock()
        monitor, alerts = monitor_with(AlertRule(metric, 5.0 if field == "cost" else 500), clock)
        for _ in range(6):  # 6 x 1.0 USD (or 100 tokens) within the hour: over 5 at the 6th
            monitor.add(record(clock, **{field: 1.0 if field == "cost" else 100}))
            clock.advance(60)
        assert len(alerts) == 1 and alerts[0].figures == {"requests_last_hour": 6}
        monitor.add(record(clock, **{field: 1.0 if field == "cost" else 100}))  # still over: no new alert
        clock.advance(3600)  # the hour rolls over: back under
        monitor.add(record(clock, **{field: 0.0 if field == "cost" else 0}))
        for _ in range(6):
            monitor.add(record(clock, **{field: 1.0 if field == "cost" else 100}))
        assert len(alerts) == 2

    def test_failure_rate_over_its_window(self):
        clock = Clock()
        monitor, alerts = monitor_with(AlertRule("failure_rate", 0.2, window=10), clock)
        for ok in [True] * 7 + [False] * 2:  # 9 requests: the window is not full yet
            monitor.add(record(clock, ok=ok))
        assert alerts == []
        monitor.add(record(clock, ok=False))  # 3 of 10
        monitor.add(record(clock, ok=False))  # 4 of 10: the same breach
        assert len(alerts) == 1 and alerts[0].figures == {"failures": 3, "requests": 10}
        for _ in range(10):
            monitor.add(record(clock, ok=True))  # recovers
        for _ in range(3):
            monitor.add(record(clock, ok=False))
        assert len(alerts) == 2

    @pytest.mark.parametrize("metric", ["p99_latency", "p95_latency"])
    def test_latency(self, metric):
        clock = Clock()
        monitor, alerts = monitor_with(AlertRule(metric, 1.0, window=20), clock)
        for _ in range(20):
            monitor.add(record(clock, seconds=0.1))
        monitor.add(record(clock, seconds=4.0))  # 1 slow of 20: the p99 (nearest rank 20), not the p95 (19)
        assert len(alerts) == (1 if metric == "p99_latency" else 0)
        monitor.add(record(clock, seconds=5.0))  # 2 slow of 20: both
        monitor.add(record(clock, seconds=5.0))  # still the same breach
        assert len(alerts) == 1 and alerts[0].figures == {"requests": 20, "max_seconds": 4.0 if metric == "p99_latency" else 5.0}
        for _ in range(20):
            monitor.add(record(clock, seconds=0.1))  # recovered
        for _ in range(2):
            monitor.add(record(clock, seconds=9.0))
        assert len(alerts) == 2

    def test_latency_waits_for_min_requests(self):
        clock = Clock()
        monitor, alerts = monitor_with(AlertRule("p99_latency", 1.0, window=100, min_requests=3), clock)
        monitor.add(record(clock, seconds=5.0))
        monitor.add(record(clock, seconds=5.0))
        assert alerts == []
        monitor.add(record(clock, seconds=5.0))
        assert len(alerts) == 1

    def test_the_default_callback_logs_a_warning(self, caplog):
        monitor = UsageMonitor([AlertRule("tokens_per_request", 10)], clock=Clock())
        with caplog.at_level(logging.WARNING, logger="contextkit.llm.monitor"):
            monitor.add(record(Clock(), tokens=50))
        assert "tokens_per_request 50 is over its limit 10" in caplog.text

    def test_alerts_are_in_the_summary(self):
        clock = Clock()
        monitor, alerts = monitor_with(AlertRule("tokens_per_request", 10), clock)
        monitor.add(record(clock, tokens=50))
        assert monitor.summary().alerts == alerts


class TestSummary:
    def test_totals_and_per_model_rows(self):
        clock = Clock()
        monitor = UsageMonitor([], clock=clock)
        monitor.add(record(clock, model="a", tokens=10, cost=0.5, seconds=1.0))
        monitor.add(record(clock, model="a", tokens=20, cost=None, seconds=3.0, ok=False))
        monitor.add(record(clock, model="b", tokens=5, cost=None, seconds=2.0))
        summary = monitor.summary()
        assert (summary.requests, summary.successes, summary.failures) == (3, 2, 1)
        assert summary.success_rate == pytest.approx(2 / 3) and summary.input_tokens == 35
        assert summary.cost_usd == 0.5 and summary.latency_seconds == {"p50": 2.0, "p95": 3.0, "p99": 3.0}
        rows = {row.model: row for row in summary.models}
        assert rows["a"].requests == 2 and rows["b"].cost_usd is None  # unknown, not 0
        assert "all" in summary.to_text() and "?" in summary.to_text()


class TestLog:
    def test_round_trips(self, tmp_path):
        log = tmp_path / "usage.jsonl"
        clock = Clock()
        monitor = UsageMonitor([AlertRule("tokens_per_request", 50)], log=log, clock=clock, on_alert=lambda a: None)
        for tokens in (10, 100, 20):
            monitor.add(record(clock, tokens=tokens, model="x" if tokens > 15 else "y"))
            clock.advance(1)
        kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
        assert kinds == ["request", "request", "alert", "request"]
        assert read_usage_log(log) == monitor.summary()

    def test_a_real_run_round_trips(self, tmp_path):
        log = tmp_path / "usage.jsonl"
        monitor = UsageMonitor(log=log)
        llm = ReliableLLM(FlakyLLM(name="gpt-4o-mini", script=["a", RuntimeError("x"), RuntimeError("x"), "b"]),
                          retries=1, sleep=Sleeps(), monitor=monitor)
        llm.run("one")
        with pytest.raises(LLMCallError):
            llm.run("two")
        llm.run("three")
        assert read_usage_log(log) == monitor.summary()
        assert read_usage_log(log).cost_usd == pytest.approx(monitor.summary().cost_usd) and monitor.summary().cost_usd

    def test_missing_file(self, tmp_path):
        with pytest.raises(UsageLogError, match="no such file"):
            read_usage_log(tmp_path / "nope.jsonl")

    @pytest.mark.parametrize("line", ["not json", '{"kind": "other"}', '{"kind": "request", "model": 3}', "[1]"])
    def test_a_bad_line_is_named(self, tmp_path, line):
        log = tmp_path / "usage.jsonl"
        good = UsageRecord(at=1.0, model="m", ok=True).model_dump_json()
        log.write_text(good + "\n\n" + line + "\n")
        with pytest.raises(UsageLogError, match="line 3"):
            read_usage_log(log)

    def test_the_log_folder_must_exist(self, tmp_path):
        with pytest.raises(InvalidArgumentError, match="does not exist"):
            UsageMonitor(log=tmp_path / "no" / "usage.jsonl")

    def test_an_unwritable_log_does_not_fail_the_request(self, tmp_path, caplog):
        log = tmp_path / "usage.jsonl"
        monitor = UsageMonitor([], log=log, clock=Clock())
        log.mkdir()  # a folder where the file should be: open() fails
        with caplog.at_level(logging.WARNING):
            monitor.add(record(Clock()))
        assert monitor.summary().requests == 1 and "in memory only" in caplog.text


@settings(max_examples=40, deadline=None)
@given(oks=st.lists(st.booleans(), min_size=1, max_size=60), window=st.integers(1, 10))
def test_failure_rate_alerts_equal_the_breaches(oks, window):
    # The invariant: one alert per run of consecutive over-limit evaluations, however the outcomes fall.
    clock = Clock()
    monitor, alerts = monitor_with(AlertRule("failure_rate", 0.3, window=window), clock)
    expected, over, seen = 0, False, []
    for ok in oks:
        monitor.add(record(clock, ok=ok))
        seen.append(ok)
        if len(seen) >= window:
            recent = seen[-window:]
            now = recent.count(False) / window > 0.3
            expected += now and not over
            over = now
    assert len(alerts) == expected


@settings(max_examples=60, deadline=None)
@given(outcomes=st.lists(st.tuples(st.booleans(), st.floats(0, 100, allow_nan=False)), max_size=80),
       size=st.integers(1, 12))
def test_the_window_keeps_what_a_slice_would(outcomes, size):
    # The invariant behind the per-record shortcut: running counts and a sorted list equal the brute force.
    from contextkit.llm.monitor import _Window

    window = _Window(size)
    for ok, seconds in outcomes:
        window.add(ok, seconds)
    last = outcomes[-size:]
    assert list(window.outcomes) == last
    assert window.failures == sum(1 for ok, _ in last if not ok)
    assert window.ordered == sorted(s for _, s in last)
