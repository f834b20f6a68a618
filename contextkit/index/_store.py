"""The records store: one SQLite file with files, documents, chunks and vectors.

SQLite is the source of truth. Every change to the index is one SQLite
transaction, so a crash (even ``kill -9``) leaves the previous committed state;
the FAISS file is a derived cache of the vectors here and is rebuilt from them
when its generation does not match (see :class:`contextkit.index.Index`).
Vectors are stored once per distinct embedded text, keyed by the embedder's
cache key: that table is also the embedding cache.

SQLite errors that mean the disk or the file failed (full disk, permissions,
I/O errors, a damaged file) are raised as :class:`~contextkit.index.IndexWriteError`
or :class:`~contextkit.index.IndexCorruptError` with a message naming the file;
they remain ``sqlite3`` errors too, so existing ``except sqlite3.Error`` clauses
still catch them. Other SQLite errors (a SQL mistake, a constraint) are untouched.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from contextkit.core.errors import InvalidArgumentError, StoreCorruptError, StoreWriteError
from contextkit.core.records import Chunk
from contextkit.index import _schema
from contextkit.index._manifest import ReadOnlyOpener, StoreStamp, immutable_readers

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL, n_documents INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY, file TEXT, source TEXT NOT NULL, sha256 TEXT NOT NULL,
    n_chars INTEGER NOT NULL, metadata TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_file ON documents(file);
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL, doc_id TEXT NOT NULL, ordinal INTEGER NOT NULL,
    start INTEGER NOT NULL, end INTEGER NOT NULL, tokens INTEGER NOT NULL, total_tokens INTEGER NOT NULL,
    header TEXT NOT NULL, text TEXT NOT NULL, metadata TEXT NOT NULL, vector_key TEXT NOT NULL, text_sha TEXT
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id);
CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS retired_chunks (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL, doc_id TEXT NOT NULL, ordinal INTEGER NOT NULL,
    start INTEGER NOT NULL, end INTEGER NOT NULL, tokens INTEGER NOT NULL, total_tokens INTEGER NOT NULL,
    header TEXT NOT NULL, text TEXT NOT NULL, metadata TEXT NOT NULL, vector_key TEXT NOT NULL, text_sha TEXT,
    last_gen INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS retired_chunks_gen ON retired_chunks(last_gen);
"""


def schema_problem(db: sqlite3.Connection, require_all: bool = True) -> str | None:
    """What in the store's schema contextkit does not create, compared in full (see :mod:`._schema`), or None.

    Why: an index folder from elsewhere is untrusted; a planted ``TRIGGER`` would run its SQL at our next
    insert, a generated column or an expression index at every read: refused before any statement of
    ours touches its tables."""
    return _schema.schema_problem(db, SCHEMA, require_all)


def text_sha(header: str, text: str) -> str:
    """The hash kept beside each chunk's header and text, so damage to them is found (verify, and each read)."""
    return hashlib.sha256(header.encode("utf-8", "surrogatepass") + b"\0" +
                          text.encode("utf-8", "surrogatepass")).hexdigest()[:32]

#: SQLite result codes (``sqlite_errorname`` prefixes) that mean writing failed, and that the file is damaged.
_WRITE_FAILURES = {
    "SQLITE_FULL": "the disk is full",
    "SQLITE_READONLY": "the file or its folder is read-only",
    "SQLITE_PERM": "permission denied",
    "SQLITE_CANTOPEN": "the file cannot be opened (missing folder or permission denied)",
    "SQLITE_IOERR": "an I/O error (disk full, permissions or a failing disk)",
}
_CORRUPTION = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def _error_name(exc: sqlite3.Error) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    if name:
        return str(name)
    text = str(exc).lower()  # no error name: guess it from the message
    for needle, guess in (("disk is full", "SQLITE_FULL"), ("readonly", "SQLITE_READONLY"),
                          ("unable to open", "SQLITE_CANTOPEN"), ("disk i/o", "SQLITE_IOERR"),
                          ("malformed", "SQLITE_CORRUPT"), ("not a database", "SQLITE_NOTADB")):
        if needle in text:
            return guess
    return ""


