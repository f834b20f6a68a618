"""The index owns its SQL: no module outside ``contextkit/index/`` runs statements on the records store.

Everything else asks the index (or its store) through typed methods, so the schema, the retired
rows kept for older readers, FAISS and BM25 stay in step with every change; the methods that took
over the SQL once written elsewhere are tested here on real indexes.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contextkit.embedders import BaseEmbedder, MemoryCache
from contextkit.errors import IndexReadOnlyError, InvalidArgumentError, RetrievalError
from contextkit.index import Index
from contextkit.records import Chunk
from contextkit.retrievers import Filters

PACKAGE = Path(__file__).resolve().parents[2] / "contextkit"
SQL_CALLS = {"execute", "executemany", "executescript"}


def sql_uses(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each SQL statement run (``.execute(``...) and each ``.db`` connection reached."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
            found.append((node.lineno, f".{node.func.attr}("))
        elif isinstance(node, ast.Attribute) and node.attr == "db":
            found.append((node.lineno, ".db"))
    return found


class TestNoSQLOutsideTheIndex:
    def test_the_scan_finds_what_the_old_code_did(self):
        # What contextkit/evaluation.py, _file_keys.py and the LlamaIndex vector store held before.
        old = ('rows = index.store.db.execute("SELECT rowid, doc_id FROM chunks")\n'
               "db = index.store.db\n"
               'db.execute("UPDATE files SET path = ? WHERE path = ?", (new, path))\n'
               'store.db.executemany("INSERT INTO vectors VALUES (?, ?)", rows)\n')
        assert {what for _, what in sql_uses(old)} == {".db", ".execute(", ".executemany("}
        assert len(sql_uses(old)) == 6

    def test_no_module_outside_the_index_runs_sql_on_the_store(self):
        offenders = []
        for path in sorted(PACKAGE.rglob("*.py")):
            relative = path.relative_to(PACKAGE)
            if relative.parts[0] == "index":
                continue
            source = path.read_text(encoding="utf-8")
            offenders += [f"contextkit/{relative}:{line}: {what}" for line, what in sql_uses(source)]
        assert offenders == [], "SQL on the store belongs in contextkit/index/ (add a method there):\n" + \
            "\n".join(offenders)

    def test_the_scan_reads_every_module(self):
        scanned = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "index"]
        assert len(scanned) > 50 and any(p.name == "evaluation.py" for p in scanned)


# --------------------------------------------------------------------------- a real index
DIM = 16


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def chunks_of(doc_id: str, n: int, meta: dict[str, Any] | None = None) -> list[Chunk]:
    texts = [f"{doc_id} word{i} shared" for i in range(n)]
    return [Chunk(id=f"{doc_id}::{i}", doc_id=doc_id, ordinal=i, text=text, start=0, end=len(text),
                  token_count=3, metadata=dict(meta or {})) for i, text in enumerate(texts)]


def add(index: Index, doc_id: str, n: int, *, file: str | None = None, source: str | None = None,
        meta: dict[str, Any] | None = None, seed: int = 0) -> np.ndarray:
    vecs = unit(np.random.default_rng(seed), n)
    index.store.put_document(doc_id, file, source if source is not None else doc_id, "sha", 10, {})
    index.add_chunks(chunks_of(doc_id, n, meta), vecs, [f"{doc_id}-{i}" for i in range(n)])
    return vecs


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """An index of three documents: two from files (one of them complete), one of its own."""
    folder = tmp_path / "ix"
    with Index.create(folder, model="m", dim=DIM) as index, index.transaction():
        add(index, "docs/a.md", 3, file="docs/a.md", source="/abs/docs/a.md", meta={"lang": "en", "n": 1}, seed=1)
        index.store.put_file("docs/a.md", "sha-a", 10, 1)
        add(index, "docs/b.txt", 2, file="docs/b.txt", source="/abs/docs/b.txt", meta={"lang": "fr", "ok": True},
            seed=2)
        add(index, "own", 2, source="", seed=3)
    return folder


def rowids_of(index: Index, *chunk_ids: str) -> list[int]:
    wanted = set(chunk_ids)
    return sorted(r for r, c in index.store.chunks_by_rowid(index.chunk_doc_ids()).items() if c.id in wanted)


class TestRowidsMatching:
    def test_each_condition_and_all_together(self, built):
        with Index.open(built) as index:
            doc = index.chunk_doc_ids()
            docs_of = lambda rowids: sorted({doc[int(r)] for r in rowids})  # noqa: E731
            assert len(index.rowids_matching()) == 7
            assert docs_of(index.rowids_matching(doc_ids=["own", "docs/b.txt"])) == ["docs/b.txt", "own"]
            assert docs_of(index.rowids_matching(metadata={"lang": "fr"})) == ["docs/b.txt"]
            assert docs_of(index.rowids_matching(metadata={"ok": True})) == ["docs/b.txt"]  # a bool is SQLite's 1
            assert docs_of(index.rowids_matching(source_glob="/abs/*/a.md")) == ["docs/a.md"]  # by source path
            assert docs_of(index.rowids_matching(source_glob="docs/*")) == ["docs/a.md", "docs/b.txt"]  # by id
            assert len(index.rowids_matching(doc_ids=["docs/a.md"], metadata={"lang": "fr"})) == 0

    def test_an_unknown_field_names_the_known_ones(self, built):
        with Index.open(built) as index, pytest.raises(RetrievalError, match="unknown filter field.*lang, n, ok"):
            index.rowids_matching(metadata={"langue": "en"})

    def test_filters_is_a_thin_call_into_the_index(self, built):
        with Index.open(built) as index:
            filters = Filters(source_glob="docs/*", metadata={"lang": "en"})
            assert np.array_equal(filters.allowed_rowids(index),
                                  index.rowids_matching(source_glob="docs/*", metadata={"lang": "en"}))

    def test_a_reader_of_an_older_generation_gets_its_own_chunks(self, built):
        with Index.open(built, read_only=True) as reader, reader.snapshot():  # one generation pinned
            before = reader.rowids_matching(doc_ids=["docs/a.md"])
            with Index.open(built) as writer:
                with writer.transaction():
                    writer.delete_document("docs/a.md")
                writer.save()
                assert len(writer.rowids_matching(doc_ids=["docs/a.md"])) == 0
            assert len(before) == 3 and list(before) == sorted(before)
            assert np.array_equal(reader.rowids_matching(doc_ids=["docs/a.md"]), before)  # retired rows match
        with Index.open(built, read_only=True) as reader:  # a new reader serves the new generation
            assert len(reader.rowids_matching(doc_ids=["docs/a.md"])) == 0


class TestDeleteChunks:
    def test_removes_chunks_from_store_faiss_and_bm25_and_keeps_their_document(self, built):
        with Index.open(built) as index:
            gone = rowids_of(index, "docs/a.md::0", "docs/a.md::2")
            with index.transaction():
                assert index.delete_chunks(["docs/a.md::0", "docs/a.md::2", "no such id"]) == 2
            assert len(index) == 5 and index.store.counts()["chunks"] == 5
            assert "docs/a.md" in index.documents()
            assert not set(gone) & set(index.chunk_doc_ids())
            hits = {int(r) for r in index.bm25.search("word0", 10)[0]}
            assert hits and not hits & set(gone)
            index.save()
        with Index.open(built, read_only=True) as index:
            assert len(index) == 5 and [c.id for c in index.store.chunks_of("docs/a.md")] == ["docs/a.md::1"]

    def test_a_reader_still_reads_the_rows_it_serves(self, built):
        with Index.open(built, read_only=True) as reader:
            rowid = rowids_of(reader, "own::0")[0]
            with Index.open(built) as writer:
                with writer.transaction():
                    writer.delete_chunks(["own::0"])
                writer.save()
            assert reader.store.chunks_by_rowid([rowid])[rowid].id == "own::0"  # retired, not lost

    def test_rolls_back_with_its_transaction(self, built):
        with Index.open(built) as index:
            with pytest.raises(RuntimeError), index.transaction():
                index.delete_chunks(["own::0", "own::1"])
                raise RuntimeError("undo")
            assert len(index) == 7 and index.store.counts()["chunks"] == 7


class TestVectors:
    def test_put_commits_at_once_and_stored_finds_them(self, built):
        vec = unit(np.random.default_rng(9), 1)[0]
        with Index.open(built) as index:
            index.put_vectors({"k-new": vec})
            assert not index.store.db.in_transaction  # committed: a crash now keeps it
            assert set(index.stored_vectors(["k-new", "docs/a.md-0", "missing"])) == {"k-new", "docs/a.md-0"}
        with Index.open(built, read_only=True) as index:
            assert np.array_equal(index.stored_vectors(["k-new"])["k-new"], vec)

    def test_put_refuses_a_wrong_dimension_and_a_reader(self, built):
        with Index.open(built) as index, pytest.raises(InvalidArgumentError, match="index dim 16"):
            index.put_vectors({"bad": np.zeros(DIM + 1, np.float32)})
        with Index.open(built, read_only=True) as index, pytest.raises(IndexReadOnlyError):
            index.put_vectors({"k": np.zeros(DIM, np.float32)})


class TestLookups:
    def test_chunk_doc_ids_and_document_sources(self, built):
        with Index.open(built, read_only=True) as index:
            doc = index.chunk_doc_ids()
            assert sorted(doc.values()) == ["docs/a.md"] * 3 + ["docs/b.txt"] * 2 + ["own"] * 2
            assert set(doc) == set(int(r) for r in index.rowids_matching())
            assert index.document_sources({"docs/a.md", "own", "nope"}) == {"docs/a.md": "/abs/docs/a.md"}
            many = [f"x{i}" for i in range(1200)] + ["docs/b.txt"]  # past SQLite's bound-parameter batches
            assert index.document_sources(many) == {"docs/b.txt": "/abs/docs/b.txt"}

    def test_what_ingestion_asks_the_store(self, built):
        with Index.open(built) as index:
            store = index.store
            assert store.file_sources() == {"docs/a.md": "/abs/docs/a.md", "docs/b.txt": "/abs/docs/b.txt"}
            assert store.unfinished_files() == ["docs/b.txt"]  # documents, no files row: a stopped stream
            assert store.recorded_files() == {"docs/a.md", "docs/b.txt"}
            assert sorted(store.file_vector_keys("docs/a.md")) == ["docs/a.md-0", "docs/a.md-1", "docs/a.md-2"]
            with index.transaction():
                store.rename_file("docs/a.md", "docs/<EMAIL>~abc")
            assert store.file_hashes() == {"docs/<EMAIL>~abc": "sha-a"}
            assert store.document_ids("docs/<EMAIL>~abc") == ["docs/a.md"]
            assert store.recorded_files() == {"docs/<EMAIL>~abc", "docs/b.txt"}


# --------------------------------------------------------------- ingestion hands vectors over
class CountingEmbedder(BaseEmbedder):
    """Deterministic vectors from a text's hash; counts what it embeds; slices like ``Embedder``."""

    model_name = "counting"
    slice_size = 4
    batch_size = 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    @property
    def dim(self) -> int:
        return DIM

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        seeds = [int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) for t in texts]
        return np.stack([unit(np.random.default_rng(s), 1)[0] for s in seeds]) if texts else np.zeros((0, DIM))

    def _settings(self) -> dict[str, Any]:
        return {}


