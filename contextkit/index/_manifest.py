"""The index folder's ``manifest.json``, its errors, and the small file-system helpers a save needs.

Split out of :mod:`contextkit.index._index` so that module holds the ``Index`` class
alone; every name here is re-exported there, so ``contextkit.index._index.X`` keeps working.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from contextkit.index._bm25 import BM25Config
from contextkit.index._verify import FileSum, sqlite_header_problem
from contextkit.errors import IndexCorruptError, IndexFolderError, IndexLockedError, IndexMismatchError, IndexWriteError, StoreCorruptError, StoreWriteError

__all__ = ["FORMAT_VERSION", "SETTINGS_FIELDS", "IndexCorruptError", "IndexFolderError", "IndexLockedError",
           "IndexManifest", "IndexMismatchError", "IndexType", "IndexWriteError", "StoreCorruptError",
           "StoreWriteError"]

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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fsync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


_ERRNO_REASONS = {
    errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded", errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted (permissions or an immutable file)", errno.EROFS: "read-only file system",
}


def _write_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno in _ERRNO_REASONS:
        return f"{_ERRNO_REASONS[exc.errno]} ({exc.strerror})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc).strip().splitlines()[-1] if str(exc).strip() else exc.__class__.__name__


def _check_store_file(folder: Path) -> None:
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


def _stored_chunks(store: Path) -> int:
    """Chunks in a store file that has no manifest (0 when there is no such file or it is unreadable)."""
    if not store.is_file() or store.stat().st_size == 0:
        return 0
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5.0)
        try:
            return int(db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0