def translate_error(exc: sqlite3.Error, path: Path) -> Exception | None:
    """The index error that ``exc`` (raised by SQLite on ``path``) stands for, or None to keep it as is."""
    name = _error_name(exc)
    if "malformed json" in str(exc).lower():  # json_each over a crafted metadata value
        err0 = StoreCorruptError(f"{path}: a metadata value is not JSON (crafted or damaged); `contextkit verify "
                                 f"--index {path.parent}` counts them; re-ingest into a new index", file=path.name)
        err0.sqlite_errorname = name
        return err0
    if "could not decode to utf-8" in str(exc).lower():  # a text whose bytes were damaged
        column = str(exc).split("column ")[-1].split(" ")[0] if "column " in str(exc) else "a text column"
        err: sqlite3.DatabaseError = StoreCorruptError(
            f"{path}: {column} holds bytes that are not UTF-8 (damaged or changed outside contextkit); "
            f"`contextkit verify --index {path.parent}` lists the chunks; re-ingest their files", file=path.name)
        # typeshed says int, but an error SQLite did not raise has no code at all: None then.
        err.sqlite_errorcode = getattr(exc, "sqlite_errorcode", None)  # type: ignore[assignment]
        err.sqlite_errorname = name
        return err
    if name.startswith(_CORRUPTION):
        err = StoreCorruptError(
            f"{path}: the records store is damaged ({exc}); `contextkit verify --index {path.parent}` "
            "says what can be repaired", file=path.name)
    else:
        reason = next((why for code, why in _WRITE_FAILURES.items() if name.startswith(code)), None)
        if reason is None:
            return None
        err = StoreWriteError(
            f"{path}: could not write the records store: {reason} (SQLite: {exc}); the transaction was not "
            "kept, so the index keeps its last committed state")
    # typeshed says int, but an error SQLite did not raise has no code at all: None then.
    err.sqlite_errorcode = getattr(exc, "sqlite_errorcode", None)  # type: ignore[assignment]
    err.sqlite_errorname = name
    return err


def _in_batches(values: Sequence[Any]) -> Iterator[tuple[Sequence[Any], str]]:
    """``values`` in parts of at most 500 with their ``?,?,...`` placeholders: SQLite limits bound parameters."""
    for lo in range(0, len(values), 500):
        part = values[lo : lo + 500]
        yield part, ",".join("?" * len(part))


class _Cursor(sqlite3.Cursor):
    """A cursor whose disk and corruption errors name the store file (see :func:`translate_error`)."""

    def _fail(self, exc: sqlite3.Error) -> Exception:
        translated = translate_error(exc, self.connection.store_path)  # type: ignore[attr-defined]
        return translated if translated is not None else exc

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:
        try:
            return super().executemany(sql, seq)
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc

    def executescript(self, script: str, /) -> _Cursor:
        try:
            return super().executescript(script)  # type: ignore[return-value]
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc


class _Connection(sqlite3.Connection):
    """``execute`` and friends go through :class:`_Cursor`, so their errors name the store."""

    store_path: Path

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:
        return self.cursor().executemany(sql, seq)

    def executescript(self, script: str, /) -> _Cursor:
        return self.cursor().executescript(script)


_CHUNK_COLS = "rowid, id, doc_id, ordinal, start, end, tokens, total_tokens, header, text, metadata"


_INT_FIELDS, _TEXT_FIELDS = (0, 3, 4, 5, 6, 7), (1, 2, 8, 9, 10)


