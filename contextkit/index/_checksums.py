"""Checksums of the derived files, and cheap looks at file headers (see :mod:`.verify` for when each runs).

A leaf of the package: ``Index.open``, ``Index.save`` and ``verify`` all check files the same
way, and none of them has to import another to do it. The costs behind the two limits below
are in :mod:`contextkit.index.verify`'s docstring.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from contextkit.index._safe_files import not_regular, opened

__all__ = ["FULL_CHECK_ON_OPEN", "RACY_SECONDS", "SAMPLE_BYTES", "FileSum", "check_file", "check_file_on_open",
           "faiss_header_count", "file_sum", "npy_header", "npy_load", "npy_shape", "sqlite_header_problem"]

#: Bytes read from each end of a file for its sample hash.
SAMPLE_BYTES = 1 << 20
#: Files up to this size are fully hashed on every open; larger ones by their sample hashes.
FULL_CHECK_ON_OPEN = 8 << 20
#: Blocks spread evenly over the middle of a large file, and their size, for its spread hash: open reads
#: 2 MiB at the ends plus 64 x 16 KiB between them (3 MiB whatever the size), a few milliseconds.
SPREAD_BLOCKS, SPREAD_BYTES = 64, 16 << 10


class FileSum(BaseModel):
    """What ``manifest.json`` records of one derived file."""

    size: int
    sha256: str
    sample_sha256: str = Field(description="sha256 of the size (8 bytes LE), the first and the last MiB")
    spread_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description=(
        "sha256 of 64 blocks of 16 KiB spread evenly between the first and the last MiB (absent in "
        "manifests written before it: those files are checked by their ends)"))


def _full_sha256(path: Path) -> str:
    with opened(path) as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _sample_sha256(path: Path, size: int) -> str:
    h = hashlib.sha256(size.to_bytes(8, "little"))
    with opened(path) as fh:
        if size <= 2 * SAMPLE_BYTES:
            h.update(fh.read())
        else:
            h.update(fh.read(SAMPLE_BYTES))
            fh.seek(size - SAMPLE_BYTES)
            h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()


def _spread_offsets(size: int) -> list[int]:
    """Where the spread blocks of a file of ``size`` bytes start: evenly between its two end samples."""
    lo, hi = SAMPLE_BYTES, size - SAMPLE_BYTES - SPREAD_BYTES
    if hi <= lo:
        return []
    step = (hi - lo) / max(1, SPREAD_BLOCKS - 1)
    return sorted({lo + round(i * step) for i in range(SPREAD_BLOCKS)})


def _spread_sha256(path: Path, size: int) -> str:
    """The hash of the spread blocks: a damaged run longer than ``size / 63`` always touches one."""
    h = hashlib.sha256(size.to_bytes(8, "little"))
    with opened(path) as fh:
        for offset in _spread_offsets(size):
            fh.seek(offset)
            h.update(fh.read(SPREAD_BYTES))
    return h.hexdigest()


def file_sum(path: Path, sha256: str | None = None) -> FileSum:
    """Size and hashes of ``path`` (``sha256`` when the caller hashed it while writing)."""
    size = path.stat().st_size
    return FileSum(size=size, sha256=sha256 or _full_sha256(path), sample_sha256=_sample_sha256(path, size),
                   spread_sha256=_spread_sha256(path, size))


def check_file(path: Path, recorded: FileSum, full: bool) -> str | None:
    """What is wrong with ``path`` against its record, or None. ``full``: hash every byte.

    A link, FIFO or device in the file's place is named as such, never followed or read."""
    if not os.path.lexists(path):
        return "missing"
    if (kind := not_regular(path)) is not None:
        return kind
    size = path.lstat().st_size
    if size != recorded.size:
        return f"{size} bytes, manifest.json records {recorded.size} (truncated or overwritten)"
    if full or size <= FULL_CHECK_ON_OPEN:
        if _full_sha256(path) != recorded.sha256:
            return "content differs from the SHA-256 in manifest.json (bit flip or overwritten)"
    elif _sample_sha256(path, size) != recorded.sample_sha256:
        return "first or last MiB differs from the hash in manifest.json (overwritten)"
    elif recorded.spread_sha256 is not None and _spread_sha256(path, size) != recorded.spread_sha256:
        return ("a block sampled from its middle differs from the hash in manifest.json (overwritten, "
                "a hole or a bit flip)")
    return None


#: A file changed less than this long before its check is hashed again on the next open: a filesystem with
#: coarse timestamps could give a later write the same mtime and ctime (git's "racily clean" files).
RACY_SECONDS = 2.0
#: How many checked files a process remembers (about 200 bytes each).
_CLEAN_MAX = 4096
_CLEAN: OrderedDict[tuple[object, ...], None] = OrderedDict()
_CLEAN_LOCK = threading.Lock()


