"""``contextkit ingest`` and ``contextkit chunk``: files into an index, or into chunks on stdout."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

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
    reported,
    safe,
)
from contextkit.cli._settings import file_settings
from contextkit.core.config import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, DEFAULT_TOKENIZER

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.ingestion import IngestEvent


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
    reprocess: Annotated[bool, typer.Option(
        "--reprocess", help="load and chunk every file again, unchanged ones too (after upgrading contextkit: its "
        "loaders may read a format differently); chunks that come out the same keep their vectors")] = False,
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
                              header=header, glob=glob or None, exclude=exclude or [], default_excludes=default_excludes, skip_duplicates=skip_duplicates, workers=workers, prune=prune, reprocess=reprocess, index_type=index_type,
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
              f"{preview.unchanged:,} unchanged, {preview.duplicates:,} duplicates"
              f"{f' ({preview.reprocessed:,} of the changed only re-read: --reprocess)' if preview.reprocessed else ''}; about {preview.estimated_chunks:,} chunks to embed "
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


@dataclass
class _Tally:
    """What the events have said so far: the figures the bar shows."""

    files: int = 0  # to do (the plan)
    bytes: int = 0  # their size
    files_read: int = 0  # read and chunked
    bytes_read: int = 0
    chunks: int = 0  # made
    embedded: int = 0
    files_committed: int = 0
    chunks_committed: int = 0
    planned: bool = False  # the plan is made: ``files`` is known
    planned_at: float = 0.0  # seconds into the bar it was made (the model loaded, the files hashed)
    final: bool = False  # the run is over: the figures are the run's, not estimates

    def add(self, event: IngestEvent) -> None:
        if event.kind == "plan":
            self.files, self.bytes, self.planned = event.files, event.bytes, True
        elif event.kind == "chunked":
            self.files_read += event.files
            self.bytes_read += event.bytes
            self.chunks += event.chunks
        elif event.kind == "embedded":
            self.embedded += event.chunks
        elif event.kind == "file":
            self.files_committed += event.files
            self.chunks_committed += event.chunks

    def read(self) -> tuple[int, int]:
        """Files read and chunks made; what was committed is a floor (a runner that sends no
        "chunked" event still moves the bar)."""
        return max(self.files_read, self.files_committed), max(self.chunks, self.chunks_committed)

    def total(self) -> tuple[int | None, bool]:
        """Chunks to embed in all, and whether that is exact: it is once every file is read (or the run
        is over); before, the chunks made so far scaled by the bytes (else files) still to read."""
        files, chunks = self.read()
        if self.final or (self.planned and files >= self.files):
            return max(chunks, self.embedded), True
        if self.bytes and self.bytes_read:
            return max(chunks, round(self.chunks * self.bytes / self.bytes_read)), False
        if self.files and files:
            return max(chunks, round(chunks * self.files / files)), False
        return None, False

    def phase(self) -> str:
        """What the run is doing: planning (starting), reading and chunking files, embedding the
        chunks, or, every file read and embedded, writing the index."""
        files, chunks = self.read()
        if self.final:
            return "done"
        if not self.planned and not chunks:
            return "starting"
        if self.embedded < chunks:
            return "embedding"
        return "writing" if files >= self.files else "reading"

    def counts(self) -> str:
        """``1,024/~4.3k chunks · 12/36 files``: embedded of the total (``~`` an estimate), files read."""
        total, exact = self.total()
        of = "?" if total is None else ("" if exact else "~") + _short(total)
        files = _short(self.files) if self.planned else "?"
        return f"{_short(self.embedded)}/{of} chunks · {_short(self.read()[0])}/{files} files"

    def times(self, elapsed: float) -> str:
        """``0:00:42``, then ``0:00:42 · eta 0:02:10`` while there is a pace, a total and chunks left to embed."""
        total = self.total()[0]
        left = None
        if not self.final and (total or 0) > self.embedded:
            left = _eta(self.embedded, total, elapsed - self.planned_at)
        return _clock(elapsed) + ("" if left is None else f" · eta {_clock(left)}")


def _short(n: int) -> str:
    """``1,234``, ``12.3k``, ``123k``, ``1.2M``: a count in at most six columns, so the bar fits 80."""
    if n < 10_000:
        return f"{n:,}"
    if n < 99_950:
        return f"{n / 1000:.1f}k"
    if n < 999_500:
        return f"{n / 1000:.0f}k"
    return f"{n / 1_000_000:.1f}M"


def _clock(seconds: float) -> str:
    """``0:01:05``, ``12:00:00``; from 100 hours ``>99h`` (an estimate that far says only "long")."""
    if seconds >= 100 * 3600:
        return ">99h"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02}:{s % 60:02}"


def _eta(done: int, total: int | None, elapsed: float) -> float | None:
    """Seconds left at the run's average pace so far (chunks embedded per second since the plan, the
    model loaded), or None before it can be told. Why the average, not rich's 30 s window: batches alternate
    reading and embedding, and rich restarts its estimate whenever the total changes."""
    if total is None or done <= 0 or elapsed <= 0:
        return None
    return max(0, total - done) * elapsed / done


def _ingest_bar(tally: _Tally, disabled: bool) -> Any:
    """A rich progress bar on stderr drawing ``tally``: phase, bar, counts, times (elapsed ticks
    between events). rich.progress is imported here, as in :func:`progress_bar`: not at CLI start."""
    from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
    from rich.table import Column
    from rich.text import Text

    class Times(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(tally.times(task.elapsed or 0.0), style="progress.elapsed")

    phase = TextColumn("{task.description}", table_column=Column(no_wrap=True, min_width=9))
    counts = TextColumn("{task.fields[counts]}", table_column=Column(no_wrap=True))
    return Progress(phase, BarColumn(bar_width=24), counts, Times(table_column=Column(no_wrap=True)),
                    console=err, disable=disabled)


class IngestProgress:
    """The ingestion bar on stderr: ``embedding ━━━━ 1,024/~4.3k chunks · 12/36 files · 0:00:42 · eta 0:02:10``.

    Why this shape (issue 31): files are counted as a batch commits, after minutes of embedding,
    so a bar over files sat at 0 with no estimate; this one fills as chunks are embedded (a slice
    at a time) out of the chunks made (estimated from the bytes read until every file is read), and
    counts the files read. Short numbers keep it within 80 columns, with nothing cut to "…".
    """

    def __init__(self, disabled: bool) -> None:
        self.tally = _Tally()
        self.progress = _ingest_bar(self.tally, disabled)
        self.task: Any = None

    def __enter__(self) -> IngestProgress:
        self.progress.start()
        self._draw()  # "starting" and the elapsed time, while the model loads and the files are hashed
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop; after a run that ended well, the last frame says so, with the run's figures (an error
        passing through a caller's ``__exit__``, as eval's, is seen in ``sys.exc_info``). One that failed
        before the plan (a bad model name) leaves no bar: its error is the one line said."""
        if not any(exc) and sys.exc_info()[0] is None:
            self.tally.final = True
            self._draw()
        elif not self.tally.planned and self.task is not None:
            self.progress.remove_task(self.task)
        self.progress.stop()

    def update(self, event: IngestEvent) -> None:
        self.tally.add(event)
        if event.kind == "plan" and self.progress.tasks:
            self.tally.planned_at = self.progress.tasks[0].elapsed or 0.0
        self._draw()

    def _draw(self) -> None:
        if self.task is None:
            self.task = self.progress.add_task(self.tally.phase(), total=None, counts=self.tally.counts())
        total, _ = self.tally.total()
        total = None if total is None else max(total, 1)  # rich draws a total of 0 as a bar never filled
        done = total if self.tally.final else self.tally.embedded
        self.progress.update(self.task, description=self.tally.phase(), completed=done, total=total,
                             counts=self.tally.counts())


def _print_ingest_report(report) -> None:
    table = Table(title=f"ingested into {safe(report.index)}", show_header=False)
    rows = [
        ("files seen", report.files_seen), ("new", report.files_new), ("changed", report.files_changed),
        *([("of them re-read (--reprocess)", report.files_reprocessed)] if report.files_reprocessed else []),
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
