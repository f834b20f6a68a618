"""``contextkit ingest`` and ``contextkit chunk``: files into an index, or into chunks on stdout."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.table import Table

from contextkit.cli._app import (
    IndexOpt,
    JsonOpt,
    app,
    err,
    fail,
    json_text,
    out,
    plain_rule,
    progress_bar,
    reported,
    safe,
)
from contextkit.cli._settings import file_settings
from contextkit.core.config import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, DEFAULT_TOKENIZER


def _check_header(header: str | None) -> None:
    """Refuse a header that is not a template (``{title``), before anything is loaded."""
    if header is None:
        return
    import string

    try:
        list(string.Formatter().parse(header))
    except ValueError as exc:
        raise fail(f"--header {header!r}: not a valid template ({exc}); write fields as {{title}}", 2) from None


def _embed_model(embed_model: str | None, model: str | None) -> str | None:
    """``--embed-model``, or its deprecated old name ``--model`` (with a warning: ``assemble
    --model`` names an LLM profile, and the same flag meaning two things misled users)."""
    if model is None:
        return embed_model
    if embed_model is not None and embed_model != model:
        raise fail("--model is the old name of --embed-model; give one of them", 2)
    err.print("[yellow]warning:[/] --model is deprecated for ingest; use --embed-model (assemble's "
              "--model names an LLM profile)", highlight=False)
    return model


def _llm_hint(name: str | None) -> str:
    """`` (gpt-4o is an LLM profile: contextkit assemble --model gpt-4o)`` when ``name`` is one."""
    if not name:
        return ""
    from contextkit.core.profiles import list_profiles

    if any(p.name == name for p in list_profiles()):
        return f" ({name} is an LLM profile, for `contextkit assemble --model {name}`)"
    return ""


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="files or folders to ingest")],
    index: IndexOpt,
    chunk_size: Annotated[int | None, typer.Option(
        help=f"max tokens per chunk, header included [default: {DEFAULT_CHUNK_SIZE}, or the index's]")] = None,
    overlap: Annotated[int | None, typer.Option(
        help=f"max tokens shared by neighbours [default: {DEFAULT_CHUNK_OVERLAP}, or the index's]")] = None,
    tokenizer: Annotated[str | None, typer.Option(
        help="cl100k_base, o200k_base, model, or a HF name [default: cl100k_base, or the index's]")] = None,
    embed_model: Annotated[str | None, typer.Option(
        "--embed-model", help="sentence-transformers model name or path [default: all-MiniLM-L6-v2, or the "
        "index's]")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", hidden=True, help="deprecated: --embed-model")] = None,
    header: Annotated[str | None, typer.Option(
        help="metadata embedded above each chunk, e.g. '{title}' (counted in --chunk-size); fields: title (a "
        "Markdown/reST file's first heading, else the file name), id, source, format, and JSONL metadata")] = None,
    glob: Annotated[list[str] | None, typer.Option(
        help="only files matching this pattern, e.g. '**/*.md' (repeatable: a file matching any is taken)")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        help="pass by files and folders matching this pattern, e.g. '_sources' or '*.min.js' (repeatable; the "
             "report counts them)")] = None,
    default_excludes: Annotated[bool, typer.Option(
        "--default-excludes/--no-default-excludes",
        help="pass by documentation builds' generated assets: Sphinx's _sources and _static, searchindex.js, "
             "genindex/py-modindex/search pages, *.min.js, *.min.css, source maps (the report counts them)")] = True,
    skip_duplicates: Annotated[bool, typer.Option(
        "--skip-duplicates/--keep-duplicates",
        help="a file with the same content as one already indexed (or earlier in the run) is not indexed again; "
             "the report names it")] = True,
    workers: Annotated[int, typer.Option(min=1, help="processes for chunking")] = 1,
    prune: Annotated[bool, typer.Option(help="remove indexed files that are no longer among PATHS")] = False,
    redact: Annotated[bool | None, typer.Option(
        "--redact/--no-redact", help="mask PII (e-mails, phones, cards, IBANs, IPs, secrets, national ids, dates of birth) before chunking; "
        "recorded in the index [default: as the index was built, else off]")] = None,
    index_type: Annotated[Literal["flat", "hnsw", "ivf", "ivfpq", "auto"], typer.Option(
        help="flat (exact), hnsw or ivf (approximate, for large corpora), ivfpq (millions of chunks: IVF-PQ + "
             "exact re-scoring, memory-mapped; flat below 10k), auto (flat below 50k chunks, then hnsw)")] = "flat",
    strict: Annotated[bool, typer.Option(help="exit 1 if any input failed")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="write nothing: count the files by format (new, changed, unchanged), load and chunk a "
        "sample, time the model on it, and estimate the chunks and the embedding time")] = False,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    follow_symlinks: Annotated[bool, typer.Option(
        "--follow-symlinks", help="follow symlinks that lead outside the folders named [default: report and "
        "skip them]")] = False,
    stream_above: Annotated[float, typer.Option(
        min=0, help="MiB: larger text files are streamed (chunked and committed part by part, memory bounded)")] = 64,
    pdf_timeout: Annotated[float, typer.Option(
        min=0.001, help="seconds one PDF may take to parse before it is skipped")] = 60,
    engine: Annotated[Literal["local", "ray"], typer.Option(help="local, or ray: load, chunk and embed on a Ray cluster (pip install 'contextkit[ray]')")] = "local",
    address: Annotated[str | None, typer.Option(
        help="--engine ray: auto, HOST:6379 or ray://HOST:10001 [default: RAY_ADDRESS, else a local Ray]")] = None,
    num_gpus: Annotated[float, typer.Option(
        min=0, help="--engine ray: GPUs for embedding, one model per GPU (0: embed on CPUs)")] = 0,
) -> None:
    """Ingest files into an index: only new or changed files are re-done.

    Index folders among the inputs (the one written included) are never read, and a file
    reached by two names is stored once. A run that finds no file writes nothing (exit 1).

    Example: contextkit ingest docs/ notes.md --index my.ck-index --glob '**/*.md'
    """
    from contextkit.core.errors import ModelNotFoundError, NothingToIngestError, RayClusterError, RayNotInstalledError
    from contextkit.ingestion import IngestConfig
    from contextkit.ingestion import ingest as run_ingest

    if engine == "local" and (address is not None or num_gpus):
        raise fail("--address and --num-gpus need --engine ray", 2)
    embed_model = _embed_model(embed_model, model)
    _check_header(header)
    with reported(2):  # options that make no valid config: a usage error
        config = IngestConfig(**file_settings("ingest"), chunk_size=chunk_size, chunk_overlap=overlap, tokenizer=tokenizer, model=embed_model,
                              header=header, glob=glob or None, exclude=exclude or [], default_excludes=default_excludes, skip_duplicates=skip_duplicates, workers=workers, prune=prune, index_type=index_type,
                              redact=redact, engine=engine, ray_address=address, num_gpus=num_gpus,
                              follow_symlinks=follow_symlinks, stream_above_bytes=int(stream_above * (1 << 20)),
                              pdf_timeout=pdf_timeout)
    if dry_run:
        _dry_run(paths, index, config, as_json, quiet)
        return
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
        except ModelNotFoundError as exc:  # a bad --embed-model: a usage error
            raise fail(str(exc) + _llm_hint(config.model), 2) from None
        except NothingToIngestError as exc:
            for f in exc.failures[1:]:  # the first is in the message
                err.print(f"  {safe(f.path)}: {safe(f.reason)}", markup=False, highlight=False)
            raise fail(str(exc), 1) from None
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        _print_ingest_report(report)
    if report.nothing_ingested or (strict and report.failures):
        raise typer.Exit(1)


def _dry_run(paths: list[Path], index: Path, config, as_json: bool, quiet: bool) -> None:
    """``--dry-run``: the preview, printed; nothing is written (see :func:`contextkit.ingestion.preview_ingest`)."""
    from contextkit.core.errors import ModelNotFoundError
    from contextkit.ingestion import preview_ingest

    with reported():
        try:
            if not (quiet or as_json):
                err.print("previewing: walking the inputs, sampling files, timing the model...", highlight=False)
            preview = preview_ingest([str(p) for p in paths], index, config)
        except ModelNotFoundError as exc:
            raise fail(str(exc) + _llm_hint(config.model), 2) from None
    if as_json:
        out.print_json(preview.model_dump_json())
        return
    table = Table(title=f"dry run: ingest into {safe(preview.index)} (nothing written)", show_header=True)
    for name in ("format", "files", "MiB", "to do", "MiB to do", "sampled", "chunks/MiB"):
        table.add_column(name, justify="left" if name == "format" else "right")
    for suffix, f in sorted(preview.formats.items(), key=lambda kv: -kv[1].bytes):
        rate = "" if f.chunks_per_mib is None else f"{f.chunks_per_mib:,.0f}"
        table.add_row(safe(suffix), f"{f.files:,}", f"{f.bytes / (1 << 20):,.1f}", f"{f.to_do:,}",
                      f"{f.bytes_to_do / (1 << 20):,.1f}", f"{f.sampled:,}", rate)
    out.print(table)
    state = "an existing index" if preview.index_exists else "a new index"
    out.print(f"{preview.files:,} files ({state}): {preview.new:,} new, {preview.changed:,} changed, "
              f"{preview.unchanged:,} unchanged, {preview.duplicates:,} duplicates; about {preview.estimated_chunks:,} chunks to embed "
              f"(from {preview.sampled_files:,} sampled files)", highlight=False)
    if preview.estimated_seconds is not None:
        out.print(f"embedding: {preview.embed_chunks_per_second:,.1f} chunks/s measured here, so about "
                  f"{_duration(preview.estimated_seconds)} (model load {preview.model_load_seconds:.1f} s)",
                  highlight=False)
    for title, entries in (("passed by", preview.notes), ("would fail", preview.failures)):
        if entries:
            out.print(f"[bold]{title} ({len(entries)}):[/]")
            for entry in entries:
                out.print(f"  {safe(entry.path)}: {safe(entry.reason)}", markup=False, highlight=False, soft_wrap=True)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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
    table = Table(title=f"ingested into {safe(report.index)}", show_header=False)
    rows = [
        ("files seen", report.files_seen), ("new", report.files_new), ("changed", report.files_changed),
        ("unchanged (skipped)", report.files_unchanged), ("duplicates (skipped)", report.files_duplicate),
        ("removed (--prune)", report.files_removed),
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
    if report.notes:  # passed by on purpose: index folders, a file reached twice
        out.print(f"[bold]passed by ({len(report.notes)}):[/]")
        for f in report.notes:
            out.print(f"  {safe(f.path)}: {safe(f.reason)}", markup=False, highlight=False, soft_wrap=True)
    if report.failures:  # one plain line each, so they can be grepped
        out.print(f"[bold red]not ingested ({len(report.failures)}):[/]")
        for f in report.failures:
            out.print(f"  {safe(f.path)}: {safe(f.reason)}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def chunk(
    file: Annotated[Path, typer.Argument(help="a file to chunk")],
    chunk_size: Annotated[int, typer.Option(help="max tokens per chunk (ingest's default too)")] = DEFAULT_CHUNK_SIZE,
    overlap: Annotated[int, typer.Option(help="max tokens shared by neighbours")] = DEFAULT_CHUNK_OVERLAP,
    header: Annotated[str | None, typer.Option(help="metadata above each chunk, as ingest --header")] = None,
    tokenizer: Annotated[str, typer.Option(help="cl100k_base, o200k_base, model, or a HF name")] = DEFAULT_TOKENIZER,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines: text, start, end, tokens")] = False,
    workers: Annotated[int, typer.Option(min=1, help="processes for a long text (same chunks)")] = 1,
) -> None:
    """Show how a file is chunked (for inspection).

    Example: contextkit chunk README.md --chunk-size 128 --json | head
    """
    from contextkit.chunking import TokenChunker
    from contextkit.loaders import SourceFile, load_file

    if not file.is_file():
        raise fail(f"{file}: no such file", 2)
    _check_header(header)
    with reported(2):
        chunker = TokenChunker(chunk_size, overlap, tokenizer, header=header, workers=workers,
                               **file_settings("chunk"))
    if workers > 1 and file.stat().st_size >= 1 << 20:
        chunker.start_workers()  # they start while the file is read
    result = load_file(SourceFile(file.resolve(), str(file)))
    for e in result.errors:
        err.print(f"error: {safe(e.path)}: {safe(e.reason)}", markup=False, highlight=False)
    for doc in result.documents:
        with reported(2):  # a header larger than --chunk-size
            chunks = chunker.chunk(doc)
        for c in chunks:
            if as_json:
                sys.stdout.write(json_text({"doc_id": c.doc_id, "ordinal": c.ordinal, "text": c.text,
                                            "start": c.start, "end": c.end, "tokens": c.token_count}) + "\n")
                continue
            title = f"{safe(c.id)}  [{c.start}:{c.end}]  {c.token_count} tokens"
            if not out.is_terminal:  # a pipe or a file: plain lines, the text as it is (not re-wrapped)
                sys.stdout.write(f"{plain_rule(title, out.width)}\n{safe(c.text, keep_lines=True)}\n")
            else:
                from rich.markup import escape

                out.rule(escape(title))
                out.print(safe(c.text, keep_lines=True), markup=False, highlight=False)
    if not result.documents:
        raise typer.Exit(1)
