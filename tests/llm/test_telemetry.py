"""OpenTelemetry: the SDK's in-memory exporter and reader receive the GenAI spans and metrics."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from contextkit.errors import LLMCallError
from contextkit.llm import ReliableLLM, telemetry
from tests.llm._fakes import FlakyLLM, Sleeps

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode


class Answer(BaseModel):
    n: int


@pytest.fixture()
def otel():
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = sdk_trace.TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_providers(tracer_provider, MeterProvider(metric_readers=[reader]))
    yield exporter, reader
    telemetry.set_providers(None, None)


def spans_by_name(exporter):
    return {s.name: s for s in exporter.get_finished_spans()}


def points(reader, name):
    data = reader.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += [(dict(p.attributes), p.sum, p.count) for p in metric.data.data_points]
    return found


class TestSpans:
    def test_a_call_has_the_gen_ai_attributes(self, otel):
        exporter, _ = otel
        llm = FlakyLLM(name="gpt-4o-mini", usage={"prompt_tokens": 120, "completion_tokens": 7},
                       response_model="gpt-4o-mini-2024-07-18")
        ReliableLLM(llm).run("q", task="qa")
        spans = spans_by_name(exporter)
        call = spans["text_completion gpt-4o-mini"]
        assert call.attributes["gen_ai.operation.name"] == "text_completion"
        assert call.attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert call.attributes["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
        assert call.attributes["gen_ai.usage.input_tokens"] == 120
        assert call.attributes["gen_ai.usage.output_tokens"] == 7
        run = spans["contextkit.llm.run"]
        assert call.parent.span_id == run.context.span_id
        assert run.attributes["contextkit.task"] == "qa" and run.attributes["contextkit.attempts"] == 1
        assert run.attributes["contextkit.cost_usd"] == pytest.approx(120 * 0.15 / 1e6)

    def test_a_chat_call_is_named_chat(self, otel):
        exporter, _ = otel
        ReliableLLM(FlakyLLM(name="m", chat_model=True)).run([{"role": "user", "content": "hi"}])
        assert "chat m" in spans_by_name(exporter)

    def test_each_attempt_is_a_span_and_failures_are_marked(self, otel):
        exporter, _ = otel
        llm = FlakyLLM(name="m", script=[ConnectionError("reset"), "not json", '{"n": 1}'])
        ReliableLLM(llm, sleep=Sleeps(), backoff=0.001).run("q", output=Answer)
        calls = [s for s in exporter.get_finished_spans() if s.name == "text_completion m"]
        assert len(calls) == 3
        assert calls[0].attributes["error.type"] == "ConnectionError" and calls[0].status.status_code == StatusCode.ERROR
        assert calls[1].attributes["error.type"] == "OutputValidationError"
        assert "error.type" not in calls[2].attributes and calls[2].status.status_code != StatusCode.ERROR

    def test_a_failed_run_is_an_error_span(self, otel):
        exporter, _ = otel
        with pytest.raises(LLMCallError):
            ReliableLLM(FlakyLLM(script=[RuntimeError("x")]), retries=0).run("q")
        run = spans_by_name(exporter)["contextkit.llm.run"]
        assert run.status.status_code == StatusCode.ERROR and run.attributes["error.type"] == "LLMCallError"

    def test_an_assembled_prompt_carries_budget_fill_and_dropped(self, otel):
        from contextkit.assembly import EvidenceItem, Section, assemble

        exporter, _ = otel
        result = assemble([Section(name="evidence", role="evidence",
                                   items=[EvidenceItem(id=f"d{i}", text=f"fact {i} " * 50) for i in range(20)])], 300)
        ReliableLLM(FlakyLLM()).run(result)
        run = spans_by_name(exporter)["contextkit.llm.run"]
        assert run.attributes["contextkit.budget"] == 300
        assert run.attributes["contextkit.fill"] == result.report.budget_used_percent
        assert run.attributes["contextkit.dropped"] == len(result.report.dropped()) > 0

    def test_the_helper_takes_dotted_names_and_drops_none(self, otel):
        exporter, _ = otel
        with telemetry.span("contextkit.retrieve", contextkit__k=5, contextkit__mode="hybrid", skipped=None) as s:
            telemetry.set_attributes(s, {"contextkit.hits": 3, "gone": None})
        (span,) = exporter.get_finished_spans()
        assert dict(span.attributes) == {"contextkit.k": 5, "contextkit.mode": "hybrid", "contextkit.hits": 3}

    def test_an_exception_through_a_span_is_recorded(self, otel):
        exporter, _ = otel
        with pytest.raises(ValueError), telemetry.span("contextkit.ingest"):
            raise ValueError("bad")
        (span,) = exporter.get_finished_spans()
        assert span.status.status_code == StatusCode.ERROR and span.events[0].name == "exception"


class TestMetrics:
    def test_token_usage_and_duration(self, otel):
        _, reader = otel
        llm = FlakyLLM(name="gpt-4o", usage={"input_tokens": 40, "output_tokens": 4})
        wrapped = ReliableLLM(llm)
        wrapped.run("a")
        wrapped.run("b")
        tokens = points(reader, "gen_ai.client.token.usage")
        by_type = {attrs["gen_ai.token.type"]: (total, count) for attrs, total, count in tokens}
        assert by_type == {"input": (80, 2), "output": (8, 2)}
        assert all(attrs["gen_ai.request.model"] == "gpt-4o" and attrs["gen_ai.operation.name"] == "text_completion"
                   for attrs, _, _ in tokens)
        ((attrs, _, count),) = points(reader, "gen_ai.client.operation.duration")
        assert count == 2 and "error.type" not in attrs

    def test_a_failed_call_has_a_duration_with_its_error_type(self, otel):
        _, reader = otel
        ReliableLLM(FlakyLLM(script=[TimeoutError("slow")]), sleep=Sleeps(), backoff=0.001).run("q")
        durations = {attrs.get("error.type"): count for attrs, _, count in points(reader, "gen_ai.client.operation.duration")}
        assert durations == {"TimeoutError": 1, None: 1}


class TestWithoutOpenTelemetry:
    def test_everything_is_a_no_op(self, otel, monkeypatch):
        exporter, reader = otel
        monkeypatch.setitem(telemetry._state, "available", False)
        with telemetry.span("x", a=1) as s:
            s.set_attribute("b", 2)
            telemetry.mark_error(s, "E")
        result = ReliableLLM(FlakyLLM()).run("q")
        assert result.text == "fine" and exporter.get_finished_spans() == ()
        assert points(reader, "gen_ai.client.token.usage") == []

    def test_the_helper_is_a_leaf(self):
        import ast
        from pathlib import Path

        tree = ast.parse(Path(telemetry.__file__).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in imported if m and m.startswith("contextkit")}


def _ingest_figures(report):
    return {"contextkit.files": report["files"], "contextkit.broken": report["missing"]}


@telemetry.traced("contextkit.ingest", _ingest_figures)
def fake_stage(files: int, *, fail: bool = False) -> dict:
    """A stage's docstring."""
    if fail:
        raise RuntimeError("stage failed")
    return {"files": files}


