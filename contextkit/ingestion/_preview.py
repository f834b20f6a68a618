"""``preview_ingest()``: what an ingest would do, before it does it (``contextkit ingest --dry-run``).

Why: a real folder surprises (issue 31: a plain ingest of Python's HTML docs was 65% reST copies,
scripts and index pages, about 9.4 hours of embedding on 2 cores instead of 3.3). A preview walks the
folders as the ingest would (the same globs, excludes and default excludes), compares each file with
the index when there is one, loads and chunks a sample of the files to do, measures the embedding
model on that sample's chunks, and says how many files, chunks and seconds the run would take. It
writes nothing: no index folder is created, an existing one is opened read-only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from contextkit.chunking import TokenChunker
from contextkit.embedders import Embedder, embedder_for
from contextkit.index import Index, is_dsn
from contextkit.ingestion._steps import digest, same_ids
from contextkit.ingestion._types import FileFailure, IngestConfig
from contextkit.loaders import GENERATED_ASSETS, LoadLimits, SourceFile, discover, load_file

__all__ = ["FormatPreview", "IngestPreview", "preview_ingest"]

#: Files loaded and chunked to estimate the rest, spread over the files to do (largest formats first).
SAMPLE_FILES = 48
#: Chunks embedded to measure the model's speed on this machine.
SPEED_CHUNKS = 96


class FormatPreview(BaseModel):
    """The files of one format (suffix) among the inputs."""

    files: int = 0
    bytes: int = 0
    to_do: int = Field(default=0, description="new or changed files")
    bytes_to_do: int = 0
    sampled: int = Field(default=0, description="files of the sample loaded and chunked")
    chunks_per_mib: float | None = Field(default=None, description="chunks per MiB of file in the sample")


class IngestPreview(BaseModel):
    """What ``ingest(paths, index_dir, config)`` would do; nothing is written to find out."""

    index: str
    index_exists: bool
    files: int
    bytes: int
    new: int
    changed: int
    unchanged: int
    reprocessed: int = Field(default=0, description="unchanged files that reprocess would load and chunk again "
                             "(counted in changed too)")
    duplicates: int = Field(default=0, description="files with the content of another: not indexed again")
    formats: dict[str, FormatPreview]
    sampled_files: int
    estimated_chunks: int = Field(description="chunks the files to do would give (from the sample, by format)")
    embed_chunks_per_second: float | None = Field(default=None, description="measured on the sample's chunks")
    model_load_seconds: float | None = None
    estimated_seconds: float | None = Field(default=None, description="embedding the estimated chunks at the "
                                            "measured speed (chunking and writing add little; loading PDFs may)")
    failures: list[FileFailure] = Field(default_factory=list, description="inputs that would fail (those found "
                                        "now: a missing path, a sampled file that does not load)")
    notes: list[FileFailure] = Field(default_factory=list, description="what the walk would pass by, and why")


def _note_retired(retired: list[tuple[str, str]], notes: list[FileFailure]) -> None:
    """Files an older version indexed under absolute paths: the run would store them again under their
    new ids (counted as new below; their vectors are in the index, so nothing is embedded for them)."""
    if retired:
        notes.append(FileFailure(path=f"({len(retired):,} file{'s' * (len(retired) != 1)})", reason=(
            f"indexed under absolute paths (e.g. {retired[0][0]}): would be stored again under ids relative to "
            f"the folder named (e.g. {retired[0][1]}), vectors reused")))


def preview_ingest(paths: Sequence[str | Path], index_dir: str | Path, config: IngestConfig | None = None, *,
                   sample_files: int = SAMPLE_FILES, measure_speed: bool = True,
                   embedder: Embedder | None = None) -> IngestPreview:
    """What an ingest of ``paths`` into ``index_dir`` with ``config`` would do (see the module's docstring).
    ``measure_speed=False`` skips loading the model (no time estimate)."""
    config = config or IngestConfig()
    found = discover(paths, config.glob, config.follow_symlinks, exclude=[Path(index_dir)], skip=config.exclude,
                     default_skip=GENERATED_ASSETS if config.default_excludes else ())
    failures = [FileFailure(path=e.path, reason=e.reason) for e in found.errors]
    notes = [FileFailure(path=e.path, reason=e.reason) for e in found.notes]
    exists = Index.exists(index_dir)
    index = Index.open(index_dir, read_only=True) if exists else None
    try:
        known = index.store.file_hashes() if index is not None else {}
        replacing = config.prune and not is_dsn(index_dir)
        sources, retired = (found.files, []) if index is None else \
            same_ids(found.files, known, index, notes, failures, replacing)
        _note_retired(retired, notes)
        formats: dict[str, FormatPreview] = {}
        todo: list[tuple[SourceFile, int]] = []
        new = changed = unchanged = duplicates = reprocessed = 0
        leaving = {old for old, _ in retired}  # their files come back under their new ids: not duplicates
        by_content = {sha: file for file, sha in known.items() if file not in leaving}
        for src in sources:
            size = _size(src)
            fmt = formats.setdefault(_suffix(src), FormatPreview())
            fmt.files += 1
            fmt.bytes += size
            hashed = digest(src, failures)
            sha, content = known.get(src.doc_id), hashed[0] if hashed else None
            if sha is not None and content == sha and not config.reprocess:
                unchanged += 1
                continue
            if config.skip_duplicates and content is not None and size and \
                    by_content.setdefault(content, src.doc_id) != src.doc_id:
                duplicates += 1
                notes.append(FileFailure(path=src.doc_id, reason=f"same content as {by_content[content]}: would "
                                         "not be indexed again"))
                continue
            new, changed = (new + 1, changed) if sha is None else (new, changed + 1)
            reprocessed += sha is not None and content == sha
            fmt.to_do += 1
            fmt.bytes_to_do += size
            todo.append((src, size))
        chunker = TokenChunker.from_config(config.chunker_config(index.manifest.chunker if index else None))
        texts = _sample(todo, formats, chunker, sample_files, config, failures)
        estimate = _estimate(formats)
        preview = IngestPreview(index=os.fspath(index_dir), index_exists=exists, files=len(found.files),
                                bytes=sum(f.bytes for f in formats.values()), new=new, changed=changed,
                                unchanged=unchanged, reprocessed=reprocessed, duplicates=duplicates, formats=formats,
                                sampled_files=sum(f.sampled for f in formats.values()), estimated_chunks=estimate,
                                failures=failures, notes=notes)
        if measure_speed and texts and estimate:
            _measure(preview, texts, embedder, index, config)
        return preview
    finally:
        if index is not None:
            index.close()


def _suffix(src: SourceFile) -> str:
    return src.path.suffix.lower() or "(none)"


def _size(src: SourceFile) -> int:
    try:
        return os.stat(src.path).st_size
    except OSError:
        return 0


def _sample(todo: list[tuple[SourceFile, int]], formats: dict[str, FormatPreview], chunker: TokenChunker,
            limit: int, config: IngestConfig, failures: list[FileFailure]) -> list[str]:
    """Load and chunk up to ``limit`` files to do, spread evenly over each format's files (each format
    gets a share by its bytes, at least one file); record chunks per MiB by format; the chunk texts."""
    by_format: dict[str, list[tuple[SourceFile, int]]] = {}
    for src, size in todo:
        by_format.setdefault(_suffix(src), []).append((src, size))
    total = sum(size for _, size in todo) or 1
    limits = LoadLimits(max_parse_bytes=config.max_parse_bytes, pdf_timeout=config.pdf_timeout)
    texts: list[str] = []
    for suffix, files in by_format.items():
        share = max(1, round(limit * sum(s for _, s in files) / total))
        step = max(1, len(files) // share)
        picked = files[::step][:share]
        chunks = sampled_bytes = 0
        for src, size in picked:
            result = load_file(src, limits)
            failures += [FileFailure(path=e.path, reason=e.reason) for e in result.errors]
            try:
                pieces = [c for doc in result.documents for c in chunker.chunk(doc)]
            except ValueError as exc:
                failures.append(FileFailure(path=src.doc_id, reason=str(exc)))
                continue
            chunks += len(pieces)
            sampled_bytes += size
            texts += [c.embedding_text for c in pieces[:8]]
        fmt = formats[suffix]
        fmt.sampled = len(picked)
        if sampled_bytes:
            fmt.chunks_per_mib = chunks / (sampled_bytes / (1 << 20))
    return texts


def _estimate(formats: dict[str, FormatPreview]) -> int:
    """Chunks of the files to do: each format's bytes at its sampled rate (a format with no sample at the
    overall rate)."""
    rates = [(f.chunks_per_mib, f.bytes_to_do) for f in formats.values() if f.chunks_per_mib is not None]
    overall = (sum(r * b for r, b in rates) / max(1, sum(b for _, b in rates))) if rates else 0.0
    return round(sum((f.chunks_per_mib if f.chunks_per_mib is not None else overall) * f.bytes_to_do / (1 << 20)
                     for f in formats.values()))


def _measure(preview: IngestPreview, texts: list[str], given: Embedder | None, index: Any,
             config: IngestConfig) -> None:
    """The model's speed on the sample's chunks, and the run's embedding time at that speed."""
    start = time.perf_counter()
    embedder: Any = given or (embedder_for(index, config.device, config.embed_batch_size) if index is not None
                              else config.new_embedder())
    embedder.embed(texts[:8])  # loads the model and warms it up
    preview.model_load_seconds = round(time.perf_counter() - start, 2)
    batch = (texts * (1 + SPEED_CHUNKS // max(1, len(texts))))[:SPEED_CHUNKS]
    start = time.perf_counter()
    embedder.embed(batch)
    rate = len(batch) / max(time.perf_counter() - start, 1e-9)
    preview.embed_chunks_per_second = round(rate, 1)
    preview.estimated_seconds = round(preview.estimated_chunks / rate, 1)

