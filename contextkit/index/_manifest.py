"""The index folder's ``manifest.json``: its model, and the checks made before anything else is read.

Imports only leaves (:mod:`._bm25` for the default BM25 settings, :mod:`._checksums`,
:mod:`contextkit.errors`), so :class:`~contextkit.index.Index`, ``verify`` and ``repair`` can
all read a manifest without importing each other.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import struct
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import IndexCorruptError
from contextkit.index._bm25 import BM25Config, with_analyzer
from contextkit.index._checksums import FileSum, sqlite_header_problem

__all__ = [
    "FORMAT_VERSION",
    "SETTINGS_FIELDS",
    "IndexManifest",
    "IndexType",
    "ReadOnlyOpener",
    "StoreStamp",
    "check_store_file",
    "connect_ro",
    "describe_invalid",
    "immutable_readers",
    "now",
    "settings_copy",
    "store_stamp",
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
    bm25: dict[str, Any] = Field(default_factory=lambda: BM25Config(title_every_chunk=True).model_dump())
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
        value = with_analyzer(value)  # saved before analyzers were recorded: bm25s's, as it was cut then
        BM25Config(**value)  # an unknown stemmer, method, stop-word list or analyzer: refused with the manifest
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


#: SQLite's lock bytes in a database file (``os_unix.c``): a connection's SHARED lock is a read lock on
#: ``SHARED_SIZE`` bytes from ``SHARED_FIRST``; closing the last connection takes them exclusively to
#: checkpoint the WAL into the file and delete it.
_PENDING_BYTE = 0x40000000
_SHARED_FIRST, _SHARED_SIZE = _PENDING_BYTE + 2, 510
#: A byte past SQLite's own, read-locked while a reader holds an ``immutable`` connection: a contextkit
#: writer that finds it held does not checkpoint (``RecordStore``), so the file stays as that reader reads it.
_IMMUTABLE_READER_BYTE = _PENDING_BYTE + 1024
StoreStamp = tuple[int, int, int, bool, bool]


def store_stamp(path: Path) -> StoreStamp | None:
    """The store file's inode, size and mtime, and whether its ``-wal`` and ``-shm`` exist (None: no file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, os.path.exists(f"{path}-wal"), os.path.exists(f"{path}-shm"))


def _ofd_lock(fd: int, kind: int, start: int, length: int, test: bool = False) -> bool:
    """An open-file-description lock (Linux): True when taken, or with ``test``, when another holds a conflicting
    one. Why OFD locks: a classic POSIX lock is dropped by closing *any* descriptor of the file in this
    process, which would take SQLite's own locks away; an OFD lock belongs to one descriptor only."""
    cmd = getattr(fcntl, "F_OFD_GETLK" if test else "F_OFD_SETLK", None)
    if cmd is None:  # not Linux: no guard (see ReadOnlyOpener)
        return not test
    arg = struct.pack("hhxxxxqqixxxx", kind, os.SEEK_SET, start, length, 0)
    try:
        got = fcntl.fcntl(fd, cmd, arg)
    except OSError:
        return False
    return struct.unpack("hhxxxxqqixxxx", got)[0] != fcntl.F_UNLCK if test else True


