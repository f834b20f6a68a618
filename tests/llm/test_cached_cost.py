"""Usage and cost that match the provider's bill: prompt-cache reads and writes, output, for OpenAI,
Anthropic and Gemini responses in the shapes LlamaIndex hands back (``raw`` a dict or an SDK object).

The usage blocks are the providers' documented shapes; the expected costs are list-price arithmetic
written out here, per million tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import ValidationError

from contextkit.core import profiles
from contextkit.core.profiles import ModelProfile, register_profile
from contextkit.errors import InvalidArgumentError
from contextkit.llm import ReliableLLM
from contextkit.llm._calls import forget_profiles


class RawLLM(CustomLLM):
    """Answers "ok" with the provider-shaped ``raw`` it was given."""

    name: str = "raw"
    raw: Any = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.name)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="ok", raw=self.raw)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError


def as_object(value: Any) -> Any:
    """A dict as an SDK-like object: nested attributes instead of keys."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: as_object(v) for k, v in value.items()})
    return value


def usage_of(name: str, raw: Any):
    return ReliableLLM(RawLLM(name=name, raw=raw), retries=0).run("q").usage


def close(actual: float | None, expected: float) -> bool:
    return actual is not None and abs(actual - expected) <= 0.01 * expected


# Test-only profiles (names no shipped profile shares), with list prices written here: gpt-4o's
# $2.50 input / $1.25 cached input / $10 output and gemini-2.5-pro's (prompts up to 200k) $1.25 input /
# $0.31 cached / $10 output. The shipped claude-sonnet-4 profile is used as is: $3 input, $0.30 cache
# hits, $3.75 5-minute cache writes, $15 output.
TEST_PROFILES = [
    ModelProfile(name="test-openai-cached", context_window=128_000, reserved_output=16_384, tokenizer="o200k_base",
                 input_price_per_million=2.50, cached_input_price_per_million=1.25, output_price_per_million=10.00),
    ModelProfile(name="test-gemini-cached", context_window=1_048_576, reserved_output=65_536,
                 tokenizer="o200k_base", input_price_per_million=1.25, cached_input_price_per_million=0.31,
                 output_price_per_million=10.00),
    ModelProfile(name="test-no-cache-price", context_window=128_000, reserved_output=16_384,
                 tokenizer="o200k_base", input_price_per_million=2.00),
]


@pytest.fixture(autouse=True)
def test_profiles() -> Iterator[None]:
    for profile in TEST_PROFILES:
        register_profile(profile, replace=True)
    forget_profiles()
    yield
    for profile in TEST_PROFILES:
        profiles._PROFILES.pop(profile.name, None)
    forget_profiles()


ANTHROPIC = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
             "usage": {"input_tokens": 19, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 39_000,
                       "output_tokens": 400}}
ANTHROPIC_WRITE = {"usage": {"input_tokens": 50, "cache_creation_input_tokens": 20_000,
                             "cache_read_input_tokens": 0, "output_tokens": 100}}
OPENAI_CHAT = {"id": "chatcmpl-1", "object": "chat.completion",
               "usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                         "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
                         "completion_tokens_details": {"reasoning_tokens": 0}}}
OPENAI_RESPONSES = {"id": "resp_1", "object": "response",
                    "usage": {"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 4096},
                              "output_tokens": 200, "output_tokens_details": {"reasoning_tokens": 0},
                              "total_tokens": 5200}}
GEMINI = {"model_version": "gemini-2.5-pro",
          "usage_metadata": {"prompt_token_count": 120_000, "cached_content_token_count": 100_000,
                             "candidates_token_count": 500, "total_token_count": 120_500}}

FORMS = [pytest.param(lambda raw: raw, id="dict"), pytest.param(as_object, id="object")]


