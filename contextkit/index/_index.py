"""``Index``: a folder holding a FAISS index, a records store and a manifest.

Layout (every file readable without contextkit)::

    manifest.json   format version, model, dimension, tokenizer, chunk settings, generation,
                    size and SHA-256 of every derived file
    store.sqlite    files, documents, chunks and vectors (the source of truth)
    vectors.faiss   FAISS index over the chunk vectors, ids = chunk rowids
    vectors.f16.npy, vectors.ids.npy
                    ``ivfpq`` only: float16 vectors for exact re-scoring, and their rowids
                    (see :mod:`contextkit.index._faiss_kinds`)
    bm25/           BM25 over the chunk texts (see :mod:`contextkit.index._bm25`)
    .lock           held by the one writer

A write is one SQLite transaction; :meth:`Index.save` then writes the FAISS file,
the BM25 folder and the manifest through temporary files and atomic renames. If a
crash falls between them, the manifest's generation lags the store's and the next
:meth:`Index.open` rebuilds the derived files from the store, so no state ever
mixes two versions. A save that must rewrite derived files while the manifest on
disk already vouches for the store's generation first moves the store to a new
generation, so that window too is seen as "lagging", never as damage.

Damage (a truncated or bit-flipped file) is told apart from lag by the checksums
in the manifest: :meth:`Index.open` refuses a damaged file, naming it, and
``contextkit repair`` rebuilds derived files from the store (see
:mod:`contextkit.index._verify` for what is checked when, and what it costs).
Write failures (full disk, permissions) raise :class:`IndexWriteError`; the
index keeps its last committed state.

The manifest model, errors and file helpers live in :mod:`._manifest`, the FAISS
structures in :mod:`._faiss_kinds`; their names are re-exported here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contextkit.index._bm25 import BM25Config, BM25Index
from contextkit.index._faiss_kinds import (
    DELTA_FILES,
    DELTA_SHARE,
    IVFPQ_FILES,
    IVFPQ_TRAIN_FROM,
    RefinedIVFPQ,
    SkippingIndex,
    ivf_nprobe,
    search_faiss,
)
from contextkit.index._manifest import (
    _ERRNO_REASONS,
    FORMAT_VERSION,
    SETTINGS_FIELDS,
    IndexCorruptError,
    IndexFolderError,
    IndexLockedError,
    IndexManifest,
    IndexMismatchError,
    IndexType,
    IndexWriteError,
    StoreCorruptError,
    StoreWriteError,
    _atomic_write,
    _check_store_file,
    _fsync_dir,
    _now,
    _stored_chunks,
    _write_reason,
)
from contextkit.index._store import RecordStore
from contextkit.index._vector_files import VectorFiles
from contextkit.index._verify import (
    LEFTOVERS,
    FileSum,
    describe_invalid,
    file_sum,
)
from contextkit.records import Chunk, Document, ScoredChunk

__all__ = ["Index", "IndexCorruptError", "IndexFolderError", "IndexLockedError", "IndexManifest",
           "IndexMismatchError", "IndexWriteError"]
# re-exported for the import paths tests, benches and docs use (``contextkit.index._index.X``)
_REEXPORTED = (_ERRNO_REASONS, FORMAT_VERSION, SETTINGS_FIELDS, IndexType, StoreCorruptError, StoreWriteError,
               ivf_nprobe, search_faiss, IVFPQ_TRAIN_FROM)

log = logging.getLogger(__name__)

#: ``auto`` stays exact (flat) below this many vectors and switches to HNSW above it.
#: ``index_type="auto"`` switches from exact search to HNSW here. Why 50,000: on 2 cores an
#: exact search costs ~1.5 ms per 10k vectors (8 ms at 50k), while a hybrid query's whole
#: budget is 15 ms of which the query embedding takes ~9; HNSW (M=32, efSearch=128) then
#: answers in ~1 ms with Recall@10 >= 0.998 at 100k and 0.979 at 1M embedding-like vectors
#: (bench/bench_retrieval.py ann), at the cost of ~15 s of build per 100k vectors.
AUTO_HNSW_FROM = 50_000



class Index(VectorFiles):
    """A persistent vector index of chunks. Use :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, manifest: IndexManifest, read_only: bool) -> None:
        self.path = path
        self.manifest = manifest
        self.read_only = read_only
        self._lock_fd: int | None = None
        if not read_only:
            self._lock()
        try:
            self.store = RecordStore(path / "store.sqlite", manifest.dim)
        except BaseException:
            self._unlock()
            raise
        self._faiss: Any = None
        self._dirty = False  # FAISS in memory differs from the file on disk
        self._rebuild_needed = False
        self._bm25: BM25Index | None = None
        self._bm25_dirty = False  # chunks changed since the BM25 in memory was built
        self._bm25_unsaved = False  # the BM25 in memory was rebuilt and is not on disk yet
        self._saved_generation: int | None = None  # the generation manifest.json on disk vouches for
        self._write_failed = False  # a write failed: close() does not try to save again

    # ----------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, path: str | Path, *, model: str, dim: int, embedder: dict[str, Any] | None = None,
               tokenizer: str = "cl100k_base", chunker: dict[str, Any] | None = None,
               index_type: IndexType = "flat", redact: bool = False) -> Index:
        folder = Path(path)
        if (folder / "manifest.json").exists():
            raise IndexFolderError(f"{folder}: an index already exists here; open it instead")
        orphans = _stored_chunks(folder / "store.sqlite")
        if orphans:
            raise IndexCorruptError(
                f"{folder}: store.sqlite holds {orphans} chunks but manifest.json is missing (lost or deleted); "
                f"`contextkit repair --index {folder}` restores it, or use another folder", file="manifest.json")
        folder.mkdir(parents=True, exist_ok=True)
        manifest = IndexManifest(model=model, dim=dim, embedder=embedder or {}, tokenizer=tokenizer,
                                 chunker=chunker or {}, index_type=index_type, redact=redact, created_at=_now())
        index = cls(folder, manifest, read_only=False)
        try:
            index._remove_leftovers()
            index._faiss = index._new_faiss()
            index._dirty = True
            index.save()
        except BaseException:
            index._release()
            raise
        return index

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False, expect_model: str | None = None,
             expect_dim: int | None = None) -> Index:
        folder = Path(path)
        manifest_path = folder / "manifest.json"
        if not manifest_path.is_file():
            if _stored_chunks(folder / "store.sqlite"):
                raise IndexCorruptError(f"{folder}: manifest.json is missing but store.sqlite holds chunks; "
                                        f"`contextkit repair --index {folder}` restores it", file="manifest.json")
            raise IndexFolderError(f"{folder}: no index here (manifest.json is missing); create one with `contextkit ingest`")
        try:
            manifest = IndexManifest.model_validate_json(manifest_path.read_bytes())
        except ValueError as exc:
            raise IndexCorruptError(
                f"{manifest_path}: unreadable manifest ({describe_invalid(exc)}); "
                f"`contextkit repair --index {folder}` restores it from the store", file="manifest.json") from exc
        if manifest.format_version != FORMAT_VERSION:
            raise IndexMismatchError(
                f"{folder}: index format {manifest.format_version}, this contextkit reads {FORMAT_VERSION}"
            )
        if expect_model is not None and manifest.model != expect_model:
            raise IndexMismatchError(
                f"{folder}: built with model {manifest.model!r}, not {expect_model!r}; use that model or a new index"
            )
        if expect_dim is not None and manifest.dim != expect_dim:
            raise IndexMismatchError(f"{folder}: vectors have dimension {manifest.dim}, the model gives {expect_dim}")
        _check_store_file(folder)
        index = cls(folder, manifest, read_only=read_only)
        try:
            index._saved_generation = manifest.generation
            if not read_only:
                index._remove_leftovers()
            index._load_faiss()
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

    @classmethod
    def exists(cls, path: str | Path) -> bool:
        return (Path(path) / "manifest.json").is_file()

    def close(self) -> None:
        """Save what is not saved yet (unless a write just failed), then release the store and the lock."""
        try:
            if not self.read_only and (self._dirty or self._bm25_unsaved) and not self._write_failed:
                self.save()
        finally:
            self._release()

    def _release(self) -> None:
        self.store.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

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
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise IndexLockedError(f"{self.path}: another process is writing to this index") from None
        self._lock_fd = fd

    # --------------------------------------------------------------- FAISS
    def _kind(self, n: int | None = None) -> str:
        """The FAISS structure to use now: ``auto`` resolves by the number of chunks."""
        kind = self.manifest.index_type
        if kind not in ("auto", "ivfpq"):
            return kind
        if n is None:
            n = self.store.counts()["chunks"] if self._faiss is None else int(self._faiss.ntotal)
        if kind == "ivfpq":  # exact until there are enough vectors to train on
            return "flat" if n < IVFPQ_TRAIN_FROM else "ivfpq"
        return "flat" if n < AUTO_HNSW_FROM else "hnsw"

    # -------------------------------------------------------------- writing
    def begin(self) -> None:
        """Start a transaction (one per file during ingestion)."""
        self._check_writable()
        self.store.begin()

    def commit(self) -> None:
        self.store.bump_generation()
        self.store.commit()
        self._write_failed = False  # the disk takes writes again

    def rollback(self) -> None:
        failure = sys.exc_info()[1]
        if isinstance(failure, IndexWriteError):
            self._write_failed = True  # the disk refuses writes: close() will not try to save again
        try:
            self.store.rollback()
        except sqlite3.Error as exc:  # SQLite already rolled back (full disk, I/O error)
            log.warning("%s: rollback: %s", self.path, exc)
        if isinstance(self._faiss, RefinedIVFPQ):  # changes never reach it in place: re-done at the next save
            self._rebuild_needed = True
            return
        self._rebuild()  # in-memory FAISS may hold the rolled-back changes

    def add_chunks(self, chunks: Sequence[Chunk], vectors: np.ndarray, vector_keys: Sequence[str],
                   store_vectors: bool = True) -> None:
        """Add chunks and their vectors (inside :meth:`begin`/:meth:`commit`).

        ``store_vectors=False`` when the vectors are already in the store under
        ``vector_keys`` (the embedder's cache wrote them).
        """
        if len(chunks) != len(vectors) or (len(vectors) and vectors.shape[1] != self.manifest.dim):
            raise ValueError(f"{len(chunks)} chunks, vectors of shape {vectors.shape}, index dim {self.manifest.dim}")
        if store_vectors:
            self.store.put_vectors({k: v for k, v in zip(vector_keys, vectors)})
        rowids = self.store.add_chunks(chunks, vector_keys)
        if self._changes_in_place():
            self._faiss.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(rowids, np.int64))
        else:
            self._rebuild_needed = True
        self._dirty = self._bm25_dirty = True

    def remove_vectors(self, rowids: Sequence[int]) -> None:
        if not rowids:
            return
        if self._changes_in_place():
            if self._faiss_is_flat():
                self._faiss.remove_ids(np.asarray(rowids, dtype=np.int64))
            else:  # HNSW cannot remove: skipped at search until the next rebuild
                if not isinstance(self._faiss, SkippingIndex):
                    self._faiss = SkippingIndex(self._faiss, np.zeros(0, dtype=np.int64))
                self._faiss.remove_ids(np.asarray(rowids, dtype=np.int64))
        else:
            self._rebuild_needed = True
        self._dirty = self._bm25_dirty = True

    def _changes_in_place(self) -> bool:
        """Flat indexes add and remove in place; HNSW adds in place and skips what was removed."""
        if self._rebuild_needed:
            return False
        kind = self._kind()
        return (kind == "flat" and self._faiss_is_flat()) or (kind == "hnsw" and self._faiss_is_hnsw())

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
        self.begin()
        try:
            self.delete_document(document.id)
            digest = hashlib.sha256(document.text.encode("utf-8", "surrogatepass")).hexdigest()
            self.store.put_document(document.id, None, document.source, digest, len(document.text), document.metadata)
            self.add_chunks(chunks, np.asarray(vectors, dtype=np.float32), keys)
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def delete(self, doc_id: str) -> int:
        """Delete one document and its chunks, in one transaction; returns how many chunks went."""
        self.begin()
        try:
            removed = self.delete_document(doc_id)
            self.commit()
        except BaseException:
            self.rollback()
            raise
        return removed

    def documents(self) -> list[str]:
        return self.store.document_ids()

    def delete_file(self, path: str) -> int:
        removed = self.store.delete_file(path)
        self.remove_vectors(removed)
        return len(removed)

    def save(self, force: bool = False) -> None:
        """Write the FAISS file, the BM25 folder and the manifest atomically (the store is already durable).

        Does nothing when nothing changed since the last save (``force`` rewrites anyway).
        Raises :class:`IndexWriteError` when the disk refuses (full, permissions): the
        files on disk then still describe the last committed state, or lag it and are
        rebuilt on the next open.
        """
        self._check_writable()
        gen = self.store.generation()
        changed = self._dirty or self._bm25_dirty or self._bm25_unsaved or self._rebuild_needed
        if not (force or changed) and self._saved_generation == gen and self.manifest.checksums:
            return
        if self.manifest.index_type in ("auto", "ivfpq") and (self._kind() == "flat") != self._faiss_is_flat():
            self._rebuild_needed = True  # crossed the size where auto / ivfpq changes structure
        if isinstance(self._faiss, SkippingIndex) and len(self._faiss.deleted) > DELTA_SHARE * self._faiss.idmap.ntotal:
            self._rebuild_needed = True  # a tenth of the graph is removed vectors: rebuilt without them
        if self._rebuild_needed:
            self._rebuild()
        if self._saved_generation == gen and not self.store.db.in_transaction:
            gen = self._bump_generation(gen)
        step = "vectors.faiss"
        try:
            sums = self._write_vectors()
            step = "bm25/"
            sums.update(self._write_bm25(gen))
            step = "store.sqlite"
            self._save_settings_copy()
            step = "manifest.json"
            self.manifest.generation = gen
            self.manifest.counts = self.store.counts()
            self.manifest.checksums = sums
            self.manifest.updated_at = _now()
            _atomic_write(self.path / "manifest.json", self.manifest.model_dump_json(indent=2).encode())
        except IndexWriteError:
            self._write_failed = True
            self._discard_temporaries()
            raise
        except (OSError, RuntimeError) as exc:  # RuntimeError: FAISS and bm25s report I/O errors so
            self._write_failed = True
            self._discard_temporaries()
            raise IndexWriteError(
                f"{self.path}: could not write {step}: {_write_reason(exc)}; the index keeps its last committed "
                "state (free space or fix permissions, then run the command again)") from exc
        self._saved_generation = gen
        self._dirty = self._bm25_unsaved = self._write_failed = False
        for name in (*IVFPQ_FILES, *DELTA_FILES):  # left from an ivfpq index that shrank back to flat, or
            if name not in sums:  # from changes a rebuild has folded in
                (self.path / name).unlink(missing_ok=True)

    def _bump_generation(self, gen: int) -> int:
        """Move the store to a new generation before rewriting files the manifest on disk vouches for.

        So a crash while they are rewritten leaves a manifest that lags the store (rebuilt
        on open) rather than checksums that no longer match (reported as damage).
        """
        old_bm25 = self._bm25 is not None and not self._bm25_dirty and self._bm25.generation == gen
        self.store.begin()
        try:
            new = self.store.bump_generation()
            self.store.commit()
        except BaseException:
            self.store.rollback()
            raise
        if old_bm25:
            self._bm25.generation = new  # type: ignore[union-attr]  # same chunks, new stamp
        return new

    def _write_bm25(self, gen: int) -> dict[str, FileSum]:
        folder = self.path / "bm25"
        if self._bm25 is None or self._bm25_dirty or self._bm25.generation != gen:
            self._bm25 = self._build_bm25(gen)
            self._bm25_dirty = False
        self._bm25.save(folder)
        sums = {}
        for file in sorted(folder.iterdir()):
            with open(file, "rb") as fh:
                os.fsync(fh.fileno())  # bm25s does not: make the files durable before the manifest names them
            sums[f"bm25/{file.name}"] = file_sum(file)
        _fsync_dir(folder)
        _fsync_dir(self.path)
        return sums

    def _save_settings_copy(self) -> None:
        """Keep the store's copy of the manifest settings current (written at creation; rarely changes)."""
        if self.store.db.in_transaction:
            return
        settings = json.dumps(self.manifest.model_dump(include=set(SETTINGS_FIELDS)), sort_keys=True)
        if self.store.get_meta("manifest_settings") == settings:
            return
        self.store.begin()
        try:
            self.store.set_meta("manifest_settings", settings)
            self.store.commit()
        except BaseException:
            self.store.rollback()
            raise

    def _discard_temporaries(self) -> None:
        for name in ("vectors.faiss.tmp", "manifest.json.tmp", "bm25.tmp", "vectors.ids.npy.tmp",
                     *(f"{name}.tmp" for name in DELTA_FILES)):
            target = self.path / name
            try:
                shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            except OSError:
                pass

    def _check_writable(self) -> None:
        if self.read_only:
            raise IndexFolderError(f"{self.path}: opened read-only")

    def _build_bm25(self, generation: int) -> BM25Index:
        rowids, texts = [], []
        for ids, batch in self.store.iter_chunk_texts():
            rowids.append(ids)
            texts += batch
        bm25 = BM25Index(BM25Config(**self.manifest.bm25))
        bm25.build(np.concatenate(rowids) if rowids else np.zeros(0, np.int64), texts, generation)
        return bm25

    @property
    def bm25(self) -> BM25Index:
        """The BM25 side, loaded on first use and rebuilt if it lags the store."""
        gen = self.store.generation()
        if self._bm25 is None or self._bm25.generation != gen or self._bm25_dirty:
            # the folder on disk is trusted only when the manifest vouches for this generation
            trusted = not self._bm25_dirty and self._saved_generation == gen
            loaded = BM25Index.load(self.path / "bm25") if trusted else None
            if loaded is None or loaded.generation != gen:
                log.warning("%s: BM25 folder is missing or behind the store; rebuilding", self.path)
                loaded = self._build_bm25(gen)
                self._bm25_unsaved = not self.read_only  # saved by the next save() or close()
            self._bm25, self._bm25_dirty = loaded, False
        return self._bm25

    # -------------------------------------------------------------- reading
    def __len__(self) -> int:
        return int(self._faiss.ntotal)

    def search(self, query_vectors: np.ndarray, k: int = 10) -> list[list[ScoredChunk]]:
        """The ``k`` nearest chunks of each query vector, best first."""
        if self._rebuild_needed:
            self._rebuild()
        queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        if len(self) == 0:
            return [[] for _ in queries]
        distances, ids = search_faiss(self._faiss, queries, min(k, len(self)))
        found = self.store.chunks_by_rowid({int(i) for i in ids.ravel() if i >= 0})
        return [
            [ScoredChunk(found[int(i)], float(d)) for d, i in zip(row_d, row_i) if i >= 0 and int(i) in found]
            for row_d, row_i in zip(distances, ids)
        ]

    def info(self) -> dict[str, Any]:
        counts = self.store.counts()
        size = sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())
        return {"path": str(self.path), **self.manifest.model_dump(exclude={"counts", "checksums"}), "counts": counts,
                "vectors_in_faiss": len(self), "bytes_on_disk": size, "checked_at": time.time()}

