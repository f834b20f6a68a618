"""Exact dense search on a database index from the reader's own copy of the vectors.

Why: pgvector scores an exact query one row at a time through the executor, about half a microsecond
a row whatever the vector type (SciFact's 17,203 vectors: 9-11 ms a query; ``halfvec`` saved 1 ms,
parallel workers cost more than they gave on 2 cores), while FAISS scores the same matrix in under
one. So a reader keeps the vectors of the state it last read in memory, as a FAISS flat index (the
folder's own structure: the same scores bit for bit, the same filter path), and asks the database
only whether that state is still the one its query reads.

Which state a query reads is told by the ``totals`` rows it sees (:mod:`._pg_schema`): every
transaction that adds or removes chunks inserts one (statement triggers on ``chunks``), ids are
never reused, and compaction replaces rows by a new one, so two snapshots that see the same
``totals`` ids see the same chunks and therefore the same ``embeddings`` (written and removed only
with their chunk). The check is one tiny statement in the query's own snapshot; when it differs,
the copy is brought up to that snapshot by reading the rowids and only the vectors it lacks, in the
same snapshot, so a query never mixes two states. A writer's own transaction, an index too large
for the memory allowed (:data:`MAX_BYTES_ENV`) and HNSW indexes use pgvector as before.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from contextkit.core.errors import IndexCorruptError
from contextkit.index._faiss_kinds import filtered_params, search_faiss

__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_ENV", "VectorCopy", "state_key"]

log = logging.getLogger(__name__)

#: The environment variable that sets how many MiB of vectors a reader may copy (0: never copy,
#: every exact query scans in the database).
MAX_BYTES_ENV = "CONTEXTKIT_PG_VECTOR_COPY_MB"
#: Default: 512 MiB, about 350,000 vectors of 384 dimensions; larger indexes are for HNSW.
DEFAULT_MAX_BYTES = 512 * 2**20


def max_bytes_from_env() -> int:
    """The copy's limit in bytes, from :data:`MAX_BYTES_ENV` (MiB), or the default."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        mib = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of MiB; using %d MiB", MAX_BYTES_ENV, raw, DEFAULT_MAX_BYTES >> 20)
        return DEFAULT_MAX_BYTES
    return max(0, int(mib * 2**20))


def state_key(db: Any) -> tuple[tuple[int, ...], int]:
    """``(the ids of the totals rows this snapshot sees, the number of chunks they add up to)``."""
    ids, chunks = db.execute("SELECT array_agg(id ORDER BY id), coalesce(sum(chunks), 0) FROM totals").fetchone()
    return tuple(int(i) for i in ids or ()), int(chunks)


@dataclass(frozen=True)
class _Copy:
    key: tuple[int, ...]
    rowids: np.ndarray  # ascending
    vectors: np.ndarray  # row i is chunk rowids[i]
    faiss: Any  # IndexIDMap2(IndexFlatIP) over them, ids = rowids


class VectorCopy:
    """The vectors of the last state a query read, searched exactly; thread-safe (a copy is never
    changed, a newer one replaces it)."""

    def __init__(self, dim: int, max_bytes: int | None = None) -> None:
        self.dim = dim
        self.max_bytes = max_bytes_from_env() if max_bytes is None else max_bytes
        self._copy: _Copy | None = None
        self._lock = threading.Lock()
        self.vectors_read = 0  # how many vectors it has read from the database (tests, info)

    def nearest(self, db: Any, query: np.ndarray, n: int, allowed: np.ndarray | None
                ) -> list[tuple[int, float]] | None:
        """``(rowid, score)`` best first from the copy of this snapshot's state; None when the index is
        larger than the copy may be (the caller scans in the database)."""
        if self.max_bytes <= 0:
            return None
        key, n_chunks = state_key(db)
        copy = self._copy
        if copy is None or copy.key != key:
            if n_chunks * self.dim * 4 > self.max_bytes:
                self.release()
                return None
            copy = self._brought_up(db, key)
        if not len(copy.rowids):
            return []
        params = None
        if allowed is not None:
            n = min(n, len(allowed))
            params = filtered_params(copy.faiss, np.asarray(allowed, dtype=np.int64))
        scores, ids = search_faiss(copy.faiss, query.reshape(1, -1), min(n, len(copy.rowids)), params)
        return [(int(i), float(s)) for s, i in zip(scores[0], ids[0]) if i >= 0]

    def _brought_up(self, db: Any, key: tuple[int, ...]) -> _Copy:
        """The copy for ``key``: the rows it keeps, plus the vectors it lacks, read in this snapshot."""
        import faiss

        with self._lock:
            old = self._copy
            if old is not None and old.key == key:
                return old
            with db.cursor(binary=True) as cur:
                rowids = np.fromiter((r for (r,) in cur.execute("SELECT rowid FROM embeddings ORDER BY rowid")),
                                     dtype=np.int64)
            kept = np.zeros(0, dtype=np.int64) if old is None else np.intersect1d(old.rowids, rowids)
            wanted = np.setdiff1d(rowids, kept)
            fresh = self._read(db, wanted)
            if old is not None and len(kept):
                merged_ids = np.concatenate([kept, wanted])
                merged = np.concatenate([old.vectors[np.searchsorted(old.rowids, kept)], fresh])
                order = np.argsort(merged_ids, kind="stable")
                rowids, vectors = merged_ids[order], np.ascontiguousarray(merged[order])
            else:
                vectors = fresh
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
            if len(rowids):
                index.add_with_ids(vectors, rowids)
            copy = _Copy(key, rowids, vectors, index)
            self._copy = copy
            return copy

    def _read(self, db: Any, rowids: np.ndarray) -> np.ndarray:
        """The vectors of ``rowids`` (ascending), in that order, as one float32 matrix."""
        out = np.empty((len(rowids), self.dim), dtype=np.float32)
        if not len(rowids):
            return out
        with db.cursor(binary=True) as cur:
            rows = cur.execute("SELECT rowid, embedding FROM embeddings WHERE rowid = ANY(%s) ORDER BY rowid",
                               (rowids.tolist(),))
            i = 0
            for rowid, vector in rows:
                array = np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)
                if i >= len(rowids) or int(rowid) != int(rowids[i]) or array.shape != (self.dim,):
                    raise IndexCorruptError(f"the embeddings table: the vector of rowid {rowid} is not one of "
                                            f"{self.dim} dimensions in rowid order; `contextkit verify` checks "
                                            "the database", file="embeddings")
                out[i] = array
                i += 1
        if i != len(rowids):  # within one snapshot the rows read are the rows listed
            raise IndexCorruptError(f"the embeddings table: {i} of {len(rowids)} vectors read", file="embeddings")
        self.vectors_read += len(rowids)
        return out

    def release(self) -> None:
        """Drop the copy (memory back); the next query reads it again if it may."""
        with self._lock:
            self._copy = None

    @property
    def size(self) -> int:
        """How many vectors the copy holds now."""
        copy = self._copy
        return 0 if copy is None else len(copy.rowids)
