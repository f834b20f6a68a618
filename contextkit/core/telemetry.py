"""OpenTelemetry spans and metrics, when ``opentelemetry-api`` is installed; nothing otherwise.

Why a helper of our own: ingestion, retrieval, assembly and every LLM call open a span, and
none of them should import OpenTelemetry (a heavy, optional import) or care whether it is
there. :func:`span` is a context manager that is a no-op without the library, so a call
site is one ``with`` line. The attribute names of LLM calls follow the OpenTelemetry GenAI
semantic conventions (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` ...), so any GenAI-aware backend reads them; contextkit's own
figures (budget, fill, dropped items, attempts) carry a ``contextkit.`` prefix.

A leaf: imports nothing from contextkit, so any module may import it without a cycle.
Spans and metrics go to the global tracer and meter providers, or to those given to
:func:`set_providers` (tests, or an application that keeps contextkit's telemetry apart).
An error through a span is recorded as OpenTelemetry records it (an ``exception`` event with its
message and traceback, an error status); with a mask given to :func:`set_masker` (the command
line's, in a run with redaction on), the message and the traceback are masked first: an error that
quotes a path or a value the user gave must not carry it to a trace backend.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "assembly_figures", "available", "ingest_figures", "mark_error", "record_llm_metrics", "retrieval_figures",
    "set_attributes", "set_masker", "set_providers", "span", "traced",
]

_SCOPE = "contextkit"
_state: dict[str, Any] = {"available": None, "tracer_provider": None, "meter_provider": None,
                          "tracer": None, "instruments": None, "mask": None}


class _NoSpan:
    """What :func:`span` yields without OpenTelemetry: takes attributes and drops them."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        pass

    def is_recording(self) -> bool:
        return False


_NO_SPAN = _NoSpan()


def available() -> bool:
    """Whether ``opentelemetry-api`` can be imported (looked up once, without importing it)."""
    if _state["available"] is None:
        try:
            _state["available"] = importlib.util.find_spec("opentelemetry.trace") is not None
        except (ImportError, ValueError):
            _state["available"] = False
    return bool(_state["available"])


