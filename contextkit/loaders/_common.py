"""Records and helpers shared by the format loaders: errors as values, strict decoding, limits."""

from __future__ import annotations

import codecs
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, Field

from contextkit.core.errors import ContextkitError
from contextkit.core.files import file_kind
from contextkit.core.records import Document

_PROSE_FORMATS = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".rst": "rst"}
#: Source-code and config suffixes, loaded as text with format "code" and this language.
_CODE_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".jsx": "javascript",
    ".mjs": "javascript", ".ts": "typescript", ".tsx": "typescript", ".java": "java",
    ".c": "c", ".h": "c", ".cpp": "cpp", ".hpp": "cpp", ".cc": "cpp", ".cxx": "cpp",
    ".go": "go", ".rs": "rust", ".rb": "ruby", ".php": "php", ".cs": "csharp",
    ".swift": "swift", ".kt": "kotlin", ".scala": "scala", ".sh": "shell",
    ".bash": "shell", ".sql": "sql", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml",
    ".json": "json", ".css": "css", ".ini": "ini", ".cfg": "ini",
}
_HTML_SUFFIXES = frozenset({".html", ".htm"})
#: Suffixes (lower-case) taken when walking a directory.
SUPPORTED_SUFFIXES: frozenset[str] = frozenset(
    {*_PROSE_FORMATS, *_CODE_LANGUAGES, *_HTML_SUFFIXES, ".pdf", ".jsonl"}
)
_BINARY_SNIFF = 8192
_UTF8_BOM = b"\xef\xbb\xbf"
MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class LoadIssue:
    """A file that could not be (fully) loaded, or was passed by, as a value for the end-of-run report.

    A record, not an exception (it was called ``LoadError``, which read as one: ``except
    contextkit.LoadError`` raised ``TypeError``); the old name still works, with a DeprecationWarning."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file to load: its resolved absolute ``path`` and its stable ``doc_id``.

    ``identity`` is the file's ``(st_dev, st_ino)`` when discovery found it: every read then goes
    through :func:`open_source`, which refuses to follow a link swapped in since (at the file or any
    folder on its path) and refuses a file that is no longer the one found. ``None`` (a
    ``SourceFile`` made by hand): the path is opened as given, links followed, as for a file the
    user names; non-regular files are refused either way."""

    path: Path
    doc_id: str
    identity: tuple[int, int] | None = field(default=None, compare=False)  # a check, not what the file is

    @property
    def shown_path(self) -> str:
        """The path as text that can be stored and printed (:func:`storable_id`): a document's ``source``."""
        return storable_id(str(self.path))


def storable_id(name: str) -> str:
    """``name`` as text that can be stored, printed and sent anywhere: a file name the OS gave as bytes
    that are not UTF-8 (Python keeps them as surrogate escapes, which no UTF-8 writer accepts) has
    each such byte written as ``\\xNN``. The same bytes always give the same id, so a re-run finds
    the file again; a valid name is returned as it is."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one file yielded; both lists may be non-empty (partial JSONL success)."""

    documents: list[Document]
    errors: list[LoadIssue]


class LoadLimits(BaseModel):
    """Bounds on what one file may cost, so one hostile file cannot stall or exhaust a run.

    HTML and PDF parsers need the whole file in memory (and build trees several
    times its size), so files above ``max_parse_bytes`` are reported, not parsed.
    pypdf can loop on crafted files: PDFs are parsed in a worker process that is
    killed after ``pdf_timeout`` seconds (``None``: parse in this process, no limit).
    """

    max_parse_bytes: int = Field(256 * MiB, ge=1, description="HTML/PDF files above this are reported as too large")
    pdf_timeout: float | None = Field(60.0, gt=0, description="seconds one PDF may take to parse; None: no limit")
    max_record_bytes: int | None = Field(None, ge=1, description="longest JSONL record (one line); longer ones "
                                         "are reported and skipped; None: the JSONL loader's own (16 MiB)")


