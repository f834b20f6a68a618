"""``Index``: a folder holding a FAISS index, a records store and a manifest.

Layout (every file readable without contextkit)::

    manifest.json   format version, model, dimension, tokenizer, chunk settings, generation,
                    the files of that generation (``files``) and the size and SHA-256 of each
    manifest.<G>.json
                    the same manifest, kept per generation G: a reader's lease (see
                    :mod:`contextkit.index._generations`)
    store.sqlite    files, documents, chunks and vectors (the source of truth); chunk rows
                    removed since an older generation a reader still holds wait in
                    ``retired_chunks``
    vectors.<G>.faiss
                    FAISS index over the chunk vectors, ids = chunk rowids
    vectors.<G>.f16.npy, vectors.<G>.ids.npy
                    ``ivfpq`` only: float16 vectors for exact re-scoring, and their rowids
                    (see :mod:`contextkit.index._faiss_kinds`); kept across generations while
                    the build is reused
    bm25.<G>/       BM25 over the chunk texts as term counts: a base and delta segments, the ones
                    kept from the previous generation hard-linked (see :mod:`contextkit.index._bm25`)
    .lock           held by the one writer

A write is one SQLite transaction; :meth:`Index.save` then writes new files named by
the generation (never changing a file an older generation's reader may read), then
``manifest.<G>.json`` and ``manifest.json`` by atomic renames, then removes the
generations no reader leases any more. If a crash falls between them, the manifest's
generation lags the store's: the next writable :meth:`Index.open` rebuilds the derived
files from the store, and a read-only open with no writer running rebuilds them in
memory (both inside one SQLite read transaction), so no state ever mixes two versions.
A reader beside a running writer serves the last saved generation whole, and moves to
the next between queries (:meth:`Index.snapshot`, :meth:`Index.refresh`).

Damage (a truncated or bit-flipped file) is told apart from lag by the checksums
in the manifest: :meth:`Index.open` refuses a damaged file, naming it, and
``contextkit repair`` rebuilds derived files from the store (see
:mod:`contextkit.index.verify` for what is checked when, and what it costs).
Write failures (full disk, permissions) raise :class:`IndexWriteError`; the
index keeps its last committed state.

Writers change the index inside :meth:`Index.transaction` (committed when the block
ends, rolled back on an error). The manifest model is in :mod:`._manifest`, the FAISS
half of the index (a component each ``Index`` owns) in :mod:`._vector_files`, the
errors in :mod:`contextkit.errors`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import (
    IndexCorruptError,
    IndexExistsError,
    IndexFolderError,
    IndexLockedError,
    IndexMismatchError,
    IndexReadOnlyError,
    IndexWriteError,
    InvalidArgumentError,
)
from contextkit.core.records import Chunk, Document, ScoredChunk
from contextkit.index._bm25 import BM25Config, BM25Index
from contextkit.index._bm25_sync import saved_bm25, synced_bm25
from contextkit.index._checksums import FileSum
from contextkit.index._disk import (
    LEFTOVERS,
    TEMPORARIES,
    atomic_write,
    fsync_dir,
    write_reason,
)
from contextkit.index._faiss_kinds import search_faiss
from contextkit.index._filters import FilterValue, matching_rowids
from contextkit.index._generations import (
    Lease,
    collect_generations,
    generation_manifest,
    lease_current,
    read_manifest_bytes,
)
from contextkit.index._manifest import (
    SETTINGS_FIELDS,
    IndexManifest,
    IndexType,
    check_store_file,
    now,
    stored_chunks,
)
from contextkit.index._pg_dsn import is_dsn
from contextkit.index._safe_files import open_regular
from contextkit.index._snapshot import (
    Snapshot,
    SnapshotReader,
    folder_identity,
    manifest_stamp,
    parse_manifest,
)
from contextkit.index._store import RecordStore, in_transaction
from contextkit.index._vector_files import VectorFiles, generation_name

__all__ = ["Index", "register_backend"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The index class of a database (``postgresql://...``), registered by :mod:`._pg_index` when
#: :mod:`contextkit.index` is imported; :meth:`Index.open`, ``create`` and ``exists`` hand a DSN to it.
_DATABASE: list[type[Index]] = []


def register_backend(cls: type[Index]) -> None:
    """Make ``cls`` the index of ``postgresql://`` DSNs (one backend: the last registered)."""
    _DATABASE[:] = [cls]


