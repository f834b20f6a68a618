"""ReliableLLM over real LlamaIndex CustomLLMs that fail, time out, answer invalid JSON or late."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import BaseModel

from contextkit.errors import ContextkitError, InvalidArgumentError, LLMCallError
from contextkit.llm import LLMResult, ReliableLLM, UsageMonitor
from tests.llm._fakes import ASleeps, FlakyLLM, Late, Sleeps


class Answer(BaseModel):
    city: str
    population: int


GOOD = '{"city": "Lisbon", "population": 545000}'


def reliable(llm, **kw):
    kw.setdefault("backoff", 0.001)
    kw.setdefault("sleep", Sleeps())
    return ReliableLLM(llm, **kw)


class TestRetries:
    def test_an_error_is_retried_then_answered(self):
        llm = FlakyLLM(script=[ConnectionError("reset"), ConnectionError("reset"), "ok"])
        result = reliable(llm, retries=2).run("q")
        assert result.text == "ok" and not result.fell_back
        assert [a.kind for a in result.attempts] == ["error", "error", None]
        assert "ConnectionError: reset" in result.attempts[0].error

    def test_backoff_grows_exponentially_with_bounded_jitter(self):
        sleeps = Sleeps()
        llm = FlakyLLM(script=[RuntimeError("x")] * 3 + ["ok"])
        ReliableLLM(llm, retries=3, backoff=1.0, sleep=sleeps).run("q")
        assert len(sleeps.waits) == 3
        for n, wait in enumerate(sleeps.waits):
            assert 2 ** n <= wait <= 2 ** n + 1.0  # initial * 2**n plus up to `backoff` of jitter

    def test_max_backoff_caps_the_wait(self):
        sleeps = Sleeps()
        ReliableLLM(FlakyLLM(script=[RuntimeError("x")] * 4), retries=4, backoff=10, max_backoff=3,
                    sleep=sleeps).run("q")
        assert sleeps.waits and max(sleeps.waits) <= 3

    def test_past_the_retries_it_raises_with_every_attempt(self):
        llm = FlakyLLM(script=[RuntimeError(f"fail {i}") for i in range(5)])
        with pytest.raises(LLMCallError) as info:
            reliable(llm, retries=2).run("q")
        assert isinstance(info.value, ContextkitError) and isinstance(info.value, RuntimeError)
        assert [a.error for a in info.value.attempts] == [f"RuntimeError: fail {i}" for i in range(3)]
        assert "fail 2" in str(info.value) and len(llm.script) == 2

    def test_an_error_outside_retry_on_propagates_at_once(self):
        llm = FlakyLLM(script=[KeyError("bug"), "never"])
        with pytest.raises(KeyError):
            reliable(llm, retry_on=(ConnectionError,)).run("q")
        assert len(llm.prompts) == 1

    @pytest.mark.parametrize("kw", [{"retries": -1}, {"retries": 1.5}, {"backoff": -1}, {"timeout": 0}])
    def test_bad_settings_are_refused(self, kw):
        with pytest.raises(InvalidArgumentError):
            ReliableLLM(FlakyLLM(), **kw)

    def test_not_an_llm_is_refused(self):
        with pytest.raises(InvalidArgumentError, match="LlamaIndex LLMs"):
            ReliableLLM("gpt-4o")

    def test_a_bad_prompt_is_refused(self):
        with pytest.raises(InvalidArgumentError, match="prompt must be"):
            reliable(FlakyLLM()).run(42)


class TestTimeouts:
    def test_a_late_answer_is_a_timeout_and_retried(self):
        llm = FlakyLLM(script=[Late(0.5), "quick"])
        started = time.perf_counter()
        result = reliable(llm, timeout=0.05).run("q")
        assert result.text == "quick" and result.attempts[0].kind == "timeout"
        assert "within 0.05 s" in result.attempts[0].error
        assert time.perf_counter() - started < 0.45  # we stopped waiting; the worker finishes on its own

    def test_a_timeout_is_retried_whatever_retry_on_says(self):
        result = reliable(FlakyLLM(script=[Late(0.3), "quick"]), timeout=0.05, retry_on=(ConnectionError,)).run("q")
        assert result.text == "quick" and result.attempts[0].kind == "timeout"

    def test_an_answer_inside_the_timeout_is_taken(self):
        result = reliable(FlakyLLM(script=[Late(0.01, "in time")]), timeout=1.0).run("q")
        assert result.text == "in time" and len(result.attempts) == 1

    def test_async_timeout_cancels_the_call(self):
        llm = FlakyLLM(script=[Late(5.0), "quick"])
        started = time.perf_counter()
        result = asyncio.run(reliable(llm, timeout=0.05, sleep=ASleeps()).arun("q"))
        assert result.text == "quick" and result.attempts[0].kind == "timeout"
        assert time.perf_counter() - started < 1.0


class TestValidation:
    def test_valid_json_in_fences_is_parsed(self):
        result = reliable(FlakyLLM(script=[f"Here you go:\n```json\n{GOOD}\n```"])).run("q", output=Answer)
        assert result.output == Answer(city="Lisbon", population=545000)

    def test_invalid_json_is_repaired_with_the_error_shown(self):
        sleeps = Sleeps()
        llm = FlakyLLM(script=['{"city": "Lisbon", "population": "many"}', GOOD])
        result = ReliableLLM(llm, backoff=1.0, sleep=sleeps).run("Where?", output=Answer)
        assert result.output.population == 545000
        assert result.attempts[0].kind == "invalid" and "population" in result.attempts[0].error
        repair = llm.prompts[1]
        assert repair.startswith("Where?") and '"many"' in repair and "population" in repair and '"required"' in repair
        assert sleeps.waits == [0.0]  # an answer that was wrong needs no backoff

    def test_the_repair_is_a_new_chat_turn_for_messages(self):
        llm = FlakyLLM(chat_model=True, script=["no json here", GOOD])
        messages = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "Where?"}]
        result = reliable(llm).run(messages, output=Answer)
        assert result.output.city == "Lisbon"
        second = llm.chats[1]
        assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
        assert second[2]["content"] == "no json here" and "holds no JSON" in second[3]["content"]

    def test_always_invalid_falls_back_then_fails(self):
        first = FlakyLLM(name="first", default_reply="nope")
        second = FlakyLLM(name="second", default_reply="[1, 2]")
        with pytest.raises(LLMCallError) as info:
            reliable(first, fallbacks=[second], retries=1).run("q", output=Answer)
        assert [(a.model, a.kind) for a in info.value.attempts] == [("first", "invalid")] * 2 + [("second", "invalid")] * 2
        assert second.prompts[0] == "q"  # the fallback starts from the original prompt

    def test_output_must_be_a_model_class(self):
        with pytest.raises(InvalidArgumentError, match="pydantic model"):
            reliable(FlakyLLM()).run("q", output=dict)


class TestFallbacks:
    def test_after_the_last_retry_the_next_llm_answers(self):
        deep = FlakyLLM(name="deep", script=[RuntimeError("down")] * 3)
        cheap = FlakyLLM(name="cheap", default_reply="from cheap")
        result = reliable(deep, fallbacks=[cheap], retries=2).run("q")
        assert result.model == "cheap" and result.fell_back and result.text == "from cheap"
        assert [a.model for a in result.attempts] == ["deep"] * 3 + ["cheap"]

    def test_a_configured_fallback_answer_when_all_fail(self):
        llm = FlakyLLM(script=[RuntimeError("x")] * 2)
        result = reliable(llm, retries=1, fallback_answer="Sorry, try later.").run("q")
        assert result.text == "Sorry, try later." and result.model == "fallback" and result.fell_back
        assert len(result.attempts) == 2

    def test_to_dict_names_the_models(self):
        data = reliable(FlakyLLM(name="a"), fallbacks=[FlakyLLM(name="b")]).to_dict()
        assert data["type"] == "ReliableLLM" and data["llm"] == "a" and data["fallbacks"] == ["b"]


class TestUsage:
    def test_tokens_are_counted_with_cl100k_when_no_profile_matches(self, cl100k):
        result = reliable(FlakyLLM(default_reply="three little words")).run("count these tokens please")
        assert result.usage.input_tokens == cl100k.count("count these tokens please")
        assert result.usage.output_tokens == cl100k.count("three little words")
        assert result.usage.counted == "counted" and result.usage.cost_usd is None  # unknown, not 0

    def test_a_profile_gives_its_tokenizer_and_price(self):
        from contextkit.tokenizers import get_tokenizer

        result = reliable(FlakyLLM(name="gpt-4o-2024-08-06", default_reply="hi")).run("a prompt")
        o200k = get_tokenizer("o200k_base")
        assert result.usage.tokenizer == "o200k_base" and result.usage.input_tokens == o200k.count("a prompt")
        assert result.usage.input_cost_usd == pytest.approx(result.usage.input_tokens * 2.50 / 1e6)

    def test_reported_usage_wins_over_counting(self):
        llm = FlakyLLM(name="gpt-4o-mini", usage={"prompt_tokens": 1000, "completion_tokens": 50})
        result = reliable(llm).run("short")
        assert (result.usage.input_tokens, result.usage.output_tokens) == (1000, 50)
        assert result.usage.counted == "reported"
        assert result.usage.cost_usd == pytest.approx(1000 * 0.15 / 1e6)

    def test_invalid_answers_are_billed_too(self):
        llm = FlakyLLM(usage={"input_tokens": 10, "output_tokens": 5}, script=["bad", GOOD])
        result = reliable(llm).run("q", output=Answer)
        assert (result.usage.input_tokens, result.usage.output_tokens) == (20, 10)

    def test_seconds_is_the_whole_run(self):
        result = reliable(FlakyLLM(script=[Late(0.02, "a")])).run("q")
        assert result.usage.seconds >= result.attempts[0].seconds >= 0.02

    def test_a_monitor_records_success_and_failure(self):
        monitor = UsageMonitor(rules=[])
        llm = FlakyLLM(script=["ok", RuntimeError("x"), RuntimeError("x")])
        wrapped = reliable(llm, retries=1, monitor=monitor)
        wrapped.run("q", task="qa")
        with pytest.raises(LLMCallError):
            wrapped.run("q")
        summary = monitor.summary()
        assert (summary.requests, summary.successes, summary.failures) == (2, 1, 1)


class TestAssemblyPrompts:
    @pytest.fixture()
    def assembled(self):
        from contextkit.assembly import EvidenceItem, Section, assemble

        sections = [Section(name="instructions", role="key_instructions", content="Answer from the documents."),
                    Section(name="evidence", role="evidence",
                            items=[EvidenceItem(id=f"d{i}", text=f"Fact number {i} about Lisbon. " * 30)
                                   for i in range(40)]),
                    Section(name="question", role="question", content="How big is Lisbon?")]
        return assemble(sections, 600, tokenizer="o200k_base")

    def test_the_prompt_of_an_assembly_is_sent_and_its_count_reused(self, assembled):
        llm = FlakyLLM(name="gpt-4o", default_reply="big")
        result = reliable(llm).run(assembled)
        assert llm.prompts == [assembled.prompt]
        assert result.usage.input_tokens == assembled.report.tokens

    def test_the_monitor_joins_the_assembly_report(self, assembled, tmp_path):
        import json

        monitor = UsageMonitor(rules=[], log=tmp_path / "usage.jsonl")
        result = reliable(FlakyLLM(name="gpt-4o"), monitor=monitor).run(assembled)
        (row,) = [json.loads(line) for line in (tmp_path / "usage.jsonl").read_text().splitlines()]
        report = assembled.report
        assert row["request_id"] == result.request_id and row["input_tokens"] == report.tokens
        assert row["assembly"] == {"model": None, "budget": 600, "tokens": report.tokens,
                                   "fill_percent": report.budget_used_percent, "dropped": len(report.dropped()),
                                   "cost_usd": None}
        assert row["assembly"]["dropped"] > 0 and row["cost_usd"] == pytest.approx(result.usage.cost_usd)


def test_result_is_a_pydantic_record():
    result = reliable(FlakyLLM()).run("q")
    assert isinstance(result, LLMResult) and str(result) == "fine"
    assert LLMResult.model_validate_json(result.model_dump_json()).text == "fine"


class TestAssemblyMessages:
    """An AssemblyResult goes to a chat model as its chat messages, to a completion model as its prompt."""

    @pytest.fixture()
    def assembled(self):
        from contextkit.assembly import EvidenceItem, Section, assemble

        return assemble([Section(name="rules", role="key_instructions", content="Answer from the documents."),
                         Section(name="evidence", role="evidence",
                                 items=[EvidenceItem(id="d1", text="Lisbon has 545,000 people.")]),
                         Section(name="question", role="question", content="How big is Lisbon?")],
                        "gpt-4o")

    def test_a_chat_model_gets_the_messages(self, assembled):
        llm = FlakyLLM(name="gpt-4o", chat_model=True)
        result = reliable(llm).run(assembled)
        assert llm.chats == [assembled.messages(style="openai")] and llm.prompts == []
        assert result.usage.input_tokens == assembled.message_tokens("openai")

    def test_a_completion_model_gets_the_prompt(self, assembled):
        llm = FlakyLLM(name="gpt-4o")
        reliable(llm).run(assembled)
        assert llm.prompts == [assembled.prompt] and llm.chats == []
