"""The records of an ingestion run: its settings, its report, progress events, and a file in flight."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from contextkit.chunking import ChunkerConfig
from contextkit.embedders import Embedder, EmbeddingReport
from contextkit.index import IndexMismatchError
from contextkit.loaders import (
    SourceFile,
)
from contextkit.records import Chunk, Document


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

    def new_embedder(self) -> Embedder:
        """The embedder for a new index: ``model`` (the default model when unset), ``device``, ``embed_batch_size``."""
        return Embedder(self.model or "default", device=self.device, batch_size=self.embed_batch_size)

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
class Pending:
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