class TestTraced:
    def test_the_stage_runs_in_a_span_with_its_figures(self, otel):
        exporter, _ = otel
        assert fake_stage(3) == {"files": 3}
        (span,) = exporter.get_finished_spans()
        # "contextkit.broken" raised KeyError in the figures: left out, the call unharmed
        assert span.name == "contextkit.ingest" and dict(span.attributes) == {}

    def test_figures_become_attributes(self, otel):
        exporter, _ = otel

        @telemetry.traced("contextkit.assemble", lambda r: {"contextkit.budget": 100, "contextkit.fill": r})
        def stage() -> float:
            return 42.5

        stage()
        (span,) = exporter.get_finished_spans()
        assert dict(span.attributes) == {"contextkit.budget": 100, "contextkit.fill": 42.5}

    def test_an_error_is_recorded_and_raised(self, otel):
        exporter, _ = otel
        with pytest.raises(RuntimeError, match="stage failed"):
            fake_stage(1, fail=True)
        (span,) = exporter.get_finished_spans()
        assert span.status.status_code == StatusCode.ERROR

    def test_name_docstring_and_signature_are_kept(self):
        import inspect

        assert fake_stage.__name__ == "fake_stage" and fake_stage.__doc__ == "A stage's docstring."
        assert list(inspect.signature(fake_stage).parameters) == ["files", "fail"]

    def test_without_opentelemetry_nothing_is_exported(self, otel, monkeypatch):
        exporter, _ = otel
        monkeypatch.setitem(telemetry._state, "available", False)
        assert fake_stage(2) == {"files": 2} and exporter.get_finished_spans() == ()