class LoadFailure(ContextkitError):
    """A file failed while it was being streamed; ``error`` is the :class:`LoadIssue` for the report.

    A :class:`~contextkit.errors.ContextkitError`, like every error contextkit raises on purpose."""

    def __init__(self, error: LoadIssue) -> None:
        super().__init__(f"{error.path}: {error.reason}")
        self.error = error


class _Failed(Exception):
    """Internal: carries a LoadIssue reason up to :func:`load_file`."""


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file or directory"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return exc.strerror or str(exc) or type(exc).__name__


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:120] if text else "") or type(exc).__name__


#: Byte-order marks of the Unicode encodings that are not UTF-8, longest first (UTF-32 LE starts as UTF-16 LE).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def _bom_encoding(data: bytes) -> tuple[str, int] | None:
    """``(encoding, BOM length)`` for text that starts with a UTF-16 or UTF-32 byte-order mark."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name, len(bom)
    return None


def _looks_utf16(head: bytes) -> bool:
    """UTF-16 without a byte-order mark: NUL in (nearly) every other byte, and only there."""
    if len(head) < 8:
        return False
    even, odd = head[0::2], head[1::2]
    for zeros, other in ((odd, even), (even, odd)):
        if zeros.count(0) >= 0.9 * len(zeros) and other.count(0) <= 0.1 * len(other):
            return True
    return False


def _sniff_binary(data: bytes) -> None:
    nul = data.find(b"\x00", 0, _BINARY_SNIFF)
    if nul >= 0:
        bom = _bom_encoding(data)
        if bom is not None:  # only a streamed file gets here: streams decode UTF-8
            raise _Failed(f"{bom[0].upper()[:6]} text too large to load whole (streamed files "
                          "must be UTF-8); save it as UTF-8")
        if _looks_utf16(data[:_BINARY_SNIFF]):
            raise _Failed("UTF-16 text without a byte-order mark; save it as UTF-8 (or UTF-16 with a BOM)")
        raise _Failed(f"binary file (NUL byte at offset {nul})")


#: A run of this many NUL bytes is never UTF-8 text: binary data, or a hole of a sparse file (a 2 GB
#: file of 1 MiB of text and then NULs once held 4.75 GB while it was chunked; issue 33).
_NUL_RUN = b"\x00" * 64


def _check_nul_run(data: bytes, offset: int = 0) -> None:
    """Refuse ``data`` (read from ``offset`` in its file) if it holds a run of :data:`_NUL_RUN`."""
    at = data.find(_NUL_RUN)
    if at >= 0:
        raise _Failed(f"binary or sparse file ({len(_NUL_RUN)} or more NUL bytes at offset {offset + at})")


def _check_holes(fh: BinaryIO) -> None:
    """Refuse a sparse file before reading it: its holes read as NUL bytes (gigabytes of them, which
    cost disk nothing). Asks the file system for the first hole (``SEEK_HOLE``); one that cannot
    tell reports none, and the NUL run is then found as the file is read."""
    try:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except (OSError, AttributeError, ValueError):  # no SEEK_HOLE here, or not a real file
        return
    finally:
        fh.seek(0)
    if hole < size:
        raise _Failed(f"sparse file (a hole of NUL bytes at offset {hole} of {size})")


def _bad_byte(encoding: str, bad: int, offset: int) -> _Failed:
    name = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else encoding
    return _Failed(f"not {name} text: invalid byte 0x{bad:02x} at offset {offset}")


def _decode(data: bytes, encoding: str = "utf-8") -> str:
    """Decode strictly; the text is kept exactly (no newline normalisation) since chunk offsets index it.

    A UTF-16 or UTF-32 byte-order mark decides the encoding (such text is full of NUL bytes,
    and is not binary); a UTF-8 BOM is dropped."""
    bom = _bom_encoding(data)
    if bom is not None:
        encoding, skip = bom
    else:
        _sniff_binary(data)
        _check_nul_run(data)
        skip = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    if skip and bom is None:
        encoding = "utf-8"
    try:
        return data[skip:].decode(encoding)
    except UnicodeDecodeError as exc:
        raise _bad_byte(encoding, data[skip + exc.start], skip + exc.start) from None


def _too_large(size: int, limit: int, kind: str) -> _Failed:
    return _Failed(f"file too large for {kind} parsing ({size / MiB:.1f} MiB > {limit / MiB:.1f} MiB limit)")


# ------------------------------------------------------------------ opening a source
# Discovery and loading are two moments: whoever can write in the docs folder can swap a file (or a
# folder on its path) for a link to /etc/shadow, a FIFO or /dev/zero in between. So a discovered file
# is opened component by component from "/" without following any link (its path is the real path
# discovery resolved: a link on it now was swapped in), without blocking (a FIFO, a tty), and what
# was opened must be a regular file with the (device, inode) discovery recorded.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
#: A folder on the way: O_PATH (Linux) needs only search permission, as a path lookup does.
_DIR_FLAGS = (getattr(os, "O_PATH", 0) or os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW \
    | getattr(os, "O_CLOEXEC", 0)
_CAN_WALK = bool(_NOFOLLOW and getattr(os, "O_DIRECTORY", 0)) and os.open in os.supports_dir_fd
_SWAPPED_FILE = "replaced by a symlink after it was found: not followed"
_SWAPPED_DIR = "a folder on its path was replaced by a symlink (or a file) after it was found: not followed"
_REPLACED = "replaced by another file after it was found: not read (run again to load it)"


def not_regular(mode: int) -> str | None:
    """The report's reason for a file of this ``st_mode`` that is not a regular file (None for one).

    Only regular files are read: a FIFO blocks its reader, a device never ends (``/dev/zero``)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    return f"not a regular file ({file_kind(mode)}): not read"


