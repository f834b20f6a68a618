"""The records of an ingestion run: its settings, its report, progress events, and a file in flight."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from contextkit.chunking import ChunkerConfig
from contextkit.core.config import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from contextkit.core.records import Chunk, Document
from contextkit.core.settings import Settings
from contextkit.embedders import Embedder, EmbeddingReport
from contextkit.index import IndexMismatchError
from contextkit.loaders import (
    SourceFile,
)


class IngestConfig(Settings):
    """Settings of an ingestion run. ``None`` means "as the index was built" (or the default).

    Unknown names are refused with :class:`~contextkit.errors.UnknownOptionError` (``chunk_sise=512``
    is a typo, not a setting to ignore), as every component refuses them. A new index chunks at
    :data:`~contextkit.config.DEFAULT_CHUNK_SIZE` / ``DEFAULT_CHUNK_OVERLAP`` tokens, the
    same defaults as ``contextkit chunk`` and :class:`~contextkit.TokenChunker`. The ``[ingest]`` table
    of ``contextkit.toml`` is read by :meth:`from_config` (the CLI reads it the same way); a field's
    ``aliases`` are the names the CLI gives it (``overlap``, ``embed_model``, ``stream_above`` in MiB).
    """

    section = "ingest"

    # Checked once, by the ChunkerConfig they make (see _chunk_settings), not here as well.
    chunk_size: int | None = None
    chunk_overlap: int | None = Field(None, json_schema_extra={"aliases": {"overlap": 1}})
    tokenizer: str | None = None
    header: str | None = None
    model: str | None = Field(None, json_schema_extra={"aliases": {"embed_model": 1}})
    index_type: Literal["flat", "hnsw", "ivf", "ivfpq", "auto"] = "flat"
    glob: str | list[str] | None = Field(None, description="only files matching this pattern (or any of these)")
    exclude: list[str] = Field(default_factory=list, description="files and folders matching these patterns "
                               "are passed by (a folder is not walked), e.g. '_sources', '*.min.js'")
    skip_duplicates: bool = Field(True, description="a file with the same content (SHA-256) as one already "
                                  "indexed or taken earlier in the run is not indexed again; the report names it")
    default_excludes: bool = Field(True, description="pass by generated assets of documentation builds (Sphinx's "
                                   "_sources and _static, search and index pages, minified bundles); the report "
                                   "counts them")
    workers: int = Field(1, ge=1)
    prune: bool = False
    reprocess: bool = Field(False, description="load and chunk every file again, those whose content is unchanged "
                            "too: after an upgrade of contextkit whose loaders read a format differently (a file is "
                            "otherwise skipped while its SHA-256 is the one indexed). Chunks whose text comes out the "
                            "same keep their vectors: nothing is embedded again for them")
    batch_chunks: int = Field(512, ge=1, description="chunks embedded and committed together")
    device: str = "auto"
    embed_batch_size: int | None = Field(None, ge=1, description="texts per model call (None: 512 on CUDA, else 64)")
    redact: bool | None = Field(None, description="mask PII before chunking (None: as the index was built)")
    follow_symlinks: bool = Field(False, description="follow symlinks leading outside the folders named")
    stream_above_bytes: int = Field(64 << 20, ge=0, description="text files larger than this are streamed",
                                    json_schema_extra={"aliases": {"stream_above": 1 << 20}})
    stream_block_bytes: int = Field(1 << 20, ge=1, description="bytes read (and chars windowed) at a time when streaming")
    max_parse_bytes: int = Field(256 << 20, ge=1, description="HTML/PDF files larger than this are reported, not parsed")
    pdf_timeout: float | None = Field(60.0, gt=0, description="seconds one PDF may take to parse (None: no limit)")
    engine: Literal["local", "ray"] = Field("local", description="ray: load, chunk and embed on a Ray cluster")
    ray_address: str | None = Field(None, description="engine='ray': auto, HOST:6379 or ray://HOST:10001",
                                    json_schema_extra={"aliases": {"address": 1}})
    num_gpus: float = Field(0, ge=0, description="engine='ray': GPUs for embedding actors (0: CPUs)")

    _new_chunker: ChunkerConfig | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _chunk_settings(self) -> IngestConfig:
        """The chunk settings of a new index, checked here once, as the :class:`ChunkerConfig` that
        ingestion hands to the chunker as it is (``--chunk-size`` is checked once, in one place).

        A value wrong on its own (``chunk_size=0``) or a pair given together that cannot work
        (``chunk_overlap >= chunk_size``) is refused now. A size given alone that only clashes with
        the *default* overlap is left to the run: the index's own recorded overlap may suit it."""
        given = self._chunk_fields()
        try:
            settings: dict[str, Any] = {"chunk_size": DEFAULT_CHUNK_SIZE, "chunk_overlap": DEFAULT_CHUNK_OVERLAP,
                                        **given}
            self._new_chunker = ChunkerConfig(**settings)
        except ValueError as exc:
            if {"chunk_size", "chunk_overlap"} <= given.keys() or not _alone_valid(given):
                raise ValueError(str(exc).removeprefix("ChunkerConfig: ")) from None  # named once, as IngestConfig
        return self

    def _chunk_fields(self) -> dict[str, Any]:
        return {k: v for k, v in {
            "chunk_size": self.chunk_size, "chunk_overlap": self.chunk_overlap,
            "tokenizer": self.tokenizer, "header": self.header,
        }.items() if v is not None}

    def with_options(self, owner: str | None = "ingest()", **overrides: Any) -> IngestConfig:
        """This config with ``overrides`` applied and validated; an unknown name names ``owner``."""
        return super().with_options(owner, **overrides)

    def new_embedder(self) -> Embedder:
        """The embedder for a new index: ``model`` (the default model when unset), ``device``, ``embed_batch_size``."""
        return Embedder(self.model or "default", device=self.device, batch_size=self.embed_batch_size)

    def chunker_config(self, recorded: dict[str, Any] | None) -> ChunkerConfig:
        """The chunk settings to use: a new index's, checked when this config was made, or the index's
        own (read from its manifest, untrusted, so checked here), refusing any asked that differ."""
        wanted = self._chunk_fields()
        if not recorded:
            if self._new_chunker is not None:
                return self._new_chunker
            return ChunkerConfig(**{"chunk_size": DEFAULT_CHUNK_SIZE, "chunk_overlap": DEFAULT_CHUNK_OVERLAP,
                                    **wanted})
        clash = {k: (recorded.get(k), v) for k, v in wanted.items() if recorded.get(k) != v}
        if clash:
            said = ", ".join(f"{k}: index has {old!r}, asked {new!r}" for k, (old, new) in clash.items())
            raise IndexMismatchError(f"chunk settings differ from the index's ({said}); ingest into a new index")
        return ChunkerConfig(**recorded)