def _database(location: object) -> type[Index] | None:
    """The database backend when ``location`` is a DSN, else None (a folder)."""
    if not is_dsn(location):
        return None
    if not _DATABASE:  # pragma: no cover  (contextkit.index registers it on import)
        raise InvalidArgumentError(f"{location}: no database backend is registered")
    return _DATABASE[0]


class Index(SnapshotReader):
    """A persistent vector index of chunks. Use :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, manifest: IndexManifest, read_only: bool, lease: Lease | None = None,
                 stamp: tuple[int, int, int] | None = None) -> None:
        self.path = path
        self.read_only = read_only
        self._lock_fd: int | None = None
        try:
            if not read_only:
                self._lock()
            try:
                self.store = RecordStore(path / "store.sqlite", manifest.dim, read_only=read_only)
            except BaseException:
                self._unlock()
                raise
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        # FAISS in memory and on disk, BM25 and the lease of the generation served (a reader moves on between queries)
        self._view = Snapshot(manifest, VectorFiles(path, manifest, self.store, read_only), lease, stamp)
        self._views_lock = threading.Lock()
        self._pinned = threading.local()  # the snapshot the current thread's query runs on
        self._bm25_dirty = False  # chunks changed since the BM25 in memory was built
        self._bm25_unsaved = False  # the BM25 in memory was rebuilt and is not on disk yet
        self._bm25_added: set[int] = set()  # rowids added since it was brought up to date (see _bm25_sync)
        self._bm25_full = False  # build the next BM25 from every text (repair: the saved one is not trusted)
        self._saved_generation: int | None = None  # the generation manifest.json on disk vouches for
        self._write_failed = False  # a write failed: close() does not try to save again

    # ----------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, path: str | Path, *, model: str, dim: int, embedder: dict[str, Any] | None = None,
               tokenizer: str = DEFAULT_TOKENIZER, chunker: dict[str, Any] | None = None,
               index_type: IndexType = "flat", redact: bool = False, bm25: dict[str, Any] | None = None) -> Index:
        backend = _database(path)
        if backend is not None:
            return backend.create(path, model=model, dim=dim, embedder=embedder, tokenizer=tokenizer, chunker=chunker,
                                  index_type=index_type, redact=redact, bm25=bm25)
        folder = Path(path)
        if (folder / "manifest.json").exists():
            raise IndexExistsError(f"{folder}: an index already exists here; open it instead")
        orphans = stored_chunks(folder / "store.sqlite")
        if orphans:
            raise IndexCorruptError(
                f"{folder}: store.sqlite holds {orphans} chunks but manifest.json is missing (lost or deleted); "
                f"`contextkit repair --index {folder}` restores it, or use another folder", file="manifest.json")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise IndexReadOnlyError(f"{folder}: cannot create the index folder: {write_reason(exc)}") from None
            raise IndexWriteError(f"{folder}: cannot create the index folder: {write_reason(exc)}") from exc
        manifest = IndexManifest(model=model, dim=dim, embedder=embedder or {}, tokenizer=tokenizer,
                                 chunker=chunker or {}, index_type=index_type, redact=redact, created_at=now())
        if bm25 is not None:  # another index's BM25 settings (``index copy``), checked as a manifest's are
            manifest = IndexManifest.model_validate({**manifest.model_dump(), "bm25": bm25})
        index = cls(folder, manifest, read_only=False)  # the writer lock: a second creator is told "locked"
        try:
            if (folder / "manifest.json").exists():  # another process created it while we waited for the lock
                raise IndexExistsError(f"{folder}: an index already exists here; open it instead")
            index._remove_leftovers()
            index._vectors.start_empty()
            index.save()
        except BaseException:
            index._release()
            raise
        return index

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False, expect_model: str | None = None,
             expect_dim: int | None = None) -> Index:
        """Open the index at ``path``. ``read_only``: serve the generation ``manifest.json`` names now, and
        move to newer ones between queries (:meth:`snapshot`); nothing in the folder is written.

        A reader resolves ``path`` once, here: a symbolic link swapped to another folder while it runs
        (``ln -s new tmp && mv -T tmp current``) leaves it on the folder it opened, whose own later
        generations it still follows; open again to read the new folder. Why: every file of one
        generation must come from one folder, and a path that names another folder between two
        reads would pair one folder's manifest with the other's store.

        A ``postgresql://`` DSN opens the index in that database instead (``docs/postgres.md``)."""
        backend = _database(path)
        if backend is not None:
            return backend.open(path, read_only=read_only, expect_model=expect_model, expect_dim=expect_dim)
        folder = Path(path).resolve() if read_only else Path(path)
        folder_id = folder_identity(folder) if read_only else None  # before anything in it is read
        manifest_path = folder / "manifest.json"
        if not os.path.lexists(manifest_path):  # (a FIFO or link there is refused by name when read)
            if stored_chunks(folder / "store.sqlite"):
                raise IndexCorruptError(f"{folder}: manifest.json is missing but store.sqlite holds chunks; "
                                        f"`contextkit repair --index {folder}` restores it", file="manifest.json")
            raise IndexFolderError(f"{folder}: no index here (manifest.json is missing); create one with `contextkit ingest`")
        stamp = manifest_stamp(folder)
        lease = lease_current(folder) if read_only else None  # a writer holds .lock: no one else saves
        try:
            manifest = parse_manifest(folder, lease.data if lease is not None else read_manifest_bytes(manifest_path))
            if expect_model is not None and manifest.model != expect_model:
                raise IndexMismatchError(
                    f"{folder}: built with model {manifest.model!r}, not {expect_model!r}; use that model or a new index"
                )
            if expect_dim is not None and manifest.dim != expect_dim:
                raise IndexMismatchError(f"{folder}: vectors have dimension {manifest.dim}, the model gives {expect_dim}")
            check_store_file(folder)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        index = cls(folder, manifest, read_only=read_only, lease=lease, stamp=stamp)
        try:
            index._saved_generation = manifest.generation
            index._folder_id = folder_id
            if not read_only:
                index._remove_leftovers()
            index._load_faiss()
            if not read_only:
                index._collect()
        except BaseException:
            index._release()
            raise
        return index

    @classmethod
    def _open_for_repair(cls, path: Path, manifest: IndexManifest) -> Index:
        """The index with its writer lock and store, derived files not read (``contextkit repair``)."""
        index = cls(Path(path), manifest, read_only=False)
        index._saved_generation = manifest.generation
        return index

    def _load_faiss(self) -> None:
        """Read (or, when they lag the store, rebuild and save) the FAISS files, then check them against the store."""
        if self.read_only and self.manifest.files:
            self._load_view(self._view)
            return
        if self._vectors.load(self._saved_generation) and not self.read_only:
            self.save()
        self._vectors.check_loaded(self._saved_generation)

    def _rebuild_derived(self) -> int:
        """Rebuild FAISS and BM25 from the store and save them (``contextkit repair``); the vectors now held."""
        self._vectors.rebuild()
        self._bm25, self._bm25_dirty, self._bm25_full = None, True, True
        self.save(force=True)
        return len(self)

    @classmethod
    def exists(cls, path: str | Path) -> bool:
        """Whether ``path`` holds an index: anything named ``manifest.json`` counts, so that a FIFO or a link
        in its place is opened (and refused by name), not taken for a new folder and then "already exists"."""
        backend = _database(path)
        if backend is not None:
            return backend.exists(path)
        return os.path.lexists(Path(path) / "manifest.json")

    def close(self) -> None:
        """Save what is not saved yet (unless a write just failed), then release the store and the lock."""
        try:
            if not self.read_only and (self._vectors.dirty or self._bm25_unsaved) and not self._write_failed:
                self.save()
        finally:
            self._release()

    def _release(self) -> None:
        self.store.close()
        self._view.close(release=True)
        self._unlock()

    def _remove_leftovers(self) -> None:
        """Temporary files of an interrupted save (we hold the lock: no save is running)."""
        for name in LEFTOVERS:
            target = self.path / name
            try:
                if target.is_dir():
                    shutil.rmtree(target)
                else:
                    target.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("%s: could not remove %s (%s)", self.path, name, exc)

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lock(self) -> None:
        """Take ``.lock`` (exclusive). Retried for a moment: readers probe it by a brief lock of their own."""
        try:
            fd = open_regular(self.path / ".lock", os.O_RDWR | os.O_CREAT)  # a FIFO or link there: refused
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise IndexReadOnlyError(
                    f"{self.path}: the index folder is read-only ({write_reason(exc)}): it can be searched, "
                    "not written; ingest into a copy or a folder you can write") from None
            raise IndexWriteError(f"{self.path}: could not take the writer lock: {write_reason(exc)}") from exc
        for attempt in range(40):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 39:
                    os.close(fd)
                    raise IndexLockedError(f"{self.path}: another process is writing to this index") from None
                time.sleep(0.005)
        self._lock_fd = fd

    @property
    def _faiss(self) -> Any:
        """The FAISS structure in memory (tests and benchmarks look at it; :mod:`._vector_files` owns it)."""
        return self._vectors.faiss

    # -------------------------------------------------------------- writing
    def transaction(self) -> AbstractContextManager[None]:
        """One write: :meth:`begin`, then :meth:`commit` when the block ends, or :meth:`rollback` on any
        exception, which is re-raised. The index is then as it was before the block.

        Like :meth:`begin`, it does not nest: a transaction started inside another fails at its
        start with what ``begin`` raises (SQLite's "cannot start a transaction within a
        transaction"), before it touches anything, so the outer one goes on unharmed.
        """
        return in_transaction(self)

    def begin(self) -> None:
        """Start a transaction (one per file during ingestion); prefer :meth:`transaction`."""
        self._check_writable()
        self.store.begin()

    def commit(self) -> None:
        """Commit the transaction as a new generation of the store."""
        self.store.bump_generation()
        self.store.commit()
        self._write_failed = False  # the disk takes writes again

    def rollback(self) -> None:
        """Undo the transaction, in the store and in memory (called while its exception is handled)."""
        failure = sys.exc_info()[1]
        if isinstance(failure, IndexWriteError):
            self._write_failed = True  # the disk refuses writes: close() will not try to save again
        try:
            self.store.rollback()
        except sqlite3.Error as exc:  # SQLite already rolled back (full disk, I/O error)
            log.warning("%s: rollback: %s", self.path, exc)
        self._vectors.after_rollback()  # in-memory FAISS may hold the rolled-back changes

    def add_chunks(self, chunks: Sequence[Chunk], vectors: np.ndarray, vector_keys: Sequence[str],
                   store_vectors: bool = True) -> None:
        """Add chunks and their vectors (inside :meth:`transaction`).

        ``store_vectors=False`` when the vectors are already in the store under
        ``vector_keys`` (the embedder's cache wrote them).
        """
        if len(chunks) != len(vectors) or (len(vectors) and vectors.shape[1] != self.manifest.dim):
            raise InvalidArgumentError(f"{len(chunks)} chunks, vectors of shape {vectors.shape}, index dim {self.manifest.dim}")
        if store_vectors:
            self.store.put_vectors({k: v for k, v in zip(vector_keys, vectors)})
        rowids = self.store.add_chunks(chunks, vector_keys)
        self._vectors.add(vectors, rowids)
        self._bm25_dirty = True
        self._bm25_added.update(rowids)

    def remove_vectors(self, rowids: Sequence[int]) -> None:
        """Take chunks the store just removed out of FAISS and BM25 (inside :meth:`transaction`)."""
        if not rowids:
            return
        self._vectors.remove(rowids)
        self._bm25_dirty = True

    def run_together(self, *calls: Callable[[], T]) -> list[T]:
        """Each call's result, in order, all reading the state this thread's query is pinned to.

        Here one after the other (FAISS and BM25 in memory are fast); a database index runs them at
        once on connections that share one snapshot, so that a hybrid query waits for the slower of its
        dense and BM25 statements rather than their sum (see :class:`~._pg_index.PgIndex`)."""
        return [call() for call in calls]

    def nearest_rowids(self, vector: np.ndarray, n: int, allowed: np.ndarray | None = None
                       ) -> list[tuple[int, float]]:
        """``(rowid, score)`` of the ``n`` chunks nearest to one query vector, best first; only ``allowed``
        rowids (ascending) when given (see :meth:`VectorFiles.nearest_rowids`)."""
        with self.snapshot():
            return self._vectors.nearest_rowids(vector, n, allowed)

    def delete_document(self, doc_id: str) -> int:
        removed = self.store.delete_document(doc_id)
        self.remove_vectors(removed)
        return len(removed)

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: np.ndarray,
               vector_keys: Sequence[str] | None = None) -> None:
        """Replace one document and its chunks, in one transaction of its own.

        ``vector_keys`` are the embedder's cache keys (:meth:`Embedder.cache_key`);
        without them each vector is keyed by its chunk id and text, so vectors
        from elsewhere never collide.
        """
        keys = list(vector_keys) if vector_keys is not None else [
            f"{c.id}@{hashlib.sha256(c.embedding_text.encode('utf-8', 'surrogatepass')).hexdigest()}" for c in chunks
        ]
        with self.transaction():
            self.delete_document(document.id)
            digest = hashlib.sha256(document.text.encode("utf-8", "surrogatepass")).hexdigest()
            self.store.put_document(document.id, None, document.source, digest, len(document.text), document.metadata)
            self.add_chunks(chunks, np.asarray(vectors, dtype=np.float32), keys)

    def delete(self, doc_id: str) -> int:
        """Delete one document and its chunks, in one transaction; returns how many chunks went."""
        with self.transaction():
            removed = self.delete_document(doc_id)
        return removed

    def documents(self) -> list[str]:
        return self.store.document_ids()

    def delete_file(self, path: str) -> int:
        removed = self.store.delete_file(path)
        self.remove_vectors(removed)
        return len(removed)

    def delete_chunks(self, chunk_ids: Sequence[str]) -> int:
        """Remove chunks by their ids (inside :meth:`transaction`); returns how many went.

        Why: a caller storing nodes of its own (the LlamaIndex vector store) replaces single
        chunks, not whole documents. They leave the way a deleted document's do: their rows
        retire (a reader of an older generation still finds them), FAISS and BM25 drop them;
        their documents stay. Ids not in the index are ignored."""
        self._check_writable()
        removed = self.store.delete_chunks(chunk_ids)
        self.remove_vectors(removed)
        return len(removed)

    def stored_vectors(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors the store keeps under those of ``keys`` it has (the embedder's :meth:`cache_key`).

        Why: the store is also the embedding cache; ingestion embeds only the texts missing here."""
        return self.store.get_vectors(keys)

    def put_vectors(self, vectors: dict[str, np.ndarray]) -> None:
        """Keep ``vectors`` under their keys (a key already held keeps its vector).

        Outside a transaction each call commits at once, so embedding work survives a crash
        (the next run finds it with :meth:`stored_vectors`); inside :meth:`transaction` it goes
        with it. Chunks then point at them (:meth:`add_chunks` with ``store_vectors=False``).
        Why a method: ingestion hands vectors to the index through its API, never by making
        the store its embedder's cache."""
        self._check_writable()
        dim = self.manifest.dim
        bad = [k for k, v in vectors.items() if np.shape(v) != (dim,)]
        if bad:
            raise InvalidArgumentError(f"vector {bad[0]!r} has shape {np.shape(vectors[bad[0]])}, index dim {dim}")
        self.store.put_vectors(vectors)

    def rowids_matching(self, *, doc_ids: Sequence[str] | None = None,
                        metadata: dict[str, FilterValue] | None = None,
                        source_glob: str | None = None) -> np.ndarray:
        """The rowids of the chunks meeting every given condition, as a filtered search takes them.

        ``doc_ids``: of these documents; ``metadata``: each field equals the value given (an
        unknown field raises :class:`~contextkit.errors.RetrievalError` naming the known ones);
        ``source_glob``: an ``fnmatch`` glob over the document id or its source path. A reader
        serving an older generation than the store's gets its generation's chunks (ascending).
        Why here: filters are data, compiled to SQL inside the index (:mod:`._filters`), so
        ``contextkit.retrievers.Filters`` holds no SQL."""
        snapshot = self.snapshot_rowids()
        rowids = matching_rowids(self.store, doc_ids=doc_ids, metadata=metadata, source_glob=source_glob,
                                 retired=snapshot is not None)
        if snapshot is not None:
            rowids = np.sort(rowids[np.isin(rowids, snapshot)])
        return rowids

    def chunk_doc_ids(self) -> dict[int, str]:
        """``{rowid: doc_id}`` of every chunk: how evaluation maps search hits (rowids) to documents."""
        return self.store.chunk_doc_ids()

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        """The chunks of one document in the generation this reader serves, in reading order (none when
        the index does not hold it).

        Why: a server hands out a whole document (or a range of it) rebuilt from its chunks' offsets; the
        rows are those of one generation, as a search's are, whatever a writer commits meanwhile."""
        with self.snapshot():
            rowids = self.rowids_matching(doc_ids=[doc_id])
            chunks = self.store.chunks_by_rowid(rowids) if len(rowids) else {}
        return sorted(chunks.values(), key=lambda c: (c.ordinal, c.start))

    def iter_documents(self) -> Iterator[tuple[str, str, int]]:
        """``(doc_id, source, n_chars)`` of every document the store holds now, by id."""
        return self.store.iter_documents()

    def document_sources(self, doc_ids: Sequence[str] | set[str]) -> dict[str, str]:
        """``{doc_id: source path}`` of those of ``doc_ids`` the index holds; an empty source is left out.

        Why: a retriever names each hit's source file without reading the store's tables itself."""
        return {d: s for d, s in self.store.document_sources(doc_ids).items() if s}

    def save(self, force: bool = False) -> None:
        """Write the FAISS file, the BM25 folder and the manifest atomically (the store is already durable).

        Does nothing when nothing changed since the last save (``force`` rewrites anyway).
        Raises :class:`IndexWriteError` when the disk refuses (full, permissions): the
        files on disk then still describe the last committed state, or lag it and are
        rebuilt on the next open.
        """
        self._check_writable()
        gen = self.store.generation()
        changed = self._vectors.dirty or self._vectors.rebuild_needed or self._bm25_dirty or self._bm25_unsaved
        if not (force or changed) and self._saved_generation == gen and self.manifest.checksums and self.manifest.files:
            return
        self._vectors.prepare_save()
        taken = self._saved_generation == gen or (self.path / generation_manifest(gen)).exists()
        if taken and not self.store.db.in_transaction:  # files are never rewritten under a name already used
            gen = self._bump_generation(gen)
        step = "vectors.faiss"
        try:
            sums = self._vectors.write(gen)
            files = dict(self._vectors.written)
            step = "bm25/"
            bm25_sums, files["bm25"] = self._write_bm25(gen)
            sums.update(bm25_sums)
            step = "store.sqlite"
            self._save_settings_copy()
            step = "manifest.json"
            self.manifest.generation = gen
            self.manifest.counts = self.store.counts()
            self.manifest.checksums = sums
            self.manifest.files = files
            self.manifest.updated_at = now()
            data = self.manifest.model_dump_json(indent=2).encode()
            atomic_write(self.path / generation_manifest(gen), data)  # the lease file of generation gen
            atomic_write(self.path / "manifest.json", data)  # readers move to gen from here on
        except IndexWriteError:
            self._write_failed = True
            self._discard_temporaries()
            raise
        except (OSError, RuntimeError) as exc:  # RuntimeError: FAISS and bm25s report I/O errors so
            self._write_failed = True
            self._discard_temporaries()
            raise IndexWriteError(
                f"{self.path}: could not write {step}: {write_reason(exc)}; the index keeps its last committed "
                "state (free space or fix permissions, then run the command again)") from exc
        self._saved_generation = gen
        self._vectors.dirty = self._bm25_unsaved = self._write_failed = False
        self._collect()

    def _collect(self) -> None:
        """Delete the generations no reader leases any more, and the store rows only they needed."""
        try:
            oldest = collect_generations(self.path, self.manifest.generation, self.manifest.top_level_names())
            if oldest >= 0 and not self.store.db.in_transaction:
                self.store.purge_retired(oldest)
        except (OSError, sqlite3.Error) as exc:  # the next save tries again
            log.warning("%s: could not remove older generations (%s)", self.path, exc)

    def _bump_generation(self, gen: int) -> int:
        """Move the store to a new generation before rewriting files the manifest on disk vouches for.

        So a crash while they are rewritten leaves a manifest that lags the store (rebuilt
        on open) rather than checksums that no longer match (reported as damage).
        """
        old_bm25 = self._bm25 is not None and not self._bm25_dirty and self._bm25.generation == gen
        with self.store.transaction():
            new = self.store.bump_generation()
        if old_bm25:
            self._bm25.generation = new  # type: ignore[union-attr]  # same chunks, new stamp
        return new

    def _write_bm25(self, gen: int) -> tuple[dict[str, FileSum], str]:
        """``bm25.<gen>/``: its files' checksums (keyed ``bm25/<file>``) and the folder's name."""
        folder = self.path / generation_name("bm25", gen)
        if self._bm25 is None or self._bm25_dirty or self._bm25.generation != gen or self._bm25.legacy:
            self._bm25 = self._updated_bm25(gen, convert=True)
        sums = self._bm25.save(folder)  # new files fsynced, kept ones hard-linked
        fsync_dir(self.path)
        return {f"bm25/{name}": rec for name, rec in sums.items()}, folder.name

    def _save_settings_copy(self) -> None:
        """Keep the store's copy of the manifest settings current (written at creation; rarely changes)."""
        if self.store.db.in_transaction:
            return
        settings = json.dumps(self.manifest.model_dump(include=set(SETTINGS_FIELDS)), sort_keys=True)
        if self.store.get_meta("manifest_settings") == settings:
            return
        with self.store.transaction():
            self.store.set_meta("manifest_settings", settings)

    def _discard_temporaries(self) -> None:
        for name in TEMPORARIES:
            target = self.path / name
            try:
                shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            except OSError:
                pass

    def _check_writable(self) -> None:
        if self.read_only:
            raise IndexReadOnlyError(f"{self.path}: opened read-only; open it without read_only=True to write")

    def _updated_bm25(self, gen: int, convert: bool = False) -> BM25Index:
        """The BM25 of the store's chunks now: the one in memory, or else the last saved one, brought up to
        date by tokenising only the chunks it lacks (:mod:`._bm25_sync`); built from every text when there is
        none to start from, when repair asks, or (``convert``, or changed chunks) for bm25s's older layout."""
        base = None if self._bm25_full else self._bm25
        vouched = False  # read from the folder the manifest names for the store's generation, nothing changed since
        if base is None and not self._bm25_full:
            base = saved_bm25(self.path, self.manifest)
            if base is None and self.manifest.checksums:
                log.warning("%s: BM25 folder is missing or unreadable; rebuilding it from every text", self.path)
            vouched = base is not None and base.generation == gen == self._saved_generation and not self._bm25_dirty
        if base is not None and base.legacy and (convert or self._bm25_dirty or base.generation != gen):
            base = None  # bm25s keeps scores, not counts: built afresh once, kept as postings from then on
        if base is None:
            bm25 = self._build_bm25(gen)
        else:
            bm25 = base if base.legacy or vouched else synced_bm25(base, self.store.db, self._bm25_added, gen)
        self._bm25_added.clear()
        self._bm25_full = False
        self._bm25_dirty = self.store.db.in_transaction  # rows read inside a transaction may yet roll back
        self._bm25_unsaved = not self.read_only and bm25.stored_as is None
        return bm25

    def _build_bm25(self, generation: int) -> BM25Index:
        rowids, texts = [], []
        config = BM25Config(**self.manifest.bm25)
        for ids, batch in self.store.iter_chunk_texts(titled=config.title_every_chunk):
            rowids.append(ids)
            texts += batch
        bm25 = BM25Index(config)
        bm25.build(np.concatenate(rowids) if rowids else np.zeros(0, np.int64), texts, generation)
        return bm25

    @property
    def bm25(self) -> BM25Index:
        """The BM25 side, loaded on first use and rebuilt if it lags the store (a reader: its generation's)."""
        self.refresh()
        view = self._current()
        if self.read_only and view.manifest.files:
            loaded = view.load_bm25(self.path)
            if loaded is not None:
                return loaded
            if self.store.generation() != view.generation:
                name = view.manifest.file("bm25")
                raise IndexCorruptError(f"{self.path / name}: unreadable or of another generation; `contextkit "
                                        f"repair --index {self.path}` rebuilds it", file=name)
        gen = self.store.generation()
        if self._bm25 is None or self._bm25.generation != gen or self._bm25_dirty:
            self._bm25 = self._updated_bm25(gen)  # the next save() or close() saves it when it changed
        return self._bm25

    # -------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self._vectors)

    def search(self, query_vectors: np.ndarray, k: int = 10) -> list[list[ScoredChunk]]:
        """The ``k`` nearest chunks of each query vector, best first (one generation: :meth:`snapshot`)."""
        with self.snapshot():
            return self._search(query_vectors, k)

    def _search(self, query_vectors: np.ndarray, k: int) -> list[list[ScoredChunk]]:
        faiss_index = self._vectors.searchable()
        queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        if len(self) == 0:
            return [[] for _ in queries]
        distances, ids = search_faiss(faiss_index, queries, min(k, len(self)))
        found = self.store.chunks_by_rowid({int(i) for i in ids.ravel() if i >= 0})
        self._vectors.check_found(ids, found)  # an id with no row: a crafted FAISS file, not served silently
        return [
            [ScoredChunk(found[int(i)], float(d)) for d, i in zip(row_d, row_i) if i >= 0 and int(i) in found]
            for row_d, row_i in zip(distances, ids)
        ]

    def info(self) -> dict[str, Any]:
        counts = self.store.counts()
        size = sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())
        return {"path": str(self.path), **self.manifest.model_dump(exclude={"counts", "checksums"}), "counts": counts,
                "vectors_in_faiss": len(self), "bytes_on_disk": size, "checked_at": time.time()}

