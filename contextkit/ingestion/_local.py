"""The local runner: files loaded in groups, chunked (in parallel with ``workers``), committed in batches.

A file above ``stream_above_bytes`` goes to :mod:`contextkit.ingestion._stream` instead.
The Ray runner (:mod:`contextkit.ingestion.ray`) hands over the files too large to ship.
"""

from __future__ import annotations

from dataclasses import replace

from contextkit.ingestion import _steps
from contextkit.ingestion._run import IngestRun
from contextkit.ingestion._steps import chunk_group, load, make_redactor
from contextkit.ingestion._stream import stream_file
from contextkit.ingestion._types import Pending
from contextkit.loaders import LoadLimits, TextStream, open_text_stream


def run_batches(todo: list[Pending], run: IngestRun) -> None:
    """Load files in groups, chunk each group at once (in parallel with ``workers``), commit in batches.

    A file above ``config.stream_above_bytes`` is streamed instead (:mod:`contextkit.ingestion._stream`): JSONL
    record by record, text window by window, unless the index redacts (PII redaction needs the
    whole text) or the tokenizer has no stable boundaries (then exact windowing is impossible).
    ``run.redactor``: the run's PII session when a caller shares one (the Ray engine); else one is made
    here for a redacting index.
    """
    index, chunker, config, report, clock = run.index, run.chunker, run.config, run.report, run.clock
    batch: list[Pending] = []
    group: list[Pending] = []
    group_chars = 0
    # Enough text per group to keep every chunking worker busy, bounded for memory.
    group_target = config.batch_chunks * 4 * 256 * max(1, config.workers)
    redactor = run.redactor or (make_redactor() if index.manifest.redact else None)
    run = run if redactor is run.redactor else replace(run, redactor=redactor)
    limits = LoadLimits(max_parse_bytes=config.max_parse_bytes, pdf_timeout=config.pdf_timeout)
    can_stream = redactor is None and chunker.tokenizer.stable_mask("a b") is not None

    def flush_group() -> None:
        nonlocal group, group_chars, batch
        if group:
            with clock("chunk"):
                batch += chunk_group(group, chunker, config.workers, report)
            group, group_chars = [], 0

    for item in todo:
        stream = None
        if item.size > config.stream_above_bytes:
            if item.source.path.suffix.lower() == ".jsonl":  # record by record: any tokenizer, redaction too
                stream = TextStream(item.source, config.stream_block_bytes)
            elif can_stream:
                stream = open_text_stream(item.source, config.stream_block_bytes)
        if stream is not None:
            flush_group()
            if batch:
                _steps.commit_batch(batch, run)
                batch = []
            stream_file(item, stream, run)
            continue
        if load(item, limits, redactor, report, clock):
            group.append(item)
            group_chars += sum(len(d.text) for d in item.documents)
        if group_chars >= group_target:
            flush_group()
        if sum(len(i.chunks) for i in batch) >= config.batch_chunks:
            _steps.commit_batch(batch, run)
            batch = []
    flush_group()
    if batch:
        _steps.commit_batch(batch, run)
