"""``ReliableLLM``: any LlamaIndex LLM with retries, output validation, fallbacks and usage.

The agent loop of the long-context guidance (``for attempt in range(max_retries): ... if
self.validate(result): return result ... return self.fallback()``) as one object:

* **retry** an error or a timeout with exponential backoff and jitter (the policy is
  tenacity's: ``stop_after_attempt``, ``wait_exponential`` plus ``wait_random``; tenacity is a
  dependency of llama-index-core, so it costs nothing to install);
* **validate**: with ``output=`` a pydantic model, the answer is parsed as JSON (code fences
  and prose around it tolerated) and validated; an invalid answer is retried at once (no
  backoff: the model answered, it only answered wrong) with the error and the schema shown
  to the model;
* **fall back**: after the last retry of one model the next of ``fallbacks`` is tried,
  from the original prompt; when all fail, :class:`~contextkit.errors.LLMCallError` with
  every attempt, or ``fallback_answer`` if one is configured;
* **measure**: tokens in and out (the provider's, else counted with the model profile's
  tokenizer), cost, seconds; each run goes to the ``monitor`` and to OpenTelemetry.

A sync call with ``timeout`` runs in a worker thread that may finish in the background
after we stop waiting (see :mod:`contextkit.llm._calls`); an async call is cancelled by
``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from contextkit.core import telemetry
from contextkit.core.errors import (
    InvalidArgumentError,
    LLMCallError,
    LLMTimeoutError,
    OutputValidationError,
)
from contextkit.llm._calls import Request, ainvoke, call_sync, model_name, usage_for
from contextkit.llm._json import parse_output, repair_instruction
from contextkit.llm._types import Attempt, FailureKind, LLMResult, Usage

__all__ = ["ReliableLLM"]


class _Failed(Exception):
    """One attempt failed in a way worth another try (tenacity retries on this type only)."""

    def __init__(self, kind: FailureKind) -> None:
        super().__init__(kind)
        self.kind: FailureKind = kind


class _Run:
    """What one run's tries share: the original request, every attempt, and the tokens billed so far."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.attempts: list[Attempt] = []
        self.usage = Usage()
        self.started = time.perf_counter()


class _Try:
    """One call to one model: which, where in the chain, its span and when it started."""

    def __init__(self, llm: Any, position: int, request: Request) -> None:
        self.llm, self.position, self.request, self.span = llm, position, request, None
        self.model = model_name(llm)
        self.operation = "chat" if request.uses_chat(llm) else "text_completion"
        self.t0 = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.t0


