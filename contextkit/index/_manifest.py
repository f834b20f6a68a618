"""The index folder's ``manifest.json``: its model, and the checks made before anything else is read.

Imports only leaves (:mod:`._bm25` for the default BM25 settings, :mod:`._checksums`,
:mod:`contextkit.errors`), so :class:`~contextkit.index.Index`, ``verify`` and ``repair`` can
all read a manifest without importing each other.
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import IndexCorruptError
from contextkit.index._bm25 import BM25Config
from contextkit.index._checksums import FileSum, sqlite_header_problem

__all__ = [
    "FORMAT_VERSION",
    "SETTINGS_FIELDS",
    "IndexManifest",
    "IndexType",
    "check_store_file",
    "connect_ro",
    "describe_invalid",
    "now",
    "ro_uri",
    "settings_copy",
    "stored_chunks",
]

FORMAT_VERSION = 1
#: The largest vector dimension accepted from a manifest (the largest embedding models give 4,096-8,192).
MAX_DIM = 65536
IndexType = Literal["flat", "hnsw", "ivf", "ivfpq", "auto"]


class IndexManifest(BaseModel):
    """``manifest.json``: what built the index, so a reader can check it fits."""

    format_version: int = FORMAT_VERSION
    model: str
    dim: int = Field(ge=1, le=MAX_DIM)
    embedder: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str = DEFAULT_TOKENIZER
    chunker: dict[str, Any] = Field(default_factory=dict)
    redact: bool = Field(default=False, description="PII was masked before chunking (contextkit ingest --redact)")
    index_type: IndexType = "flat"
    # Bounds: a manifest may come from elsewhere, and FAISS allocates by these values before it
    # can fail (hnsw_m 1,000,000 aborts the interpreter with std::bad_alloc); each bound is far
    # above any useful setting.
    hnsw_m: int = Field(default=32, ge=2, le=512)
    hnsw_ef_search: int = Field(default=128, ge=1, le=1 << 16)
    hnsw_ef_construction: int = Field(default=80, ge=1, le=1 << 16)
    ivfpq_m: int = Field(default=0, ge=0, le=MAX_DIM,
                         description="ivfpq: PQ sub-vectors (0: by size at each training, dim/8 or dim/4)")
    ivfpq_nbits: int = Field(default=8, ge=1, le=16, description="ivfpq: bits per PQ sub-vector code")
    ivfpq_nprobe: int = Field(default=8, ge=1, le=1 << 20, description="ivfpq: inverted lists visited per query")
    # 200: chosen at 10M vectors by bench/bench_10m.py (better recall than 100 at the same p50 within the noise)
    ivfpq_refine: int = Field(default=200, ge=0, le=1 << 20,
                              description="ivfpq: IVF-PQ candidates re-scored exactly (float16 vectors)")
    metric: Literal["ip"] = "ip"
    bm25: dict[str, Any] = Field(default_factory=lambda: BM25Config().model_dump())
    generation: int = Field(default=0, ge=-1, le=1 << 62)
    counts: dict[str, int] = Field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    checksums: dict[str, FileSum] = Field(
        default_factory=dict, description="size and SHA-256 of vectors.faiss (ivfpq: and vectors.f16.npy, vectors.ids.npy) and each bm25/ file, as last saved")
    files: dict[str, str] = Field(
        default_factory=dict, description="the file each role (vectors.faiss, bm25, ...) is in for this generation, "
        "e.g. vectors.12.faiss; empty in a folder saved before generations had their own files")

    @field_validator("bm25")
    @classmethod
    def _bm25_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        BM25Config(**value)  # an unknown stemmer, method or stop-word list: refused with the manifest
        return value

    @field_validator("counts")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        if any(n < 0 for n in value.values()):
            raise ValueError("a negative count")
        return value

    @field_validator("files")
    @classmethod
    def _plain_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value.values():  # names in the folder, never paths out of it
            if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
                raise ValueError(f"file name {name!r} is not a plain name in the index folder")
        return value

    def file(self, role: str) -> str:
        """The name in the folder of the file playing ``role`` (``vectors.faiss``, ``bm25``, a ``bm25/`` file)."""
        if role.startswith("bm25/"):
            return f"{self.files.get('bm25', 'bm25')}/{role[5:]}"
        return self.files.get(role, role)

    def top_level_names(self) -> frozenset[str]:
        """The names in the folder this generation's files occupy (what the cleanup of older ones keeps)."""
        if not self.files:  # the older single-set layout: all of its names are this generation's
            return frozenset({"vectors.faiss", "vectors.f16.npy", "vectors.ids.npy", "vectors.delta.npy",
                              "vectors.delta_ids.npy", "vectors.deleted.npy", "bm25"})
        return frozenset({*self.files.values(), *(self.file(k).split("/")[0] for k in self.checksums)})


