"""``PgIndex``: an :class:`~contextkit.index.Index` whose records, vectors and BM25 live in PostgreSQL.

``Index.open("postgresql://user@host/db?schema=name")`` (and ``Index.create``, ``Index.exists``) come
here; everything that takes an index (ingestion, the retrievers, the assembler, the CLI's ``--index``,
the server) then works on it unchanged. See ``docs/postgres.md`` for when to move and what differs.

What the folder does with files and generations, the database does with transactions:

- a write is one transaction (:meth:`transaction`), committed whole or not at all: a writer killed
  mid-batch leaves nothing of it (the server rolls back a dropped connection), and no file lock is
  taken, so several processes on several hosts write at once (files they share are claimed one
  writer at a time, see :mod:`._pg_store`);
- a query is one ``REPEATABLE READ`` transaction (:meth:`snapshot`): dense search, BM25, filters and
  the chunks' texts all read one committed state, whatever writers commit meanwhile;
- dense search is exact by default (``index_type="flat"``): a reader scores its own copy of the
  vectors with FAISS, checked against each query's snapshot and brought up to it (:mod:`._pg_dense`;
  pgvector's exact ``<#>`` scan when the copy would be too large, and in a writer's own transaction),
  or through pgvector's HNSW index (``"hnsw"``, built with the manifest's ``hnsw_m`` and ``hnsw_ef_construction``,
  searched with ``hnsw_ef_search`` and iterative scans, so filters still return ``k`` hits).

The manifest (model, dimension, chunker, BM25 settings) is written once, at creation, into ``meta``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Self

import numpy as np

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import (
    IndexDatabaseError,
    IndexExistsError,
    IndexFolderError,
    IndexMismatchError,
    IndexReadOnlyError,
    InvalidArgumentError,
)
from contextkit.core.records import Chunk, ScoredChunk
from contextkit.index._bm25 import BM25Config, BM25Index
from contextkit.index._filters import FilterValue
from contextkit.index._index import Index, T, register_backend
from contextkit.index._manifest import IndexManifest, IndexType, now
from contextkit.index._pg_bm25 import PgBM25
from contextkit.index._pg_dense import VectorCopy
from contextkit.index._pg_dsn import Dsn, DsnPath, parse_dsn
from contextkit.index._pg_filters import matching_rowids
from contextkit.index._pg_schema import (
    TOTALS_ROWS,
    Connections,
    _connect,
    _table_exists,
    compact_totals,
    create_schema,
    schema_problem,
    translated,
)
from contextkit.index._pg_store import PgRecordStore

__all__ = ["PgIndex"]


def sql_literal(text: str) -> str:
    """A snapshot id as a SQL string literal (``SET TRANSACTION SNAPSHOT`` takes no parameter); the ids
    the server exports are hex digits and dashes, checked so."""
    if not text or any(c not in "0123456789ABCDEFabcdef-" for c in text):
        raise IndexDatabaseError(f"an unexpected snapshot id {text[:40]!r} from the server")
    return f"'{text}'"

log = logging.getLogger(__name__)

_INDEX_TYPES = ("flat", "hnsw")


class PgIndex(Index):
    """An index in one schema of a PostgreSQL database (pgvector for the vectors). Use ``Index.open``."""

    store: PgRecordStore

    def __init__(self, dsn: Dsn, manifest: IndexManifest, read_only: bool) -> None:  # noqa: D107
        # (Index.__init__ takes a folder and its lock: not called)
        self.dsn = dsn
        # str() of it is the DSN without its password: what code naming an index by its path records. Not a
        # folder (no .exists(), .iterdir()): every method of Index that reads the folder is overridden here.
        self.path = DsnPath.of(dsn)  # type: ignore[assignment]
        self.read_only = read_only
        self._manifest = manifest
        self._conns = Connections(dsn)
        config = BM25Config.stored(manifest.bm25)
        self._bm25_index = PgBM25(config, None)
        self.store = PgRecordStore(self._conns, manifest.dim, self._bm25_index.terms, config.title_every_chunk)
        self._bm25_index._store = self.store
        self._bm25_index.pin = self.snapshot
        self._in_write = threading.local()
        self._pinned = threading.local()
        self._lock_fd = None
        self._write_failed = False
        self._wrote = False  # a commit since the last save (which then vacuums)
        self._pool: ThreadPoolExecutor | None = None  # run_together's workers, each with its own connection
        self._pool_lock = threading.Lock()
        self.vector_copy = VectorCopy(manifest.dim)  # exact queries' vectors, read once (see _pg_dense)

    # ----------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, path: str | Path, *, model: str, dim: int, embedder: dict[str, Any] | None = None,
               tokenizer: str = DEFAULT_TOKENIZER, chunker: dict[str, Any] | None = None,
               index_type: IndexType = "flat", redact: bool = False, bm25: dict[str, Any] | None = None) -> PgIndex:
        dsn = parse_dsn(path)
        if index_type not in _INDEX_TYPES:
            raise InvalidArgumentError(f"index type {index_type!r} is the folder's; a PostgreSQL index is "
                                       f"{' or '.join(_INDEX_TYPES)} (pgvector: exact, or HNSW)")
        if index_type == "hnsw" and dim > 2000:
            raise InvalidArgumentError(f"pgvector's HNSW indexes vectors of at most 2,000 dimensions, not {dim}; "
                                       "use index_type='flat'")
        manifest = IndexManifest(model=model, dim=dim, embedder=embedder or {}, tokenizer=tokenizer,
                                 chunker=chunker or {}, index_type=index_type, redact=redact, created_at=now())
        if bm25 is not None:  # another index's BM25 settings (``index copy``), checked as a manifest's are
            manifest = IndexManifest.model_validate({**manifest.model_dump(), "bm25": bm25})
        conn = _connect(dsn)
        try:
            if not create_schema(conn, dsn, dim, manifest.model_dump_json()):
                raise IndexExistsError(f"{dsn.display}: an index already exists here; open it instead")
        finally:
            conn.close()
        index = cls(dsn, manifest, read_only=False)
        if index_type == "hnsw":
            index._create_hnsw()
        return index

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False, expect_model: str | None = None,
             expect_dim: int | None = None) -> PgIndex:
        dsn = parse_dsn(path)
        conns = Connections(dsn)
        try:
            raw = _connect(dsn)
            try:
                problem = schema_problem(raw, dsn)
            finally:
                raw.close()
            if problem:
                raise IndexFolderError(f"{dsn.display}: {problem}")
            row = conns.get().execute("SELECT value FROM meta WHERE key = 'manifest'").fetchone()
        finally:
            conns.close()
        try:
            manifest = IndexManifest.model_validate_json(row[0] if row else "")
        except ValueError as exc:
            raise IndexDatabaseError(f"{dsn.display}: the manifest in meta is not one contextkit wrote "
                                     f"({str(exc).splitlines()[0][:120]})") from None
        if expect_model is not None and manifest.model != expect_model:
            raise IndexMismatchError(f"{dsn.display}: built with model {manifest.model!r}, not {expect_model!r}; "
                                     "use that model or a new index")
        if expect_dim is not None and manifest.dim != expect_dim:
            raise IndexMismatchError(f"{dsn.display}: vectors have dimension {manifest.dim}, the model gives {expect_dim}")
        return cls(dsn, manifest, read_only=read_only)

    @classmethod
    def exists(cls, path: str | Path) -> bool:
        dsn = parse_dsn(path)
        conn = _connect(dsn)
        try:
            return _table_exists(conn, dsn.schema, "meta")
        finally:
            conn.close()

    def _create_hnsw(self) -> None:
        m, ef = self._manifest.hnsw_m, self._manifest.hnsw_ef_construction
        self.store.db.execute(f"CREATE INDEX IF NOT EXISTS embeddings_hnsw ON embeddings USING hnsw "
                              f"(embedding vector_ip_ops) WITH (m = {int(m)}, ef_construction = {int(ef)})")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.vector_copy.release()
        self._conns.close()

    def _release(self) -> None:
        self.close()

    def __enter__(self) -> Self:
        return self

    # ------------------------------------------------------------ state
    @property
    def manifest(self) -> IndexManifest:
        return self._manifest

    @property
    def generation(self) -> int:
        return self.store.generation()

    @contextmanager
    def snapshot(self) -> Iterator[Self]:
        """One committed state for the block (a ``REPEATABLE READ``, read-only transaction on this thread's
        connection); nested blocks and a writer's own transaction share the state they are in."""
        if getattr(self._pinned, "on", False) or getattr(self._in_write, "on", False):
            yield self
            return
        conn = self.store.db
        self.store._q("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._pinned.on = True
        try:
            yield self
        except Exception as exc:  # a lost connection mid-query: contextkit's error, naming the database
            mapped = translated(exc, self.dsn)
            if mapped is None:
                raise
            raise mapped from None
        finally:
            self._pinned.on = False
            if not conn.closed:
                conn.execute("COMMIT")

    def refresh(self) -> bool:
        return False  # every query reads the latest committed state

    def run_together(self, *calls: Callable[[], T]) -> list[T]:
        """The calls at once, each on its own connection, all in this thread's snapshot (exported by
        ``pg_export_snapshot()``, imported by ``SET TRANSACTION SNAPSHOT``): a hybrid query's dense and
        BM25 statements run side by side on the server and read the same committed state. Outside a
        snapshot (a writer's transaction, or no query pinned), one after the other."""
        if len(calls) < 2 or not getattr(self._pinned, "on", False) or getattr(self._in_write, "on", False):
            return [call() for call in calls]
        exported = str(self.store._q("SELECT pg_export_snapshot()").fetchone()[0])
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="contextkit-pg")
        futures = [self._pool.submit(self._in_snapshot, exported, call) for call in calls[1:]]
        first = calls[0]()
        return [first, *(f.result() for f in futures)]

    def _in_snapshot(self, exported: str, call: Callable[[], T]) -> T:
        """``call`` on this (worker) thread, inside the snapshot another thread exported."""
        self.store._q("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            self.store._q(f"SET TRANSACTION SNAPSHOT {sql_literal(exported)}")
            self._pinned.on = True
            try:
                return call()
            finally:
                self._pinned.on = False
        finally:
            conn = self.store.db
            if not conn.closed:
                conn.execute("COMMIT")

    def snapshot_rowids(self) -> np.ndarray | None:
        return None

    # -------------------------------------------------------------- writing
    def _check_writable(self) -> None:
        if self.read_only:
            raise IndexReadOnlyError(f"{self.dsn.display}: opened read-only")

    def transaction(self) -> AbstractContextManager[None]:
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        except BaseException as exc:
            self.rollback()
            mapped = translated(exc, self.dsn)
            if mapped is None:
                raise
            raise mapped from None
        self.commit()

    def begin(self) -> None:
        self._check_writable()
        if getattr(self._in_write, "on", False):
            raise IndexDatabaseError("cannot start a transaction within a transaction")
        self.store.begin()
        self._in_write.on = True

    def commit(self) -> None:
        try:
            if self.store.db.execute("SELECT count(*) > %s FROM totals", (TOTALS_ROWS,)).fetchone()[0]:
                compact_totals(self.store.db)
            self.store.bump_generation()
            self.store.commit()
            self._wrote = True
        finally:
            self._in_write.on = False

    def rollback(self) -> None:
        self._in_write.on = False
        try:
            self.store.rollback()
        except Exception:  # noqa: S110 - the connection broke: the server rolled back already
            pass

    def add_chunks(self, chunks: Sequence[Chunk], vectors: np.ndarray, vector_keys: Sequence[str],
                   store_vectors: bool = True) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if len(chunks) != len(vectors) or (len(vectors) and vectors.shape[1] != self.manifest.dim):
            raise InvalidArgumentError(f"{len(chunks)} chunks, vectors of shape {vectors.shape}, "
                                       f"index dim {self.manifest.dim}")
        self._check_writable()
        if store_vectors:
            self.store.put_vectors({k: v for k, v in zip(vector_keys, vectors)})
        self.store.add_chunks_with_vectors(chunks, vectors, vector_keys)

    def remove_vectors(self, rowids: Sequence[int]) -> None:
        return None  # the vectors and postings went with their rows

    def save(self, force: bool = False) -> None:
        """Every commit is durable already; after writes, ``VACUUM (ANALYZE)`` the tables they changed.

        Why: right after a bulk load the planner has no statistics and scans all of ``postings`` for a
        query (28 ms instead of 4 on SciFact), and until a vacuum counts read every row's page instead of
        the index alone. Autovacuum gets there in time; an ingest or a copy ends with it done. Skipped
        (with a warning) for a user not allowed to."""
        if not (self._wrote or force) or getattr(self._in_write, "on", False):
            return
        try:
            self.store._q("VACUUM (ANALYZE) chunks, embeddings, postings, totals")
        except IndexReadOnlyError as exc:
            log.warning("%s", exc)
        self._wrote = False

    def rowids_matching(self, *, doc_ids: Sequence[str] | None = None,
                        metadata: dict[str, FilterValue] | None = None,
                        source_glob: str | None = None) -> np.ndarray:
        return matching_rowids(self.store, doc_ids=doc_ids, metadata=metadata, source_glob=source_glob)

    # -------------------------------------------------------------- reading
    @property
    def bm25(self) -> BM25Index:
        return self._bm25_index

    def __len__(self) -> int:
        return self.store.n_chunks()

    def nearest_rowids(self, vector: np.ndarray, n: int, allowed: np.ndarray | None = None
                       ) -> list[tuple[int, float]]:
        """``(rowid, inner product)`` of the ``n`` nearest chunks, best first (ties by rowid), within
        ``allowed`` when given; exact unless the index is ``hnsw``."""
        if n <= 0 or (allowed is not None and not len(allowed)):
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape != (self.manifest.dim,):
            raise InvalidArgumentError(f"a query vector of shape {query.shape}, index dim {self.manifest.dim}")
        where = "WHERE rowid = ANY(%(allowed)s)" if allowed is not None else ""
        params: dict[str, Any] = {"q": query, "n": int(n)}
        if allowed is not None:
            params["allowed"] = [int(r) for r in allowed]
        with self.snapshot():
            conn = self.store.db
            if self.manifest.index_type != "hnsw" and not getattr(self._in_write, "on", False):
                copied = self.vector_copy.nearest(conn, query, int(n), allowed)
                if copied is not None:
                    return sorted(copied, key=lambda h: (-h[1], h[0]))
            if self.manifest.index_type == "hnsw":
                ef = max(int(self.manifest.hnsw_ef_search), int(n))
                conn.execute(f"SET LOCAL hnsw.ef_search = {min(ef, 1000)}")
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            # ORDER BY the distance alone: what an HNSW index can serve (ties are ordered by rowid below)
            rows = conn.execute(f"SELECT rowid, -(embedding <#> %(q)s) AS score FROM embeddings {where} "
                                "ORDER BY embedding <#> %(q)s LIMIT %(n)s", params).fetchall()
        return sorted(((int(r), float(s)) for r, s in rows), key=lambda h: (-h[1], h[0]))

    def search(self, query_vectors: np.ndarray, k: int = 10) -> list[list[ScoredChunk]]:
        queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        out = []
        with self.snapshot():
            for q in queries:
                hits = self.nearest_rowids(q, k)
                found = self.store.chunks_by_rowid(r for r, _ in hits)
                out.append([ScoredChunk(found[r], s) for r, s in hits if r in found])
        return out

    def info(self) -> dict[str, Any]:
        counts = self.store.counts()
        size = self.store.db.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                                     "JOIN pg_namespace n ON n.oid = c.relnamespace "
                                     "WHERE n.nspname = %s AND c.relkind = 'r'", (self.dsn.schema,)).fetchone()[0]
        return {"path": self.dsn.display, **self.manifest.model_dump(exclude={"counts", "checksums", "files"}),
                "generation": self.generation, "backend": "postgresql", "counts": counts,
                "vectors_in_faiss": counts["chunks"], "bytes_on_disk": int(size), "checked_at": time.time()}


register_backend(PgIndex)