class ReliableLLM:
    """Calls ``llm`` and, when it keeps failing, each of ``fallbacks`` in turn (any LlamaIndex LLMs).

    ``retries`` more tries per model after the first; the wait before try ``n`` is
    ``backoff * 2**(n-1)`` plus up to ``backoff`` of random jitter, at most ``max_backoff``.
    ``retry_on``: the exceptions worth a retry (any other propagates at once, as a bug should; a
    timeout is always retried).
    ``sleep``: how to wait (tests pass a recorder). ``monitor``: a
    :class:`~contextkit.llm.UsageMonitor` that records every run.
    """

    def __init__(self, llm: Any, *, fallbacks: Sequence[Any] = (), retries: int = 2, backoff: float = 0.5,
                 max_backoff: float = 30.0, timeout: float | None = None, monitor: Any = None,
                 fallback_answer: str | None = None, retry_on: tuple[type[BaseException], ...] = (Exception,),
                 sleep: Callable[[float], Any] | None = None) -> None:
        for candidate in (llm, *fallbacks):
            if not (hasattr(candidate, "complete") and hasattr(candidate, "chat")):
                raise InvalidArgumentError(f"ReliableLLM takes LlamaIndex LLMs (with .complete and .chat), "
                                           f"not {type(candidate).__name__}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidArgumentError(f"retries must be a whole number >= 0, not {retries!r}")
        if backoff < 0 or max_backoff < 0:
            raise InvalidArgumentError(f"backoff and max_backoff must be >= 0 seconds, not {backoff!r}, {max_backoff!r}")
        if timeout is not None and not timeout > 0:
            raise InvalidArgumentError(f"timeout must be a number of seconds > 0 or None, not {timeout!r}")
        self.llm, self.fallbacks = llm, tuple(fallbacks)
        self.retries, self.backoff, self.max_backoff, self.timeout = retries, backoff, max_backoff, timeout
        self.monitor, self.fallback_answer, self.retry_on = monitor, fallback_answer, tuple(retry_on)
        # a timeout is always worth another try
        self._retryable: tuple[type[BaseException], ...] = (LLMTimeoutError, *self.retry_on)
        self.sleep = sleep

    @property
    def models(self) -> tuple[Any, ...]:
        """The LLM, then its fallbacks: the order they are tried in."""
        return (self.llm, *self.fallbacks)

    def to_dict(self) -> dict[str, Any]:
        """The settings; LLMs by name only (a dict cannot hold a client)."""
        return {"type": "ReliableLLM", "llm": model_name(self.llm), "fallbacks": [model_name(f) for f in self.fallbacks],
                "retries": self.retries, "backoff": self.backoff, "max_backoff": self.max_backoff,
                "timeout": self.timeout, "fallback_answer": self.fallback_answer}

    # ------------------------------------------------------------------ sync

    def run(self, prompt: Any, *, output: type[BaseModel] | None = None, task: str | None = None) -> LLMResult:
        """Answer ``prompt`` (a string, chat messages or an ``AssemblyResult``); LLMCallError if nothing could.

        With ``output=`` a pydantic model, ``result.output`` is the validated object.
        """
        run = self._start(prompt, output)
        with telemetry.span("contextkit.llm.run", contextkit__task=task) as run_span:
            try:
                result = self._chain_sync(run, output)
            except LLMCallError as exc:
                raise self._failed(exc, run, task, run_span) from None
            return self._finish(result, run, task, run_span)

    def _chain_sync(self, run: _Run, output: type[BaseModel] | None) -> LLMResult:
        from tenacity import (
            RetryError,
            Retrying,
            retry_if_exception_type,
            stop_after_attempt,
        )

        for position, llm in enumerate(self.models):
            request = [run.request]  # repaired after an invalid answer; each model starts from the original
            retrying = Retrying(stop=stop_after_attempt(self.retries + 1), wait=self._wait,
                                retry=retry_if_exception_type(_Failed), sleep=self.sleep or time.sleep)
            try:
                for attempt in retrying:
                    one = _Try(llm, position, request[0])
                    with attempt, self._call_span(one) as one.span:
                        try:
                            text, response = call_sync(llm, one.request, self.timeout)
                        except self._retryable as exc:
                            self._call_failed(one, exc, run)
                        return self._answered(one, text, response, output, run, request)
            except RetryError:
                continue
        return self._exhausted(run)

    # ------------------------------------------------------------------ async

    async def arun(self, prompt: Any, *, output: type[BaseModel] | None = None, task: str | None = None) -> LLMResult:
        """:meth:`run` with the LLM's async methods (``acomplete``/``achat``); timeouts cancel the call."""
        run = self._start(prompt, output)
        with telemetry.span("contextkit.llm.run", contextkit__task=task) as run_span:
            try:
                result = await self._chain_async(run, output)
            except LLMCallError as exc:
                raise self._failed(exc, run, task, run_span) from None
            return self._finish(result, run, task, run_span)

    async def _chain_async(self, run: _Run, output: type[BaseModel] | None) -> LLMResult:
        from tenacity import (
            AsyncRetrying,
            RetryError,
            retry_if_exception_type,
            stop_after_attempt,
        )

        for position, llm in enumerate(self.models):
            request = [run.request]
            retrying = AsyncRetrying(stop=stop_after_attempt(self.retries + 1), wait=self._wait,
                                     retry=retry_if_exception_type(_Failed), sleep=self.sleep or asyncio.sleep)
            try:
                async for attempt in retrying:
                    one = _Try(llm, position, request[0])
                    with attempt, self._call_span(one) as one.span:
                        try:
                            text, response = await self._acall(llm, one.request)
                        except self._retryable as exc:
                            self._call_failed(one, exc, run)
                        return self._answered(one, text, response, output, run, request)
            except RetryError:
                continue
        return self._exhausted(run)

    async def _acall(self, llm: Any, request: Request) -> tuple[str, Any]:
        if self.timeout is None:
            return await ainvoke(llm, request)
        try:
            return await asyncio.wait_for(ainvoke(llm, request), self.timeout)
        except TimeoutError:
            raise LLMTimeoutError(f"{model_name(llm)} did not answer within {self.timeout:g} s") from None

    # ------------------------------------------------------------------ shared steps

    def _start(self, prompt: Any, output: Any) -> _Run:
        if output is not None and not (isinstance(output, type) and issubclass(output, BaseModel)):
            raise InvalidArgumentError(f"output must be a pydantic model class, not {output!r:.80}")
        return _Run(Request.build(prompt))

    def _wait(self, state: Any) -> float:
        """Exponential backoff with jitter after an error or a timeout; none after an invalid answer."""
        failure = state.outcome.exception() if state.outcome is not None else None
        if self.backoff <= 0 or (isinstance(failure, _Failed) and failure.kind == "invalid"):
            return 0.0
        from tenacity import wait_exponential, wait_random

        exponential = wait_exponential(multiplier=self.backoff, max=self.max_backoff) + wait_random(0, self.backoff)
        return min(exponential(state), self.max_backoff)

    @staticmethod
    def _call_span(one: _Try) -> Any:
        """The GenAI client span of one call: ``{operation} {model}``, as the conventions name it."""
        return telemetry.span(f"{one.operation} {one.model}", gen_ai__operation__name=one.operation,
                              gen_ai__request__model=one.model)

    def _call_failed(self, one: _Try, exc: BaseException, run: _Run) -> None:
        """Record an error or a timeout, then ask tenacity for another try."""
        seconds = one.seconds()
        kind: FailureKind = "timeout" if isinstance(exc, TimeoutError) else "error"
        run.attempts.append(Attempt(model=one.model, error=f"{type(exc).__name__}: {exc}", kind=kind,
                                    seconds=seconds))
        telemetry.mark_error(one.span, type(exc).__name__, str(exc))
        telemetry.record_llm_metrics(operation=one.operation, request_model=one.model, response_model=None,
                                     input_tokens=0, output_tokens=0, seconds=seconds,
                                     error_type=type(exc).__name__)
        raise _Failed(kind)

    def _answered(self, one: _Try, text: str, response: Any, output: type[BaseModel] | None, run: _Run,
                  request: list[Request]) -> LLMResult:
        """Count and validate an answer: a result, or (invalid) a repaired request and another try."""
        seconds = one.seconds()
        usage = usage_for(one.model, one.request, text, response, chat=one.operation == "chat")
        run.usage = run.usage + usage
        answered_by = _response_model(response, one.model)
        telemetry.set_attributes(one.span, {"gen_ai.response.model": answered_by,
                                            "gen_ai.usage.input_tokens": usage.input_tokens,
                                            "gen_ai.usage.output_tokens": usage.output_tokens})
        telemetry.record_llm_metrics(operation=one.operation, request_model=one.model, response_model=answered_by,
                                     input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                     seconds=seconds)
        tin, tout = usage.input_tokens, usage.output_tokens
        value = None
        if output is not None:
            try:
                value = parse_output(text, output)
            except OutputValidationError as exc:
                run.attempts.append(Attempt(model=one.model, error=str(exc), kind="invalid", seconds=seconds,
                                            input_tokens=tin, output_tokens=tout))
                telemetry.mark_error(one.span, "OutputValidationError", str(exc))
                request[0] = one.request.with_repair(text, repair_instruction(str(exc), output))
                raise _Failed("invalid") from None
        run.attempts.append(Attempt(model=one.model, seconds=seconds, input_tokens=tin, output_tokens=tout))
        return LLMResult(text=text, output=value, model=one.model, fell_back=one.position > 0,
                         attempts=run.attempts)

    def _exhausted(self, run: _Run) -> LLMResult:
        if self.fallback_answer is not None:
            return LLMResult(text=self.fallback_answer, model="fallback", fell_back=True, attempts=run.attempts)
        tried = ", ".join(dict.fromkeys(a.model for a in run.attempts))
        last = run.attempts[-1].error if run.attempts else "no attempt"
        raise LLMCallError(f"every model failed ({tried}; {len(run.attempts)} attempts); last: {last}", run.attempts)

    def _finish(self, result: LLMResult, run: _Run, task: str | None, run_span: Any) -> LLMResult:
        usage = run.usage.model_copy(update={"seconds": time.perf_counter() - run.started})
        result = result.model_copy(update={"task": task, "request_id": secrets.token_hex(8), "usage": usage})
        if run_span.is_recording():
            telemetry.set_attributes(run_span, _run_attributes(result, run.request))
        if self.monitor is not None:
            self.monitor.record(result, assembly=run.request.assembly)
        return result

    def _failed(self, exc: LLMCallError, run: _Run, task: str | None, run_span: Any) -> LLMCallError:
        """The error, with what the run spent (``usage``, ``seconds``, ``task``), recorded and traced."""
        exc.usage = run.usage.model_copy(update={"seconds": time.perf_counter() - run.started})
        exc.seconds, exc.task, exc.request_id = exc.usage.seconds, task, secrets.token_hex(8)
        telemetry.mark_error(run_span, "LLMCallError", str(exc))
        telemetry.set_attributes(run_span, {"contextkit.attempts": len(exc.attempts)})
        if self.monitor is not None:
            self.monitor.record(exc, assembly=run.request.assembly)
        return exc


def _response_model(response: Any, default: str) -> str:
    raw = getattr(response, "raw", None)
    name = raw.get("model") if isinstance(raw, dict) else getattr(raw, "model", None)
    return name if isinstance(name, str) and name else default


def _run_attributes(result: LLMResult, request: Request) -> dict[str, Any]:
    """The run span's figures: the GenAI totals and, for an assembled prompt, its budget and fill."""
    attributes: dict[str, Any] = {
        "gen_ai.response.model": result.model, "gen_ai.usage.input_tokens": result.usage.input_tokens,
        "gen_ai.usage.output_tokens": result.usage.output_tokens, "contextkit.attempts": len(result.attempts),
        "contextkit.fell_back": result.fell_back, "contextkit.cost_usd": result.usage.cost_usd,
    }
    report = request.assembly
    if report is not None:
        attributes.update({"contextkit.budget": getattr(report, "budget", None),
                           "contextkit.fill": getattr(report, "budget_used_percent", None),
                           "contextkit.dropped": len(report.dropped()) if hasattr(report, "dropped") else None})
    return attributes
