"""An index in PostgreSQL answers as the folder does, on the same chunks, through the public calls users make.

The sceptic's questions: are the dense, BM25 and hybrid lists the folder's (ids and scores), with filters
too; do incremental re-runs, ``--prune`` and a failed transaction behave as in a folder; does a query see
one committed state while a writer commits; is the password ever shown; are a newer schema, a bad DSN and
a server that is not there clear errors?
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from contextkit import ingest, search_index
from contextkit.core.errors import (
    IndexDatabaseError,
    IndexExistsError,
    IndexFolderError,
    InvalidArgumentError,
    RetrievalError,
)
from contextkit.index import Index, PgIndex
from contextkit.retrievers import BM25Retriever, DenseRetriever, HybridRetriever
from tests._postgres import with_schema

QUERIES = ["how is a PEP submitted and reviewed", "deprecation of a module", "the Zen of Python",
           "release schedule of Python 2", "BDFL pronouncement", "keyword arguments"]


def _lists(index_path: str, mode: str, embedder, **filters) -> list[list[tuple[str, float]]]:
    with Index.open(index_path, read_only=True) as index:
        kind = {"dense": DenseRetriever, "bm25": BM25Retriever, "hybrid": HybridRetriever}[mode]
        retriever = kind(index, embedder=embedder) if mode != "bm25" else kind(index)
        return [[(h.chunk.id, h.score) for h in retriever.retrieve(q, k=10, filters=filters or None)]
                for q in QUERIES]


def _untied(hits: list[tuple[str, float]]) -> list[tuple[float, str]]:
    """Hits as ``(score, id)`` with ties put in id order and the tie at the cut left out: which of two
    chunks of equal score comes first follows their rowids, which two separate ingests may give in
    another order (batches commit as they finish)."""
    if not hits:
        return []
    last = round(hits[-1][1], 5)
    return sorted(((round(s, 5), i) for i, s in hits if round(s, 5) != last), key=lambda h: (-h[0], h[1]))


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_same_hits_and_scores_as_the_folder(twins: tuple[str, str], embedder, mode: str) -> None:
    folder, dsn = twins
    local, database = _lists(folder, mode, embedder), _lists(dsn, mode, embedder)
    for a, b in zip(local, database):
        assert [i for _, i in _untied(a)] == [i for _, i in _untied(b)]
        np.testing.assert_allclose(sorted(s for _, s in a), sorted(s for _, s in b), rtol=1e-5, atol=1e-6)
        # scored as the folder scores them, bit for bit: BM25 from the same counts, dense by FAISS over the
        # reader's copy of the vectors (pgvector's own scan differs in the last bits), hybrid fused from them
        assert sorted(s for _, s in a) == sorted(s for _, s in b)


@pytest.mark.parametrize("filters", [{"source_glob": "*pep-00[0-4]*"}, {"doc_ids": None}])
def test_filters_match_the_folder(twins: tuple[str, str], embedder, filters: dict) -> None:
    folder, dsn = twins
    if "doc_ids" in filters:
        with Index.open(folder, read_only=True) as index:
            filters = {"doc_ids": sorted(index.documents())[3:9]}
    for mode in ("dense", "bm25", "hybrid"):
        local, database = _lists(folder, mode, embedder, **filters), _lists(dsn, mode, embedder, **filters)
        assert [[i for _, i in _untied(row)] for row in local] == [[i for _, i in _untied(row)] for row in database]
        assert any(local), mode


def test_metadata_filter_and_unknown_field(twins: tuple[str, str], embedder) -> None:
    folder, dsn = twins
    with Index.open(dsn, read_only=True) as index:
        with pytest.raises(RetrievalError, match="unknown filter field"):
            index.rowids_matching(metadata={"no_such_field": 1})
        fields = index.store.metadata_fields()
    if "title" in fields:
        with Index.open(folder, read_only=True) as index:
            title = next(c for c in index.store.chunks_of(index.documents()[0])).metadata["title"]
        for path in twins:
            with Index.open(path, read_only=True) as index:
                assert len(index.rowids_matching(metadata={"title": title})) > 0


def test_search_index_and_counts(twins: tuple[str, str]) -> None:
    folder, dsn = twins
    a = search_index(folder, "the Zen of Python", k=5)
    b = search_index(dsn, "the Zen of Python", k=5)
    assert [h.chunk.id for h in a] == [h.chunk.id for h in b]
    with Index.open(folder, read_only=True) as f, Index.open(dsn, read_only=True) as d:
        assert isinstance(d, PgIndex)
        assert f.store.counts() == d.store.counts()
        assert len(f) == len(d)
        doc = f.documents()[2]
        assert [c.text for c in f.document_chunks(doc)] == [c.text for c in d.document_chunks(doc)]


def test_incremental_rerun_change_and_prune(corpus: Path, embedder, pg_dsn: str, tmp_path: Path) -> None:
    work = tmp_path / "docs"
    shutil.copytree(corpus, work)
    first = ingest([work], pg_dsn, embedder=embedder)
    again = ingest([work], pg_dsn, embedder=embedder)
    assert again.files_unchanged == first.files_new and again.chunks_added == 0
    changed = sorted(work.iterdir())[0]
    changed.write_text(changed.read_text() + "\n\nA sentence added about zebras and quokkas.\n")
    gone = sorted(work.iterdir())[1]
    gone.unlink()
    third = ingest([work], pg_dsn, embedder=embedder, prune=True)
    assert third.files_changed == 1 and third.files_removed == 1
    with Index.open(pg_dsn, read_only=True) as index:
        ids = {d for d in index.documents()}
        assert not any(gone.name in d for d in ids)
        hits = BM25Retriever(index).retrieve("zebras quokkas", k=3)
        assert hits and changed.name in hits[0].chunk.doc_id
        assert index.store.counts()["files"] == len(list(work.iterdir()))


def test_failed_transaction_leaves_nothing(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    index = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    try:
        with Index.open(twins[1], read_only=True) as source:
            chunks = source.store.chunks_of(source.documents()[0])
            vectors = source.store.vectors_by_rowid(sorted(source.rowids_matching(doc_ids=[chunks[0].doc_id])))
        with pytest.raises(RuntimeError), index.transaction():
            index.store.put_document(chunks[0].doc_id, "f.rst", "f.rst", "0" * 64, 10, {})
            index.add_chunks(chunks, vectors, [f"k{i}" for i in range(len(chunks))])
            raise RuntimeError("the writer fails mid-file")
        assert index.store.counts()["chunks"] == 0 and index.store.counts()["documents"] == 0
        with index.transaction():
            index.store.put_document(chunks[0].doc_id, "f.rst", "f.rst", "0" * 64, 10, {})
            index.add_chunks(chunks, vectors, [f"k{i}" for i in range(len(chunks))])
        assert index.store.counts()["chunks"] == len(chunks)
        assert BM25Retriever(index).retrieve(chunks[0].text[:60], k=1)[0].chunk.doc_id == chunks[0].doc_id
    finally:
        index.close()


def test_a_query_reads_one_committed_state(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    with Index.open(twins[1], read_only=True) as source:
        doc = source.documents()[0]
        chunks = source.store.chunks_of(doc)
        vectors = source.store.vectors_by_rowid(sorted(source.rowids_matching(doc_ids=[doc])))
    writer = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    reader = Index.open(pg_dsn, read_only=True)
    try:
        query = chunks[0].text[:80]
        with reader.snapshot():
            before = reader.bm25.search(query, 5)
            with writer.transaction():
                writer.store.put_document(doc, "f.rst", "f.rst", "0" * 64, 10, {})
                writer.add_chunks(chunks, vectors, [f"k{i}" for i in range(len(chunks))])
            assert len(reader.bm25.search(query, 5)[0]) == len(before[0]) == 0  # still the state it began on
            assert reader.nearest_rowids(vectors[0], 3) == []
            # a hybrid query's two runs go to two connections at once: both in the state the query began on
            together = reader.run_together(lambda: reader.nearest_rowids(vectors[0], 3),
                                           lambda: len(reader.bm25.search(query, 5)[0]),
                                           lambda: reader.store.counts()["chunks"])
            assert together == [[], 0, 0]
        assert len(reader.bm25.search(query, 5)[0]) > 0  # the next query sees the commit
        assert reader.nearest_rowids(vectors[0], 1)[0][1] == pytest.approx(float(vectors[0] @ vectors[0]), rel=1e-5)
    finally:
        reader.close()
        writer.close()


def test_hnsw_finds_what_exact_finds_and_filters_keep_k(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    index = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim, index_type="hnsw")
    try:
        with Index.open(twins[1], read_only=True) as source:
            rowids = sorted(source.rowids_matching())
            chunks = source.store.chunks_by_rowid(rowids)
            vectors = source.store.vectors_by_rowid(rowids)
        with index.transaction():
            index.store.put_document("d", None, "d", "0" * 64, 1, {})
            index.add_chunks([chunks[r] for r in rowids], vectors, [f"k{i}" for i in range(len(rowids))])
        ids = [chunks[r].id for r in rowids]
        for q in vectors[:20]:
            exact = {ids[i] for i in np.argsort(-(vectors @ q), kind="stable")[:10]}
            found = index.store.chunks_by_rowid(r for r, _ in index.nearest_rowids(q, 10))
            assert len(exact & {c.id for c in found.values()}) >= 9  # HNSW: approximate, recall@10 >= 0.9
        allowed = np.sort(index.rowids_matching())[::7]
        assert len(index.nearest_rowids(vectors[0], 10, allowed)) == 10
    finally:
        index.close()


def test_the_password_is_never_shown(twins: tuple[str, str], pg_server: str, corpus: Path, embedder) -> None:
    dsn = with_schema(pg_server.replace("postgres:@", "postgres:s3cret-pw@"), "pw")
    report = ingest([corpus], dsn, embedder=embedder)  # the local server trusts the socket: any password works
    assert "s3cret" not in report.model_dump_json()
    with Index.open(dsn, read_only=True) as index:
        assert "s3cret" not in str(index.path) + repr(index.path) + repr(index.info()) + repr(index.dsn)
        assert index.info()["counts"]["chunks"] == report.chunks_added


def test_clear_errors(pg_server: str, pg_dsn: str, embedder) -> None:
    with pytest.raises(IndexFolderError, match="no index here"):
        Index.open(pg_dsn)
    assert not Index.exists(pg_dsn)
    index = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    index.close()
    assert Index.exists(pg_dsn)
    with pytest.raises(IndexExistsError):
        Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    with pytest.raises(InvalidArgumentError, match="schema"):
        Index.open(with_schema(pg_server, "Robert'); DROP TABLE x"))
    with pytest.raises(InvalidArgumentError, match="flat or hnsw"):
        Index.create(with_schema(pg_server, "ivf"), model="m", dim=4, index_type="ivfpq")
    with pytest.raises(IndexDatabaseError, match="cannot connect") as caught:
        Index.open("postgresql://someone:hunter2@127.0.0.1:1/nowhere")
    assert "hunter2" not in str(caught.value) and "someone@127.0.0.1:1/nowhere" in str(caught.value)
    # a database written by a newer contextkit is refused, not read as this one's
    with Index.open(pg_dsn) as opened:
        opened.store.set_meta("schema_version", "99")
    with pytest.raises(IndexFolderError, match="newer contextkit"):
        Index.open(pg_dsn, read_only=True)


def test_read_only_refuses_writes(twins: tuple[str, str]) -> None:
    from contextkit.core.errors import IndexReadOnlyError

    with Index.open(twins[1], read_only=True) as index, pytest.raises(IndexReadOnlyError):
        index.put_vectors({})


def test_two_writers_of_one_file_follow_each_other(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    """Two processes that both found a file new write it at once: the second waits for the first, then
    replaces its rows by id (no unique-key failure, no chunk twice; a plain insert fails here)."""
    import threading

    with Index.open(twins[1], read_only=True) as source:
        doc = source.documents()[0]
        chunks = source.store.chunks_of(doc)
        vectors = source.store.vectors_by_rowid(sorted(source.rowids_matching(doc_ids=[doc])))
    first = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    second = Index.open(pg_dsn)
    keys = [f"k{i}" for i in range(len(chunks))]
    outcome: list[object] = []

    def write(index: Index) -> None:
        try:
            with index.transaction():
                index.store.put_document(doc, "f.rst", "f.rst", "0" * 64, 10, {})
                index.add_chunks(chunks, vectors, keys)
                index.store.put_file("f.rst", "0" * 64, 10, 1)
            outcome.append("ok")
        except Exception as exc:  # noqa: BLE001 - the outcome is what is checked
            outcome.append(exc)

    try:
        first.begin()
        first.store.put_document(doc, "f.rst", "f.rst", "0" * 64, 10, {})
        first.add_chunks(chunks, vectors, keys)
        other = threading.Thread(target=write, args=(second,))
        other.start()
        other.join(1.0)
        assert other.is_alive()  # waiting for the first writer's file
        first.store.put_file("f.rst", "0" * 64, 10, 1)
        first.commit()
        other.join(30)
        assert outcome == ["ok"]
        counts = first.store.counts()
        assert counts["chunks"] == len(chunks) and counts["documents"] == 1 and counts["files"] == 1
    finally:
        first.close()
        second.close()


def test_replacing_a_file_waits_for_another_writer_of_it(twins: tuple[str, str], pg_dsn: str, embedder) -> None:
    """A writer replacing a changed file while another writes its old version (other document ids): the
    replacement waits for it and removes what it wrote, so the file never holds two versions."""
    import threading

    with Index.open(twins[1], read_only=True) as source:
        doc = source.documents()[0]
        chunks = source.store.chunks_of(doc)
        vectors = source.store.vectors_by_rowid(sorted(source.rowids_matching(doc_ids=[doc])))
    renamed = [replace(c, id=f"v2::{c.ordinal}", doc_id="v2") for c in chunks]
    old = Index.create(pg_dsn, model=embedder.model_name, dim=embedder.dim)
    new = Index.open(pg_dsn)
    keys = [f"k{i}" for i in range(len(chunks))]

    def replace_file() -> None:
        with new.transaction():
            new.delete_file("f.rst")
            new.store.put_document("v2", "f.rst", "f.rst", "2" * 64, 10, {})
            new.add_chunks(renamed, vectors, keys)
            new.store.put_file("f.rst", "2" * 64, 10, 1)

    try:
        old.begin()
        old.store.put_document(doc, "f.rst", "f.rst", "1" * 64, 10, {})
        old.add_chunks(chunks, vectors, keys)
        other = threading.Thread(target=replace_file)
        other.start()
        other.join(1.0)
        old.store.put_file("f.rst", "1" * 64, 10, 1)
        old.commit()
        other.join(30)
        assert old.documents() == ["v2"] and old.store.file_hashes() == {"f.rst": "2" * 64}
        assert old.store.counts()["chunks"] == len(chunks)
    finally:
        old.close()
        new.close()


def test_the_assembler_and_the_server_read_it_as_a_folder(twins: tuple[str, str], embedder) -> None:
    from contextkit import ContextAssembler
    from contextkit.serve._requests import SearchRequest
    from contextkit.serve._service import IndexService

    prompts = []
    for path in twins:
        with Index.open(path, read_only=True) as index:
            result = ContextAssembler(budget=1200, retriever=HybridRetriever(index, embedder=embedder)).assemble(
                "What does the Zen of Python say about errors?", instructions="Answer from the sources.")
            prompts.append(result.prompt)
    assert prompts[0] == prompts[1] and "<" in prompts[0]
    answers = []
    for path in twins:
        service = IndexService(path, warm=False)
        try:
            found = service.search(SearchRequest(query="keyword arguments", k=5, mode="bm25"))
            answers.append([h["id"] for h in found["hits"]])
        finally:
            service.close()
    assert answers[0] == answers[1] and answers[0]


def test_prune_removes_only_under_its_own_inputs(corpus: Path, embedder, pg_dsn: str, tmp_path: Path) -> None:
    """Two writers' folders in one database: ``--prune`` in one's run never removes the other's files."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    files = sorted(corpus.iterdir())
    for folder, part in ((mine, files[:4]), (theirs, files[4:8])):
        folder.mkdir()
        for f in part:
            shutil.copy(f, folder / f.name)
    ingest([mine], pg_dsn, embedder=embedder)
    ingest([theirs], pg_dsn, embedder=embedder)
    (mine / files[0].name).unlink()
    report = ingest([mine], pg_dsn, embedder=embedder, prune=True)
    assert report.files_removed == 1
    with Index.open(pg_dsn, read_only=True) as index:
        kept = index.store.file_hashes()
    assert len(kept) == 7 and sum(f.startswith("theirs/") for f in kept) == 4


