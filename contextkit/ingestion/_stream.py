"""Streaming ingestion of one large file (text window by window, JSONL record by record).

It commits through the same :func:`~contextkit.ingestion._steps.commit_batch` as whole
files (looked up on the module at call time, so tests can simulate a
crash there), with two extra rules for a file committed in several transactions:
the first part replaces the file's old records and only the last records its hash.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from contextkit.chunking import ChunkTooSmallError, HeaderTooLargeError, TokenChunker
from contextkit.core.records import Chunk, Document
from contextkit.ingestion import _steps
from contextkit.ingestion._run import IngestRun
from contextkit.ingestion._types import FileFailure, IngestConfig, IngestReport, Pending
from contextkit.loaders import (
    LoadFailure,
    LoadIssue,
    SourceFile,
    TextStream,
    iter_jsonl,
)


def stream_file(item: Pending, stream: TextStream, run: IngestRun) -> None:
    """Chunk and commit one large file part by part: memory is bounded by the block and batch
    sizes, not the file size, and the records equal those of a whole load.

    Crash-safe like whole files: the first part's transaction replaces the file's old records,
    only the last part's records its hash, so a run killed in between leaves the file unrecorded
    and the next run redoes it from the start (the vectors already embedded come from the store's
    cache). The file is read once first to check it: one that fails half-way (invalid UTF-8 at
    byte 900,000,000) is reported with the indexed version left as it was.
    """
    chunker, config, report, clock, redactor = run.chunker, run.config, run.report, run.clock, run.redactor
    with clock("load"):
        problem = stream.check()  # also counts the characters of a text file
    if problem is not None:
        report.failures.append(FileFailure(path=problem.path, reason=problem.reason))
        return
    if item.source.path.suffix.lower() == ".jsonl":
        parts, n_chars = _jsonl_parts(item.source, chunker, config, report, redactor, clock), None
    else:
        parts, n_chars = _text_parts(stream, chunker, config, report, clock), stream.n_chars
    done = Pending(item.source, item.sha256, item.size, is_new=item.is_new, reprocess=item.reprocess)  # committed so far
    tokens, failures_before = 0, len(report.failures)
    try:
        upcoming: tuple[list[Document], list[Chunk]] | None = next(parts)
        while upcoming is not None:
            documents, chunks = upcoming
            upcoming = next(parts, None)  # one part ahead: the last part is the one that records the hash
            if upcoming is None and done.replace and not documents and len(report.failures) > failures_before:
                return  # every JSONL line failed: like a whole load, the indexed version stays
            part = Pending(item.source, item.sha256, item.size, documents, chunks, item.is_new,
                           reprocess=item.reprocess, replace=done.replace, complete=upcoming is None, n_chars=n_chars,
                           n_documents=done.n_documents)
            _steps.commit_batch([part], run)
            done.replace, done.n_documents = False, done.n_documents + len(documents)
            tokens += sum(c.token_count for c in chunks)
    except (LoadFailure, HeaderTooLargeError, ChunkTooSmallError) as exc:  # file changed after the check; no room
        if not done.replace:  # take back the parts committed: the file is reported, not half-indexed
            with run.index.transaction():
                removed = run.index.delete_file(item.source.doc_id)
            report.chunks_added -= removed
            report.tokens -= tokens
            report.documents -= done.n_documents
        reason = exc.error.reason if isinstance(exc, LoadFailure) else str(exc)
        report.failures.append(FileFailure(path=item.source.doc_id, reason=reason))


def _text_parts(stream: TextStream, chunker: TokenChunker, config: IngestConfig,
                report: IngestReport, clock: Any) -> Iterator[tuple[list[Document], list[Chunk]]]:
    """``batch_chunks`` chunks at a time; the document (without its text) goes with the first."""
    doc = stream.document()
    chunks = chunker.chunk_stream(stream.blocks(), doc.id, doc.source, doc.metadata,
                                  window_chars=config.stream_block_bytes)
    first = True
    while True:
        with clock("chunk"):
            batch = list(itertools.islice(chunks, config.batch_chunks))
        report.empty_documents += first and not batch
        yield ([doc] if first else []), batch
        first = False
        if len(batch) < config.batch_chunks:
            return


def _jsonl_parts(source: SourceFile, chunker: TokenChunker, config: IngestConfig,
                 report: IngestReport, redactor: Any,
                 clock: Any) -> Iterator[tuple[list[Document], list[Chunk]]]:
    """Records read line by line, chunked about ``batch_chunks`` chunks' worth of text at a time."""
    target = config.batch_chunks * 1024  # characters: about 4 a token, 256 tokens a chunk
    documents: list[Document] = []
    chars = 0

    def part() -> tuple[list[Document], list[Chunk]]:
        with clock("chunk"):
            per_doc = chunker.chunk_many(documents, workers=config.workers)
        report.empty_documents += sum(1 for chunks in per_doc if not chunks)
        return list(documents), [c for chunks in per_doc for c in chunks]

    for record in iter_jsonl(source):
        if isinstance(record, LoadIssue):
            report.failures.append(FileFailure(path=record.path, reason=record.reason))
            continue
        if redactor is not None:
            with clock("redact"):
                record = _steps.redact([record], redactor, report)[0]
        documents.append(record)
        chars += len(record.text)
        if chars >= target:
            yield part()
            documents, chars = [], 0
    yield part()