class TestEmbedBatch:
    def test_embeds_only_what_the_index_lacks_and_keeps_each_slice(self, tmp_path):
        from contextkit.ingestion._steps import embed_batch

        embedder = CountingEmbedder()
        own = embedder.cache = MemoryCache()
        texts = [f"text {i}" for i in range(11)]
        with Index.create(tmp_path / "ix", model="counting", dim=DIM) as index:
            index.put_vectors({embedder.cache_key(texts[0]): embedder._encode([texts[0]])[0]})
            embedder.calls.clear()
            done: list[int] = []
            vectors, keys, report = embed_batch(index, embedder, texts, progress=done.append)
            assert keys == [embedder.cache_key(t) for t in texts]
            assert np.allclose(vectors, embedder._encode(texts), atol=1e-7)
            # the index held one; the other ten in slices of 4, the last two joined to the one before
            assert [len(c) for c in embedder.calls[:-1]] == [4, 6]
            assert (report.texts, report.cache_hits, report.model_inputs) == (11, 1, 10)
            assert done[0] == 1 and sum(done) == 11
            assert len(index.stored_vectors(keys)) == 11 and not index.store.db.in_transaction
        assert embedder.cache is own  # the caller's embedder keeps its own cache

    def test_ingest_leaves_the_callers_cache_and_stores_every_vector(self, tmp_path, small_corpus):
        from contextkit.ingestion import ingest

        embedder = CountingEmbedder()
        own = embedder.cache = MemoryCache()
        first = ingest([small_corpus], tmp_path / "ix", embedder=embedder)
        assert first.ok and first.embedding.model_inputs == first.embedding.texts == first.chunks_added
        assert embedder.cache is own
        (small_corpus / "bm25.txt").write_text("Changed words about BM25 ranking.\n", encoding="utf-8")
        again = ingest([small_corpus], tmp_path / "ix", embedder=CountingEmbedder())  # no cache of its own
        assert again.files_changed == 1 and again.embedding.cache_hits == 0 and again.embedding.model_inputs == 1
        with Index.open(tmp_path / "ix", read_only=True) as index:
            rowids = index.rowids_matching()
            assert len(rowids) == len(index) == index.store.counts()["chunks"]
            assert index.store.vectors_by_rowid(rowids).shape == (len(rowids), DIM)  # every chunk has its vector


