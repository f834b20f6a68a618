import numpy as np
import pytest

from contextkit.index import Index, IndexFolderError, IndexLockedError, IndexMismatchError
from contextkit.records import Chunk


def make_chunks(doc_id: str, n: int) -> list[Chunk]:
    return [Chunk(id=f"{doc_id}::{i}", doc_id=doc_id, ordinal=i, text=f"t{i:05d}", start=6 * i, end=6 * i + 6,
                  token_count=1) for i in range(n)]


def unit(rng, n, d=16):
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def fill(index: Index, rng, docs: dict[str, int]) -> dict[str, np.ndarray]:
    vectors = {}
    index.begin()
    for doc_id, n in docs.items():
        chunks = make_chunks(doc_id, n)
        vecs = unit(rng, n)
        index.store.put_document(doc_id, doc_id, doc_id, "sha", 10, {})
        index.add_chunks(chunks, vecs, [f"{doc_id}-{i}" for i in range(n)])
        vectors[doc_id] = vecs
    index.commit()
    return vectors


class TestIndex:
    def test_search_matches_brute_force(self, tmp_path):
        rng = np.random.default_rng(0)
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            vectors = fill(index, rng, {"a": 50, "b": 30})
            queries = unit(rng, 5)
            hits = index.search(queries, k=7)
        allv = np.concatenate([vectors["a"], vectors["b"]])
        ids = [f"a::{i}" for i in range(50)] + [f"b::{i}" for i in range(30)]
        for q, got in zip(queries, hits):
            scores = allv @ q
            want = [ids[i] for i in np.argsort(-scores)[:7]]
            assert [h.chunk.id for h in got] == want
            assert np.allclose([h.score for h in got], np.sort(scores)[::-1][:7], atol=1e-5)

    def test_persists_and_deletes(self, tmp_path):
        rng = np.random.default_rng(1)
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            vectors = fill(index, rng, {"a": 5, "b": 5})
            index.begin()
            assert index.delete_document("a") == 5
            index.commit()
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert len(index) == 5
            hit = index.search(vectors["b"][2], k=1)[0][0]
            assert hit.chunk.id == "b::2" and hit.score == pytest.approx(1.0, abs=1e-5)
            assert {h.chunk.doc_id for h in index.search(vectors["a"][0], k=10)[0]} == {"b"}

    @staticmethod
    def recall_at_10(tmp_path, index_type: str, n: int, seed: int) -> float:
        """Recall@10 of an approximate index against the exact flat one on the same vectors."""
        with Index.create(tmp_path / "flat", model="m", dim=16) as flat, \
                Index.create(tmp_path / index_type, model="m", dim=16, index_type=index_type) as approx:
            fill(flat, np.random.default_rng(seed), {"a": n})
            fill(approx, np.random.default_rng(seed), {"a": n})
            approx.save()
            queries = unit(np.random.default_rng(seed + 100), 50)
            exact = [{h.chunk.id for h in r} for r in flat.search(queries, 10)]
            found = [{h.chunk.id for h in r} for r in approx.search(queries, 10)]
        return float(np.mean([len(f & e) / 10 for f, e in zip(found, exact)]))

    def test_hnsw_recall_against_exact(self, tmp_path):
        assert self.recall_at_10(tmp_path, "hnsw", 2000, 2) >= 0.9

    def test_ivf_recall_against_exact(self, tmp_path):
        assert self.recall_at_10(tmp_path, "ivf", 3000, 3) >= 0.8

    def test_stale_faiss_file_is_rebuilt_from_the_store(self, tmp_path):
        rng = np.random.default_rng(4)
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            fill(index, rng, {"a": 4})
        stale = (tmp_path / "ix" / "vectors.faiss").read_bytes()
        with Index.open(tmp_path / "ix") as index:
            fill(index, rng, {"b": 3})
        # a crash after the store committed but before the FAISS file was replaced
        (tmp_path / "ix" / "vectors.faiss").write_bytes(stale)
        import json

        manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
        manifest["generation"] -= 1
        (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert len(index) == 7

    def test_inconsistent_faiss_file_is_a_clear_error(self, tmp_path):
        rng = np.random.default_rng(5)
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            fill(index, rng, {"a": 4})
        with Index.create(tmp_path / "other", model="m", dim=16) as other:
            fill(other, rng, {"a": 2})
        (tmp_path / "ix" / "vectors.faiss").write_bytes((tmp_path / "other" / "vectors.faiss").read_bytes())
        with pytest.raises(IndexFolderError, match="FAISS holds 2 vectors but the store has 4"):
            Index.open(tmp_path / "ix")

    def test_model_and_dimension_are_checked(self, tmp_path):
        Index.create(tmp_path / "ix", model="m", dim=16).close()
        with pytest.raises(IndexMismatchError, match="model 'm'"):
            Index.open(tmp_path / "ix", expect_model="other")
        with pytest.raises(IndexMismatchError, match="dimension 16"):
            Index.open(tmp_path / "ix", expect_dim=384)

    def test_missing_and_corrupt_folders(self, tmp_path):
        with pytest.raises(IndexFolderError, match="no index here"):
            Index.open(tmp_path / "nothing")
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "manifest.json").write_text("{not json")
        with pytest.raises(IndexFolderError, match="unreadable manifest"):
            Index.open(tmp_path / "bad")

    def test_one_writer_at_a_time(self, tmp_path):
        with Index.create(tmp_path / "ix", model="m", dim=16):
            with pytest.raises(IndexLockedError):
                Index.open(tmp_path / "ix")
            Index.open(tmp_path / "ix", read_only=True).close()  # readers are fine

    def test_folder_is_readable_without_contextkit(self, tmp_path):
        import json
        import sqlite3

        import faiss

        rng = np.random.default_rng(6)
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            fill(index, rng, {"a": 3})
        manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
        assert manifest["format_version"] == 1 and manifest["dim"] == 16
        assert faiss.read_index(str(tmp_path / "ix" / "vectors.faiss")).ntotal == 3
        db = sqlite3.connect(tmp_path / "ix" / "store.sqlite")
        assert db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 3
        assert not list((tmp_path / "ix").glob("*.pkl"))