def immutable_readers(path: Path) -> bool:
    """Whether a reader holds an ``immutable`` connection to this store file now (see :class:`ReadOnlyOpener`)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return _ofd_lock(fd, fcntl.F_WRLCK, _IMMUTABLE_READER_BYTE, 1, test=True)
    finally:
        os.close(fd)


class ReadOnlyOpener:
    """How a reader connects to one store file, read-only (``mode=ro``: it never creates or changes a file).

    A WAL database needs its ``-shm`` file to be read. In a folder the reader cannot write (a read-only
    mount, another user's files) SQLite cannot create it, so when the owner has no session open (no
    ``-shm``, no ``-wal``) the file is opened ``immutable=1``, which tells SQLite the file never changes:
    no locks, and pages cached for good. That is true only while no owner writes, so an immutable
    connection is held to three rules. (1) It is taken under a guard, read locks on SQLite's SHARED bytes
    and on a byte of our own, before the ``-shm`` is looked for: an owner's last connection cannot
    then checkpoint into the file and delete its WAL on closing (it needs those bytes exclusively), and
    a contextkit writer holds its checkpoints while the byte is locked (``RecordStore``); so the file
    does not change under the reader. (2) :meth:`stale` (a few ``stat`` calls, before each query) tells
    when an owner has come (a ``-shm`` or ``-wal`` now, another inode, size or mtime); the connection is
    then reopened, as a normal read-only WAL reader once the ``-shm`` exists (SQLite reads a ``-shm`` it
    cannot write safely: it takes the readers' locks with read locks only, or reads the WAL itself).
    (3) The guard goes when the last immutable connection closes: each thread reopens its own at its
    next query, so until every thread of such a reader has queried (or ended) the owner's WAL is not
    checkpointed and grows. Where OFD locks do not exist (not Linux) rule (1) is missing: an owner
    that checkpoints during a query can then give that query a damaged page.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._guard: int | None = None
        self._users = 0
        self._lock = threading.Lock()

    def uri(self) -> tuple[str, StoreStamp | None]:
        """A URI to connect with, and for an immutable one the stamp it is valid for (release it by :meth:`done`)."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        if os.access(self.path.parent, os.W_OK):
            return uri, None
        with self._lock:
            self._take_guard()
            stamp = store_stamp(self.path)
            if stamp is None or stamp[3] or stamp[4]:  # an owner's session is open: read as a WAL reader
                self._drop_guard()
                return uri, None
            return uri + "&immutable=1", stamp

    def stale(self, stamp: StoreStamp | None) -> bool:
        """Whether an immutable connection made at ``stamp`` must be reopened (False for a normal one)."""
        return stamp is not None and store_stamp(self.path) != stamp

    def done(self, stamp: StoreStamp | None) -> None:
        """A connection :meth:`uri` gave is closed."""
        if stamp is not None:
            with self._lock:
                self._drop_guard()

    def _take_guard(self) -> None:
        if self._users == 0:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                fd = None
            if fd is not None:
                _ofd_lock(fd, fcntl.F_RDLCK, _SHARED_FIRST, _SHARED_SIZE)
                _ofd_lock(fd, fcntl.F_RDLCK, _IMMUTABLE_READER_BYTE, 1)
            self._guard = fd
        self._users += 1

    def _drop_guard(self) -> None:
        self._users -= 1
        if self._users == 0 and self._guard is not None:
            os.close(self._guard)  # closing the descriptor drops its OFD locks
            self._guard = None


class _OneOffConnection(sqlite3.Connection):
    """A connection that releases its :class:`ReadOnlyOpener` guard when closed."""

    opener: ReadOnlyOpener | None = None
    stamp: StoreStamp | None = None

    def close(self) -> None:
        super().close()
        if self.opener is not None:
            self.opener.done(self.stamp)
            self.opener = None


def connect_ro(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A read-only connection to a store file (see :class:`ReadOnlyOpener`), with ``trusted_schema`` off.

    Close it: an immutable one holds a guard on the file until then."""
    opener = ReadOnlyOpener(path)
    uri, stamp = opener.uri()
    try:
        db = sqlite3.connect(uri, uri=True, timeout=timeout, factory=_OneOffConnection)
    except BaseException:
        opener.done(stamp)
        raise
    db.opener, db.stamp = opener, stamp
    db.execute("PRAGMA trusted_schema=OFF")
    return db


def settings_copy(db: sqlite3.Connection) -> dict[str, Any] | None:
    """The store's copy of the manifest settings (meta ``manifest_settings``); None without one or when unreadable."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'manifest_settings'").fetchone()
    except sqlite3.Error:
        return None
    copy = json.loads(row[0]) if row else None
    if isinstance(copy, dict) and isinstance(copy.get("bm25"), dict):  # as the manifest reads it (no analyzer: bm25s's)
        copy["bm25"] = with_analyzer(copy["bm25"])
    return copy


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
