"""What ``ReliableLLM`` and ``UsageMonitor`` add to one LLM call, against a bare ``llm.complete``.

The LLM is a LlamaIndex ``CustomLLM`` that answers at once (no network, no model), so the
figures are contextkit's own cost per call: building the request, tenacity's retry loop,
token counting, the result record, the monitor's record and rules, the JSON-lines log, and
the OpenTelemetry spans and metrics (SDK with an in-memory exporter, when installed).
Goal (issue 21): under 1 ms per call.

    python bench/bench_llm_overhead.py [--calls 2000] [--repeats 5] [--json FILE]

Each case runs ``--calls`` calls in each of ``--repeats`` rounds, the cases interleaved; the
best round is printed in microseconds per call, with the overhead over the bare call and the
ratio to it. The OpenTelemetry case runs last (once providers are set they stay set), scaled
by the bare call measured again beside it. "tokens counted" is the one case whose cost grows
with the prompt: the LLM reports no usage, so the prompt is tokenised (an assembled prompt
reuses the assembly's count instead).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from llama_index.core.llms import (
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import BaseModel

from contextkit.llm import ReliableLLM, UsageMonitor, telemetry
from contextkit.tokenizers import get_tokenizer

SDK_ALONE = "OpenTelemetry SDK alone"
RECORD_ALONE = "UsageMonitor.record alone"
PROMPT = "Answer from the documents below.\n\n" + "A sentence of retrieved context about Lisbon. " * 40
ANSWER = '{"city": "Lisbon", "population": 545000}'


class InstantLLM(CustomLLM):
    """Answers at once; ``reported`` puts the provider's token counts in ``raw`` as OpenAI's client does."""

    reported: bool = True

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="gpt-4o-mini")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raw = {"usage": {"prompt_tokens": 400, "completion_tokens": 12}} if self.reported else None
        return CompletionResponse(text=ANSWER, raw=raw)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt)


class Answer(BaseModel):
    city: str
    population: int


def measure(cases: dict[str, Any], calls: int, repeats: int) -> dict[str, float]:
    """Microseconds per call of each case: the best of ``repeats`` rounds, the cases interleaved.

    Interleaved, so that a busy neighbour slows every case alike; the best round, because
    noise only ever adds time.
    """
    for fn in cases.values():  # warm: tokenizer loaded, caches filled
        for _ in range(min(200, calls)):
            fn()
    best = {name: float("inf") for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - started) / calls * 1e6)
    return best


def otel_sdk() -> bool:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError:
        return False
    tracer = TracerProvider()
    exporter = InMemorySpanExporter()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_providers(tracer, MeterProvider(metric_readers=[InMemoryMetricReader()]))
    otel_sdk.exporter = exporter  # cleared between repeats so memory stays flat
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    reported, counted = InstantLLM(), InstantLLM(reported=False)
    folder = Path(tempfile.mkdtemp(prefix="ck-bench-llm-"))
    available = telemetry.available()
    telemetry._state["available"] = False  # the first cases without OpenTelemetry
    plain, with_counting, validated = ReliableLLM(reported), ReliableLLM(counted), ReliableLLM(reported)
    monitored = ReliableLLM(reported, monitor=UsageMonitor())
    logged = ReliableLLM(reported, monitor=UsageMonitor(log=folder / "usage.jsonl"))
    alone, one_result = UsageMonitor(), plain.run(PROMPT)
    cases: dict[str, Any] = {
        "bare llm.complete": lambda: reported.complete(PROMPT),
        "ReliableLLM.run": lambda: plain.run(PROMPT),
        "ReliableLLM.run, tokens counted (o200k)": lambda: with_counting.run(PROMPT),
        "ReliableLLM.run, output= validated": lambda: validated.run(PROMPT, output=Answer),
        "ReliableLLM.run + UsageMonitor": lambda: monitored.run(PROMPT),
        "ReliableLLM.run + UsageMonitor(log=)": lambda: logged.run(PROMPT),
        RECORD_ALONE: lambda: alone.record(one_result),
    }
    figures = measure(cases, args.calls, args.repeats)
    telemetry._state["available"] = available
    if available and otel_sdk():
        traced_llm = ReliableLLM(reported, monitor=UsageMonitor())

        calls = [0]

        def trim() -> None:  # the exporter keeps every span: emptied now and then, cheaply
            calls[0] += 1
            if calls[0] % 1000 == 0:
                otel_sdk.exporter.clear()

        def traced() -> None:
            traced_llm.run(PROMPT)
            trim()

        def sdk_alone() -> None:  # what the SDK itself costs for the same telemetry, without contextkit
            with telemetry.span("contextkit.llm.run"), telemetry.span("text_completion gpt-4o-mini",
                                                                      gen_ai__operation__name="text_completion"):
                telemetry.record_llm_metrics(operation="text_completion", request_model="gpt-4o-mini",
                                             response_model="gpt-4o-mini", input_tokens=400, output_tokens=12,
                                             seconds=0.001)
            trim()

        traced_cases = {"bare llm.complete (again)": cases["bare llm.complete"],
                        "ReliableLLM.run + UsageMonitor + OpenTelemetry SDK": traced,
                        SDK_ALONE: sdk_alone}
        again = measure(traced_cases, args.calls, args.repeats)
        scale = figures["bare llm.complete"] / again.pop("bare llm.complete (again)")
        figures.update({name: us * scale for name, us in again.items()})

    bare = figures["bare llm.complete"]
    sdk, record = figures.pop(SDK_ALONE, None), figures.pop(RECORD_ALONE)
    tokens = get_tokenizer("o200k_base").count(PROMPT)
    print(f"{args.calls} calls x {args.repeats} rounds, best round per case; prompt {len(PROMPT)} characters, "
          f"{tokens} o200k tokens")
    print(f"{'case':<52}{'us/call':>10}{'overhead us':>13}{'ratio':>8}")
    for name, us in figures.items():
        print(f"{name:<52}{us:>10.1f}{us - bare:>13.1f}{us / bare:>8.2f}")
    worst = max(us - bare for name, us in figures.items() if "counted" not in name)
    print(f"largest overhead, usage reported by the provider: {worst:.1f} us per call (goal: under 1000 us)")
    print(f"UsageMonitor.record alone (4 default rules, no log): {record:.1f} us")
    if sdk is not None:
        print(f"of which the OpenTelemetry SDK itself (2 spans, 3 histogram points, no contextkit): {sdk:.1f} us")
    counting = figures["ReliableLLM.run, tokens counted (o200k)"] - figures["ReliableLLM.run"]
    print(f"counting the tokens when the provider reports none: {counting:.1f} us for {tokens} tokens")
    if args.json:
        args.json.write_text(json.dumps({"calls": args.calls, "repeats": args.repeats, "us_per_call": figures},
                                        indent=2))


if __name__ == "__main__":
    main()
