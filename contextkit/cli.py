"""The ``contextkit`` command line: thin commands over the public API.

Progress bars and tables live here only, on stderr and stdout respectively;
``--json`` prints machine-readable output. Exit codes: 0 success, 1 nothing
could be done (or any failure with ``--strict``), 2 a usage error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="contextkit",
    help="Context engineering for RAG: token-exact chunking, a persistent FAISS index, search.\n\n"
    "Example: contextkit ingest docs/ --index my.ck-index && contextkit search 'how do I…' --index my.ck-index",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True, soft_wrap=True)

IndexOpt = Annotated[Path, typer.Option("--index", "-i", help="index folder")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as plain text (paths and hints such as ``contextkit[ray]`` hold brackets)."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="files or folders to ingest")],
    index: IndexOpt,
    chunk_size: Annotated[Optional[int], typer.Option(help="max tokens per chunk [default: 256, or the index's]")] = None,
    overlap: Annotated[Optional[int], typer.Option(help="max tokens shared by neighbours [default: 32]")] = None,
    tokenizer: Annotated[Optional[str], typer.Option(help="cl100k_base, o200k_base, model, or a HF name")] = None,
    model: Annotated[Optional[str], typer.Option(help="sentence-transformers model name or path [default: all-MiniLM-L6-v2]")] = None,
    header: Annotated[Optional[str], typer.Option(help="metadata embedded above each chunk, e.g. '{title}' (counted in --chunk-size)")] = None,
    glob: Annotated[Optional[str], typer.Option(help="only files matching this pattern, e.g. '**/*.md'")] = None,
    workers: Annotated[int, typer.Option(help="processes for chunking")] = 1,
    prune: Annotated[bool, typer.Option(help="remove indexed files that are no longer among PATHS")] = False,
    redact: Annotated[Optional[bool], typer.Option(
        "--redact/--no-redact", help="mask PII (e-mails, phones, cards, IBANs, IPs, secrets) before chunking; "
        "recorded in the index [default: as the index was built, else off]")] = None,
    index_type: Annotated[str, typer.Option(
        help="flat (exact), hnsw or ivf (approximate, for large corpora), ivfpq (millions of chunks: IVF-PQ + "
             "exact re-scoring, memory-mapped; flat below 10k), auto (flat below 50k chunks, then hnsw)")] = "flat",
    strict: Annotated[bool, typer.Option(help="exit 1 if any input failed")] = False,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    follow_symlinks: Annotated[bool, typer.Option(
        "--follow-symlinks", help="follow symlinks that lead outside the folders named (default: report and skip them)")] = False,
    stream_above: Annotated[float, typer.Option(
        help="MiB: larger text files are streamed (chunked and committed part by part, memory bounded)")] = 64,
    pdf_timeout: Annotated[float, typer.Option(help="seconds one PDF may take to parse before it is skipped")] = 60,
    engine: Annotated[str, typer.Option(
        help="local, or ray: load, chunk and embed on a Ray cluster (pip install 'contextkit[ray]')")] = "local",
    address: Annotated[Optional[str], typer.Option(
        help="--engine ray: auto, HOST:6379 or ray://HOST:10001 [default: RAY_ADDRESS, else a local Ray]")] = None,
    num_gpus: Annotated[float, typer.Option(
        help="--engine ray: GPUs for embedding, one model per GPU (0: embed on CPUs)")] = 0,
) -> None:
    """Ingest files into an index: only new or changed files are re-done.

    Example: contextkit ingest docs/ notes.md --index my.ck-index --glob '**/*.md'
    """
    from contextkit.distributed import RayClusterError, RayIngestError, RayNotInstalledError
    from contextkit.index import IndexFolderError
    from contextkit.ingestion import IngestConfig
    from contextkit.ingestion import ingest as run_ingest

    if index_type not in ("flat", "hnsw", "ivf", "ivfpq", "auto"):
        raise _fail(f"--index-type must be flat, hnsw, ivf, ivfpq or auto, not {index_type!r}", 2)
    if engine not in ("local", "ray"):
        raise _fail(f"--engine must be local or ray, not {engine!r}", 2)
    if engine == "local" and (address is not None or num_gpus):
        raise _fail("--address and --num-gpus need --engine ray", 2)
    try:
        config = IngestConfig(chunk_size=chunk_size, chunk_overlap=overlap, tokenizer=tokenizer, model=model,
                              header=header, glob=glob, workers=workers, prune=prune, index_type=index_type,
                              redact=redact, engine=engine, ray_address=address, num_gpus=num_gpus,
                              follow_symlinks=follow_symlinks, stream_above_bytes=int(stream_above * (1 << 20)),
                              pdf_timeout=pdf_timeout)
    except ValueError as exc:
        raise _fail(str(exc), 2) from None
    # Ray prints its workers' retries to stdout; they go to stderr, keeping stdout for the report (--json).
    to_stderr = contextlib.redirect_stdout(sys.stderr) if engine == "ray" else contextlib.nullcontext()
    if engine == "ray":
        from contextkit.distributed._cluster import quiet_console

        quiet_console()
    try:
        with to_stderr, _IngestProgress(disabled=quiet or as_json) as bar:
            report = run_ingest([str(p) for p in paths], index, config, progress=bar.update)
    except (RayNotInstalledError, RayClusterError) as exc:
        raise _fail(str(exc), 2) from None
    except (IndexFolderError, ValueError, LookupError, RayIngestError) as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        _print_ingest_report(report)
    if report.nothing_ingested or (strict and report.failures):
        raise typer.Exit(1)


class _IngestProgress:
    def __init__(self, disabled: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.disabled = disabled
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[chunks]} chunks · {task.fields[tokens]} tokens · "
                       "{task.fields[embedded]} embedded · {task.fields[rate]} chunks/s"),
            TimeElapsedColumn(), console=err, disable=disabled,
        )
        self.task = None
        self.chunks = self.tokens = self.embedded = 0

    def __enter__(self) -> _IngestProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, event) -> None:
        if event.kind == "plan":
            self.task = self.progress.add_task("files", total=event.files, chunks=0, tokens=0, embedded=0, rate=0)
            return
        if self.task is None:
            return
        if event.kind == "file":
            self.chunks += event.chunks
            self.tokens += event.tokens
        elif event.kind == "embedded":
            self.embedded += event.chunks
        elapsed = self.progress.tasks[0].elapsed or 1e-9
        self.progress.update(self.task, advance=event.files, chunks=self.chunks, tokens=self.tokens,
                             embedded=self.embedded, rate=f"{self.embedded / elapsed:.1f}")


def _print_ingest_report(report) -> None:
    table = Table(title=f"ingested into {report.index}", show_header=False)
    rows = [
        ("files seen", report.files_seen), ("new", report.files_new), ("changed", report.files_changed),
        ("unchanged (skipped)", report.files_unchanged), ("removed (--prune)", report.files_removed),
        ("documents", report.documents), ("chunks added", report.chunks_added),
        ("chunks removed", report.chunks_removed), ("tokens", report.tokens),
        ("embedding cache hits", report.embedding.cache_hits),
        ("model read", f"{report.embedding.coverage:.1%} of tokens ({report.embedding.windowed_texts} chunks windowed)"),
        ("seconds", f"{sum(report.seconds.values()):.1f}"),
        ("failed", len(report.failures)),
    ]
    if report.redactions:
        rows.insert(-2, ("PII masked", ", ".join(f"{n} {k.lower()}" for k, n in sorted(report.redactions.items()))))
    for name, value in rows:
        table.add_row(name, str(value))
    out.print(table)
    if report.failures:  # one plain line each, so they can be grepped
        out.print(f"[bold red]not ingested ({len(report.failures)}):[/]")
        for f in report.failures:
            out.print(f"  {f.path}: {f.reason}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def chunk(
    file: Annotated[Path, typer.Argument(help="a file to chunk")],
    chunk_size: Annotated[int, typer.Option(help="max tokens per chunk")] = 512,
    overlap: Annotated[int, typer.Option(help="max tokens shared by neighbours")] = 64,
    tokenizer: Annotated[str, typer.Option(help="cl100k_base, o200k_base, model, or a HF name")] = "cl100k_base",
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines: text, start, end, tokens")] = False,
) -> None:
    """Show how a file is chunked (for inspection).

    Example: contextkit chunk README.md --chunk-size 128 --json | head
    """
    from contextkit.chunking import TokenChunker
    from contextkit.loaders import SourceFile, load_file

    if not file.is_file():
        raise _fail(f"{file}: no such file", 2)
    try:
        chunker = TokenChunker(chunk_size, overlap, tokenizer)
    except (ValueError, LookupError) as exc:
        raise _fail(str(exc), 2) from None
    result = load_file(SourceFile(file.resolve(), str(file)))
    for e in result.errors:
        err.print(f"[red]{e.path}[/]: {e.reason}", highlight=False)
    for doc in result.documents:
        for c in chunker.chunk(doc):
            if as_json:
                sys.stdout.write(json.dumps({"doc_id": c.doc_id, "ordinal": c.ordinal, "text": c.text,
                                             "start": c.start, "end": c.end, "tokens": c.token_count},
                                            ensure_ascii=False) + "\n")
            else:
                out.rule(f"{c.id}  [{c.start}:{c.end}]  {c.token_count} tokens")
                out.print(c.text, markup=False, highlight=False)
    if not result.documents:
        raise typer.Exit(1)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    index: IndexOpt,
    k: Annotated[int, typer.Option("-k", help="how many results")] = 10,
    mode: Annotated[str, typer.Option(help="dense, bm25 or hybrid")] = "hybrid",
    filter_: Annotated[Optional[list[str]], typer.Option(
        "--filter", help="key=value: source=GLOB, doc_id=ID or a metadata field (repeatable)")] = None,
    mmr: Annotated[Optional[float], typer.Option(help="diversify with MMR, 0..1 (1 = relevance only)")] = None,
    min_score: Annotated[Optional[float], typer.Option(help="drop results scoring below this")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search an index: dense (meaning), bm25 (words) or hybrid (both, fused).

    Example: contextkit search "how are exceptions chained?" --index my.ck-index -k 5 --filter source='*.md'
    """
    from contextkit.search import SearchError, search_index

    try:
        hits = search_index(index, query, k, mode=mode, filters=filter_ or None, mmr=mmr, min_score=min_score)
    except SearchError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        for hit in hits:
            sys.stdout.write(json.dumps(hit.to_dict(), ensure_ascii=False) + "\n")
        return
    table = Table(title=f"{len(hits)} results for {query!r}")
    for col in ("#", "score", "chunk", "text"):
        table.add_column(col, overflow="fold")
    for rank, hit in enumerate(hits, 1):
        snippet = " ".join(hit.chunk.text.split())[:160]
        table.add_row(str(rank), f"{hit.score:.3f}", hit.chunk.id, snippet)
    out.print(table)


