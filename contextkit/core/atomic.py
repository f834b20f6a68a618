"""The one atomic file writer: a temporary file in the same folder, written, fsynced, renamed.

A reader (or a crash) never sees half a file: until the rename, the old file is whole; after
it, the new one is, on disk (the file is fsynced before the rename, and the folder after it
where the OS allows, so the new name survives a power cut too). A failure mid-write removes
the temporary file and leaves the old one as it was.

The temporary file is created with mode 0o666, so the kernel applies the user's umask: the
result has the permissions any ordinary write would give it (``tempfile.mkstemp`` would leave
it 0o600). Its name is random unless the caller names it (the index names its own, so that
``verify`` and ``repair`` can recognise what an interrupted save left behind).

* :func:`write_bytes_atomic` and :func:`write_text_atomic`: data already in memory;
* :func:`atomic_file`: a binary file to stream into (``np.save``, a FAISS writer callback);
* :func:`atomic_path`: a temporary path for a writer that only takes a file name
  (``torch.onnx.export``).
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_file", "atomic_path", "fsync_dir", "fsync_file", "write_bytes_atomic", "write_text_atomic"]


def fsync_dir(folder: str | Path) -> None:
    """Make a rename in ``folder`` durable (a crash after it then keeps the new name).

    Skipped where a folder cannot be opened for it (Windows) or its file system does not
    sync folders (``EINVAL``); any other failure is raised.
    """
    if os.name == "nt":
        return
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(dir_fd)


def fsync_file(path: str | Path) -> None:
    """Flush a file written by someone else's code (by name) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary(path: Path, temporary: str | None) -> Path:
    return path.with_name(temporary or f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.part")


def _commit(tmp: Path, path: Path, sync_folder: bool) -> None:
    os.replace(tmp, path)
    if sync_folder:
        fsync_dir(path.parent)


def _discard(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


@contextmanager
def atomic_file(path: str | Path, *, temporary: str | None = None, sync_folder: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into; on a clean exit it replaces ``path``.

    ``temporary`` names the temporary file (in ``path``'s folder; random by default, and then
    created exclusively). ``sync_folder=False`` leaves the folder's fsync to a caller that
    renames several files and syncs the folder once.
    """
    path = Path(path)
    tmp = _temporary(path, temporary)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if temporary else os.O_EXCL) | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _commit(tmp, path, sync_folder)
    except BaseException:
        _discard(tmp)
        raise


@contextmanager
def atomic_path(path: str | Path, *, temporary: str | None = None, sync_folder: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that takes a file name; renamed into place after.

    The writer creates the file; on a clean exit it is fsynced and replaces ``path``, on a
    failure it is removed.
    """
    path = Path(path)
    tmp = _temporary(path, temporary)
    try:
        yield tmp
        fsync_file(tmp)
        _commit(tmp, path, sync_folder)
    except BaseException:
        _discard(tmp)
        raise


def write_bytes_atomic(path: str | Path, data: bytes, *, temporary: str | None = None,
                       sync_folder: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically and durably; returns the path."""
    with atomic_file(path, temporary=temporary, sync_folder=sync_folder) as fh:
        fh.write(data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str, newline: str | None = None, *, temporary: str | None = None,
                      sync_folder: bool = True) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically and durably; returns the path.

    ``newline`` is as for :func:`open`: None writes ``os.linesep`` for each ``\\n``, ``""`` the text as it is.
    The text is encoded before the file is opened, so text that cannot be encoded leaves nothing behind.
    """
    if newline is None:
        newline = os.linesep
    if newline:
        text = text.replace("\n", newline)
    return write_bytes_atomic(path, text.encode("utf-8"), temporary=temporary, sync_folder=sync_folder)
