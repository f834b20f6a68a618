"""``ModelRouter``: work goes to a route by task type, and around a route that is unwell.

Why: the guidance routes by task type between a standard and a high-speed model and adjusts
"dynamically based on these metrics". A route (a name for an LLM, e.g. ``"deep"`` and
``"fast"``) is chosen by ``task=``, else by ``classify(prompt)``, else ``default``. Each route
keeps its recent outcomes; when its failure rate or p99 latency over the last ``window``
requests passes :class:`RouteLimits`, the route is *open* (a circuit breaker's word): work
goes to the next route in the order given, until ``cooldown`` seconds have passed; then one
request probes it, and a success closes it again (its window starts afresh). A request
whose route fails outright (``LLMCallError``) is tried on the next healthy route too.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from contextkit.core.errors import InvalidArgumentError, LLMCallError
from contextkit.llm._summary import percentile
from contextkit.llm._types import LLMResult, Usage
from contextkit.llm.reliable import ReliableLLM

__all__ = ["ModelRouter", "RouteHealth", "RouteLimits"]


class RouteLimits(BaseModel):
    """When a route counts as unwell: over the last ``window`` requests (at least ``min_requests``)."""

    max_failure_rate: float | None = Field(default=0.5, ge=0, le=1)
    max_p99_seconds: float | None = Field(default=None, gt=0)
    window: int = Field(default=20, gt=0)
    min_requests: int = Field(default=5, gt=0)
    cooldown: float = Field(default=30.0, ge=0, description="seconds an unwell route is left alone")


class RouteHealth:
    """One route's recent outcomes and whether it takes work now."""

    def __init__(self, limits: RouteLimits, clock: Callable[[], float]) -> None:
        self.limits, self.clock = limits, clock
        self.recent: deque[tuple[bool, float]] = deque(maxlen=limits.window)
        self.opened_at: float | None = None
        self.reason: str | None = None

    def record(self, ok: bool, seconds: float) -> None:
        if self.opened_at is not None and ok:  # the probe answered: closed again, a fresh window
            self.recent.clear()
            self.opened_at, self.reason = None, None
        elif self.opened_at is not None:  # the probe failed: another cooldown
            self.opened_at = self.clock()
        self.recent.append((ok, seconds))
        if self.opened_at is None:
            self.reason = self._breach()
            if self.reason is not None:
                self.opened_at = self.clock()

    def available(self) -> bool:
        """Healthy, or unwell for longer than the cooldown (then it takes a probe)."""
        return self.opened_at is None or self.clock() - self.opened_at >= self.limits.cooldown

    def figures(self) -> dict[str, Any]:
        outcomes = list(self.recent)
        failures = sum(1 for ok, _ in outcomes if not ok)
        return {"requests": len(outcomes), "failure_rate": failures / len(outcomes) if outcomes else 0.0,
                "p99_seconds": percentile([s for _, s in outcomes], 99), "open": self.opened_at is not None,
                "reason": self.reason}

    def _breach(self) -> str | None:
        if len(self.recent) < self.limits.min_requests:
            return None
        figures = self.figures()
        if self.limits.max_failure_rate is not None and figures["failure_rate"] > self.limits.max_failure_rate:
            return f"failure rate {figures['failure_rate']:.0%} > {self.limits.max_failure_rate:.0%}"
        if self.limits.max_p99_seconds is not None and figures["p99_seconds"] > self.limits.max_p99_seconds:
            return f"p99 latency {figures['p99_seconds']:.3g} s > {self.limits.max_p99_seconds:g} s"
        return None


class _Failures:
    """The routes that failed one request so far: their attempts, usage and last error."""

    def __init__(self) -> None:
        self.attempts: list[Any] = []
        self.usage = Usage()
        self.last: LLMCallError | None = None

    def add(self, exc: LLMCallError) -> None:
        self.attempts += exc.attempts
        self.usage = self.usage + getattr(exc, "usage", Usage())
        self.last = exc