def test_a_database_without_pgvector_is_named_in_the_error(pg_server: str) -> None:
    """A user who may not create extensions, in a database without pgvector: one clear line, no traceback."""
    import psycopg

    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS noext")
        admin.execute("CREATE DATABASE noext")
        admin.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'plain') THEN "
                      "CREATE ROLE plain LOGIN; END IF; END $$")
        admin.execute("GRANT CREATE ON DATABASE noext TO plain")
    dsn = pg_server.replace("postgres:@/postgres", "plain@/noext")
    with pytest.raises(IndexDatabaseError, match="pgvector extension is not available"):
        Index.create(dsn, model="m", dim=4)
    with pytest.raises(IndexFolderError, match="no index here"):
        Index.open(dsn)


def test_a_lost_connection_is_a_clear_error_and_the_next_query_reconnects(twins: tuple[str, str], pg_server: str
                                                                          ) -> None:
    import psycopg

    with Index.open(twins[1], read_only=True) as index:
        assert index.bm25.search("the Zen of Python", 3)[0].size
        pid = index.store.db.info.backend_pid
        with psycopg.connect(pg_server, autocommit=True) as admin:  # the server drops this reader's connection
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(IndexDatabaseError, match="the database failed") as caught:
            index.bm25.search("the Zen of Python", 3)
        assert "twins" in str(caught.value)
        assert index.bm25.search("the Zen of Python", 3)[0].size  # a new connection for the next query
