"""ModelRouter: by task, by classifier, around unwell routes and back."""

from __future__ import annotations

import asyncio

import pytest

from contextkit.errors import InvalidArgumentError, LLMCallError
from contextkit.llm import ModelRouter, ReliableLLM, RouteLimits, UsageMonitor
from tests.llm._fakes import Clock, FlakyLLM, Late, Sleeps


def router(routes, **kw):
    kw.setdefault("retries", 0)
    kw.setdefault("sleep", Sleeps())
    return ModelRouter(routes, **kw)


class TestChoosing:
    def test_task_names_the_route(self):
        deep, fast = FlakyLLM(name="deep", default_reply="D"), FlakyLLM(name="fast", default_reply="F")
        r = router({"deep": deep, "fast": fast}, default="deep")
        assert r.run("q", task="fast").text == "F" and r.run("q").text == "D"
        result = r.run("q", task="fast")
        assert result.route == "fast" and result.task == "fast" and not result.fell_back

    def test_classify_picks_from_the_prompt(self):
        r = router({"deep": FlakyLLM(default_reply="D"), "fast": FlakyLLM(default_reply="F")},
                   classify=lambda prompt: "fast" if len(prompt) < 20 else "deep")
        assert r.run("short").text == "F" and r.run("a much longer question than that").text == "D"

    def test_unknown_routes_are_refused(self):
        with pytest.raises(InvalidArgumentError, match="default route"):
            router({"deep": FlakyLLM()}, default="fast")
        with pytest.raises(InvalidArgumentError, match="not a route"):
            router({"deep": FlakyLLM()}).run("q", task="summarise")
        with pytest.raises(InvalidArgumentError, match="classify chose"):
            router({"deep": FlakyLLM()}, classify=lambda p: "other").run("q")
        with pytest.raises(InvalidArgumentError, match="at least one route"):
            ModelRouter({})

    def test_a_reliable_llm_is_taken_as_it_is(self):
        wrapped = ReliableLLM(FlakyLLM(), retries=5)
        assert router({"deep": wrapped}).routes["deep"] is wrapped


class TestHealth:
    def test_a_failing_route_sends_work_to_the_next_until_it_recovers(self):
        clock = Clock()
        deep = FlakyLLM(name="deep", script=[RuntimeError("down")] * 3, default_reply="D")
        fast = FlakyLLM(name="fast", default_reply="F")
        r = router({"deep": deep, "fast": fast}, clock=clock,
                   limits=RouteLimits(max_failure_rate=0.5, window=4, min_requests=2, cooldown=10))
        first = r.run("q")  # deep fails outright: this request goes on to fast
        assert first.text == "F" and first.route == "fast" and first.fell_back
        r.run("q")
        assert r.status()["deep"]["open"] and "failure rate" in r.status()["deep"]["reason"]
        calls = len(deep.prompts)
        for _ in range(5):
            assert r.run("q").route == "fast"  # deep is left alone while open
        assert len(deep.prompts) == calls
        clock.advance(10)
        probe = r.run("q")  # after the cooldown one request probes deep: it fails, another cooldown
        assert probe.route == "fast" and len(deep.prompts) == calls + 1 and r.status()["deep"]["open"]
        clock.advance(10)
        assert r.run("q").route == "deep"  # the probe answers: closed again, a fresh window
        assert not r.status()["deep"]["open"] and r.status()["deep"]["requests"] == 1

    def test_a_slow_route_fails_over_on_p99(self):
        clock = Clock()
        deep = FlakyLLM(name="deep", delay=0.03, default_reply="D")
        fast = FlakyLLM(name="fast", default_reply="F")
        r = router({"deep": deep, "fast": fast}, clock=clock,
                   limits={"deep": RouteLimits(max_p99_seconds=0.02, window=3, min_requests=3, cooldown=5)})
        assert [r.run("q").route for _ in range(3)] == ["deep"] * 3  # answered, but slowly
        assert "p99 latency" in r.status()["deep"]["reason"]
        assert r.run("q").route == "fast"
        assert r.status()["fast"]["open"] is False

    def test_every_route_failing_raises_with_all_attempts(self):
        r = router({"a": FlakyLLM(name="a", script=[RuntimeError("x")]),
                    "b": FlakyLLM(name="b", script=[RuntimeError("y")])})
        with pytest.raises(LLMCallError) as info:
            r.run("q")
        assert [a.model for a in info.value.attempts] == ["a", "b"]

    def test_when_all_are_open_the_wanted_one_still_gets_the_work(self):
        clock = Clock()
        r = router({"a": FlakyLLM(name="a"), "b": FlakyLLM(name="b")}, clock=clock)
        for name in ("a", "b"):
            r.health[name].opened_at = clock()
        assert r.order("b") == ["b", "a"]


class TestMonitoring:
    def test_each_request_is_recorded_with_its_route(self, tmp_path):
        import json

        log = tmp_path / "usage.jsonl"
        r = router({"deep": FlakyLLM(name="deep"), "fast": FlakyLLM(name="fast")},
                   monitor=UsageMonitor([], log=log))
        r.run("q", task="fast")
        r.run("q")
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        assert [(row["route"], row["model"]) for row in rows] == [("fast", "fast"), ("deep", "deep")]

    def test_async(self):
        r = router({"deep": FlakyLLM(name="deep", script=[Late(0.01, "D")]), "fast": FlakyLLM(name="fast")})
        result = asyncio.run(r.arun("q"))
        assert result.text == "D" and result.route == "deep"


def test_a_failed_over_request_is_one_record_with_every_attempt(tmp_path):
    import json

    log = tmp_path / "usage.jsonl"
    r = router({"deep": FlakyLLM(name="deep", script=[RuntimeError("x")]), "fast": FlakyLLM(name="fast")},
               monitor=UsageMonitor([], log=log))
    result = r.run("q")
    assert [(a.model, a.ok) for a in result.attempts] == [("deep", False), ("fast", True)]
    (row,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert row["ok"] and row["fell_back"] and row["route"] == "fast" and row["failed_attempts"] == 1


def test_a_request_every_route_failed_is_one_failed_record(tmp_path):
    monitor = UsageMonitor([])
    r = router({"a": FlakyLLM(name="a", script=[RuntimeError("x")]), "b": FlakyLLM(name="b", script=[RuntimeError("y")])},
               monitor=monitor)
    with pytest.raises(LLMCallError):
        r.run("q")
    summary = monitor.summary()
    assert (summary.requests, summary.failures) == (1, 1)
