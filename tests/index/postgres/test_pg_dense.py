"""Exact dense search on a database index from the reader's copy of the vectors (``_pg_dense``).

The sceptic's questions: are the hits and scores the folder's, bit for bit, with filters too, and the
same as pgvector's own exact scan; does the copy follow every commit of another connection (added and
removed chunks) while reading only the vectors it lacks; does a query pinned to an older state still
get that state's answer after the copy moved on; does a writer's uncommitted state never enter the
copy; does a limit of 0 (or one the index exceeds) fall back to the database's scan?
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from contextkit.index import Index, PgIndex
from contextkit.index._pg_dense import MAX_BYTES_ENV, VectorCopy


def _queries(index: Index, n: int = 12) -> np.ndarray:
    """Vectors near some chunks' own (seeded noise): realistic queries with close runners-up."""
    rowids = sorted(index.rowids_matching())[:: max(1, len(index) // n)][:n]
    vectors = index.store.vectors_by_rowid(rowids)
    return vectors + np.random.default_rng(7).normal(0, 0.03, vectors.shape).astype(np.float32)


def _by_id(index: Index, hits: list[tuple[int, float]]) -> list[tuple[str, float]]:
    chunks = index.store.chunks_by_rowid([r for r, _ in hits])
    return [(chunks[r].id, s) for r, s in hits]


def _rows_of(index: Index, doc: str) -> tuple[list, np.ndarray]:
    rowids = sorted(index.rowids_matching(doc_ids=[doc]))
    chunks = index.store.chunks_by_rowid(rowids)
    return [chunks[r] for r in rowids], index.store.vectors_by_rowid(rowids)


def _put(index: Index, chunks: list, vectors: np.ndarray) -> str:
    """The chunks' document and the chunks, in one transaction; returns the document's id."""
    doc = chunks[0].doc_id
    with index.transaction():
        index.store.put_document(doc, f"{doc}.rst", f"{doc}.rst", "0" * 64, 10, {})
        index.add_chunks(chunks, vectors, [f"{doc}:{i}" for i in range(len(chunks))])
    return doc


def test_the_copy_answers_as_the_folder_bit_for_bit(twins: tuple[str, str]) -> None:
    folder, dsn = twins
    with Index.open(folder, read_only=True) as local, Index.open(dsn, read_only=True) as db:
        assert isinstance(db, PgIndex)
        queries = _queries(local)
        allowed = np.asarray(sorted(db.rowids_matching(doc_ids=sorted(db.documents())[2:7])), dtype=np.int64)
        allowed_local = np.asarray(sorted(local.rowids_matching(doc_ids=sorted(db.documents())[2:7])), dtype=np.int64)
        for q in queries:
            assert _by_id(db, db.nearest_rowids(q, 10)) == _by_id(local, local.nearest_rowids(q, 10))
            assert _by_id(db, db.nearest_rowids(q, 5, allowed)) == _by_id(local, local.nearest_rowids(q, 5, allowed_local))
        assert db.vector_copy.size == len(db)
        # and against pgvector's own exact scan of the same rows (another path to the same answer)
        copied = [db.nearest_rowids(q, 10) for q in queries]
        db.vector_copy.max_bytes = 0
        scanned = [db.nearest_rowids(q, 10) for q in queries]
    for a, b in zip(copied, scanned):
        assert [r for r, _ in a] == [r for r, _ in b]
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-5, atol=1e-6)


def _two_documents(folder: str) -> tuple[list, np.ndarray, list, np.ndarray]:
    """The chunks and vectors of the first two documents of a folder index: (a chunks, a vectors, b ...)."""
    with Index.open(folder, read_only=True) as source:
        docs = sorted(source.documents())
        return (*_rows_of(source, docs[0]), *_rows_of(source, docs[1]))


def test_the_copy_follows_commits_reading_only_what_it_lacks(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    a_chunks, a_vectors, b_chunks, b_vectors = _two_documents(twins[1])
    writer = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    reader = Index.open(pg_dsn, read_only=True)
    try:
        assert reader.nearest_rowids(a_vectors[0], 3) == []
        a_doc = _put(writer, a_chunks, a_vectors)
        top = reader.nearest_rowids(a_vectors[0], 1)
        assert _by_id(reader, top)[0][0] == a_chunks[0].id
        assert reader.vector_copy.vectors_read == len(a_chunks)
        reader.nearest_rowids(a_vectors[1], 1)  # the same state: nothing read
        assert reader.vector_copy.vectors_read == len(a_chunks)

        _put(writer, b_chunks, b_vectors)  # another connection commits
        assert _by_id(reader, reader.nearest_rowids(b_vectors[0], 1))[0][0] == b_chunks[0].id
        assert reader.vector_copy.vectors_read == len(a_chunks) + len(b_chunks)

        with writer.transaction():
            writer.delete_document(a_doc)
        ids = {i for i, _ in _by_id(reader, reader.nearest_rowids(a_vectors[0], 50))}
        assert ids == {c.id for c in b_chunks}  # a's chunks are gone, b's all there
        assert reader.vector_copy.size == len(b_chunks)
        assert reader.vector_copy.vectors_read == len(a_chunks) + len(b_chunks)  # a removal reads nothing
    finally:
        reader.close()
        writer.close()


def test_a_query_pinned_to_an_older_state_gets_that_state(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    a_chunks, a_vectors, b_chunks, b_vectors = _two_documents(twins[1])
    writer = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    a_doc = _put(writer, a_chunks, a_vectors)
    reader = Index.open(pg_dsn, read_only=True)
    pinned, moved, seen = threading.Event(), threading.Event(), {}

    def old_query() -> None:  # a thread whose query began before the commit, and reads on after it
        with reader.snapshot():
            seen["before"] = {i for i, _ in _by_id(reader, reader.nearest_rowids(a_vectors[0], 50))}
            pinned.set()
            moved.wait(60)
            seen["after"] = {i for i, _ in _by_id(reader, reader.nearest_rowids(a_vectors[0], 50))}

    try:
        thread = threading.Thread(target=old_query)
        thread.start()
        assert pinned.wait(60)
        with writer.transaction():
            writer.delete_document(a_doc)
        _put(writer, b_chunks, b_vectors)
        now = {i for i, _ in _by_id(reader, reader.nearest_rowids(a_vectors[0], 50))}  # the copy moves on
        moved.set()
        thread.join(60)
        assert now == {c.id for c in b_chunks}
        assert seen["before"] == seen["after"] == {c.id for c in a_chunks}
    finally:
        reader.close()
        writer.close()


def test_a_writers_own_uncommitted_rows_never_enter_the_copy(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    with Index.open(twins[1], read_only=True) as source:
        a_chunks, a_vectors = _rows_of(source, sorted(source.documents())[0])
    writer = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    try:
        with pytest.raises(RuntimeError), writer.transaction():
            writer.store.put_document(a_chunks[0].doc_id, "a.rst", "a.rst", "0" * 64, 10, {})
            writer.add_chunks(a_chunks, a_vectors, [f"a:{i}" for i in range(len(a_chunks))])
            assert len(writer.nearest_rowids(a_vectors[0], 3)) == 3  # its own rows, through the database
            raise RuntimeError("the writer gives up")
        assert writer.nearest_rowids(a_vectors[0], 3) == []
        assert writer.vector_copy.vectors_read == 0
    finally:
        writer.close()


@pytest.mark.parametrize("limit_mb", ["0", "0.01"])
def test_a_limit_the_index_exceeds_falls_back_to_the_database(twins: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
                                                              limit_mb: str) -> None:
    folder, dsn = twins
    monkeypatch.setenv(MAX_BYTES_ENV, limit_mb)
    with Index.open(folder, read_only=True) as local, Index.open(dsn, read_only=True) as db:
        assert isinstance(db, PgIndex)
        for q in _queries(local, 4):
            assert [i for i, _ in _by_id(db, db.nearest_rowids(q, 10))] == \
                [i for i, _ in _by_id(local, local.nearest_rowids(q, 10))]
        assert db.vector_copy.size == 0 and db.vector_copy.vectors_read == 0


def test_a_limit_that_is_not_a_number_keeps_the_default(monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    # Ray's logging setup (tests/ingestion/test_ray.py, when it runs first) disables loggers made before it
    monkeypatch.setattr(logging.getLogger(VectorCopy.__module__), "disabled", False)
    assert VectorCopy(384).max_bytes == 512 * 2**20
    assert MAX_BYTES_ENV in caplog.text
