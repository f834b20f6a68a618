"""What a reader of an index holds: one generation's manifest, FAISS and BM25, and its lease.

Why a separate object: an open read-only :class:`~contextkit.index.Index` moves to a newer
generation between queries (a service keeps one open while a job re-ingests), but a query
that started on generation G must finish on G, FAISS, BM25 and store rows alike, even while
another thread of the same process moves the index on. Each query pins the :class:`Snapshot`
it started with (:meth:`Index.snapshot`); a snapshot the index has moved past releases its
lease when its last query ends. The files and rows a lease keeps are described in
:mod:`._generations`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import numpy as np

from contextkit.core.errors import IndexCorruptError, IndexFolderError, IndexMismatchError
from contextkit.index._bm25 import BM25Index
from contextkit.index._bm25_sync import saved_bm25
from contextkit.index._checksums import npy_load, npy_shape
from contextkit.index._generations import Lease, lease_current, writer_active
from contextkit.index._manifest import FORMAT_VERSION, IndexManifest, describe_invalid
from contextkit.index._store import RecordStore
from contextkit.index._vector_files import VectorFiles

__all__ = ["Snapshot", "SnapshotReader", "folder_identity", "manifest_stamp", "parse_manifest"]

log = logging.getLogger(__name__)


def manifest_stamp(folder: Path) -> tuple[int, int, int] | None:
    """``manifest.json``'s inode, mtime and size: every save replaces it by a rename, so a changed stamp is
    the cheap sign (one ``stat``, about a microsecond) that a newer generation may be there."""
    try:
        st = os.stat(folder / "manifest.json")
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def folder_identity(folder: Path) -> tuple[int, int] | None:
    """The device and inode of the folder itself (None when it is gone)."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def parse_manifest(folder: Path, data: bytes) -> IndexManifest:
    """The manifest in ``data`` (read from ``folder``), or the error that names what is wrong with it."""
    try:
        manifest = IndexManifest.model_validate_json(data)
    except ValueError as exc:
        raise IndexCorruptError(
            f"{folder / 'manifest.json'}: unreadable manifest ({describe_invalid(exc)}); "
            f"`contextkit repair --index {folder}` restores it from the store", file="manifest.json") from exc
    if manifest.format_version != FORMAT_VERSION:
        raise IndexMismatchError(f"{folder}: index format {manifest.format_version}, this contextkit reads "
                                 f"{FORMAT_VERSION}")
    return manifest


class Snapshot:
    """One generation of an index as its readers (or its one writer) see it."""

    def __init__(self, manifest: IndexManifest, vectors: VectorFiles, lease: Lease | None = None,
                 stamp: tuple[int, int, int] | None = None) -> None:
        self.manifest = manifest
        self.vectors = vectors
        self.bm25: BM25Index | None = None
        self.lease = lease
        self.stamp = stamp
        self.pins = 0  # queries running on it now
        self._rowids: np.ndarray | None = None
        self._loading = threading.Lock()

    @property
    def generation(self) -> int:
        return self.manifest.generation

    def rowids(self, folder: Path) -> np.ndarray:
        """The rowids of every chunk of this generation, ascending (``rowids.npy`` of its BM25, checked)."""
        if self._rowids is None:
            path = folder / self.manifest.file("bm25/rowids.npy")
            if npy_shape(path, "<i8") is None:
                raise IndexCorruptError(f"{path}: not the rowids of this generation's chunks; `contextkit repair "
                                        f"--index {folder}` rebuilds it", file=self.manifest.file("bm25/rowids.npy"))
            self._rowids = np.sort(npy_load(path))
        return self._rowids

    def pin_rowids(self, rowids: np.ndarray) -> None:
        """The rowids of this snapshot when it was built in memory rather than read from its files."""
        self._rowids = np.sort(np.asarray(rowids, dtype=np.int64))

    def load_bm25(self, folder: Path) -> BM25Index | None:
        """This generation's BM25 from its own folder (None when it cannot be read, or was saved for another
        generation or other BM25 settings)."""
        if self.bm25 is None:
            with self._loading:  # threads whose first search this is wait for one load, not load it each
                if self.bm25 is None:
                    self.bm25 = saved_bm25(folder, self.manifest)
        return self.bm25

    def close(self, release: bool = False) -> None:
        """Release the lease; with ``release`` (the index is closed), a reader's structures too: its vectors
        are mapped from the files (:func:`._faiss_kinds.mapped_read_flags`), which must not stay mapped while
        a closed :class:`~contextkit.index.Index` waits to be collected (Windows cannot delete a mapped file).
        A view a refresh replaced keeps them: a thread that took it unpinned may still search it, and it is
        freed with its last reference. A search that holds the structure keeps it until it ends."""
        if self.lease is not None:
            self.lease.release()
            self.lease = None
        if release and self.vectors.read_only:
            self.vectors.faiss = None
            self.bm25 = None