def check_file_on_open(path: Path, recorded: FileSum) -> str | None:
    """:func:`check_file` as an open runs it (``full=False``), once per file and process while the file
    stays as it was: a file this process found matching ``recorded``, whose device, inode, size, mtime and
    ctime are still what they were before and after that check (and were older than
    :data:`RACY_SECONDS` then), is not hashed again.

    Why: a search that opens the index each call (``search_index``, the CLI's ``search`` in a loop, a
    worker per request) hashed every small file on every open, about 15 ms of a 40 ms call on a
    20,000-chunk index. The files of a generation never change once saved, and any write to a file,
    a rename over it or an ``os.utime`` changes its ctime, which no program can set back: a file damaged or
    replaced since is hashed again and caught. Bit rot under an unchanged inode is what ``contextkit
    verify`` is for (it hashes every byte, every time, and never asks this cache)."""
    before = _stat_key(path)
    key = (os.fspath(path), before, recorded.size, recorded.sha256, recorded.sample_sha256, recorded.spread_sha256)
    if before is not None:
        with _CLEAN_LOCK:
            if key in _CLEAN:
                _CLEAN.move_to_end(key)
                return None
    problem = check_file(path, recorded, full=False)
    if problem is None and before is not None and _stat_key(path) == before and \
            time.time_ns() - max(before[3], before[4]) >= RACY_SECONDS * 1e9:
        with _CLEAN_LOCK:
            _CLEAN[key] = None
            while len(_CLEAN) > _CLEAN_MAX:
                _CLEAN.popitem(last=False)
    return problem


def _stat_key(path: Path) -> tuple[int, int, int, int, int] | None:
    """(device, inode, size, mtime, ctime) of a regular file; None for anything else or a missing path."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def sqlite_header_problem(path: Path) -> str | None:
    """A cheap look at a SQLite file's header: not SQLite, or shorter than its page count says; or it, its
    ``-wal`` or its ``-shm`` not a regular file (SQLite would open a FIFO there and wait, or map a device)."""
    for side in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if (kind := not_regular(side)) is not None:
            return f"{side.name} is {kind}"
    wal_size = _size_if_present(path.with_name(path.name + "-wal"))
    # The header first, then the size of the same open file: a writer's checkpoint may grow the file between
    # two looks (and a closing writer deletes its WAL), never shrink it, so this order cannot see a false cut.
    with opened(path) as fh:
        head = fh.read(100)
        size = os.fstat(fh.fileno()).st_size
    if size == 0:
        return "empty file (0 bytes)"
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        return f"not a SQLite database ({size} bytes, no SQLite header)"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The page count is valid when the change counter matches "version-valid-for"; with a WAL
    # pending, the file may legitimately be shorter (a checkpoint was interrupted), so skip then.
    if wal_size == 0 and pages and head[24:28] == head[92:96] and size < pages * page_size:
        return f"truncated: {size} bytes, its header says {pages} pages of {page_size} bytes"
    return None


def _size_if_present(path: Path) -> int:
    """The size of ``path``, 0 when it is missing or vanishes while looked at (a live SQLite's ``-wal``)."""
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return 0


def faiss_header_count(path: Path) -> int | None:
    """The vector count in a FAISS ``IndexIDMap``/``IndexIDMap2`` file's header, read without FAISS."""
    try:
        with opened(path) as fh:
            head = fh.read(16)
    except (OSError, ValueError, RuntimeError):  # missing, or not a regular file (IndexCorruptError)
        return None
    if len(head) < 16 or head[:4] not in (b"IxM2", b"IxMp"):
        return None
    return int.from_bytes(head[8:16], "little", signed=True)


#: Held while a ``.npy`` header is parsed (by :func:`npy_header` or ``np.load``): numpy parses it with
#: ``ast.literal_eval``, and on CPython 3.11 two threads building ASTs at once can fail with ``SystemError:
#: AST constructor recursion depth mismatch`` (python/cpython#106905): four threads' first searches of one
#: index, each loading its BM25 files, did (CI, ``test_aretrieve_from_several_threads_at_once``).
NPY_READ_LOCK = threading.Lock()


def npy_load(source: Any, **kwargs: Any) -> Any:
    """``np.load(source, allow_pickle=False, **kwargs)`` under :data:`NPY_READ_LOCK`."""
    import numpy as np

    with NPY_READ_LOCK:
        return np.load(source, allow_pickle=False, **kwargs)


def npy_header(path: Path) -> tuple[str, tuple[int, ...]] | None:
    """``(dtype string, shape)`` from a ``.npy`` file's header, read without loading it (None: not a plain
    ``.npy``, Fortran order, or a size the file does not hold).

    Why: a crafted header can claim 10^11 rows; ``np.load`` would then try to allocate them (MemoryError)
    before noticing the file is short. The header is checked against the file size first."""
    import numpy as np
    from numpy.lib import format as npy

    try:
        with opened(path) as fh:  # a link, FIFO or device: IndexCorruptError, never read
            size = os.fstat(fh.fileno()).st_size
            version = npy.read_magic(fh)
            reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            with NPY_READ_LOCK:
                shape, fortran, dtype = reader(fh, max_header_size=10000)
            offset = fh.tell()
    except (OSError, ValueError, SyntaxError, TypeError):
        return None
    if fortran or dtype.hasobject or any(not isinstance(n, int) or n < 0 for n in shape):
        return None
    count = 1
    for n in shape:
        count *= n
    if offset + count * dtype.itemsize != size:
        return None
    return np.dtype(dtype).str, tuple(shape)


def npy_shape(path: Path, dtype: str) -> tuple[int, ...] | None:
    """The shape of a ``.npy`` file of ``dtype`` (e.g. ``<i8``) whose header fits its size; None otherwise."""
    found = npy_header(path)
    return found[1] if found is not None and found[0] == dtype else None