def file_identity(st: os.stat_result) -> tuple[int, int]:
    """``(st_dev, st_ino)``: what says two opens reached the same file, whatever the path."""
    return st.st_dev, st.st_ino


def open_source(source: SourceFile) -> BinaryIO:
    """``source`` open for reading in binary: the one way loaders, hashing and streams open a file.

    Raises :class:`_Failed` (a reason for the report) for a file that is not regular, a link swapped in
    at the file or on its path since discovery, or another file than the one discovery found
    (``source.identity``); :class:`OSError` for the rest (gone, permission denied)."""
    fd = _open_fd(source)
    try:
        st = os.fstat(fd)
        reason = not_regular(st.st_mode)
        if reason is None and source.identity is not None and file_identity(st) != source.identity:
            reason = _REPLACED
        if reason is not None:
            raise _Failed(reason)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_source(source: SourceFile, limit: int | None = None, kind: str = "") -> bytes:
    """The whole of ``source`` (through :func:`open_source`); above ``limit`` bytes it is refused
    before a byte is read, since a whole-file parser (HTML, PDF) would blow up in memory."""
    with open_source(source) as fh:
        if limit is not None:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise _too_large(size, limit, kind)
        return fh.read()


def _open_fd(source: SourceFile) -> int:
    path = os.fspath(source.path)
    if source.identity is None:
        return os.open(path, _OPEN_FLAGS)  # a path given by hand: opened as the caller named it
    if not (_CAN_WALK and os.path.isabs(path)):
        return _open_last(path, None)
    return _open_beneath(Path(path).parts)


def _open_beneath(parts: tuple[str, ...]) -> int:
    """Open ``parts`` (an absolute path's) one folder at a time, following no link on the way."""
    folder = os.open(parts[0], _DIR_FLAGS)
    try:
        for part in parts[1:-1]:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _Failed(_SWAPPED_DIR) from None
                raise
            os.close(folder)
            folder = inner
        return _open_last(parts[-1], folder)
    finally:
        os.close(folder)


def _open_last(name: str, folder: int | None) -> int:
    try:
        return os.open(name, _OPEN_FLAGS | _NOFOLLOW, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: what FreeBSD says for O_NOFOLLOW on a link
            raise _Failed(_SWAPPED_FILE) from None
        raise
