"""Durable writes in the index folder, the names of a save's temporary files, and why a write failed.

Shared by :mod:`._index` (the manifest, BM25), :mod:`._vector_files` (the FAISS files),
:mod:`.verify` (it reports leftovers) and :mod:`.repair` (it removes them). The writes are
:mod:`contextkit.core.atomic`'s, under the temporary names below.
"""

from __future__ import annotations

import errno
from pathlib import Path

from contextkit.core.atomic import fsync_dir, write_bytes_atomic
from contextkit.index._faiss_kinds import DELTA_FILES

__all__ = ["ERRNO_REASONS", "LEFTOVERS", "TEMPORARIES", "atomic_write", "fsync_dir", "write_reason"]

#: What a save writes under a temporary name, then renames into place.
TEMPORARIES = ("vectors.faiss.tmp", "manifest.json.tmp", "bm25.tmp", "vectors.ids.npy.tmp",
               *(f"{name}.tmp" for name in DELTA_FILES))
#: Temporary names a save writes then renames; left behind only by an interrupted save.
LEFTOVERS = ("vectors.faiss.tmp", "manifest.json.tmp", "bm25.tmp", "bm25.old", "vectors.ids.npy.tmp",
             "vectors.f16.npy.build", *(f"{name}.tmp" for name in DELTA_FILES))

ERRNO_REASONS = {
    errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded", errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted (permissions or an immutable file)", errno.EROFS: "read-only file system",
}


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through ``<name>.tmp`` beside it, fsynced, renamed, the folder fsynced."""
    write_bytes_atomic(path, data, temporary=path.name + ".tmp")


def write_reason(exc: BaseException) -> str:
    """One phrase for a failed write ("the disk is full (...)"), for messages that name the file."""
    if isinstance(exc, OSError) and exc.errno in ERRNO_REASONS:
        return f"{ERRNO_REASONS[exc.errno]} ({exc.strerror})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc).strip().splitlines()[-1] if str(exc).strip() else exc.__class__.__name__