class TestLlamaIndexVectorStoreReplacesNodesThroughTheIndex:
    def test_adding_a_stored_node_id_again_replaces_it_everywhere(self, tmp_path):
        pytest.importorskip("llama_index.core")
        from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

        from contextkit.integrations.llamaindex.vector_store import ContextKitVectorStore

        rng = np.random.default_rng(5)

        def node(node_id: str, text: str) -> TextNode:
            return TextNode(id_=node_id, text=text, embedding=unit(rng, 1)[0].tolist(),
                            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc")})

        store = ContextKitVectorStore(tmp_path / "li")
        try:
            store.add([node("n1", "alpha words here"), node("n2", "beta words here")])
            store.add([node("n1", "gamma words instead")])  # the same node id: replaced, not doubled
            index = store.client
            assert len(index) == 2 and index.store.counts()["chunks"] == 2
            texts = sorted(c.text for c in index.store.chunks_of("doc"))
            assert texts == ["beta words here", "gamma words instead"]
            found = index.store.chunks_by_rowid(int(r) for r in index.bm25.search("alpha", 5)[0])
            assert not [c for c in found.values() if c.text.startswith("alpha")]  # BM25 dropped the old text
        finally:
            store.close()
        with Index.open(tmp_path / "li", read_only=True) as index:
            assert len(index) == 2 and sorted(index.chunk_doc_ids().values()) == ["doc", "doc"]
