"""The ingestion pipeline: files -> documents -> chunks -> vectors -> index folder.

Incremental: a file whose SHA-256 is already recorded is skipped; a changed file
has all its old chunks replaced in the same transaction that adds the new ones.
Resumable: files are committed in batches, each batch one SQLite transaction,
so a run killed at any point (``kill -9`` included) leaves whole files only, and
the next run does what is left, with no duplicate and no missing chunk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from contextkit.chunking import ChunkerConfig, TokenChunker
from contextkit.embedders import DEFAULT_MODEL, Embedder, EmbeddingReport
from contextkit.index import Index, IndexMismatchError
from contextkit.loaders import (
    LoadError,
    LoadLimits,
    SourceFile,
    TextStream,
    discover_files,
    file_sha256,
    load_file,
    open_text_stream,
)
from contextkit.records import Chunk, Document

__all__ = ["FileFailure", "IngestConfig", "IngestEvent", "IngestReport", "ingest"]

log = logging.getLogger(__name__)


class IngestConfig(BaseModel):
    """Settings of an ingestion run. ``None`` means "as the index was built" (or the default)."""

    chunk_size: int | None = Field(None, ge=1)
    chunk_overlap: int | None = Field(None, ge=0)
    tokenizer: str | None = None
    header: str | None = None
    model: str | None = None
    index_type: Literal["flat", "hnsw", "ivf", "ivfpq", "auto"] = "flat"
    glob: str | None = None
    workers: int = Field(1, ge=1)
    prune: bool = False
    batch_chunks: int = Field(512, ge=1, description="chunks embedded and committed together")
    device: str = "auto"
    embed_batch_size: int | None = Field(None, ge=1, description="texts per model call (None: 512 on CUDA, else 64)")
    redact: bool | None = Field(None, description="mask PII before chunking (None: as the index was built)")
    follow_symlinks: bool = Field(False, description="follow symlinks leading outside the folders named")
    stream_above_bytes: int = Field(64 << 20, ge=0, description="text files larger than this are streamed")
    stream_block_bytes: int = Field(1 << 20, ge=1, description="bytes read (and chars windowed) at a time when streaming")
    max_parse_bytes: int = Field(256 << 20, ge=1, description="HTML/PDF files larger than this are reported, not parsed")
    pdf_timeout: float | None = Field(60.0, gt=0, description="seconds one PDF may take to parse (None: no limit)")
    engine: Literal["local", "ray"] = Field("local", description="ray: load, chunk and embed on a Ray cluster")
    ray_address: str | None = Field(None, description="engine='ray': auto, HOST:6379 or ray://HOST:10001")
    num_gpus: float = Field(0, ge=0, description="engine='ray': GPUs for embedding actors (0: CPUs)")

    @classmethod
    def from_config(cls, path: str | Path | None = None, **overrides: Any) -> IngestConfig:
        """The ``[ingest]`` table of ``contextkit.toml`` (see :mod:`contextkit.config`), then ``overrides``."""
        from contextkit.config import load_config

        table = dict(load_config(path).get("ingest", {}))
        for cli_name, field_name in (("overlap", "chunk_overlap"), ("address", "ray_address")):
            if cli_name in table:
                table[field_name] = table.pop(cli_name)
        table.pop("index", None)
        return cls(**{**table, **overrides})

    def chunker_config(self, recorded: dict[str, Any] | None) -> ChunkerConfig:
        """The chunk settings to use, refusing any that differ from the index's own."""
        wanted = {k: v for k, v in {
            "chunk_size": self.chunk_size, "chunk_overlap": self.chunk_overlap,
            "tokenizer": self.tokenizer, "header": self.header,
        }.items() if v is not None}
        if not recorded:
            return ChunkerConfig(**{"chunk_size": 256, "chunk_overlap": 32, **wanted})
        clash = {k: (recorded.get(k), v) for k, v in wanted.items() if recorded.get(k) != v}
        if clash:
            said = ", ".join(f"{k}: index has {old!r}, asked {new!r}" for k, (old, new) in clash.items())
            raise IndexMismatchError(f"chunk settings differ from the index's ({said}); ingest into a new index")
        return ChunkerConfig(**recorded)


class FileFailure(BaseModel):
    path: str
    reason: str