class TestStageFigures:
    """The figures the lead's one-line ``@traced`` puts on ingest, retrieve and assemble."""

    def test_assemble_traced_has_budget_fill_and_dropped(self, otel):
        from contextkit.assembly import EvidenceItem, Section, assemble

        exporter, _ = otel
        result = assemble([Section(name="evidence", role="evidence",
                                   items=[EvidenceItem(id=f"d{i}", text=f"fact {i} " * 50) for i in range(20)])],
                          "gpt-4o")
        (span,) = [s for s in exporter.get_finished_spans() if s.name == "contextkit.assemble"]
        report = result.report
        assert dict(span.attributes) == {"contextkit.budget": report.budget, "contextkit.tokens": report.tokens,
                                         "contextkit.fill": report.budget_used_percent,
                                         "contextkit.dropped": len(report.dropped()), "gen_ai.request.model": "gpt-4o"}

    def test_ingest_figures(self):
        from contextkit.ingestion import IngestReport

        report = IngestReport(index="ix", files_seen=4, files_new=3, chunks_added=12, tokens=900)
        figures = telemetry.ingest_figures(report)
        assert figures["contextkit.files_new"] == 3 and figures["contextkit.chunks_added"] == 12
        assert figures["contextkit.failures"] == 0

    def test_retrieval_figures(self):
        from contextkit.records import Chunk, ScoredChunk

        chunk = Chunk(id="d#0", doc_id="d", ordinal=0, text="t", start=0, end=1, token_count=1)
        hits = [ScoredChunk(chunk, 0.9), ScoredChunk(chunk, 0.5)]
        assert telemetry.retrieval_figures(hits) == {"contextkit.hits": 2, "contextkit.top_score": 0.9}
        assert telemetry.retrieval_figures([]) == {"contextkit.hits": 0, "contextkit.top_score": None}


class TestStagesAreTraced:
    """ingest, retrieve and assemble themselves run in spans (the one-line ``@traced`` on each)."""

    def test_ingest_retrieve_and_assemble_spans(self, otel, tmp_path, embedder):
        from contextkit.assembly.context_assembler import ContextAssembler
        from contextkit.index import Index
        from contextkit.ingestion import ingest
        from contextkit.retrievers.factory import make_retriever

        exporter, _ = otel
        folder = tmp_path / "docs"
        folder.mkdir()
        (folder / "a.txt").write_text("FAISS searches dense vectors quickly.\n", encoding="utf-8")
        ingest([folder], tmp_path / "ix", embedder=embedder)
        with Index.open(tmp_path / "ix", read_only=True) as index:
            retriever = make_retriever("hybrid", index, embedder)
            ContextAssembler("gpt-4o", retriever=retriever).assemble("What does FAISS search?")
        spans = spans_by_name(exporter)
        assert spans["contextkit.ingest"].attributes["contextkit.chunks_added"] == 1
        assert spans["contextkit.retrieve"].attributes["contextkit.hits"] >= 1
        assert spans["contextkit.assemble"].attributes["gen_ai.request.model"] == "gpt-4o"
