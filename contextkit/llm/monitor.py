"""``UsageMonitor``: every request's tokens, cost, latency and outcome; alerts; a JSON-lines log.

Why in contextkit: the assembly report knows what the prompt cost to build and the call
knows what it cost to answer; only together do they say what a request cost. A record
joins them (the call's tokens and cost, the assembly's budget, fill and dropped items).
Rules watch the figures the long-context guidance names (tokens per request, cost per
hour, failure rate, tail latency) and fire **once per breach**: when a figure goes over its
limit, and again only after it has come back under. The log is JSON lines, readable
without our code, one ``{"kind": "request"}`` or ``{"kind": "alert"}`` object a line
(``"v"``: the format version); :func:`read_usage_log` rebuilds the summary from it and
``contextkit usage LOG`` prints it.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from contextkit.core.errors import InvalidArgumentError, UsageLogError
from contextkit.llm._summary import Tally, UsageSummary, percentile
from contextkit.llm._types import LLMResult, Usage

__all__ = ["Alert", "AlertRule", "UsageMonitor", "UsageRecord", "read_usage_log"]

logger = logging.getLogger(__name__)

LOG_VERSION = 1
Metric = Literal["tokens_per_request", "cost_per_request", "tokens_per_hour", "cost_per_hour", "failure_rate",
                 "p95_latency", "p99_latency"]
_WINDOWED = {"failure_rate": 50, "p95_latency": 100, "p99_latency": 100}
_HOUR = 3600.0


class AlertRule(BaseModel):
    """Fire when ``metric`` goes above ``threshold``.

    Per-request metrics look at the request just recorded; ``*_per_hour`` at the last 3600 s;
    ``failure_rate`` and ``p9x_latency`` (seconds) at the last ``window`` requests (50 and 100
    by default), once ``min_requests`` of them are in (default: the whole window, so that
    two failures out of three do not page anyone).
    """

    metric: Metric
    threshold: float = Field(ge=0)
    window: int | None = Field(default=None, gt=0)
    min_requests: int | None = Field(default=None, gt=0)

    def __init__(self, metric: Metric | None = None, threshold: float | None = None, /, **data: Any) -> None:
        if metric is not None:
            data["metric"] = metric
        if threshold is not None:
            data["threshold"] = threshold
        super().__init__(**data)

    @property
    def size(self) -> int:
        """Requests the rule looks at (1 for per-request metrics, 0 for per-hour ones)."""
        if self.metric in _WINDOWED:
            return self.window or _WINDOWED[self.metric]
        return 1 if self.metric.endswith("_per_request") else 0

    def to_dict(self) -> dict[str, Any]:
        return {"type": "AlertRule", **self.model_dump()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertRule:
        return cls(**{k: v for k, v in data.items() if k != "type"})


class Alert(BaseModel):
    """A rule's breach: the figure, the limit, and what the figure was made of."""

    kind: Literal["alert"] = "alert"
    v: int = LOG_VERSION
    metric: str
    threshold: float
    value: float
    at: float = Field(description="Unix time of the request that broke the limit")
    request_id: str | None = None
    figures: dict[str, Any] = Field(default_factory=dict)
    message: str


class UsageRecord(BaseModel):
    """One request: the call's outcome, tokens, cost and seconds, joined with its assembly's figures."""

    kind: Literal["request"] = "request"
    v: int = LOG_VERSION
    at: float
    request_id: str | None = None
    task: str | None = None
    route: str | None = None
    model: str
    ok: bool
    fell_back: bool = False
    attempts: int = 0
    failed_attempts: int = 0
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = Field(default=None, description="the call's, else the assembly's input estimate")
    seconds: float = 0.0
    assembly: dict[str, Any] | None = Field(default=None, description="budget, tokens, fill, dropped, cost")

    @classmethod
    def of(cls, item: LLMResult | BaseException, assembly: Any = None, *, at: float, route: str | None = None,
           ) -> UsageRecord:
        """The record of a result or of an ``LLMCallError`` (with the assembly report, when there was one)."""
        joined = _assembly_figures(assembly)
        usage: Usage | None
        error: str | None = None
        if isinstance(item, LLMResult):
            usage, attempts = item.usage, item.attempts
            request_id, task, route, model = item.request_id, item.task, route or item.route, item.model
            ok, fell_back = True, item.fell_back
        else:
            usage, attempts = getattr(item, "usage", None), list(getattr(item, "attempts", []))
            request_id, task = getattr(item, "request_id", None), getattr(item, "task", None)
            model = attempts[-1].model if attempts else "unknown"
            ok, fell_back, error = False, False, f"{type(item).__name__}: {item}"[:500]
        cost = usage.cost_usd if usage is not None else None
        if cost is None and joined is not None:
            cost = joined.get("cost_usd")
        return cls(at=at, request_id=request_id, task=task, route=route, model=model, ok=ok, fell_back=fell_back,
                   error=error, attempts=len(attempts), failed_attempts=sum(1 for a in attempts if a.error is not None),
                   input_tokens=usage.input_tokens if usage else 0, output_tokens=usage.output_tokens if usage else 0,
                   cost_usd=cost, seconds=usage.seconds if usage else float(getattr(item, "seconds", 0.0)),
                   assembly=joined)


