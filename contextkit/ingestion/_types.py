"""The records of an ingestion run: its settings, its report, progress events, and a file in flight."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contextkit.chunking import ChunkerConfig
from contextkit.chunking.token import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from contextkit.embedders import Embedder, EmbeddingReport
from contextkit.index import IndexMismatchError
from contextkit.loaders import (
    SourceFile,
)
from contextkit.records import Chunk, Document


#: ``contextkit.toml`` ``[ingest]`` keys that are CLI option names, and the field each sets.
_CLI_NAMES = {"overlap": "chunk_overlap", "address": "ray_address", "embed_model": "model"}
#: ``[ingest]`` keys that only the CLI reads (how it prints), not settings of a run.
_CLI_ONLY = frozenset({"index", "strict", "quiet", "json", "as_json"})


def unknown_option(owner: str, name: str, known: list[str]) -> str:
    """``owner got an unknown option 'chunk_sise'; did you mean 'chunk_size'?`` (one line)."""
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(known))}"
    return f"{owner} got an unknown option {name!r}{hint}"


class IngestConfig(BaseModel):
    """Settings of an ingestion run. ``None`` means "as the index was built" (or the default).

    Unknown names are refused (``chunk_sise=512`` is a typo, not a setting to ignore), as
    :class:`~contextkit.ContextAssembler` refuses them. A new index chunks at
    :data:`~contextkit.chunking.token.DEFAULT_CHUNK_SIZE` / ``DEFAULT_CHUNK_OVERLAP`` tokens, the
    same defaults as ``contextkit chunk`` and :class:`~contextkit.TokenChunker`.
    """

    model_config = ConfigDict(extra="forbid")

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

    def __init__(self, **data: Any) -> None:
        unknown = [name for name in data if name not in type(self).model_fields]
        if unknown:
            from contextkit.errors import UnknownOptionError

            raise UnknownOptionError(unknown_option("IngestConfig", unknown[0], list(type(self).model_fields)))
        super().__init__(**data)

    def with_options(self, owner: str = "ingest()", **overrides: Any) -> IngestConfig:
        """This config with ``overrides`` applied and validated; an unknown name is an
        :class:`~contextkit.errors.UnknownOptionError` naming ``owner`` and the closest known name
        (``model_copy(update=...)`` would take ``chunk_sise=512`` without a word)."""
        fields = list(type(self).model_fields)
        for name in overrides:
            if name not in type(self).model_fields:
                from contextkit.errors import UnknownOptionError

                raise UnknownOptionError(unknown_option(owner, name, fields))
        if not overrides:
            return self
        return type(self).model_validate({**self.model_dump(exclude_unset=True), **overrides})

    @classmethod
    def from_config(cls, path: str | Path | None = None, **overrides: Any) -> IngestConfig:
        """The ``[ingest]`` table of ``contextkit.toml`` (see :mod:`contextkit.config`), then ``overrides``.

        The table's keys are the CLI's option names (``overlap``, ``embed_model``, ``stream_above``
        in MiB); keys only the CLI reads (``strict``, ``quiet``, ``json``) are passed by."""
        from contextkit.config import load_config

        table = {k: v for k, v in load_config(path).get("ingest", {}).items() if k not in _CLI_ONLY}
        for cli_name, field_name in _CLI_NAMES.items():
            if cli_name in table:
                table[field_name] = table.pop(cli_name)
        if "stream_above" in table:
            table["stream_above_bytes"] = int(float(table.pop("stream_above")) * (1 << 20))
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
            return ChunkerConfig(**{"chunk_size": DEFAULT_CHUNK_SIZE, "chunk_overlap": DEFAULT_CHUNK_OVERLAP,
                                    **wanted})
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
        done = self.files_new + self.files_changed + self.files_unchanged
        return done == 0 and self.files_removed == 0


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
