"""LLM calls that survive failures, and usage you can watch (over any LlamaIndex LLM).

* :class:`ReliableLLM`: retries with backoff and jitter, timeouts, JSON output validated by a
  pydantic model (and repaired by the model), fallbacks, tokens and cost per call;
* :class:`ModelRouter`: routes by task type, and around a route whose failure rate or
  latency passes its limit;
* :class:`UsageMonitor`: a record per request, alert rules fired once per breach, a
  JSON-lines log (``contextkit usage LOG`` sums it up);
* :mod:`contextkit.llm.telemetry`: OpenTelemetry spans and GenAI metrics, when installed.

Names load on first use, so ``import contextkit.llm.telemetry`` (done by ingestion, retrieval
and assembly) imports nothing else of this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.llm._summary import ModelUsage, UsageSummary
    from contextkit.llm._types import Attempt, LLMResult, Usage
    from contextkit.llm.monitor import (
        Alert,
        AlertRule,
        UsageMonitor,
        UsageRecord,
        read_usage_log,
    )
    from contextkit.llm.reliable import ReliableLLM
    from contextkit.llm.router import ModelRouter, RouteLimits

__all__ = [
    "Alert", "AlertRule", "Attempt", "LLMResult", "ModelRouter", "ModelUsage", "ReliableLLM", "RouteLimits",
    "Usage", "UsageMonitor", "UsageRecord", "UsageSummary", "read_usage_log",
]

_WHERE = {
    "Alert": "monitor", "AlertRule": "monitor", "UsageMonitor": "monitor", "UsageRecord": "monitor",
    "read_usage_log": "monitor", "Attempt": "_types", "LLMResult": "_types", "Usage": "_types",
    "ModelUsage": "_summary", "UsageSummary": "_summary", "ReliableLLM": "reliable", "ModelRouter": "router",
    "RouteLimits": "router",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"contextkit.llm.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'contextkit.llm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