class IngestReport(BaseModel):
    """What a run did; the CLI prints it as a table, ``--json`` as JSON."""

    index: str
    files_seen: int = 0
    files_new: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    documents: int = 0
    empty_documents: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    tokens: int = 0
    redactions: dict[str, int] = Field(default_factory=dict, description="PII masked, by kind (--redact)")
    failures: list[FileFailure] = Field(default_factory=list)
    embedding: EmbeddingReport = Field(default_factory=EmbeddingReport)
    seconds: dict[str, float] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def nothing_ingested(self) -> bool:
        """True when files were asked for and none is in the index now."""
        done = self.files_new + self.files_changed + self.files_unchanged
        return self.files_seen + len(self.failures) > 0 and done == 0 and self.files_removed == 0


@dataclass
class IngestEvent:
    """Progress, for a progress bar: ``kind`` is "plan", "file" or "embedded"."""

    kind: str
    files: int = 0
    chunks: int = 0
    tokens: int = 0
    path: str = ""


@dataclass
class _Pending:
    source: SourceFile
    sha256: str
    size: int
    documents: list[Document] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    is_new: bool = True
    replace: bool = True  # delete the file's old records first (False: a later part of a streamed file)
    complete: bool = True  # the file's last part: record its hash (False: more parts follow)
    n_chars: int | None = None  # length of a streamed document's text (its Document holds none)
    n_documents: int = 0  # documents in the earlier parts of a streamed file


def _open_index(index_dir: Path, config: IngestConfig,
                given: Embedder | None = None) -> tuple[Index, Embedder, TokenChunker]:
    if Index.exists(index_dir):
        index = Index.open(index_dir)
        try:
            recorded_model = index.manifest.model
            asked = DEFAULT_MODEL if config.model == "default" else config.model
            if asked is not None and asked != recorded_model:
                raise IndexMismatchError(
                    f"{index_dir}: built with model {recorded_model!r}, not {config.model!r}; use a new index"
                )
            if given is not None and given.model_name != recorded_model:
                raise IndexMismatchError(
                    f"{index_dir}: built with model {recorded_model!r}, the embedder given is {given.model_name!r}"
                )
            embedder = given or Embedder(recorded_model, device=config.device, batch_size=config.embed_batch_size,
                                         long_text=index.manifest.embedder.get("long_text", "window"))
            embedder.cache = index.store
            if config.redact is not None and config.redact != index.manifest.redact:
                built = "with" if index.manifest.redact else "without"
                raise IndexMismatchError(f"{index_dir}: built {built} --redact; keep the setting or use a new index")
            chunker = TokenChunker.from_dict(config.chunker_config(index.manifest.chunker).model_dump())
        except BaseException:
            index.close()
            raise
        return index, embedder, chunker
    chunk_cfg = config.chunker_config(None)
    chunker = TokenChunker.from_dict(chunk_cfg.model_dump())  # fails early on a bad tokenizer name
    embedder = given or Embedder(config.model or "default", device=config.device, batch_size=config.embed_batch_size)
    index = Index.create(index_dir, model=embedder.model_name, dim=embedder.dim, embedder=embedder.settings(),
                         tokenizer=chunk_cfg.tokenizer, chunker=chunk_cfg.model_dump(), index_type=config.index_type,
                         redact=bool(config.redact))
    embedder.cache = index.store
    return index, embedder, chunker