def _row_to_chunk(row: Sequence[Any], path: Path | None = None) -> tuple[int, Chunk]:
    """A chunk row as a :class:`Chunk`, its values checked first: a crafted store's row of the wrong types,
    metadata that is not a JSON object or offsets its text cannot have is a one-line ``StoreCorruptError``."""
    rowid, cid, doc_id, ordinal, start, end, tokens, total, header, text, meta = row[:11]
    if not all(type(row[i]) is int for i in _INT_FIELDS) or not all(type(row[i]) is str for i in _TEXT_FIELDS):
        raise _bad_row(path, cid, "values of the wrong type (a number stored as text, or the reverse)")
    if len(row) > 11 and row[11] is not None and row[11] != text_sha(header, text):
        raise StoreCorruptError(
            f"{path}: chunk {cid!r} (of {doc_id!r}) no longer matches its hash: its text was damaged or changed "
            f"outside contextkit; `contextkit verify --index {path.parent if path else '.'}` lists every such "
            "chunk; re-ingest its file", file="store.sqlite")
    try:
        metadata = json.loads(meta)
    except (ValueError, RecursionError) as exc:
        raise _bad_row(path, cid, f"its metadata is not JSON ({_first_line(exc)})") from None
    if not isinstance(metadata, dict):
        raise _bad_row(path, cid, "its metadata is not a JSON object")
    try:
        chunk = Chunk(id=cid, doc_id=doc_id, ordinal=ordinal, text=text, start=start, end=end,
                      token_count=tokens, header=header, total_tokens=total, metadata=metadata)
    except (ValueError, InvalidArgumentError) as exc:
        raise _bad_row(path, cid, _first_line(exc)) from None
    return rowid, chunk


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _bad_row(path: Path | None, cid: object, why: str) -> StoreCorruptError:
    where = path if path is not None else Path("store.sqlite")
    return StoreCorruptError(f"{where}: chunk {str(cid)[:80]!r}: {why} (crafted or damaged); `contextkit verify "
                             f"--index {where.parent}` checks every row; re-ingest into a new index", file="store.sqlite")


def _vectors_of(blobs: Sequence[Any], dim: int, path: Path) -> np.ndarray:
    """Stored vector blobs as a ``(n, dim)`` float32 array; a blob of another size is ``StoreCorruptError``."""
    if any(type(b) is not bytes or len(b) != 4 * dim for b in blobs):
        raise StoreCorruptError(f"{path}: a stored vector is not {4 * dim} bytes ({dim} float32 values): crafted or "
                                f"damaged; `contextkit verify --index {path.parent}` counts them", file=path.name)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim)


@contextmanager
def in_transaction(owner: Any) -> Iterator[None]:
    """``owner.begin()``; ``owner.commit()`` when the block ends; ``owner.rollback()`` and re-raise on any error.

    The one copy of that sequence: the store and the index (whose begin/commit/rollback also keep
    FAISS in step) both use it, and every writer goes through one of the two.
    """
    owner.begin()
    try:
        yield
        owner.commit()
    except BaseException:
        owner.rollback()
        raise


