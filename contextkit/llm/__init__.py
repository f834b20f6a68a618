"""LLM calls that survive failures, and usage you can watch (over any LlamaIndex LLM).

* :class:`ReliableLLM`: retries with backoff and jitter, timeouts, JSON output validated by a
  pydantic model (and repaired by the model), fallbacks, tokens and cost per call;
* :class:`ModelRouter`: routes by task type, and around a route whose failure rate or
  latency passes its limit;
* :class:`UsageMonitor`: a record per request, alert rules fired once per breach, a
  JSON-lines log (``contextkit usage LOG`` sums it up);
* :mod:`contextkit.llm.telemetry`: OpenTelemetry spans and GenAI metrics, when installed (its code
  lives in :mod:`contextkit.core.telemetry`, which every stage uses).

Names load on first use (:func:`contextkit.core.lazy.lazy_exports`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextkit.core.lazy import lazy_exports

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

_WHERE = {
    "Alert": "monitor", "AlertRule": "monitor", "UsageMonitor": "monitor", "UsageRecord": "monitor",
    "read_usage_log": "monitor", "Attempt": "_types", "LLMResult": "_types", "Usage": "_types",
    "ModelUsage": "_summary", "UsageSummary": "_summary", "ReliableLLM": "reliable", "ModelRouter": "router",
    "RouteLimits": "router",
}
__all__ = [
    "Alert", "AlertRule", "Attempt", "LLMResult", "ModelRouter", "ModelUsage", "ReliableLLM", "RouteLimits",
    "Usage", "UsageMonitor", "UsageRecord", "UsageSummary", "read_usage_log",
]

__getattr__, __dir__ = lazy_exports("contextkit.llm", _WHERE, globals())
