"""Opening the files of an index folder as a hostile folder's files: regular files only, reads capped.

Why: an index folder is often received (a download, a shared drive, a colleague's copy), and every
file in it may be other than what contextkit wrote. A FIFO in place of a lease file, ``.lock`` or a
JSON file makes ``open`` wait forever for a writer; a link to ``/dev/zero`` makes a read grow without
end; a link out of the folder makes us read (and serve) a file the folder's owner chose. So every
reader of an index file goes through here: the file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a
link in its place is refused, a FIFO opens without waiting), ``fstat`` on the open descriptor says
what it is (anything but a regular file is refused), and a read stops at a size fixed per kind of
file (a manifest or meta file is small; a segment's size is what its manifest records) before the
bytes are read. The index itself never makes symbolic links (BM25 segments are hard links, which are
regular files of their own), so refusing every link refuses nothing contextkit wrote.

A leaf: it imports only :mod:`contextkit.core.errors`. Each refusal is an ``IndexCorruptError`` whose
one-line message names the file and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from io import BufferedReader
from pathlib import Path

from contextkit.core.errors import IndexCorruptError
from contextkit.core.files import file_kind

__all__ = ["not_regular", "open_regular", "opened", "read_capped", "require_folder", "require_regular"]

def _refused(path: Path, what: str) -> IndexCorruptError:
    return IndexCorruptError(f"{path}: {what}, not a file the index wrote; refused (an index folder from "
                             "elsewhere may hold anything): remove it, or re-ingest into a new index", file=path.name)


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of ``path``, which must be a regular file (not a link, FIFO, device, socket or folder).

    ``FileNotFoundError`` and permission errors pass through as ``OSError`` (callers decide whether a
    missing file is an error); everything else that is not a plain file is ``IndexCorruptError``."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: the last part of the path is a symbolic link
            raise _refused(path, "a symbolic link") from None
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EISDIR):  # a FIFO opened to write, a device, a folder
            raise _refused(path, os.strerror(exc.errno).lower()) from None
        raise
    try:
        kind = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise _refused(path, file_kind(kind))
    return fd


@contextmanager
def opened(path: Path) -> Iterator[BufferedReader]:
    """``path`` open for reading as a binary file object, once it is known to be a regular file."""
    with os.fdopen(open_regular(path), "rb") as fh:
        yield fh


def read_capped(path: Path, limit: int, what: str = "") -> bytes:
    """Every byte of the regular file ``path``, refused (before reading) when it holds more than ``limit``.

    ``what``: the kind of file, for the message (``a manifest``, ``a BM25 vocabulary``)."""
    with opened(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise IndexCorruptError(f"{path}: {size} bytes, over the {_size(limit)} {what or 'such a file'} may "
                                    "hold; refused (crafted or overwritten)", file=path.name)
        data = fh.read(limit + 1)
    if len(data) > limit:  # grew while read
        raise IndexCorruptError(f"{path}: grew past {_size(limit)} while read; refused", file=path.name)
    return data


def not_regular(path: Path) -> str | None:
    """Why ``path`` (which exists) is not a plain file, by ``lstat``: a link, FIFO, device ...; None when it is
    a regular file or is missing. For files another library opens by name (SQLite, FAISS, a memory map)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    return None if stat.S_ISREG(mode) else f"{file_kind(mode)}, not a regular file the index wrote"


def require_regular(path: Path) -> None:
    """Refuse ``path`` unless it is a regular file (or missing: the caller's own open says so)."""
    if (problem := not_regular(path)) is not None:
        raise _refused(path, problem.split(",")[0])


def require_folder(path: Path) -> None:
    """Refuse ``path`` unless it is a folder itself (not a link to one elsewhere)."""
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        raise _refused(path, f"{file_kind(mode)} in place of a folder")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"
