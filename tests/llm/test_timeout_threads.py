"""A timed-out LLM call leaves no thread behind (issue 33).

On 7f7ba2f every sync call with a timeout started a thread of its own and left it running past the
timeout: fifty timed-out calls to a slow LLM left fifty threads (the async fake) or as many as were
still sleeping. The fakes are real LlamaIndex ``CustomLLM`` subclasses: one with async methods of
its own (its coroutine can be cancelled), one with sync methods only (no one can stop it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import Field

from contextkit.core.errors import LLMCallError
from contextkit.llm import ReliableLLM, _calls

WORKERS = getattr(_calls, "SYNC_WORKERS", 4)
IDLE = getattr(_calls, "IDLE_SECONDS", 2.0)

class SlowSync(CustomLLM):
    """Sleeps ``seconds`` in ``complete``; counts the calls that started and those that finished."""

    seconds: float = 2.0
    started: list[float] = Field(default_factory=list)
    finished: list[float] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=type(self).__name__)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.started.append(time.monotonic())
        time.sleep(self.seconds)
        self.finished.append(time.monotonic())
        return CompletionResponse(text=f"answer to {prompt}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt)


class SlowAsync(SlowSync):
    """Its own ``acomplete``: awaits ``seconds``; records a cancellation."""

    cancelled: list[float] = Field(default_factory=list)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.started.append(time.monotonic())
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled.append(time.monotonic())
            raise
        self.finished.append(time.monotonic())
        return CompletionResponse(text=f"answer to {prompt}")


def _time_out(llm: Any, calls: int, timeout: float = 0.05) -> None:
    wrapped = ReliableLLM(llm, retries=0, timeout=timeout)
    for _ in range(calls):
        with pytest.raises(LLMCallError) as caught:
            wrapped.run("hello")
        assert "did not answer within" in str(caught.value)


def _pool_threads() -> int:
    return sum(thread.name == "contextkit-llm-call" for thread in threading.enumerate())


def _wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class TestNoThreadBehind:
    def test_fifty_timed_out_async_calls_are_cancelled_and_leave_no_thread(self):
        loop = getattr(_calls, "_LOOP", None)  # (so that on 7f7ba2f the test fails on its assertions)
        if loop is not None:
            loop._started()  # the one loop thread the process keeps (counted before, as a baseline)
        before = threading.active_count()
        llm = SlowAsync(seconds=2.0)
        started = time.monotonic()
        _time_out(llm, 50)
        assert time.monotonic() - started < 15  # each call gives up at its timeout
        assert threading.active_count() == before  # 7f7ba2f: 50 more
        assert _wait_for(lambda: len(llm.cancelled) == 50, 2.0), (len(llm.cancelled), len(llm.started))
        time.sleep(2.2)
        assert llm.finished == []  # cancelled: none ran on to its end

    def test_fifty_timed_out_sync_calls_hold_at_most_the_pool(self):
        before = threading.active_count()
        llm = SlowSync(seconds=5.0)  # longer than the 50 calls take: the first ones hold every worker
        _time_out(llm, 50)
        assert threading.active_count() - before <= WORKERS  # 7f7ba2f: one per call still asleep
        assert len(llm.started) <= WORKERS  # the calls queued past their timeout never start
        # once the stuck calls end, the workers find only abandoned calls and leave (counted by name:
        # a thread of an earlier test that ends meanwhile would keep the process's count below `before`)
        assert _wait_for(lambda: _pool_threads() == 0, 5.0 + IDLE + 3.0), _pool_threads()
        assert len(llm.started) <= WORKERS

    def test_calls_within_their_timeout_still_answer_on_both_paths(self):
        for llm in (SlowSync(seconds=0.01), SlowAsync(seconds=0.01)):
            result = ReliableLLM(llm, retries=0, timeout=5).run("ping")
            assert result.text == "answer to ping"

    def test_an_error_of_the_llm_comes_back_as_itself(self):
        class Broken(SlowSync):
            @llm_completion_callback()
            def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
                raise ConnectionError("refused")

        with pytest.raises(LLMCallError, match="ConnectionError: refused"):
            ReliableLLM(Broken(), retries=0, timeout=5).run("ping")

    def test_an_llm_whose_async_method_blocks_the_loop_still_times_out(self):
        class BlocksTheLoop(SlowSync):
            @llm_completion_callback()
            async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
                return self.complete(prompt)  # sync work inside the coroutine: a cancel cannot reach it

        started = time.monotonic()
        with pytest.raises(LLMCallError, match="did not answer within"):
            ReliableLLM(BlocksTheLoop(seconds=2.0), retries=0, timeout=0.1).run("ping")
        assert time.monotonic() - started < 1.9  # the caller is let go at the timeout and its grace
        time.sleep(2.0)  # the loop is free again for the next test
