"""``contextkit ingest`` and ``contextkit chunk``: files into an index, or into chunks on stdout."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from contextkit.cli._app import IndexOpt, JsonOpt, app, err, fail, out, progress_bar, reported


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
    from contextkit.errors import RayClusterError, RayNotInstalledError
    from contextkit.ingestion import IngestConfig
    from contextkit.ingestion import ingest as run_ingest

    if index_type not in ("flat", "hnsw", "ivf", "ivfpq", "auto"):
        raise fail(f"--index-type must be flat, hnsw, ivf, ivfpq or auto, not {index_type!r}", 2)
    if engine not in ("local", "ray"):
        raise fail(f"--engine must be local or ray, not {engine!r}", 2)
    if engine == "local" and (address is not None or num_gpus):
        raise fail("--address and --num-gpus need --engine ray", 2)
    with reported(2):  # options that make no valid config: a usage error
        config = IngestConfig(chunk_size=chunk_size, chunk_overlap=overlap, tokenizer=tokenizer, model=model,
                              header=header, glob=glob, workers=workers, prune=prune, index_type=index_type,
                              redact=redact, engine=engine, ray_address=address, num_gpus=num_gpus,
                              follow_symlinks=follow_symlinks, stream_above_bytes=int(stream_above * (1 << 20)),
                              pdf_timeout=pdf_timeout)
    # Ray prints its workers' retries to stdout; they go to stderr, keeping stdout for the report (--json).
    to_stderr = contextlib.redirect_stdout(sys.stderr) if engine == "ray" else contextlib.nullcontext()
    if engine == "ray":
        from contextkit.ingestion.ray._cluster import quiet_console

        quiet_console()
    with reported():
        try:
            with to_stderr, IngestProgress(disabled=quiet or as_json) as bar:
                report = run_ingest([str(p) for p in paths], index, config, progress=bar.update)
        except (RayNotInstalledError, RayClusterError) as exc:  # no Ray, or no cluster: a usage error
            raise fail(str(exc), 2) from None
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        _print_ingest_report(report)
    if report.nothing_ingested or (strict and report.failures):
        raise typer.Exit(1)


class IngestProgress:
    def __init__(self, disabled: bool) -> None:
        self.disabled = disabled
        self.progress = progress_bar("{task.fields[chunks]} chunks · {task.fields[tokens]} tokens · "
                                     "{task.fields[embedded]} embedded · {task.fields[rate]} chunks/s",
                                     disabled=disabled)
        self.task = None
        self.chunks = self.tokens = self.embedded = 0

    def __enter__(self) -> IngestProgress:
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
        raise fail(f"{file}: no such file", 2)
    with reported(2):
        chunker = TokenChunker(chunk_size, overlap, tokenizer)
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
