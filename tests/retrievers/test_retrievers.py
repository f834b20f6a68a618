import json

import numpy as np
import pytest

from contextkit.index import Index
from contextkit.ingestion import ingest
from contextkit.retrievers import (
    BM25Retriever,
    DenseRetriever,
    Filters,
    HybridRetriever,
    RetrievalError,
    mmr_select,
    rrf_fuse,
    weighted_fuse,
)


class TestFusion:
    def test_rrf_by_hand(self):
        fused = rrf_fuse([[(1, 0.9), (2, 0.8)], [(2, 5.0), (3, 4.0)]], [1.0, 1.0], k=60)
        assert [r for r, _ in fused] == [2, 1, 3]
        assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
        assert fused[1][1] == pytest.approx(1 / 61)

    def test_weights_shift_rrf(self):
        fused = rrf_fuse([[(1, 0.9)], [(2, 5.0)]], [1.0, 3.0], k=60)
        assert fused[0][0] == 2

    def test_weighted_fusion_normalises_each_run(self):
        fused = weighted_fuse([[(1, 0.9), (2, 0.1)], [(2, 100.0), (3, 0.0)]], [1.0, 1.0])
        assert dict(fused) == pytest.approx({1: 1.0, 2: 1.0, 3: 0.0})


class TestMMR:
    def test_lambda_one_is_relevance_order(self):
        rng = np.random.default_rng(0)
        vecs = rng.standard_normal((20, 8)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        q = vecs[0]
        assert mmr_select(q, vecs, 5, lambda_=1.0) == list(np.argsort(-(vecs @ q))[:5])

    def test_diversity_skips_near_duplicates(self):
        a = np.array([1.0, 0.0, 0.0], dtype=np.float32)
        dup = np.array([0.999, 0.0447, 0.0], dtype=np.float32)
        other = np.array([0.6, 0.0, 0.8], dtype=np.float32)
        vecs = np.stack([a, dup / np.linalg.norm(dup), other])
        q = np.array([0.9, 0.0, 0.436], dtype=np.float32)
        q /= np.linalg.norm(q)
        assert mmr_select(q, vecs, 2, lambda_=1.0) == [0, 1]  # by relevance: the near-duplicate is second
        assert mmr_select(q, vecs, 2, lambda_=0.3) == [0, 2]  # with diversity: the different one is


class TestRetrievers:
    def test_each_mode_finds_the_obvious_document(self, corpus_index, embedder):
        index, _ = corpus_index
        for retriever in (DenseRetriever(index, embedder), BM25Retriever(index), HybridRetriever(index, embedder)):
            hits = retriever.retrieve("how long should bread dough rise", k=3)
            assert hits[0].chunk.doc_id.endswith("bread.txt"), type(retriever).__name__
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    def test_dense_matches_brute_force(self, corpus_index, embedder):
        index, _ = corpus_index
        q = embedder.embed(["cooking pasta"])[0]
        rowids = index.store.rowids_where("1", [])
        exact = index.store.vectors_by_rowid(rowids) @ q
        hits = DenseRetriever(index, embedder).retrieve("cooking pasta", k=5)
        assert [h.score for h in hits] == pytest.approx(sorted(exact, reverse=True), abs=1e-5)

    def test_filters(self, corpus_index, embedder):
        index, folder = corpus_index
        dense = DenseRetriever(index, embedder)
        hits = dense.retrieve("bread", k=5, filters=Filters(source_glob="*guide/*"))
        assert len(hits) == 2 and all("/guide/" in h.chunk.doc_id for h in hits)  # k honoured inside the filter
        only = f"{folder.name}/cake.txt"
        assert [h.chunk.doc_id for h in BM25Retriever(index).retrieve("bread", 5, {"doc_ids": [only]})] == []
        assert [h.chunk.doc_id for h in dense.retrieve("bread", 5, {"doc_ids": [only]})] == [only]
        hits = HybridRetriever(index, embedder).retrieve("bread", 5, Filters(metadata={"format": "markdown"}))
        assert {h.chunk.metadata["format"] for h in hits} == {"markdown"}
        assert dense.retrieve("bread", 5, Filters(metadata={"format": "pdf"})) == []

    def test_unknown_filter_field_is_a_clear_error(self, corpus_index, embedder):
        index, _ = corpus_index
        with pytest.raises(RetrievalError, match="unknown filter field.*colour.*format"):
            BM25Retriever(index).retrieve("bread", 3, Filters(metadata={"colour": "red"}))

    def test_cli_style_filters(self):
        f = Filters.parse(["source=docs/*.md", "doc_id=a", "doc_id=b", "year=2020", "draft=false", "lang=en"])
        assert f.source_glob == "docs/*.md" and f.doc_ids == ["a", "b"]
        assert f.metadata == {"year": 2020, "draft": False, "lang": "en"}
        with pytest.raises(RetrievalError, match="key=value"):
            Filters.parse(["nonsense"])

    @pytest.mark.parametrize("query,k", [("", 3), ("   ", 3), ("bread", 0), ("bread", -1)])
    def test_bad_requests(self, corpus_index, query, k):
        index, _ = corpus_index
        with pytest.raises(RetrievalError):
            BM25Retriever(index).retrieve(query, k)

    def test_min_score_and_mmr(self, corpus_index, embedder):
        index, _ = corpus_index
        dense = DenseRetriever(index, embedder)
        all_hits = dense.retrieve("baking", k=5)
        cut = all_hits[2].score
        assert all(h.score >= cut for h in dense.retrieve("baking", k=5, min_score=cut))
        diverse = dense.retrieve("baking", k=3, mmr=0.3)
        assert len({h.chunk.id for h in diverse}) == 3

    def test_long_query_is_windowed_not_truncated(self, corpus_index, embedder):
        index, _ = corpus_index
        query = "unrelated words " * 300 + " knead the bread dough"
        DenseRetriever(index, embedder).retrieve(query, k=1)
        assert embedder.last_report.windowed_texts == 1 and embedder.last_report.coverage == 1.0


class TestBM25Consistency:
    def ids(self, index):
        faiss_ids = set(int(i) for i in index.store.rowids_where("1", []))
        return faiss_ids, set(index.bm25.rowids.tolist())

    def test_bm25_follows_every_change(self, tmp_path, embedder):
        folder = tmp_path / "docs"
        folder.mkdir()
        for i in range(4):
            (folder / f"d{i}.txt").write_text(f"document number {i} talks about topic{i}\n", encoding="utf-8")
        ix = tmp_path / "ix"
        ingest([folder], ix, embedder=embedder)
        (folder / "d1.txt").write_text("rewritten: now about zebras\n", encoding="utf-8")
        (folder / "d2.txt").unlink()
        ingest([folder], ix, embedder=embedder, prune=True)
        with Index.open(ix, read_only=True) as index:
            store_ids, bm25_ids = self.ids(index)
            assert store_ids == bm25_ids and len(store_ids) == len(index) == 3
            assert [h.chunk.doc_id for h in BM25Retriever(index).retrieve("zebras", 3)] == [f"{folder.name}/d1.txt"]
            assert BM25Retriever(index).retrieve("topic2", 3) == []
            meta = json.loads((ix / index.manifest.file("bm25/meta.json")).read_text())
            assert meta["generation"] == index.store.generation()

    def test_lagging_bm25_folder_is_rebuilt(self, tmp_path, embedder):
        folder = tmp_path / "docs"
        folder.mkdir()
        (folder / "a.txt").write_text("alpha bravo\n", encoding="utf-8")
        ix = tmp_path / "ix"
        ingest([folder], ix, embedder=embedder)
        import shutil

        def bm25_folder() -> str:  # named by its generation in the manifest
            return json.loads((ix / "manifest.json").read_text())["files"]["bm25"]

        stale = tmp_path / "stale-bm25"
        shutil.copytree(ix / bm25_folder(), stale)
        (folder / "b.txt").write_text("charlie delta\n", encoding="utf-8")
        ingest([folder], ix, embedder=embedder)
        shutil.rmtree(ix / bm25_folder())
        shutil.copytree(stale, ix / bm25_folder())  # as if a crash hit between the store commit and the BM25 save
        with Index.open(ix, read_only=True) as index:
            assert [h.chunk.doc_id for h in BM25Retriever(index).retrieve("charlie", 3)] == [f"{folder.name}/b.txt"]
            store_ids, bm25_ids = self.ids(index)
            assert store_ids == bm25_ids


@pytest.fixture(scope="module")
def reranker(embedder):
    import torch

    from contextkit.retrievers import CrossEncoderReranker

    torch.manual_seed(0)
    rr = CrossEncoderReranker(embedder._path, device="cpu")
    rr.rerank("warm", [])  # nothing to score: the model is not even loaded
    assert rr._model is None
    return rr


class TestCrossEncoderReranker:
    """A real sentence-transformers CrossEncoder built from the offline MiniLM weights.

    No trained cross-encoder ships offline, so its head is freshly initialised (seeded):
    the scores mean nothing, but the plumbing (pairs, batching, order, k) is real.
    """

    def test_reorders_by_the_models_own_scores(self, reranker, corpus_index, embedder):
        hits = DenseRetriever(corpus_index[0], embedder).retrieve("vector search", 3)
        reranked = reranker.rerank("vector search", hits)
        want = reranker._model.predict([("vector search", h.chunk.text) for h in hits])
        assert sorted(h.chunk.id for h in reranked) == sorted(h.chunk.id for h in hits)
        assert [h.score for h in reranked] == pytest.approx(sorted(map(float, want), reverse=True), abs=1e-5)

    def test_retriever_reranks_a_wider_pool_then_cuts_to_k(self, reranker, corpus_index, embedder):
        index, _ = corpus_index
        plain = DenseRetriever(index, embedder).retrieve("bread dough", 4)
        hits = DenseRetriever(index, embedder, reranker=reranker, candidates=4).retrieve("bread dough", 2)
        assert len(hits) == 2
        assert {h.chunk.id for h in hits} <= {h.chunk.id for h in plain}
        assert hits[0].score >= hits[1].score
