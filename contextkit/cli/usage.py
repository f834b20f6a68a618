"""``contextkit usage``: the summary of a usage log written by ``UsageMonitor(log=...)``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from contextkit.cli._app import JsonOpt, app, fail, out, reported


@app.command("usage")
def usage(
    log: Annotated[Path, typer.Argument(help="usage log: JSON lines written by UsageMonitor(log=...)")],
    as_json: JsonOpt = False,
) -> None:
    """Requests, success rate, tokens, cost and latency p50/p95/p99 of a usage log, with a row per model.

    Example: contextkit usage usage.jsonl --json
    """
    from contextkit.llm.monitor import read_usage_log

    if not log.is_file():
        raise fail(f"usage log {log}: no such file", 2)
    with reported():
        summary = read_usage_log(log)
    if as_json:
        out.print_json(summary.model_dump_json())
        return
    _print_table(summary, log)


def _print_table(summary: Any, log: Path) -> None:
    """One row per model, then the totals; the alerts below."""
    from contextkit.llm._summary import format_cost

    table = Table(title=f"{log} · {summary.requests} requests · {summary.failures} failed")
    for col in ("model", "requests", "ok %", "fell back", "in tokens", "out tokens", "cost $", "p50 s", "p95 s",
                "p99 s"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    rows = [*summary.models, summary]
    for i, row in enumerate(rows):
        lat = row.latency_seconds
        table.add_row(row.model, str(row.requests), f"{100 * row.success_rate:.1f}", str(row.fell_back),
                      str(row.input_tokens), str(row.output_tokens), format_cost(row.cost_usd), f"{lat['p50']:.3f}",
                      f"{lat['p95']:.3f}", f"{lat['p99']:.3f}", end_section=i == len(rows) - 2)
    out.print(table)
    for alert in summary.alerts:
        out.print(f"alert: {alert.message}", highlight=False)
    if summary.cost_usd is None and summary.requests:
        out.print("cost ?: no model in this log has a price in its profile", highlight=False)