class TestIndexUpsert:
    def test_upsert_replaces_and_delete_removes(self, tmp_path):
        from contextkit.records import Document

        rng = np.random.default_rng(7)
        doc = Document(id="doc", text="x" * 60, source="mem")
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            index.upsert(doc, make_chunks("doc", 4), unit(rng, 4))
            index.upsert(doc, make_chunks("doc", 2), unit(rng, 2))  # the new version replaces the old
            assert len(index) == 2 and index.documents() == ["doc"]
            assert index.delete("doc") == 2 and len(index) == 0
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert len(index) == 0 and index.documents() == []

    def test_failed_upsert_leaves_the_previous_state(self, tmp_path):
        from contextkit.records import Document

        rng = np.random.default_rng(8)
        doc = Document(id="doc", text="x" * 60)
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            index.upsert(doc, make_chunks("doc", 3), unit(rng, 3))
            with pytest.raises(ValueError):
                index.upsert(doc, make_chunks("doc", 2), unit(rng, 5))  # vectors do not match the chunks
            assert len(index) == 3 and len(index.store.chunks_of("doc")) == 3


class TestAutoIndexType:
    def test_auto_is_exact_when_small_and_hnsw_when_large(self, tmp_path, monkeypatch):
        import faiss

        from contextkit.index import _index

        monkeypatch.setattr(_index, "AUTO_HNSW_FROM", 500)
        rng = np.random.default_rng(9)
        with Index.create(tmp_path / "ix", model="m", dim=16, index_type="auto") as index:
            fill(index, rng, {"a": 100})
            index.save()
            assert isinstance(faiss.downcast_index(index._faiss.index), faiss.IndexFlat)
            fill(index, rng, {"b": 600})
            index.save()
            assert isinstance(faiss.downcast_index(index._faiss.index), faiss.IndexHNSWFlat)
            assert len(index) == 700
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert len(index) == 700 and index.search(unit(rng, 1), 5)[0]
