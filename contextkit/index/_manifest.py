"""The index folder's ``manifest.json``: its model, and the checks made before anything else is read.

Imports only leaves (:mod:`._bm25` for the default BM25 settings, :mod:`._checksums`,
:mod:`contextkit.errors`), so :class:`~contextkit.index.Index`, ``verify`` and ``repair`` can
all read a manifest without importing each other.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from contextkit.errors import IndexCorruptError
from contextkit.index._bm25 import BM25Config
from contextkit.index._checksums import FileSum, sqlite_header_problem

__all__ = ["FORMAT_VERSION", "SETTINGS_FIELDS", "IndexManifest", "IndexType", "check_store_file", "connect_ro",
           "describe_invalid", "now", "settings_copy", "stored_chunks"]

FORMAT_VERSION = 1
IndexType = Literal["flat", "hnsw", "ivf", "ivfpq", "auto"]


class IndexManifest(BaseModel):
    """``manifest.json``: what built the index, so a reader can check it fits."""

    format_version: int = FORMAT_VERSION
    model: str
    dim: int
    embedder: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str = "cl100k_base"
    chunker: dict[str, Any] = Field(default_factory=dict)
    redact: bool = Field(default=False, description="PII was masked before chunking (contextkit ingest --redact)")
    index_type: IndexType = "flat"
    hnsw_m: int = 32
    hnsw_ef_search: int = 128
    hnsw_ef_construction: int = 80
    ivfpq_m: int = Field(default=0, description="ivfpq: PQ sub-vectors (0: by size at each training, dim/8 or dim/4)")
    ivfpq_nbits: int = Field(default=8, description="ivfpq: bits per PQ sub-vector code")
    ivfpq_nprobe: int = Field(default=8, description="ivfpq: inverted lists visited per query")
    # 200: at 10M vectors (bench/bench_10m.py) Recall@10 0.982 vs 0.959 for 100, at the same p50 within the noise
    ivfpq_refine: int = Field(default=200, description="ivfpq: IVF-PQ candidates re-scored exactly (float16 vectors)")
    metric: Literal["ip"] = "ip"
    bm25: dict[str, Any] = Field(default_factory=lambda: BM25Config().model_dump())
    generation: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    checksums: dict[str, FileSum] = Field(
        default_factory=dict, description="size and SHA-256 of vectors.faiss (ivfpq: and vectors.f16.npy, vectors.ids.npy) and each bm25/ file, as last saved")


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
    if not path.is_file():
        raise IndexCorruptError(f"{path}: missing; {lost}", file="store.sqlite")
    problem = sqlite_header_problem(path)
    if problem:
        raise IndexCorruptError(f"{path}: damaged: {problem}; {lost} (`contextkit verify --index {folder}` "
                                "checks everything)", file="store.sqlite")


def connect_ro(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A read-only connection to a store file (``mode=ro``: it never creates or changes one)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)


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