#: Manifest fields that never change after creation; the store keeps a copy (meta ``manifest_settings``)
#: from which ``contextkit repair`` restores a lost or damaged manifest.
SETTINGS_FIELDS = ("format_version", "model", "dim", "embedder", "tokenizer", "chunker", "redact", "index_type",
                   "hnsw_m", "hnsw_ef_search", "hnsw_ef_construction", "ivfpq_m", "ivfpq_nbits", "ivfpq_nprobe",
                   "ivfpq_refine", "metric", "bm25", "created_at")


def now() -> str:
    """The manifest's timestamps: UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def describe_invalid(exc: ValueError) -> str:
    """One line for a manifest that does not parse or validate."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            return f"{first['msg']}{f' at {where}' if where else ''}"
        except (IndexError, KeyError, TypeError):
            pass
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0] if text else ''}"


def check_store_file(folder: Path) -> None:
    """Refuse a missing, empty, non-SQLite or truncated ``store.sqlite`` before SQLite touches it."""
    path = folder / "store.sqlite"
    lost = ("it is the index's source of truth (chunks, texts, vectors) and cannot be rebuilt: restore it from a "
            "backup or re-ingest into a new index")
    if not os.path.lexists(path):  # a link to a device is no store: sqlite_header_problem says what it is
        raise IndexCorruptError(f"{path}: missing; {lost}", file="store.sqlite")
    problem = sqlite_header_problem(path)
    if problem:
        raise IndexCorruptError(f"{path}: damaged: {problem}; {lost} (`contextkit verify --index {folder}` "
                                "checks everything)", file="store.sqlite")


def ro_uri(path: Path) -> str:
    """The URI that opens a store file read-only (``mode=ro``: it never creates or changes one).

    In a folder the process cannot write (a read-only mount, another user's files) SQLite cannot
    make the ``-shm`` file a WAL reader needs; when there is no ``-wal`` file either, no writer is
    active (a writer keeps it), so the file is read as it is (``immutable=1``)."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    if not os.access(path.parent, os.W_OK) and not path.with_name(path.name + "-wal").exists():
        uri += "&immutable=1"
    return uri


def connect_ro(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A read-only connection to a store file (see :func:`ro_uri`), with ``trusted_schema`` off."""
    db = sqlite3.connect(ro_uri(path), uri=True, timeout=timeout)
    db.execute("PRAGMA trusted_schema=OFF")
    return db


def settings_copy(db: sqlite3.Connection) -> dict | None:
    """The store's copy of the manifest settings (meta ``manifest_settings``); None without one or when unreadable."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'manifest_settings'").fetchone()
    except sqlite3.Error:
        return None
    return json.loads(row[0]) if row else None


def stored_chunks(store: Path) -> int:
    """Chunks in a store file that has no manifest (0 when there is no such file or it is unreadable)."""
    if not store.is_file() or store.stat().st_size == 0:
        return 0
    try:
        db = connect_ro(store, timeout=5.0)
        try:
            return int(db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0