def ingest(
    paths: Sequence[str | Path],
    index_dir: str | Path,
    config: IngestConfig | None = None,
    progress: Callable[[IngestEvent], None] | None = None,
    embedder: Embedder | None = None,
    **overrides: Any,
) -> IngestReport:
    """Ingest files and folders into the index at ``index_dir`` (created if missing).

    Bad inputs never stop the run: they are listed in ``report.failures``. Pass an
    ``embedder`` to reuse a loaded model across calls (a notebook, a service);
    it must be the index's model. ``engine="ray"`` loads, chunks and embeds on a Ray
    cluster (``contextkit.distributed``): the same index, written here; each worker loads its own model.
    """
    config = (config or IngestConfig()).model_copy(update=overrides)
    run_batches = _run_batches
    if config.engine == "ray":  # connects first: an unreachable cluster leaves no index behind
        from contextkit.distributed import ray_batches

        run_batches = ray_batches(config)
    notify = progress or (lambda event: None)
    index_dir = Path(index_dir)
    clock = _Clock()
    report = IngestReport(index=str(index_dir))
    with clock("discover"):
        sources, errors = discover_files(paths, config.glob, config.follow_symlinks)
    report.failures += [FileFailure(path=e.path, reason=e.reason) for e in errors]
    report.files_seen = len(sources)
    given_cache = embedder.cache if embedder is not None else None
    with clock("open"):
        index, embedder, chunker = _open_index(index_dir, config, embedder)
    try:
        known = index.store.file_hashes()
        todo: list[_Pending] = []
        with clock("hash"):
            for src in sources:
                try:
                    sha, size = file_sha256(src.path), src.path.stat().st_size
                except OSError as exc:
                    report.failures.append(FileFailure(path=src.doc_id, reason=f"unreadable: {exc.strerror or exc}"))
                    continue
                if known.get(src.doc_id) == sha:
                    report.files_unchanged += 1
                else:
                    todo.append(_Pending(src, sha, size, is_new=src.doc_id not in known))
        notify(IngestEvent("plan", files=len(todo)))
        run_batches(todo, index, embedder, chunker, config, report, notify, clock)
        if config.prune:
            _prune(index, sources, known, errors, report)
        with clock("save"):
            index.save()
    finally:
        chunker.close()
        index.close()
        embedder.cache = given_cache  # the store is closed; a caller's embedder gets its own cache back
    report.seconds = clock.totals
    return report


def _run_batches(todo, index, embedder, chunker, config, report, notify, clock, redactor=None) -> None:
    """Load files in groups, chunk each group at once (in parallel with ``workers``), commit in batches.

    A file above ``config.stream_above_bytes`` is streamed instead (:mod:`contextkit._ingest_stream`): JSONL
    record by record, text window by window, unless the index redacts (PII redaction needs the
    whole text) or the tokenizer has no stable boundaries (then exact windowing is impossible).
    ``redactor``: the run's PII session when a caller shares one (the Ray engine); else one is made
    here for a redacting index.
    """
    batch: list[_Pending] = []
    group: list[_Pending] = []
    group_chars = 0
    # Enough text per group to keep every chunking worker busy, bounded for memory.
    group_target = config.batch_chunks * 4 * 256 * max(1, config.workers)
    redactor = redactor or (_redactor() if index.manifest.redact else None)
    limits = LoadLimits(max_parse_bytes=config.max_parse_bytes, pdf_timeout=config.pdf_timeout)
    can_stream = redactor is None and chunker.tokenizer.stable_mask("a b") is not None

    def chunk_group() -> None:
        nonlocal group, group_chars, batch
        if group:
            with clock("chunk"):
                batch += _chunk_group(group, chunker, config.workers, report)
            group, group_chars = [], 0

    for item in todo:
        stream = None
        if item.size > config.stream_above_bytes:
            if item.source.path.suffix.lower() == ".jsonl":  # record by record: any tokenizer, redaction too
                stream = TextStream(item.source, config.stream_block_bytes)
            elif can_stream:
                stream = open_text_stream(item.source, config.stream_block_bytes)
        if stream is not None:
            chunk_group()
            if batch:
                _commit_batch(batch, index, embedder, report, notify, clock)
                batch = []
            from contextkit._ingest_stream import stream_file

            stream_file(item, stream, index, embedder, chunker, config, report, notify, clock, redactor)
            continue
        if _load(item, limits, redactor, report, clock):
            group.append(item)
            group_chars += sum(len(d.text) for d in item.documents)
        if group_chars >= group_target:
            chunk_group()
        if sum(len(i.chunks) for i in batch) >= config.batch_chunks:
            _commit_batch(batch, index, embedder, report, notify, clock)
            batch = []
    chunk_group()
    if batch:
        _commit_batch(batch, index, embedder, report, notify, clock)


def _load(item: _Pending, limits: LoadLimits, redactor: Any, report: IngestReport, clock: _Clock) -> bool:
    """Load one file into ``item.documents`` (PII masked when ``redactor``); False when nothing of it is kept.

    Its load errors go to the report; a file that gave some documents keeps them, as does an empty one."""
    with clock("load"):
        result = load_file(item.source, limits)
    report.failures += [FileFailure(path=e.path, reason=e.reason) for e in result.errors]
    if not (result.documents or not result.errors):
        return False
    item.documents = result.documents
    if redactor is not None:
        with clock("redact"):
            item.documents = _redact(item.documents, redactor, report)
    return True


def _redactor() -> Any:
    from contextkit.compressors.redact import PIIRedactor

    return PIIRedactor()  # one session per run: a value keeps its placeholder across files