def _alone_valid(given: dict[str, Any]) -> bool:
    """Whether the chunk values given pass ChunkerConfig's own checks beside a partner that suits them
    (a size alone with no overlap; an overlap alone with a size one larger)."""
    overlap = given.get("chunk_overlap")
    partner = {"chunk_overlap": 0} if "chunk_size" in given else (
        {"chunk_size": overlap + 1} if isinstance(overlap, int) else {})
    try:
        ChunkerConfig(**{**partner, **given})
    except ValueError:
        return False
    return True


class FileFailure(BaseModel):
    path: str
    reason: str


class IngestReport(BaseModel):
    """What a run did; the CLI prints it as a table, ``--json`` as JSON."""

    index: str
    files_seen: int = 0
    files_new: int = 0
    files_changed: int = Field(default=0, description="files indexed before and written again: their content "
                               "changed, or reprocess (then files_reprocessed counts them too)")
    files_reprocessed: int = Field(default=0, description="files whose content was unchanged, loaded and chunked "
                                   "again because reprocess was set (also counted in files_changed)")
    files_unchanged: int = 0
    files_removed: int = 0
    files_duplicate: int = Field(default=0, description="files with the content of one already indexed or taken "
                                 "in this run: not indexed again (a note names each and its first copy)")
    documents: int = 0
    empty_documents: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    tokens: int = 0
    redactions: dict[str, int] = Field(default_factory=dict, description="PII masked, by kind (--redact)")
    failures: list[FileFailure] = Field(default_factory=list)
    notes: list[FileFailure] = Field(
        default_factory=list, description="what was passed by on purpose: index folders, a file reached twice")
    embedding: EmbeddingReport = Field(default_factory=EmbeddingReport)
    seconds: dict[str, float] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def nothing_ingested(self) -> bool:
        """True when no file asked for is in the index now (none found, or every one failed)."""
        done = self.files_new + self.files_changed + self.files_unchanged + self.files_duplicate
        return done == 0 and self.files_removed == 0


#: What an :class:`IngestEvent` reports: the plan made, a batch chunked, chunks embedded, a file done.
IngestEventKind = Literal["plan", "chunked", "embedded", "file"]


@dataclass
class IngestEvent:
    """Progress, for a progress bar. By ``kind``:

    * "plan": ``files`` to do and their size in ``bytes``, once, before any work;
    * "chunked": a batch read and chunked, before it is embedded: ``chunks`` and ``tokens`` made,
      ``files`` (and their ``bytes``) whose last chunks are among them. Why: a batch takes minutes to
      embed on a CPU, and "file" comes only after; this tells a bar how much work there is, so it can
      show chunks embedded out of chunks known, and estimate the total (``bytes`` read of the plan's);
    * "embedded": ``chunks`` given a vector (or found in the cache), a slice at a time;
    * "file": a file (or one part of a streamed file) committed, its ``chunks`` and ``tokens``.
    """

    kind: IngestEventKind
    files: int = 0
    chunks: int = 0
    tokens: int = 0
    path: str = ""
    bytes: int = 0


@dataclass
class Pending:
    source: SourceFile
    sha256: str
    size: int
    documents: list[Document] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    is_new: bool = True
    reprocess: bool = False  # indexed with the same content, re-read because IngestConfig.reprocess is set
    replace: bool = True  # delete the file's old records first (False: a later part of a streamed file)
    complete: bool = True  # the file's last part: record its hash (False: more parts follow)
    n_chars: int | None = None  # length of a streamed document's text (its Document holds none)
    n_documents: int = 0  # documents in the earlier parts of a streamed file


class Clock:
    """Seconds spent per stage, for the report and the benchmark."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def __call__(self, stage: str) -> Clock:
        self._stage = stage
        return self

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.totals[self._stage] = self.totals.get(self._stage, 0.0) + time.perf_counter() - self._t0
