"""``contextkit eval``: retrieval quality of every mode on a BEIR-format dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from contextkit.cli._app import JsonOpt, app, err, fail, out, progress_bar, reported, safe
from contextkit.cli.ingest import IngestProgress


@app.command("eval")
def eval_(
    index: Annotated[Path, typer.Option("--index", "-i", help="index folder (built from the corpus if missing)")],
    beir: Annotated[Path, typer.Option("--beir", help="BEIR dataset folder: corpus.jsonl, queries.jsonl, qrels/")],
    split: Annotated[str, typer.Option(help="qrels split: qrels/SPLIT.tsv")] = "test",
    mode: Annotated[list[str] | None, typer.Option(
        "--mode", help="dense, bm25 or hybrid (repeatable) [default: all three]")] = None,
    k: Annotated[int, typer.Option("-k", help="chunks retrieved per query (300 leave >= 100 distinct documents for Recall@100 on SciFact: ~230)")] = 300,
    option: Annotated[list[str] | None, typer.Option(
        "--option", help="MODE.NAME=VALUE retriever option, e.g. hybrid.rrf_k=30 (repeatable)")] = None,
    limit: Annotated[int | None, typer.Option(help="evaluate only the first N queries")] = None,
    as_json: JsonOpt = False,
    plot: Annotated[Path | None, typer.Option(help="write a bar chart (nDCG@10, Recall@100 per mode) to this PNG")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Score retrieval on a BEIR dataset: nDCG@10, Recall@10/100, MRR@10 and latency per mode.

    Example: contextkit eval --index scifact.ck-index --beir beir/scifact --mode bm25 --mode hybrid --plot eval.png
    """
    from contextkit.evaluation import MODES, evaluate, plot_report

    modes = mode or list(MODES)
    if any(m not in MODES for m in modes):
        raise fail(f"--mode must be dense, bm25 or hybrid, not {', '.join(m for m in modes if m not in MODES)}", 2)
    options = _parse_options(option or [], MODES)
    if plot is not None and not plot.parent.is_dir():
        raise fail(f"--plot {plot}: folder {plot.parent} does not exist", 2)
    progress = _EvalProgress(disabled=quiet)
    try:
        with reported(), progress:
            report = evaluate(index, beir, split, modes, k, options=options, progress=progress.update, limit=limit)
    except OSError as exc:  # a dataset file that cannot be read
        raise fail(str(exc)) from None
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        _print_table(report)
    if plot is not None:
        try:
            plot_report(report, plot)
        except (OSError, ValueError) as exc:
            raise fail(f"--plot {plot}: {exc}") from None
        err.print(f"wrote {safe(plot)}", markup=False, highlight=False)


def _parse_options(items: list[str], modes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``MODE.NAME=VALUE`` items as per-mode retriever options; a value is JSON when it parses, else text."""
    options: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, field = key.partition(".")
        if not sep or not dot or name not in modes or not field:
            raise fail(f"--option {item!r} is not MODE.NAME=VALUE with MODE dense, bm25 or hybrid", 2)
        try:
            options.setdefault(name, {})[field] = json.loads(value)
        except ValueError:
            options.setdefault(name, {})[field] = value
    return options


def _print_table(report: Any) -> None:
    """One row per mode: its metrics, latency percentiles and documents per query."""
    title = f"{report.beir} · {report.split} · {report.queries} queries · top {report.k} chunks"
    table = Table(title=title)
    names = list(report.results[0].metrics) if report.results else []
    short = {"ndcg": "nDCG", "recall": "R", "mrr": "MRR", "precision": "P", "map": "MAP"}
    labels = [short.get(n.partition("@")[0], n) + "@" + n.partition("@")[2] for n in names]
    for col in ("mode", *labels, "p50 ms", "p95 ms", "docs/q"):
        table.add_column(col, justify="left" if col == "mode" else "right", no_wrap=True)
    for r in report.results:
        table.add_row(r.mode, *(f"{r.metrics[n]:.4f}" for n in names), f"{r.latency_ms['p50']:.1f}",
                      f"{r.latency_ms['p95']:.1f}", f"{r.docs_per_query:.1f}")
    out.print(table)
    out.print(f"metrics: {report.metrics_library}; latency includes the query embedding", highlight=False)


class _EvalProgress:
    """Ingestion bar (only when the index is built), then one bar per mode; all on stderr."""

    def __init__(self, disabled: bool) -> None:
        self.ingest = IngestProgress(disabled)
        self.ingesting = False
        self.progress = progress_bar(disabled=disabled)
        self.task = None
        self.started = False

    def __enter__(self) -> _EvalProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ingesting:
            self.ingest.__exit__()
        if self.started:
            self.progress.stop()

    def update(self, event) -> None:
        if event.kind == "ingest":
            if not self.ingesting:
                self.ingesting = True
                self.ingest.__enter__()
            self.ingest.update(event.event)
            return
        if self.ingesting:
            self.ingest.__exit__()
            self.ingesting = False
        if not self.started:
            self.started = True
            self.progress.start()
        if event.kind == "mode":
            self.task = self.progress.add_task(f"{event.mode} queries", total=event.total)
        elif event.kind == "query" and self.task is not None:
            self.progress.update(self.task, completed=event.done)
