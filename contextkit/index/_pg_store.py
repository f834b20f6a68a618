"""``PgRecordStore``: the records store of an index in PostgreSQL, with the methods of the folder's store.

Every SQL statement on a database index is here or in :mod:`._pg_schema` / :mod:`._pg_bm25`, as the
folder's are in :mod:`._store`; the callers (ingestion, the retrievers, the assembler) cannot tell the
two apart. What differs, and why:

- **Many writers.** A writer's transaction claims each file it writes (an advisory transaction lock
  on the file's path), so two writers of the same file follow each other, and the later one's rows
  replace the earlier's by id: never both versions, never a unique-key failure. Ingestion commits the files of
  a batch in the order it found them (sorted), so two batches claim shared files in the same order.
- **Readers see one committed state**: :class:`~._pg_index.PgIndex` runs each query in one
  ``REPEATABLE READ`` transaction; removed rows need no ``retired_chunks`` (MVCC keeps them for it).
- **Vectors live beside their chunk** (pgvector), so a search is one statement; the ``vectors`` table is
  the embedding cache, as in the folder.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Chunk
from contextkit.index._pg_schema import Connections, translated
from contextkit.index._store import RecordStore, _row_to_chunk, text_sha

__all__ = ["PgRecordStore", "bm25_text"]

_COLS = 'rowid, id, doc_id, ordinal, start, "end", tokens, total_tokens, header, text, metadata'


def _array(value: Any) -> np.ndarray:
    """A vector as pgvector's loader gives it (a numpy array, or its ``Vector`` in binary results) as float32."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


def bm25_text(chunk: Chunk, titled: bool) -> str:
    """The text BM25 indexes of a chunk: the folder's rule (:func:`._bm25_sync.title_above_sql`) in Python:
    with ``titled``, its document's title above every chunk after the first that does not already hold it."""
    above = ""
    title = chunk.metadata.get("title")
    if titled and chunk.ordinal > 0 and isinstance(title, str) and title and title not in chunk.header + chunk.text:
        above = title + "\n\n"
    return above + chunk.header + chunk.text


