"""The usage summary: totals, latency percentiles and one row per model, from records.

One :class:`Tally` serves both the live monitor and a log read back from disk, so
``monitor.summary()`` and ``contextkit usage LOG`` cannot disagree. Latencies are kept in a
bounded deque (the newest ``keep`` requests), so a long-running process does not grow
without end; counts, tokens and cost are running totals over every request.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

__all__ = ["ModelUsage", "Tally", "UsageSummary", "format_cost", "percentile"]


def percentile(values: Sequence[float], q: float, *, presorted: bool = False) -> float:
    """The nearest-rank ``q``-th percentile (0 for no values): a value that was observed."""
    if not values:
        return 0.0
    ordered = values if presorted else sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def format_cost(usd: float | None) -> str:
    """Dollars for a table: ``?`` when unknown, 4 decimals, or 3 significant digits below a cent."""
    if usd is None:
        return "?"
    return f"{usd:.4f}" if usd >= 0.01 or usd == 0 else f"{usd:.3g}"


class ModelUsage(BaseModel):
    """One model's share: requests, successes, tokens, cost and latency."""

    model: str
    requests: int = 0
    successes: int = 0
    success_rate: float = 0.0
    fell_back: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_seconds: dict[str, float] = Field(default_factory=dict, description="p50, p95, p99")


class UsageSummary(ModelUsage):
    """All requests together (``model`` is ``"all"``), the per-model rows and the alerts fired."""

    model: str = "all"
    failures: int = 0
    first: float | None = Field(default=None, description="Unix time of the first request")
    last: float | None = None
    models: list[ModelUsage] = Field(default_factory=list)
    alerts: list[Any] = Field(default_factory=list)

    def to_text(self) -> str:
        """A plain-text table (the CLI prints a rich one): the totals, a row per model, the alerts."""
        head = f"{'model':<24}{'requests':>9}{'ok %':>7}{'in tok':>10}{'out tok':>9}{'cost $':>10}" \
               f"{'p50 s':>8}{'p95 s':>8}{'p99 s':>8}"
        lines = [head]
        for row in [*self.models, self]:
            cost = format_cost(row.cost_usd)
            lat = row.latency_seconds
            lines.append(f"{row.model[:23]:<24}{row.requests:>9}{100 * row.success_rate:>7.1f}{row.input_tokens:>10}"
                         f"{row.output_tokens:>9}{cost:>10}{lat.get('p50', 0):>8.3f}{lat.get('p95', 0):>8.3f}"
                         f"{lat.get('p99', 0):>8.3f}")
        lines += [f"alert: {a.message}" for a in self.alerts]
        return "\n".join(lines)


class _Counts:
    def __init__(self, keep: int) -> None:
        self.requests = self.successes = self.fell_back = self.input_tokens = self.output_tokens = 0
        self.cost: float | None = None
        self.latencies: deque[float] = deque(maxlen=keep)

    def add(self, record: Any) -> None:
        self.requests += 1
        self.successes += bool(record.ok)
        self.fell_back += bool(record.fell_back)
        self.input_tokens += record.input_tokens
        self.output_tokens += record.output_tokens
        if record.cost_usd is not None:
            self.cost = (self.cost or 0.0) + record.cost_usd
        self.latencies.append(record.seconds)

    def fields(self) -> dict[str, Any]:
        lat = list(self.latencies)
        return {"requests": self.requests, "successes": self.successes,
                "success_rate": self.successes / self.requests if self.requests else 0.0,
                "fell_back": self.fell_back, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": self.cost, "latency_seconds": {f"p{q}": percentile(lat, q) for q in (50, 95, 99)}}


class Tally:
    """Running totals of usage records, overall and per model."""

    def __init__(self, keep: int = 100_000) -> None:
        self.keep = keep
        self.total = _Counts(keep)
        self.per_model: dict[str, _Counts] = {}
        self.first: float | None = None
        self.last: float | None = None

    def add(self, record: Any) -> None:
        self.total.add(record)
        counts = self.per_model.get(record.model)
        if counts is None:
            counts = self.per_model[record.model] = _Counts(self.keep)
        counts.add(record)
        self.first = record.at if self.first is None else min(self.first, record.at)
        self.last = record.at if self.last is None else max(self.last, record.at)

    def summary(self, alerts: Sequence[Any] = ()) -> UsageSummary:
        rows = [ModelUsage(model=name, **counts.fields()) for name, counts in sorted(self.per_model.items())]
        fields = self.total.fields()
        return UsageSummary(**fields, failures=fields["requests"] - fields["successes"], first=self.first,
                            last=self.last, models=rows, alerts=list(alerts))