@pytest.mark.parametrize("form", FORMS)
class TestAnthropic:
    def test_cache_reads_count_in_the_prompt_and_bill_at_the_cache_price(self, form):
        usage = usage_of("claude-sonnet-4", form(ANTHROPIC))
        assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (39_019, 39_000, 0)
        assert usage.output_tokens == 400
        assert close(usage.input_cost_usd, (19 * 3.00 + 39_000 * 0.30) / 1e6)
        assert close(usage.output_cost_usd, 400 * 15.00 / 1e6)
        assert close(usage.cost_usd, (19 * 3.00 + 39_000 * 0.30 + 400 * 15.00) / 1e6)

    def test_cache_writes_bill_at_the_write_price(self, form):
        usage = usage_of("claude-sonnet-4", form(ANTHROPIC_WRITE))
        assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (20_050, 0, 20_000)
        assert close(usage.cost_usd, (50 * 3.00 + 20_000 * 3.75 + 100 * 15.00) / 1e6)


@pytest.mark.parametrize("form", FORMS)
class TestOpenAI:
    def test_chat_completions_cached_tokens_are_part_of_the_prompt_and_cheaper(self, form):
        usage = usage_of("test-openai-cached", form(OPENAI_CHAT))
        assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (2006, 1920, 0)
        assert close(usage.input_cost_usd, (86 * 2.50 + 1920 * 1.25) / 1e6)
        assert close(usage.output_cost_usd, 300 * 10.00 / 1e6)

    def test_responses_api(self, form):
        usage = usage_of("test-openai-cached", form(OPENAI_RESPONSES))
        assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (5000, 4096, 200)
        assert close(usage.cost_usd, (904 * 2.50 + 4096 * 1.25 + 200 * 10.00) / 1e6)


@pytest.mark.parametrize("form", FORMS)
def test_gemini_cached_content_is_part_of_the_prompt_and_cheaper(form):
    usage = usage_of("test-gemini-cached", form(GEMINI))
    assert usage.counted == "reported"
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (120_000, 100_000, 500)
    assert close(usage.cost_usd, (20_000 * 1.25 + 100_000 * 0.31 + 500 * 10.00) / 1e6)


def test_unknown_cache_price_falls_back_to_the_input_price_and_output_stays_unknown():
    usage = usage_of("test-no-cache-price", OPENAI_CHAT)
    assert usage.cached_input_tokens == 1920
    assert close(usage.input_cost_usd, 2006 * 2.00 / 1e6)
    assert usage.output_cost_usd is None


def test_run_usage_sums_the_cache_counts_of_each_answer():
    llm = RawLLM(name="claude-sonnet-4", raw=ANTHROPIC)
    first, second = (ReliableLLM(llm, retries=0).run("q").usage for _ in range(2))
    total = first + second
    assert (total.input_tokens, total.cached_input_tokens) == (78_038, 78_000)


def test_a_tokens_per_request_limit_sees_the_cached_prompt():
    from contextkit.llm import AlertRule, UsageMonitor

    monitor = UsageMonitor(rules=[AlertRule("tokens_per_request", 20_000)])
    result = ReliableLLM(RawLLM(name="claude-sonnet-4", raw=ANTHROPIC), retries=0, monitor=monitor).run("q")
    assert result.usage.input_tokens == 39_019
    assert any(alert.metric == "tokens_per_request" for alert in monitor.alerts)


class TestProfileFields:
    def test_a_misspelt_price_is_refused(self):
        with pytest.raises((ValidationError, InvalidArgumentError), match="output_price_per_miliion"):
            ModelProfile(name="m", context_window=1000, reserved_output=100, output_price_per_miliion=4.0)

    def test_output_and_cache_prices_are_kept(self):
        profile = ModelProfile(name="m", context_window=1000, reserved_output=100, input_price_per_million=3.0,
                               output_price_per_million=15.0, cached_input_price_per_million=0.3,
                               cache_write_price_per_million=3.75)
        assert (profile.output_price_per_million, profile.cached_input_price_per_million,
                profile.cache_write_price_per_million) == (15.0, 0.3, 3.75)
        assert close(profile.cost(1_000_000), 3.0)

    def test_a_negative_price_is_refused(self):
        with pytest.raises(ValidationError):
            ModelProfile(name="m", context_window=1000, reserved_output=100, cached_input_price_per_million=-1)