@app.command()
def info(index: IndexOpt, as_json: JsonOpt = False) -> None:
    """Describe an index: model, chunk settings, counts, size on disk.

    Example: contextkit info --index my.ck-index --json | jq .chunks
    """
    from contextkit.index import Index, IndexFolderError

    try:
        with Index.open(index, read_only=True) as idx:
            data = idx.info()
    except IndexFolderError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps(data))
        return
    table = Table(title=str(index), show_header=False)
    for key, value in data.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    out.print(table)


@app.command()
def demo(
    index: Annotated[Path, typer.Option("--index", "-i", help="where to build the demo index")] = Path("demo.ck-index"),
    query: Annotated[Optional[list[str]], typer.Option("--query", "-q", help="questions to ask (repeatable)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object: the ingest report and the hits")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar")] = False,
) -> None:
    """Ingest the Python standard library's own documentation, offline, and search it.

    The corpus is written from the docstrings of the installed Python's standard
    library, so every machine has it and nothing is downloaded. A second run
    re-uses the index (nothing changed, nothing re-embedded).

    Example: contextkit demo --query "sort a list in place" --query "temporary folder"
    """
    from contextkit.demo import DEMO_QUERIES, write_demo_corpus

    corpus = index.with_name(index.name + "-corpus")
    n = write_demo_corpus(corpus)
    if not as_json:
        err.print(f"demo corpus: {n} modules' docstrings in {corpus}/")
    if not as_json:
        ingest(paths=[corpus], index=index, prune=True, quiet=quiet)
        for q in query or DEMO_QUERIES:
            search(q, index=index, k=3, as_json=False)
        err.print(f"\nnext: a prompt under a budget, with its report:\n"
                  f"  contextkit assemble \"{(query or DEMO_QUERIES)[0]}\" --index {index} --budget 2000 "
                  f"--report-html report.html > prompt.txt", highlight=False, markup=False)
        return
    from contextkit.ingestion import ingest as run_ingest
    from contextkit.search import search_index

    report = run_ingest([str(corpus)], index, prune=True)
    searches = [{"query": q, "hits": [h.to_dict() for h in search_index(index, q, 3)]}
                for q in query or DEMO_QUERIES]
    sys.stdout.write(json.dumps({"ingest": json.loads(report.model_dump_json()), "searches": searches},
                                ensure_ascii=False) + "\n")
    if report.nothing_ingested:
        raise typer.Exit(1)


@app.command("eval")
def eval_(
    index: Annotated[Path, typer.Option("--index", "-i", help="index folder (built from the corpus if missing)")],
    beir: Annotated[Path, typer.Option("--beir", help="BEIR dataset folder: corpus.jsonl, queries.jsonl, qrels/")],
    split: Annotated[str, typer.Option(help="qrels split: qrels/SPLIT.tsv")] = "test",
    mode: Annotated[Optional[list[str]], typer.Option(
        "--mode", help="dense, bm25 or hybrid (repeatable) [default: all three]")] = None,
    k: Annotated[int, typer.Option("-k", help="chunks retrieved per query (300 leave >= 100 distinct documents for Recall@100 on SciFact: ~230)")] = 300,
    option: Annotated[Optional[list[str]], typer.Option(
        "--option", help="MODE.NAME=VALUE retriever option, e.g. hybrid.rrf_k=30 (repeatable)")] = None,
    limit: Annotated[Optional[int], typer.Option(help="evaluate only the first N queries")] = None,
    as_json: JsonOpt = False,
    plot: Annotated[Optional[Path], typer.Option(help="write a bar chart (nDCG@10, Recall@100 per mode) to this PNG")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Score retrieval on a BEIR dataset: nDCG@10, Recall@10/100, MRR@10 and latency per mode.

    Example: contextkit eval --index scifact.ck-index --beir beir/scifact --mode bm25 --mode hybrid --plot eval.png
    """
    from contextkit.evaluation import MODES, EvaluationError, evaluate, plot_report
    from contextkit.index import IndexFolderError

    modes = mode or list(MODES)
    if any(m not in MODES for m in modes):
        raise _fail(f"--mode must be dense, bm25 or hybrid, not {', '.join(m for m in modes if m not in MODES)}", 2)
    options: dict[str, dict] = {}
    for item in option or []:
        key, sep, value = item.partition("=")
        name, dot, field = key.partition(".")
        if not sep or not dot or name not in MODES or not field:
            raise _fail(f"--option {item!r} is not MODE.NAME=VALUE with MODE dense, bm25 or hybrid", 2)
        try:
            options.setdefault(name, {})[field] = json.loads(value)
        except ValueError:
            options.setdefault(name, {})[field] = value
    if plot is not None and not plot.parent.is_dir():
        raise _fail(f"--plot {plot}: folder {plot.parent} does not exist", 2)
    progress = _EvalProgress(disabled=quiet)
    try:
        with progress:
            report = evaluate(index, beir, split, modes, k, options=options, progress=progress.update, limit=limit)
    except (EvaluationError, IndexFolderError, ValueError, LookupError, OSError) as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out.print_json(report.model_dump_json())
    else:
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
    if plot is not None:
        try:
            plot_report(report, plot)
        except (OSError, ValueError) as exc:
            raise _fail(f"--plot {plot}: {exc}") from None
        err.print(f"wrote {plot}", highlight=False)


class _EvalProgress:
    """Ingestion bar (only when the index is built), then one bar per mode; all on stderr."""

    def __init__(self, disabled: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.ingest = _IngestProgress(disabled)
        self.ingesting = False
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=err, disable=disabled)
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


from contextkit import _cli_assemble  # noqa: E402,F401  (registers `assemble`, `models`, `summarize`, `redact`)
from contextkit import _cli_index  # noqa: E402,F401  (registers `verify` and `repair`)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from contextkit.config import ConfigError, cli_defaults, load_config

    try:
        config = load_config()
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise SystemExit(2) from None
    group = typer.main.get_command(app)
    known = {name: {p.name for p in cmd.params} for name, cmd in group.commands.items()}
    for name, table in config.items():
        if isinstance(table, dict):
            unknown = sorted(set(table) - known.get(name, set()) - {"index"}) if name in known else [name]
            if unknown:
                where = f"[{name}]" if name in known else "the file"
                from rich.markup import escape

                err.print(f"[bold red]error:[/] contextkit config: unknown setting(s) in {escape(where)}: "
                          f"{escape(', '.join(unknown))}", highlight=False)
                raise SystemExit(2)
    app(default_map=cli_defaults(config, list(known)))


if __name__ == "__main__":  # pragma: no cover
    # Run the imported module's app: commands registered by other modules live there.
    from contextkit.cli import main as _main

    _main()