def _redact(documents: list[Document], redactor: Any, report: IngestReport) -> list[Document]:
    out = []
    for doc in documents:
        result = redactor.redact(doc.text)
        for kind, n in result.counts.items():
            report.redactions[kind] = report.redactions.get(kind, 0) + n
        out.append(replace(doc, text=result.text) if result.text != doc.text else doc)
    return out


def _chunk_group(group: list[_Pending], chunker: TokenChunker, workers: int, report: IngestReport) -> list[_Pending]:
    docs = [d for item in group for d in item.documents]
    try:
        per_doc = chunker.chunk_many(docs, workers=workers)
    except ValueError:  # a header too large for some document: find it, keep the others
        if len(group) == 1:
            item = group[0]
            try:
                per_doc = [chunker.chunk(d) for d in item.documents]
            except ValueError as exc:
                report.failures.append(FileFailure(path=item.source.doc_id, reason=str(exc)))
                return []
        else:
            return [ok for item in group for ok in _chunk_group([item], chunker, 1, report)]
    it = iter(per_doc)
    for item in group:
        chunks_per_doc = [next(it) for _ in item.documents]
        item.chunks = [c for chunks in chunks_per_doc for c in chunks]
        report.empty_documents += sum(1 for chunks in chunks_per_doc if not chunks)
    return group


def _commit_batch(batch: list[_Pending], index: Index, embedder: Embedder, report: IngestReport, notify,
                  clock) -> None:
    chunks = [c for item in batch for c in item.chunks]
    texts = [c.embedding_text for c in chunks]
    keys = [embedder.cache_key(t) for t in texts]
    with clock("embed"):  # the embedder's cache is the index store: it commits each slice of vectors
        vectors = embedder.embed(texts, progress=lambda n: notify(IngestEvent("embedded", chunks=n)), keys=keys)
    report.embedding.add(embedder.last_report)
    with clock("store"):
        index.begin()
        try:
            offset = 0
            for item in batch:
                key = item.source.doc_id
                if item.replace:
                    report.chunks_removed += index.delete_file(key)
                for doc in item.documents:
                    n_chars = len(doc.text) if item.n_chars is None else item.n_chars
                    index.store.put_document(doc.id, key, doc.source, item.sha256, n_chars, doc.metadata)
                n = len(item.chunks)
                index.add_chunks(item.chunks, vectors[offset : offset + n], keys[offset : offset + n],
                                 store_vectors=False)
                offset += n
                if item.complete:
                    index.store.put_file(key, item.sha256, item.size, item.n_documents + len(item.documents))
            index.commit()
        except BaseException:
            index.rollback()
            raise
    for item in batch:
        if item.complete:
            report.files_new += item.is_new
            report.files_changed += not item.is_new
        report.documents += len(item.documents)
        report.chunks_added += len(item.chunks)
        tokens = sum(c.token_count for c in item.chunks)
        report.tokens += tokens
        notify(IngestEvent("file", files=int(item.complete), chunks=len(item.chunks), tokens=tokens,
                           path=item.source.doc_id))


def _prune(index: Index, sources: list[SourceFile], known: dict[str, str], errors: list[LoadError],
           report: IngestReport) -> None:
    """Remove files that are in the index but no longer among the inputs."""
    if any(e.reason.startswith("no such file") for e in errors):
        report.failures.append(FileFailure(path="--prune", reason="skipped: an input path is missing"))
        return
    present = {s.doc_id for s in sources}
    gone = [path for path in known if path not in present]
    # Parts of a streamed file whose run was killed (no hash recorded) and that is no longer an input.
    unfinished = [row[0] for row in index.store.db.execute(
        "SELECT DISTINCT file FROM documents WHERE file IS NOT NULL AND file NOT IN (SELECT path FROM files)")
        if row[0] not in present]
    if not gone and not unfinished:
        return
    index.begin()
    for path in gone + unfinished:
        report.chunks_removed += index.delete_file(path)
    index.store.drop_unused_vectors()
    index.commit()
    report.files_removed = len(gone) + len(unfinished)


class _Clock:
    """Seconds spent per stage, for the report and the benchmark."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def __call__(self, stage: str) -> _Clock:
        self._stage = stage
        return self

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.totals[self._stage] = self.totals.get(self._stage, 0.0) + time.perf_counter() - self._t0