class RecordStore:
    """Thin, typed access to the SQLite file; one writer at a time.

    Each thread gets its own connection (SQLite connections must not be shared
    across threads, and WAL lets readers run beside each other and beside the
    writer), so many threads can query one opened index. The thread that opened
    the store holds the first connection; writes belong to that thread.
    """

    def __init__(self, path: Path, dim: int, read_only: bool = False) -> None:
        self.path = path
        self.dim = dim
        self.read_only = read_only
        self._local = threading.local()
        self._all: list[tuple[threading.Thread, sqlite3.Connection, StoreStamp | None]] = []
        self._lock = threading.Lock()
        self._opener = ReadOnlyOpener(path)  # a reader's connections (immutable ones are guarded and followed)
        problem = schema_problem(self.db, require_all=read_only)
        if problem:
            self.close()
            raise StoreCorruptError(
                f"{path}: its schema is not the one contextkit creates ({problem}): refused (SQL planted in an index "
                "folder from elsewhere would run here); re-ingest the documents into a new index", file=path.name)
        if not read_only:
            self.db.executescript(SCHEMA)
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(chunks)")}
            if "text_sha" not in columns:  # a store made before chunk hashes: new chunks get theirs
                self.db.execute("ALTER TABLE chunks ADD COLUMN text_sha TEXT")
        self.has_retired = read_only is False or self.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'retired_chunks'").fetchone() is not None

    def _connect(self) -> tuple[_Connection, StoreStamp | None]:
        """A connection: read-write, or for a reader ``mode=ro`` (it never creates or changes a file, so a
        read-only folder or mount works; :class:`ReadOnlyOpener` says when and how it is ``immutable``).
        ``trusted_schema`` off: a crafted store's views and triggers cannot run our functions."""
        if not self.read_only:
            return sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0, check_same_thread=False,
                                   factory=_Connection), None
        uri, stamp = self._opener.uri()
        try:
            return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0, check_same_thread=False,
                                   factory=_Connection), stamp
        except BaseException:
            self._opener.done(stamp)
            raise

    @property
    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn, stamp = self._connect()
            except sqlite3.DatabaseError as exc:
                raise (translate_error(exc, self.path) or exc) from exc
            conn.store_path = self.path
            try:
                conn.execute("PRAGMA trusted_schema=OFF")
                if not self.read_only:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA synchronous=FULL")
                    self._hold_checkpoints(conn)
            except BaseException:
                conn.close()
                self._opener.done(stamp)
                raise
            self._local.conn, self._local.stamp = conn, stamp
            with self._lock:
                # A thread-per-request server would leave one connection (two file descriptors)
                # per finished thread: close those of dead threads whenever a new one connects.
                dead = [(c, s) for t, c, s in self._all if not t.is_alive()]
                self._all = [entry for entry in self._all if entry[0].is_alive()]
                self._all.append((threading.current_thread(), conn, stamp))
            for old, old_stamp in dead:
                old.close()
                self._opener.done(old_stamp)
        return conn

    def follow(self) -> None:
        """Before a reader's query: reopen this thread's connection if it is ``immutable`` and the file is no
        longer as it was (an owner came: :meth:`ReadOnlyOpener.stale`), so it reads the owner's commits."""
        conn = getattr(self._local, "conn", None)
        stamp = getattr(self._local, "stamp", None)
        if conn is None or not self._opener.stale(stamp):
            return
        with self._lock:
            self._all = [entry for entry in self._all if entry[1] is not conn]
        self._local.conn = self._local.stamp = None
        conn.close()
        self._opener.done(stamp)

    def _hold_checkpoints(self, conn: sqlite3.Connection) -> None:
        """A writer does not checkpoint while a reader holds an ``immutable`` connection to the file (see
        :class:`ReadOnlyOpener`); checked when it connects and at each transaction."""
        held = immutable_readers(self.path)
        if held != getattr(self._local, "checkpoints_held", False):
            conn.execute(f"PRAGMA wal_autocheckpoint={0 if held else 1000}")
            self._local.checkpoints_held = held

    def close(self) -> None:
        with self._lock:
            conns, self._all = [(c, s) for _, c, s in self._all], []
        for conn, stamp in conns:
            conn.close()
            self._opener.done(stamp)
        self._local = threading.local()

    # ------------------------------------------------------------- transactions
    def begin(self) -> None:
        self._hold_checkpoints(self.db)
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def transaction(self) -> AbstractContextManager[None]:
        """One SQLite transaction: committed when the block ends, rolled back (and re-raised) on any error.

        For the store's own bookkeeping (generation, settings copy), which moves no vectors; changes
        to chunks go through :meth:`contextkit.index.Index.transaction`, which also keeps FAISS in step.
        """
        return in_transaction(self)

    # ---------------------------------------------------------------- meta
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def generation(self) -> int:
        """The store's generation (a crafted value that is not a whole number: ``StoreCorruptError``)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return _schema.parse_generation(row[0], self.path) if row else 0

    def bump_generation(self) -> int:
        gen = self.generation() + 1
        self.set_meta("generation", str(gen))
        return gen

    # ---------------------------------------------------------------- files
    def file_hashes(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT path, sha256 FROM files"))

    def put_file(self, path: str, sha256: str, size: int, n_documents: int) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO files (path, sha256, size, n_documents) VALUES (?, ?, ?, ?)",
            (path, sha256, size, n_documents),
        )

    def delete_file(self, path: str) -> list[int]:
        """Forget a file and everything loaded from it; returns the removed vector ids."""
        removed: list[int] = []
        for (doc_id,) in self.db.execute("SELECT id FROM documents WHERE file = ?", (path,)).fetchall():
            removed += self.delete_document(doc_id)
        self.db.execute("DELETE FROM files WHERE path = ?", (path,))
        return removed

    def file_sources(self) -> dict[str, str]:
        """``{file: source path}``, one document's source per file documents were loaded from.

        Why: ingestion recognises a file named another way (``docs`` then ``/abs/docs``) by the real
        path its documents recorded, and keeps the id the file was first stored under."""
        return dict(self.db.execute("SELECT file, source FROM documents WHERE file IS NOT NULL GROUP BY file"))

    def unfinished_files(self) -> list[str]:
        """Files some documents came from that have no ``files`` row: a streamed file whose run stopped
        before its last part (which records the hash). Why: ``--prune`` removes them once not an input."""
        return [row[0] for row in self.db.execute(
            "SELECT DISTINCT file FROM documents WHERE file IS NOT NULL AND file NOT IN (SELECT path FROM files)")]

    def recorded_files(self) -> set[str]:
        """Every file path the store names: recorded files and the files documents came from."""
        paths = {row[0] for row in self.db.execute("SELECT path FROM files")}
        return paths | {row[0] for row in self.db.execute("SELECT DISTINCT file FROM documents WHERE file IS NOT NULL")}

    def rename_file(self, old: str, new: str) -> None:
        """Record file ``old`` and its documents under the path ``new`` (inside a transaction).

        Why: a redacting index names files by masked ids; rows an older run wrote under the real
        path take the masked one (see :mod:`contextkit.ingestion._file_keys`)."""
        self.db.execute("UPDATE files SET path = ? WHERE path = ?", (new, old))
        self.db.execute("UPDATE documents SET file = ? WHERE file = ?", (new, old))

    def file_vector_keys(self, file: str) -> list[str]:
        """The distinct vector keys of the chunks of the documents loaded from ``file``.

        Why: the Ray runner tells its workers which vectors the index holds for a changed file, so
        text that did not change is not embedded again."""
        rows = self.db.execute("SELECT DISTINCT c.vector_key FROM chunks c JOIN documents d ON d.id = c.doc_id "
                               "WHERE d.file = ?", (file,))
        return [r[0] for r in rows]

    # ------------------------------------------------------------ documents
    def document_ids(self, file: str | None = None) -> list[str]:
        if file is None:
            return [r[0] for r in self.db.execute("SELECT id FROM documents ORDER BY id")]
        return [r[0] for r in self.db.execute("SELECT id FROM documents WHERE file = ? ORDER BY id", (file,))]

    def put_document(self, doc_id: str, file: str | None, source: str, sha256: str, n_chars: int,
                     metadata: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO documents (id, file, source, sha256, n_chars, metadata) VALUES (?, ?, ?, ?, ?, ?)",
            (doc_id, file, source, sha256, n_chars, json.dumps(metadata, ensure_ascii=False, default=str)),
        )

    def delete_document(self, doc_id: str) -> list[int]:
        """Remove a document; its chunk rows move to ``retired_chunks``, stamped with the last generation that
        held them, so a reader of that generation still finds them (purged by :meth:`purge_retired`)."""
        ids = [r[0] for r in self.db.execute("SELECT rowid FROM chunks WHERE doc_id = ?", (doc_id,))]
        if ids:
            self.db.execute(f"INSERT OR REPLACE INTO retired_chunks ({_CHUNK_COLS}, vector_key, text_sha, last_gen) "
                            f"SELECT {_CHUNK_COLS}, vector_key, text_sha, ? FROM chunks WHERE doc_id = ?",
                            (self.generation(), doc_id))
        self.db.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
        self.db.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
        return ids

    def iter_documents(self) -> Iterator[tuple[str, str, int]]:
        """``(doc_id, source, n_chars)`` of every document, by id (what a server lists, page by page)."""
        for doc_id, source, n_chars in self.db.execute("SELECT id, source, n_chars FROM documents ORDER BY id"):
            if type(doc_id) is str and type(source) is str and type(n_chars) is int:  # a crafted row is skipped
                yield doc_id, source, n_chars

    def document_sources(self, doc_ids: Iterable[str]) -> dict[str, str]:
        """``{doc_id: source path}`` of those of ``doc_ids`` the store holds (a source may be empty)."""
        ids = sorted(set(doc_ids))
        out: dict[str, str] = {}
        for part, marks in _in_batches(ids):
            out.update(self.db.execute(f"SELECT id, source FROM documents WHERE id IN ({marks})", part))
        return out

    # --------------------------------------------------------------- chunks
    def add_chunks(self, chunks: Sequence[Chunk], vector_keys: Sequence[str]) -> list[int]:
        rows = [
            (c.id, c.doc_id, c.ordinal, c.start, c.end, c.token_count, c.total_tokens, c.header, c.text,
             json.dumps(c.metadata, ensure_ascii=False, default=str), key, text_sha(c.header, c.text))
            for c, key in zip(chunks, vector_keys)
        ]
        ids = []
        for row in rows:
            cur = self.db.execute(
                "INSERT INTO chunks (id, doc_id, ordinal, start, end, tokens, total_tokens, header, text, metadata,"
                " vector_key, text_sha) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            assert cur.lastrowid is not None  # every INSERT that returns sets it
            ids.append(int(cur.lastrowid))
        return ids

    def delete_chunks(self, chunk_ids: Iterable[str]) -> list[int]:
        """Remove chunks by their ids, as :meth:`delete_document` removes a document's: the rows move to
        ``retired_chunks`` for readers of older generations. Returns the removed rowids; their
        documents stay. Why: a caller that stores chunks of its own (the LlamaIndex vector store)
        replaces nodes one by one, not whole documents."""
        ids = list(dict.fromkeys(chunk_ids))
        removed: list[int] = []
        gen = self.generation()
        for part, marks in _in_batches(ids):
            rowids = [r[0] for r in self.db.execute(f"SELECT rowid FROM chunks WHERE id IN ({marks})", part)]
            if not rowids:
                continue
            self.db.execute(f"INSERT OR REPLACE INTO retired_chunks ({_CHUNK_COLS}, vector_key, text_sha, last_gen) "
                            f"SELECT {_CHUNK_COLS}, vector_key, text_sha, ? FROM chunks WHERE id IN ({marks})",
                            [gen, *part])
            self.db.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
            removed += rowids
        return removed

    def max_rowid(self) -> int:
        """The largest chunk rowid the store has given (``AUTOINCREMENT``: never reused), 0 for none. Why: a
        FAISS file read from elsewhere may hold ids past it, which no chunk can have (two index lookups)."""
        seq = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        top = self.db.execute("SELECT MAX(rowid) FROM chunks").fetchone()
        return max([v for v in (seq and seq[0], top and top[0]) if type(v) is int] or [0])

    def chunk_doc_ids(self) -> dict[int, str]:
        """``{rowid: doc_id}`` of every live chunk: how a search hit maps to its document (evaluation)."""
        return dict(self.db.execute("SELECT rowid, doc_id FROM chunks"))

    def chunks_by_rowid(self, rowids: Iterable[int]) -> dict[int, Chunk]:
        """The chunks of these rowids, live or retired (a reader of an older generation asks for those)."""
        ids = [int(i) for i in rowids]
        out: dict[int, Chunk] = {}
        for table in ("chunks", "retired_chunks"):
            if table == "retired_chunks":
                ids = [i for i in ids if i not in out]
                if not ids or not self.has_retired:
                    break
            for part, marks in _in_batches(ids):
                sql = f"SELECT {_CHUNK_COLS}, text_sha FROM {table} WHERE rowid IN ({marks})"
                for row in self.db.execute(sql, part):
                    rowid, chunk = _row_to_chunk(row, self.path)
                    out[rowid] = chunk
        return out

    def purge_retired(self, below: int) -> int:
        """Forget retired chunk rows no reader can need: those last held by a generation before ``below``."""
        with self.transaction():
            return int(self.db.execute("DELETE FROM retired_chunks WHERE last_gen < ?", (below,)).rowcount)

    def chunks_of(self, doc_id: str) -> list[Chunk]:
        rows = self.db.execute(f"SELECT {_CHUNK_COLS} FROM chunks WHERE doc_id = ? ORDER BY ordinal", (doc_id,))
        return [_row_to_chunk(r, self.path)[1] for r in rows]

    def iter_chunk_vectors(self, batch: int = 4096, after: int = -1) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(rowids, vectors)`` of every chunk (with a rowid above ``after``), in batches: what a FAISS rebuild reads."""
        cur = self.db.execute(
            "SELECT c.rowid, v.vector FROM chunks c JOIN vectors v ON v.key = c.vector_key WHERE c.rowid > ? "
            "ORDER BY c.rowid", (after,)
        )
        while rows := cur.fetchmany(batch):
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            yield ids, _vectors_of([r[1] for r in rows], self.dim, self.path)

    def iter_chunk_texts(self, batch: int = 4096, titled: bool = False) -> Iterator[tuple[np.ndarray, list[str]]]:
        """``(rowids, header + text)`` of every chunk, in batches: what a BM25 rebuild reads (``titled``: the
        document's title above every later chunk, see ``_bm25_sync.bm25_text_sql``)."""
        from contextkit.index._bm25_sync import bm25_text_sql

        cur = self.db.execute(f"SELECT rowid, {bm25_text_sql(titled)} FROM chunks ORDER BY rowid")
        while rows := cur.fetchmany(batch):
            yield np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)), [r[1] for r in rows]

    def sample_chunk_rows(self, n: int, seed: int = 0) -> list[tuple[int, str]]:
        """``(rowid, doc_id)`` of every chunk when the store holds at most ``n``, else of about ``n`` drawn
        by rowid with a fixed seed (rowids left by deletions are skipped): the same store gives the same
        sample, without reading every row of a large index."""
        lo, hi, count = self.db.execute("SELECT min(rowid), max(rowid), count(*) FROM chunks").fetchone()
        if count <= n:
            return [(int(r), str(d)) for r, d in self.db.execute("SELECT rowid, doc_id FROM chunks ORDER BY rowid")]
        picks = sorted({int(x) for x in np.random.default_rng(seed).integers(lo, hi + 1, n)})
        rows: list[tuple[int, str]] = []
        for part, marks in _in_batches(picks):
            sql = f"SELECT rowid, doc_id FROM chunks WHERE rowid IN ({marks}) ORDER BY rowid"
            rows += [(int(r), str(d)) for r, d in self.db.execute(sql, part)]
        return rows

    def vectors_by_rowid(self, rowids: Sequence[int]) -> np.ndarray:
        """The stored vectors of these chunks, in the order given."""
        ids = [int(i) for i in rowids]
        found: dict[int, bytes] = {}
        for table in ("chunks", "retired_chunks"):
            todo = [i for i in ids if i not in found]
            if table == "retired_chunks" and (not todo or not self.has_retired):
                break
            for part, marks in _in_batches(todo):
                sql = (f"SELECT c.rowid, v.vector FROM {table} c JOIN vectors v ON v.key = c.vector_key "
                       f"WHERE c.rowid IN ({marks})")
                found.update(self.db.execute(sql, part))
        if not ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _vectors_of([found[i] for i in ids], self.dim, self.path)

    def chunk_rows(self, retired: bool) -> str:
        """The table to read chunk rows from: ``chunks``, or with ``retired`` also the retired rows (a reader
        of an older generation narrows them to its own rowids)."""
        if not retired or not self.has_retired:
            return "chunks"
        cols = "rowid, id, doc_id, metadata"
        return f"(SELECT {cols} FROM chunks UNION ALL SELECT {cols} FROM retired_chunks)"

    def rowids_where(self, where: str, params: Sequence[Any], retired: bool = False) -> np.ndarray:
        """Rowids of the chunks matching a SQL condition over ``chunks c`` joined to ``documents d``."""
        sql = f"SELECT c.rowid FROM {self.chunk_rows(retired)} c LEFT JOIN documents d ON d.id = c.doc_id WHERE {where}"
        return np.fromiter((r[0] for r in self.db.execute(sql, list(params))), dtype=np.int64)

    def metadata_fields(self, retired: bool = False) -> set[str]:
        rows = self.db.execute(f"SELECT DISTINCT j.key FROM {self.chunk_rows(retired)} c, json_each(c.metadata) j")
        return {r[0] for r in rows}

    # ---------------------------------------------------- vectors (and cache)
    def get_vectors(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        uniq = list(dict.fromkeys(keys))
        for part, marks in _in_batches(uniq):
            for key, blob in self.db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", part):
                out[key] = _vectors_of([blob], self.dim, self.path)[0]
        return out

    def put_vectors(self, items: dict[str, np.ndarray]) -> None:
        self.db.executemany(
            "INSERT OR IGNORE INTO vectors (key, vector) VALUES (?, ?)",
            [(k, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in items.items()],
        )

    def drop_unused_vectors(self) -> int:
        cur = self.db.execute("DELETE FROM vectors WHERE key NOT IN (SELECT vector_key FROM chunks) "
                              "AND key NOT IN (SELECT vector_key FROM retired_chunks)")
        return cur.rowcount

    # ------------------------------------------------------------- copying
    def file_records(self) -> list[tuple[str, str, int, int]]:
        """``(path, sha256, size, n_documents)`` of every file recorded whole, by path (``index copy``)."""
        return [tuple(r) for r in self.db.execute("SELECT path, sha256, size, n_documents FROM files ORDER BY path")]

    def document_records(self) -> Iterator[tuple[str, str | None, str, str, int, dict[str, Any]]]:
        """``(id, file, source, sha256, n_chars, metadata)`` of every document, by id (``index copy``)."""
        for doc_id, file, source, sha, n_chars, meta in self.db.execute(
                "SELECT id, file, source, sha256, n_chars, metadata FROM documents ORDER BY id").fetchall():
            yield doc_id, file, source, sha, n_chars, json.loads(meta)

    def iter_chunk_records(self, batch: int = 2048) -> Iterator[tuple[list[Chunk], list[str], np.ndarray]]:
        """Every chunk with its vector key and vector, by document and position, ``batch`` at a time
        (``index copy``: the same chunks and vectors in another index)."""
        cur = self.db.execute(f"SELECT {', '.join('c.' + c for c in _CHUNK_COLS.split(', '))}, c.text_sha, "
                              "c.vector_key, v.vector FROM chunks c JOIN vectors v ON v.key = c.vector_key "
                              "ORDER BY c.doc_id, c.ordinal, c.rowid")
        while rows := cur.fetchmany(batch):
            chunks = [_row_to_chunk(r[:12], self.path)[1] for r in rows]
            yield chunks, [r[12] for r in rows], _vectors_of([r[13] for r in rows], self.dim, self.path)

    # ---------------------------------------------------------------- counts
    def counts(self) -> dict[str, int]:
        def q(sql: str) -> int:
            return int(self.db.execute(sql).fetchone()[0] or 0)

        return {
            "files": q("SELECT COUNT(*) FROM files"),
            "documents": q("SELECT COUNT(*) FROM documents"),
            "chunks": q("SELECT COUNT(*) FROM chunks"),
            "tokens": q("SELECT SUM(tokens) FROM chunks"),
            "vectors": q("SELECT COUNT(*) FROM vectors"),
        }