class ModelRouter:
    """Routes ``run(prompt, task=...)`` to one of ``routes`` (LLMs or :class:`ReliableLLM`\\ s).

    A plain LLM is wrapped in ``ReliableLLM(llm, **reliable)``. ``limits``: one
    :class:`RouteLimits` for every route, or a dict of them by route name. ``monitor`` records
    every request with its route.
    """

    def __init__(self, routes: Mapping[str, Any], default: str | None = None, *,
                 classify: Callable[[Any], str] | None = None, limits: RouteLimits | Mapping[str, RouteLimits] | None = None,
                 monitor: Any = None, clock: Callable[[], float] = time.monotonic, **reliable: Any) -> None:
        if not routes:
            raise InvalidArgumentError("ModelRouter needs at least one route, e.g. routes={'deep': llm}")
        self.routes = {name: r if isinstance(r, ReliableLLM) else ReliableLLM(r, **reliable)
                       for name, r in routes.items()}
        self.default = default if default is not None else next(iter(self.routes))
        if self.default not in self.routes:
            raise InvalidArgumentError(f"default route {self.default!r} is not one of {sorted(self.routes)}")
        self.classify, self.monitor = classify, monitor
        per_route = limits if isinstance(limits, Mapping) else {}
        shared = limits if isinstance(limits, RouteLimits) else RouteLimits()
        self.health = {name: RouteHealth(per_route.get(name, shared), clock) for name in self.routes}
        self._lock = threading.Lock()

    def route_for(self, prompt: Any, task: str | None = None) -> str:
        """The route asked for: ``task`` when it names one, else ``classify(prompt)``, else the default."""
        if task is not None and task in self.routes:
            return task
        if self.classify is not None:
            chosen = self.classify(prompt)
            if chosen not in self.routes:
                raise InvalidArgumentError(f"classify chose route {chosen!r}, which is not one of {sorted(self.routes)}")
            return chosen
        if task is not None:
            raise InvalidArgumentError(f"task {task!r} is not a route ({', '.join(self.routes)}) and there is no classify")
        return self.default

    def order(self, wanted: str) -> list[str]:
        """The routes to try: ``wanted`` then the others in order, those taking work first."""
        names = list(self.routes)
        start = names.index(wanted)
        ring = names[start:] + names[:start]
        with self._lock:
            healthy = [n for n in ring if self.health[n].available()]
        return healthy + [n for n in ring if n not in healthy]

    def run(self, prompt: Any, *, task: str | None = None, output: type[BaseModel] | None = None) -> LLMResult:
        """Answer on the chosen route, or the next one taking work; LLMCallError when every route failed.

        One request is one record for the monitor, whichever routes it went through: its
        attempts and usage include those of the routes that failed before.
        """
        wanted = self.route_for(prompt, task)
        failed = _Failures()
        for name in self.order(wanted):
            started = time.perf_counter()
            try:
                result = self.routes[name].run(prompt, output=output, task=task or name)
            except LLMCallError as exc:
                self._note(name, False, time.perf_counter() - started)
                failed.add(exc)
                continue
            return self._answered(result, name, wanted, failed, prompt)
        raise self._all_failed(failed, prompt, task)

    async def arun(self, prompt: Any, *, task: str | None = None, output: type[BaseModel] | None = None) -> LLMResult:
        """:meth:`run` with the routes' :meth:`ReliableLLM.arun`."""
        wanted = self.route_for(prompt, task)
        failed = _Failures()
        for name in self.order(wanted):
            started = time.perf_counter()
            try:
                result = await self.routes[name].arun(prompt, output=output, task=task or name)
            except LLMCallError as exc:
                self._note(name, False, time.perf_counter() - started)
                failed.add(exc)
                continue
            return self._answered(result, name, wanted, failed, prompt)
        raise self._all_failed(failed, prompt, task)

    def _answered(self, result: LLMResult, name: str, wanted: str, failed: _Failures, prompt: Any) -> LLMResult:
        self._note(name, True, result.usage.seconds)
        result = result.model_copy(update={
            "route": name, "fell_back": result.fell_back or name != wanted,
            "attempts": [*failed.attempts, *result.attempts], "usage": failed.usage + result.usage})
        self._record(result, prompt, name)
        return result

    def _all_failed(self, failed: _Failures, prompt: Any, task: str | None) -> LLMCallError:
        error = LLMCallError(f"every route failed ({', '.join(self.routes)}); last: {failed.last}", failed.attempts)
        error.usage, error.task = failed.usage, task
        error.seconds, error.request_id = failed.usage.seconds, getattr(failed.last, "request_id", None)
        self._record(error, prompt, None)
        return error

    def status(self) -> dict[str, dict[str, Any]]:
        """Each route's recent figures: requests, failure rate, p99 seconds, open, reason."""
        with self._lock:
            return {name: health.figures() for name, health in self.health.items()}

    def _note(self, name: str, ok: bool, seconds: float) -> None:
        with self._lock:
            self.health[name].record(ok, seconds)

    def _record(self, item: Any, prompt: Any, route: str | None) -> None:
        if self.monitor is not None:
            self.monitor.record(item, assembly=getattr(prompt, "report", None), route=route)