def set_providers(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Send contextkit's spans and metrics to these providers (None: back to the global ones)."""
    _state.update(tracer_provider=tracer_provider, meter_provider=meter_provider, tracer=None, instruments=None)


def set_masker(mask: Callable[[str], str] | None) -> None:
    """Mask what spans record of an error (message, traceback, status) with ``mask`` (None: as it is)."""
    _state["mask"] = mask


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes str, bool, int, float (and sequences of them), never None."""
    return {k: v for k, v in attributes.items() if isinstance(v, (str, bool, int, float, tuple, list))}


def _tracer() -> Any:
    if _state["tracer"] is None:
        from opentelemetry import trace

        provider = _state["tracer_provider"]
        _state["tracer"] = (provider.get_tracer(_SCOPE) if provider is not None else trace.get_tracer(_SCOPE))
    return _state["tracer"]


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named ``name`` around the block (current span as parent), or a no-op without OpenTelemetry.

    Keyword names become attribute keys with ``__`` read as ``.`` (``gen_ai__request__model=``
    is ``gen_ai.request.model``); None values are left out. The span records an exception
    that leaves the block and ends with an error status, as OpenTelemetry's own does.
    """
    if not available():
        yield _NO_SPAN
        return
    attrs = _clean({k.replace("__", "."): v for k, v in attributes.items()})
    mask = _state["mask"]
    with _tracer().start_as_current_span(name, attributes=attrs, record_exception=mask is None,
                                         set_status_on_exception=mask is None) as current:
        try:
            yield current
        except Exception as exc:
            if mask is not None:
                _record_masked(current, exc, mask)
            raise


def _record_masked(current: Any, exc: Exception, mask: Callable[[str], str]) -> None:
    """The ``exception`` event and error status OpenTelemetry records, with the message and traceback masked."""
    import traceback

    from opentelemetry.trace import Status, StatusCode

    message = mask(str(exc))
    current.add_event("exception", {"exception.type": type(exc).__name__, "exception.message": message,
                                    "exception.stacktrace": mask("".join(traceback.format_exception(exc))),
                                    "exception.escaped": "False"})
    current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"))


def traced(name: str, figures: Callable[[Any], dict[str, Any]] | None = None) -> Callable[[Any], Any]:
    """A decorator: the function runs in a span ``name``; ``figures(result)`` gives the span's attributes.

    One line at a stage's public function (``@traced("contextkit.assemble", _figures)``), so the
    stage itself stays free of tracing code. Without OpenTelemetry the function is called
    directly. A figure that cannot be computed is left out: tracing never fails the call.
    ``functools.wraps`` keeps the name, docstring and signature.
    """
    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            if not available():
                return fn(*args, **kwargs)
            with span(name) as current:
                result = fn(*args, **kwargs)
                if figures is not None:
                    try:
                        set_attributes(current, figures(result))
                    except Exception:
                        logging.getLogger(__name__).debug("span %s: figures not recorded", name, exc_info=True)
                return result

        return inner

    return decorate


def set_attributes(current: Any, attributes: dict[str, Any]) -> None:
    """Set the attributes that are not None on a span from :func:`span` (a no-op span takes them too)."""
    if current is not _NO_SPAN:
        current.set_attributes(_clean(attributes))


def mark_error(current: Any, error_type: str, message: str = "") -> None:
    """Give a span ``error.type`` and an error status without raising through it (a handled failure)."""
    if not current.is_recording():
        return
    from opentelemetry.trace import Status, StatusCode

    current.set_attribute("error.type", error_type)
    mask = _state["mask"]
    current.set_status(Status(StatusCode.ERROR, (mask(message) if mask is not None else message)[:200]))


def _instruments() -> tuple[Any, Any]:
    if _state["instruments"] is None:
        from opentelemetry import metrics

        provider = _state["meter_provider"]
        meter = provider.get_meter(_SCOPE) if provider is not None else metrics.get_meter(_SCOPE)
        tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                        description="Measures number of input and output tokens used")
        duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s",
                                          description="GenAI operation duration")
        _state["instruments"] = (tokens, duration)
    return _state["instruments"]


def record_llm_metrics(*, operation: str, request_model: str, response_model: str | None, input_tokens: int,
                       output_tokens: int, seconds: float, error_type: str | None = None) -> None:
    """One LLM call on the GenAI metrics: ``gen_ai.client.token.usage`` (input and output) and the duration."""
    if not available():
        return
    tokens, duration = _instruments()
    base = _clean({"gen_ai.operation.name": operation, "gen_ai.request.model": request_model,
                   "gen_ai.response.model": response_model, "error.type": error_type})
    duration.record(seconds, base)
    if error_type is None:
        tokens.record(input_tokens, {**base, "gen_ai.token.type": "input"})
        tokens.record(output_tokens, {**base, "gen_ai.token.type": "output"})


# --------------------------------------------------------------------------- the stages' figures
# Read by attribute (no import of the stages' records, so this module stays a leaf).


def ingest_figures(report: Any) -> dict[str, Any]:
    """An ``IngestReport`` on the ``contextkit.ingest`` span: files, chunks, tokens, failures."""
    return {"contextkit.files_seen": report.files_seen, "contextkit.files_new": report.files_new,
            "contextkit.files_changed": report.files_changed, "contextkit.chunks_added": report.chunks_added,
            "contextkit.tokens": report.tokens, "contextkit.failures": len(report.failures)}


def retrieval_figures(hits: Any) -> dict[str, Any]:
    """The hits of a retriever on the ``contextkit.retrieve`` span: how many, the best score."""
    hits = list(hits)
    return {"contextkit.hits": len(hits), "contextkit.top_score": float(hits[0].score) if hits else None}


def assembly_figures(result: Any) -> dict[str, Any]:
    """An ``AssemblyResult`` on the ``contextkit.assemble`` span: budget, tokens, fill, dropped items."""
    report = result.report
    return {"contextkit.budget": report.budget, "contextkit.tokens": report.tokens,
            "contextkit.fill": report.budget_used_percent, "contextkit.dropped": len(report.dropped()),
            "gen_ai.request.model": report.model}