class SnapshotReader:
    """The reader's side of :class:`~contextkit.index.Index` (a mixin): which generation it serves, how a
    query pins one (:meth:`snapshot`) and how it moves to a newer one (:meth:`refresh`)."""

    path: Path
    read_only: bool
    store: RecordStore
    _view: Snapshot
    _views_lock: threading.Lock
    _pinned: threading.local
    _saved_generation: int | None
    _lock_fd: int | None  # the writer's lock file (Index.__init__)
    _folder_id: tuple[int, int] | None = None  # a reader's folder as opened (Index.open)

    def _build_bm25(self, generation: int) -> BM25Index:  # pragma: no cover  (Index's)
        raise NotImplementedError

    @property
    def manifest(self) -> IndexManifest:
        """The manifest of the generation served (to this thread's query, when one is running)."""
        return self._current().manifest

    @property
    def _vectors(self) -> VectorFiles:
        return self._current().vectors

    @property
    def _bm25(self) -> BM25Index | None:
        return self._current().bm25

    @_bm25.setter
    def _bm25(self, value: BM25Index | None) -> None:
        self._current().bm25 = value

    def _current(self) -> Snapshot:
        pinned = getattr(self._pinned, "view", None)
        return pinned if pinned is not None else self._view

    @property
    def generation(self) -> int:
        """The generation served now (a read-only index moves to newer ones between queries)."""
        return self._current().generation

    @contextmanager
    def snapshot(self) -> Iterator[Self]:
        """Pin one committed generation for the block: every search, BM25 look-up and store read in it
        answers from that generation, whatever a writer commits meanwhile.

        Why: a query (dense, then BM25, then the chunks' texts) must not mix two generations. A
        read-only index first checks, by one ``stat`` of ``manifest.json``, whether a newer generation
        was saved, and moves to it; then whether this thread's store connection must be reopened to
        read what the owner committed (:meth:`RecordStore.follow`: a connection that cannot see the
        owner's writes would answer from an older store than the generation). Nested blocks share the
        outer one's generation. A writable index always serves its own, current state.
        """
        if not self.read_only or getattr(self._pinned, "view", None) is not None:
            yield self
            return
        self.refresh()
        self.store.follow()
        with self._views_lock:
            view = self._view
            view.pins += 1
        self._pinned.view = view
        try:
            yield self
        finally:
            self._pinned.view = None
            with self._views_lock:
                view.pins -= 1
                if view.pins == 0 and view is not self._view:
                    view.close()

    def refresh(self) -> bool:
        """Move a read-only index to the generation ``manifest.json`` names now; True when it moved.

        Cheap when nothing changed (one ``stat``); otherwise the new generation's files are leased,
        checked and loaded as :meth:`open` does, and the old lease is released when no query uses it.
        The folder is the one opened (:meth:`Index.open` resolves symbolic links once, so a link
        swapped to another folder leaves this reader on its own); a folder renamed over it is refused
        (:class:`IndexFolderError`: open it again), never read as if its files were this one's."""
        if not self.read_only or getattr(self._pinned, "view", None) is not None:
            return False
        stamp = manifest_stamp(self.path)
        if stamp is None or stamp == self._view.stamp:
            return False
        with self._views_lock:
            if stamp == self._view.stamp:
                return False
            if self._folder_id is not None and folder_identity(self.path) != self._folder_id:
                raise IndexFolderError(f"{self.path}: another folder was moved here while this index was open "
                                       "(renamed over it); open it again to read the new one")
            lease = lease_current(self.path)
            try:
                manifest = parse_manifest(self.path, lease.data)
                self.store.follow()  # after the manifest: the store then holds at least its generation
                if manifest.generation == self._view.generation and manifest.files == self._view.manifest.files:
                    lease.release()
                    self._view.stamp = stamp
                    return False
                view = Snapshot(manifest, VectorFiles(self.path, manifest, self.store, True), lease, stamp)
                self._load_view(view)
            except BaseException:
                lease.release()
                raise
            old, self._view = self._view, view
            self._saved_generation = manifest.generation
            if old.pins == 0:
                old.close()
        return True

    def snapshot_rowids(self) -> np.ndarray | None:
        """The rowids of every chunk of the generation served, ascending; None when that is the store's
        live state (a writer, or a folder saved before generations had their own files)."""
        view = self._current()
        if not self.read_only or not view.manifest.files:
            return None
        return view.rowids(self.path)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load_view(self, view: Snapshot) -> None:
        """A reader's generation: its files, checked; or, when the store is ahead of every saved generation
        and no writer is running (a crash between a commit and its save), FAISS and BM25 rebuilt in memory
        from the store, both inside one SQLite read transaction so they hold the same rows."""
        lagging = self.store.generation() > view.generation and not writer_active(self.path)
        if lagging and manifest_stamp(self.path) == view.stamp:  # (a newer save since: served from the next query)
            db = self.store.db
            db.execute("BEGIN")
            try:
                gen = self.store.generation()
                log.warning("%s: the saved files are behind the records store (generation %s vs %s), and no "
                            "writer is running; rebuilding in memory", self.path, view.generation, gen)
                view.vectors.rebuild()
                view.bm25 = self._build_bm25(gen)
                view.pin_rowids(view.bm25.rowids)
            finally:
                db.execute("COMMIT")
            return
        view.vectors.load(view.generation)
        view.vectors.check_loaded(view.generation)
