"""Durable writes in the index folder, the names of a save's temporary files, and why a write failed.

A leaf shared by :mod:`._index` (the manifest, BM25), :mod:`._vector_files` (the FAISS files),
:mod:`.verify` (it reports leftovers) and :mod:`.repair` (it removes them).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

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


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a crash after it then keeps the new name)."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, rename it into place."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_reason(exc: BaseException) -> str:
    """One phrase for a failed write ("the disk is full (...)"), for messages that name the file."""
    if isinstance(exc, OSError) and exc.errno in ERRNO_REASONS:
        return f"{ERRNO_REASONS[exc.errno]} ({exc.strerror})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc).strip().splitlines()[-1] if str(exc).strip() else exc.__class__.__name__