def _assembly_figures(report: Any) -> dict[str, Any] | None:
    if report is None:
        return None
    dropped = report.dropped() if hasattr(report, "dropped") else []
    return {"model": getattr(report, "model", None), "budget": getattr(report, "budget", None),
            "tokens": getattr(report, "tokens", None), "fill_percent": getattr(report, "budget_used_percent", None),
            "dropped": len(dropped), "cost_usd": getattr(report, "estimated_cost_usd", None)}


DEFAULT_RULES = (AlertRule("tokens_per_request", 200_000), AlertRule("cost_per_hour", 5.0),
                 AlertRule("failure_rate", 0.2, window=50), AlertRule("p99_latency", 3.0))


class UsageMonitor:
    """Records requests, checks the rules after each, appends both to ``log`` and sums them up.

    ``on_alert(alert)`` is called once per breach (default: a warning on this module's logger).
    ``clock`` gives Unix time (tests pass their own to move through an hour). Thread-safe.
    """

    def __init__(self, rules: Sequence[AlertRule] | None = None, *, on_alert: Callable[[Alert], Any] | None = None,
                 log: str | Path | None = None, clock: Callable[[], float] = time.time,
                 keep_latencies: int = 100_000) -> None:
        self.rules = list(DEFAULT_RULES if rules is None else rules)
        if not all(isinstance(rule, AlertRule) for rule in self.rules):
            raise InvalidArgumentError("rules must be AlertRule objects, e.g. AlertRule('failure_rate', 0.2)")
        if log is not None and not Path(log).parent.is_dir():
            raise InvalidArgumentError(f"usage log {log}: folder {Path(log).parent} does not exist")
        self.on_alert = on_alert or _log_alert
        self.log = Path(log) if log is not None else None
        self.clock = clock
        self.tally = Tally(keep_latencies)
        self.alerts: list[Alert] = []
        self._breached = [False] * len(self.rules)
        self._windows = [_Window(rule.size) if rule.metric in _WINDOWED else None for rule in self.rules]
        self._hour = _Hour()
        self._lock = threading.Lock()

    def record(self, item: LLMResult | BaseException, assembly: Any = None, *, route: str | None = None
               ) -> UsageRecord:
        """Record a result (or an ``LLMCallError``) with its assembly report; fire what it breaches."""
        record = UsageRecord.of(item, assembly, at=self.clock(), route=route)
        self.add(record)
        return record

    def add(self, record: UsageRecord) -> list[Alert]:
        """Take a record as it is (one read back from a log, or built by hand); the alerts it fired."""
        with self._lock:
            self.tally.add(record)
            for window in self._windows:
                if window is not None:
                    window.add(record.ok, record.seconds)
            self._hour.add(record)
            fired = self._check(record)
            self.alerts.extend(fired)
            self._write([record, *fired])
        for alert in fired:
            self.on_alert(alert)
        return fired

    def summary(self) -> UsageSummary:
        """Requests, success rate, tokens, cost, latency p50/p95/p99, per-model rows and the alerts."""
        with self._lock:
            return self.tally.summary(self.alerts)

    # ------------------------------------------------------------------ rules

    def _check(self, record: UsageRecord) -> list[Alert]:
        fired = []
        for i, rule in enumerate(self.rules):
            measured = self._measure(rule, record, self._windows[i])
            if measured is None:
                continue
            value, figures = measured
            over = value > rule.threshold
            if over and not self._breached[i]:
                fired.append(Alert(metric=rule.metric, threshold=rule.threshold, value=value, at=record.at,
                                   request_id=record.request_id, figures=figures,
                                   message=f"{rule.metric} {value:.4g} is over its limit {rule.threshold:g} "
                                           f"({', '.join(f'{k}={v}' for k, v in figures.items())})"))
            self._breached[i] = over
        return fired

    def _measure(self, rule: AlertRule, record: UsageRecord, window: _Window | None
                 ) -> tuple[float, dict[str, Any]] | None:
        metric = rule.metric
        if metric == "tokens_per_request":
            return float(record.input_tokens + record.output_tokens), {
                "input_tokens": record.input_tokens, "output_tokens": record.output_tokens, "model": record.model}
        if metric == "cost_per_request":
            return (record.cost_usd or 0.0), {"model": record.model, "tokens": record.input_tokens + record.output_tokens}
        if metric in ("tokens_per_hour", "cost_per_hour"):
            total = float(self._hour.tokens if metric == "tokens_per_hour" else self._hour.cost)
            return total, {"requests_last_hour": len(self._hour.rows)}
        if window is None or len(window.outcomes) < (rule.min_requests or rule.size):
            return None
        if metric == "failure_rate":
            return window.failures / len(window.outcomes), {"failures": window.failures,
                                                            "requests": len(window.outcomes)}
        q = 95 if metric == "p95_latency" else 99
        return percentile(window.ordered, q, presorted=True), {"requests": len(window.outcomes),
                                                               "max_seconds": round(window.ordered[-1], 4)}

    # ------------------------------------------------------------------ log

    def _write(self, rows: Iterable[BaseModel]) -> None:
        if self.log is None:
            return
        text = "".join(row.model_dump_json() + "\n" for row in rows)
        try:
            with open(self.log, "a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:  # a full disk must not fail the request the log describes
            logger.warning("usage log %s: %s; the record is kept in memory only", self.log, exc)


class _Window:
    """The last ``size`` outcomes, with the failure count and the latencies kept sorted (no sort per record)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.outcomes: deque[tuple[bool, float]] = deque()
        self.failures = 0
        self.ordered: list[float] = []

    def add(self, ok: bool, seconds: float) -> None:
        self.outcomes.append((ok, seconds))
        self.failures += not ok
        bisect.insort(self.ordered, seconds)
        if len(self.outcomes) > self.size:
            old_ok, old_seconds = self.outcomes.popleft()
            self.failures -= not old_ok
            del self.ordered[bisect.bisect_left(self.ordered, old_seconds)]


class _Hour:
    """The requests of the last hour, with running sums (a sum per record would grow with the traffic)."""

    def __init__(self) -> None:
        self.rows: deque[tuple[float, int, float]] = deque()
        self.tokens, self.cost = 0, 0.0

    def add(self, record: UsageRecord) -> None:
        row = (record.at, record.input_tokens + record.output_tokens, record.cost_usd or 0.0)
        self.rows.append(row)
        self.tokens += row[1]
        self.cost += row[2]
        while self.rows and self.rows[0][0] < record.at - _HOUR:
            _, tokens, cost = self.rows.popleft()
            self.tokens -= tokens
            self.cost -= cost
        self.cost = max(self.cost, 0.0)  # float subtraction must not drift below zero


def _log_alert(alert: Alert) -> None:
    logger.warning("usage alert: %s", alert.message)


def read_usage_log(path: str | Path) -> UsageSummary:
    """The summary of a usage log: every request line tallied, every alert line listed."""
    path = Path(path)
    if not path.is_file():
        raise UsageLogError(f"usage log {path}: no such file")
    tally, alerts = Tally(), []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageLogError(f"usage log {path}: cannot be read ({exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            kind = row.get("kind") if isinstance(row, dict) else None
            if kind == "request":
                tally.add(UsageRecord.model_validate(row))
            elif kind == "alert":
                alerts.append(Alert.model_validate(row))
            else:
                raise ValueError("not a request or alert record")
        except (ValueError, ValidationError) as exc:
            why = str(exc).splitlines()[0] if not isinstance(exc, ValidationError) else f"{exc.error_count()} bad fields"
            raise UsageLogError(f"usage log {path}, line {number}: {why}") from None
    return tally.summary(alerts)