class PgRecordStore(RecordStore):
    """The folder store's interface over PostgreSQL tables (see :mod:`._pg_schema`)."""

    def __init__(self, conns: Connections, dim: int, terms: Any, titled: bool) -> None:  # noqa: D107
        # (RecordStore.__init__ opens a SQLite file: not called)
        self.conns = conns
        self.dim = dim
        self.path = None  # type: ignore[assignment]  # (a folder's store file; none here)
        self._terms = terms  # text -> list of terms (the index's BM25 analyzer)
        self._titled = titled
        self._claimed: set[str] = set()  # files this transaction claimed (see claim_file)

    # ------------------------------------------------------------ plumbing
    def _q(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        try:
            return self.conns.get().execute(sql, params)
        except Exception as exc:
            mapped = translated(exc, self.conns.dsn)
            if mapped is None:
                raise
            raise mapped from None

    @property
    def db(self) -> Any:
        return self.conns.get()

    def close(self) -> None:
        self.conns.close()

    def begin(self) -> None:
        self._claimed.clear()
        self._q("BEGIN")

    def commit(self) -> None:
        self._q("COMMIT")
        self._claimed.clear()

    def rollback(self) -> None:
        self._claimed.clear()
        conn = self.conns.get()
        if not conn.closed:
            conn.execute("ROLLBACK")

    def follow(self) -> None:
        return None

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self._q("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self._q("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (key, value))

    def generation(self) -> int:
        value = self.get_meta("generation", "0")
        return int(value) if value is not None and value.isdigit() else 0

    def bump_generation(self) -> int:
        row = self._q("UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'generation' "
                      "RETURNING value::bigint").fetchone()
        return int(row[0])

    # ---------------------------------------------------------------- files
    def claim_file(self, path: str) -> None:
        """Wait until no other transaction writes ``path`` (an advisory lock held to this one's end).

        Why: a writer replacing a changed file deletes its documents, then writes the new ones. Another
        writer's uncommitted documents of that file are invisible to the delete; claimed, the delete
        waits for them to commit and removes them too, so the file never holds two versions. (Two
        writers of the same document are ordered by its primary key anyway; the later one's rows then
        replace the earlier's by id, see :meth:`add_chunks_with_vectors`.) A streamed file's later
        parts claim it again in their own transactions, keeping the parts before them."""
        if path in self._claimed:
            return
        self._q("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"contextkit:file:{path}",))
        self._claimed.add(path)

    def file_hashes(self) -> dict[str, str]:
        return dict(self._q("SELECT path, sha256 FROM files").fetchall())

    def put_file(self, path: str, sha256: str, size: int, n_documents: int) -> None:
        self.claim_file(path)
        self._q("INSERT INTO files (path, sha256, size, n_documents) VALUES (%s, %s, %s, %s) ON CONFLICT (path) "
                "DO UPDATE SET sha256 = EXCLUDED.sha256, size = EXCLUDED.size, n_documents = EXCLUDED.n_documents",
                (path, sha256, size, n_documents))

    def delete_file(self, path: str) -> list[int]:
        self.claim_file(path)
        return self._drop_file_rows(path)

    def _drop_file_rows(self, path: str) -> list[int]:
        rows = self._q("DELETE FROM chunks WHERE doc_id IN (SELECT id FROM documents WHERE file = %s) RETURNING rowid",
                       (path,)).fetchall()
        self._q("DELETE FROM documents WHERE file = %s", (path,))
        self._q("DELETE FROM files WHERE path = %s", (path,))
        return [int(r[0]) for r in rows]

    def file_sources(self) -> dict[str, str]:
        return dict(self._q("SELECT DISTINCT ON (file) file, source FROM documents WHERE file IS NOT NULL "
                            "ORDER BY file, id").fetchall())

    def unfinished_files(self) -> list[str]:
        return [r[0] for r in self._q("SELECT DISTINCT file FROM documents WHERE file IS NOT NULL "
                                      "AND file NOT IN (SELECT path FROM files)").fetchall()]

    def recorded_files(self) -> set[str]:
        return {r[0] for r in self._q("SELECT path FROM files UNION SELECT DISTINCT file FROM documents "
                                      "WHERE file IS NOT NULL").fetchall()}

    def rename_file(self, old: str, new: str) -> None:
        self._q("UPDATE files SET path = %s WHERE path = %s", (new, old))
        self._q("UPDATE documents SET file = %s WHERE file = %s", (new, old))

    def file_vector_keys(self, file: str) -> list[str]:
        return [r[0] for r in self._q("SELECT DISTINCT c.vector_key FROM chunks c JOIN documents d ON d.id = c.doc_id "
                                      "WHERE d.file = %s", (file,)).fetchall()]

    # ------------------------------------------------------------ documents
    def document_ids(self, file: str | None = None) -> list[str]:
        if file is None:
            return [r[0] for r in self._q("SELECT id FROM documents ORDER BY id").fetchall()]
        return [r[0] for r in self._q("SELECT id FROM documents WHERE file = %s ORDER BY id", (file,)).fetchall()]

    def put_document(self, doc_id: str, file: str | None, source: str, sha256: str, n_chars: int,
                     metadata: dict[str, Any]) -> None:
        if file is not None:
            self.claim_file(file)
        self._q("INSERT INTO documents (id, file, source, sha256, n_chars, metadata) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET file = EXCLUDED.file, source = EXCLUDED.source, "
                "sha256 = EXCLUDED.sha256, n_chars = EXCLUDED.n_chars, metadata = EXCLUDED.metadata",
                (doc_id, file, source, sha256, n_chars, json.dumps(metadata, ensure_ascii=False, default=str)))

    def delete_document(self, doc_id: str) -> list[int]:
        rows = self._q("DELETE FROM chunks WHERE doc_id = %s RETURNING rowid", (doc_id,)).fetchall()
        self._q("DELETE FROM documents WHERE id = %s", (doc_id,))
        return [int(r[0]) for r in rows]

    def iter_documents(self) -> Iterator[tuple[str, str, int]]:
        for doc_id, source, n_chars in self._q("SELECT id, source, n_chars FROM documents ORDER BY id").fetchall():
            yield str(doc_id), str(source), int(n_chars)

    def document_sources(self, doc_ids: Iterable[str]) -> dict[str, str]:
        ids = list(doc_ids)
        if not ids:
            return {}
        return dict(self._q("SELECT id, source FROM documents WHERE id = ANY(%s)", (ids,)).fetchall())

    # --------------------------------------------------------------- chunks
    def add_chunks_with_vectors(self, chunks: Sequence[Chunk], vectors: np.ndarray, vector_keys: Sequence[str]) -> list[int]:
        """Insert chunks with their vectors and BM25 postings; their rowids, in order. A chunk id already held
        (another writer's document of the same id) is replaced, so ids stay unique whatever the order."""
        if not chunks:
            return []
        self._q("DELETE FROM chunks WHERE id = ANY(%s)", ([c.id for c in chunks],))
        texts = [bm25_text(c, self._titled) for c in chunks]
        terms = self._terms(texts)
        columns = list(zip(*[(c.id, c.doc_id, c.ordinal, c.start, c.end, c.token_count, c.total_tokens, c.header,
                              c.text, json.dumps(c.metadata, ensure_ascii=False, default=str), key,
                              text_sha(c.header, c.text), len(t))
                             for c, key, t in zip(chunks, vector_keys, terms)]))
        # one statement (the totals trigger fires once), the rowids matched back by chunk id
        rows = self._q('INSERT INTO chunks (id, doc_id, ordinal, start, "end", tokens, total_tokens, header, text, '
                       "metadata, vector_key, text_sha, bm25_len) SELECT * FROM unnest(%s::text[], %s::text[], "
                       "%s::int[], %s::int[], %s::int[], %s::int[], %s::int[], %s::text[], %s::text[], %s::text[], "
                       "%s::text[], %s::text[], %s::int[]) RETURNING id, rowid", [list(col) for col in columns]).fetchall()
        by_id = {str(cid): int(rowid) for cid, rowid in rows}
        rowids = [by_id[c.id] for c in chunks]
        conn = self.conns.get()
        with conn.cursor() as cur, cur.copy("COPY embeddings (rowid, embedding) FROM STDIN") as copy:
            for rowid, vector in zip(rowids, vectors):
                copy.write_row((rowid, np.asarray(vector, dtype=np.float32)))
        postings = [(term, rowid, tf, len(t)) for rowid, t in zip(rowids, terms) for term, tf in Counter(t).items()]
        if postings:
            with conn.cursor() as cur, cur.copy("COPY postings (term, rowid, tf, dl) FROM STDIN") as copy:
                for row in postings:
                    copy.write_row(row)
        return rowids

    def add_chunks(self, chunks: Sequence[Chunk], vector_keys: Sequence[str]) -> list[int]:
        """The folder store's call (vectors already stored under their keys): read them, then insert."""
        found = self.get_vectors(list(vector_keys))
        missing = [k for k in vector_keys if k not in found]
        if missing:
            raise InvalidArgumentError(f"no stored vector under key {missing[0]!r}; put_vectors first")
        vectors = np.stack([found[k] for k in vector_keys]) if vector_keys else np.zeros((0, self.dim), np.float32)
        return self.add_chunks_with_vectors(chunks, vectors, vector_keys)

    def delete_chunks(self, chunk_ids: Iterable[str]) -> list[int]:
        ids = list(chunk_ids)
        if not ids:
            return []
        return [int(r[0]) for r in self._q("DELETE FROM chunks WHERE id = ANY(%s) RETURNING rowid", (ids,)).fetchall()]

    def chunk_doc_ids(self) -> dict[int, str]:
        return {int(r): str(d) for r, d in self._q("SELECT rowid, doc_id FROM chunks").fetchall()}

    def chunks_by_rowid(self, rowids: Iterable[int]) -> dict[int, Chunk]:
        ids = sorted({int(r) for r in rowids})
        if not ids:
            return {}
        rows = self._q(f"SELECT {_COLS}, text_sha FROM chunks WHERE rowid = ANY(%s)", (ids,)).fetchall()
        return dict(_row_to_chunk(tuple(row)) for row in rows)

    def chunks_of(self, doc_id: str) -> list[Chunk]:
        rows = self._q(f"SELECT {_COLS} FROM chunks WHERE doc_id = %s ORDER BY ordinal", (doc_id,)).fetchall()
        return [_row_to_chunk(tuple(row))[1] for row in rows]

    def iter_chunk_texts(self, batch: int = 4096, titled: bool = False) -> Iterator[tuple[np.ndarray, list[str]]]:
        """``(rowids, BM25 texts)`` of every chunk by rowid, ``batch`` at a time (server-side inside a
        transaction, so that memory stays bounded on a large index)."""
        with self._cursor() as cur:
            cur.execute(f"SELECT {_COLS} FROM chunks ORDER BY rowid")
            while rows := cur.fetchmany(batch):
                part = [_row_to_chunk(tuple(r)) for r in rows]
                yield (np.fromiter((r for r, _ in part), dtype=np.int64, count=len(part)),
                       [bm25_text(c, titled) for _, c in part])

    def _cursor(self) -> Any:
        """A server-side cursor when this thread's connection is in a transaction (rows come as they are
        fetched), else a plain one."""
        conn = self.conns.get()
        return conn.cursor(name="ck_rows") if conn.info.transaction_status else conn.cursor()

    def sample_chunk_rows(self, n: int, seed: int = 0) -> list[tuple[int, str]]:
        lo, hi, count = self._q("SELECT min(rowid), max(rowid), count(*) FROM chunks").fetchone()
        if count <= n:
            return [(int(r), str(d)) for r, d in self._q("SELECT rowid, doc_id FROM chunks ORDER BY rowid").fetchall()]
        picks = sorted({int(x) for x in np.random.default_rng(seed).integers(lo, hi + 1, n)})
        return [(int(r), str(d)) for r, d in
                self._q("SELECT rowid, doc_id FROM chunks WHERE rowid = ANY(%s) ORDER BY rowid", (picks,)).fetchall()]

    def vectors_by_rowid(self, rowids: Sequence[int]) -> np.ndarray:
        ids = [int(i) for i in rowids]
        if not ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        found = {int(r): v for r, v in self._q("SELECT rowid, embedding FROM embeddings WHERE rowid = ANY(%s)",
                                                (sorted(set(ids)),)).fetchall()}
        missing = [i for i in ids if i not in found]
        if missing:
            raise InvalidArgumentError(f"no chunk with rowid {missing[0]} (removed since the search)")
        return np.stack([_array(found[i]) for i in ids])

    def rowids_where(self, where: str, params: Sequence[Any], retired: bool = False) -> np.ndarray:
        rows = self._q(f"SELECT c.rowid FROM chunks c LEFT JOIN documents d ON d.id = c.doc_id WHERE {where} "
                       "ORDER BY c.rowid", params).fetchall()
        return np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))

    def metadata_fields(self, retired: bool = False) -> set[str]:
        return {str(r[0]) for r in self._q("SELECT DISTINCT jsonb_object_keys(metadata::jsonb) FROM chunks").fetchall()}

    def source_rows(self) -> list[tuple[int, str, str | None]]:
        """``(rowid, doc_id, source)`` of every chunk (a source glob is matched in Python, as the folder's is)."""
        return [(int(r), str(d), s) for r, d, s in
                self._q("SELECT c.rowid, c.doc_id, d.source FROM chunks c LEFT JOIN documents d ON d.id = c.doc_id")
                .fetchall()]

    # -------------------------------------------------------------- vectors
    def get_vectors(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        if not keys:
            return {}
        rows = self._q("SELECT key, vector FROM vectors WHERE key = ANY(%s)", (list(keys),)).fetchall()
        return {str(k): _array(v) for k, v in rows}

    def put_vectors(self, items: dict[str, np.ndarray]) -> None:
        if not items:
            return
        conn = self.conns.get()
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO vectors (key, vector) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                            [(k, np.ascontiguousarray(v, dtype=np.float32)) for k, v in items.items()])

    def drop_unused_vectors(self) -> int:
        cur = self._q("DELETE FROM vectors v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.vector_key = v.key)")
        return int(cur.rowcount)

    # ------------------------------------------------------------- copying
    def file_records(self) -> list[tuple[str, str, int, int]]:
        return [(str(p), str(h), int(n), int(d)) for p, h, n, d in
                self._q("SELECT path, sha256, size, n_documents FROM files ORDER BY path").fetchall()]

    def document_records(self) -> Iterator[tuple[str, str | None, str, str, int, dict[str, Any]]]:
        for doc_id, file, source, sha, n_chars, meta in self._q(
                "SELECT id, file, source, sha256, n_chars, metadata FROM documents ORDER BY id").fetchall():
            yield doc_id, file, source, sha, int(n_chars), json.loads(meta)

    def iter_chunk_records(self, batch: int = 2048) -> Iterator[tuple[list[Chunk], list[str], np.ndarray]]:
        with self._cursor() as cur:
            cur.execute(f"SELECT {', '.join('c.' + c for c in _COLS.split(', '))}, c.text_sha, c.vector_key, e.embedding "
                        "FROM chunks c JOIN embeddings e ON e.rowid = c.rowid ORDER BY c.doc_id, c.ordinal, c.rowid")
            while rows := cur.fetchmany(batch):
                chunks = [_row_to_chunk(tuple(r[:12]))[1] for r in rows]
                vectors = np.stack([_array(r[13]) for r in rows])
                yield chunks, [str(r[12]) for r in rows], vectors

    # ---------------------------------------------------------------- counts
    def n_chunks(self) -> int:
        """The number of chunks, from ``totals`` (no count over the table: a query asks for it)."""
        return int(self._q("SELECT coalesce(sum(chunks), 0) FROM totals").fetchone()[0])

    def counts(self) -> dict[str, int]:
        row = self._q("SELECT (SELECT count(*) FROM files), (SELECT count(*) FROM documents), "
                      "(SELECT count(*) FROM chunks), (SELECT coalesce(sum(tokens), 0) FROM chunks), "
                      "(SELECT count(*) FROM vectors)").fetchone()
        return dict(zip(("files", "documents", "chunks", "tokens", "vectors"), (int(v) for v in row)))
