"""Retrievers to a dict and back: the same hits from the dict alone, on a real index (FAISS, BM25, the model)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from contextkit.records import ScoredChunk
from contextkit.retrievers import (
    BM25Retriever,
    DenseRetriever,
    Filters,
    HybridRetriever,
    Reranker,
    Retriever,
)

QUERIES = ["how long should bread dough rise", "vectors by inner product", "cook pasta in salted water"]


class ShortestFirst(Reranker):
    """A reranker of our own: shorter chunks first, above ``floor`` characters."""

    def __init__(self, floor: int = 0) -> None:
        self.floor = floor

    def rerank(self, query: str, hits: list[ScoredChunk]) -> list[ScoredChunk]:
        kept = [h for h in hits if len(h.chunk.text) >= self.floor]
        return [ScoredChunk(h.chunk, -float(len(h.chunk.text))) for h in sorted(kept, key=lambda h: len(h.chunk.text))]

    def _settings(self) -> dict[str, Any]:
        return {"floor": self.floor}


class WordRetriever(Retriever):
    """A retriever of our own: chunks scored by how many query words they contain."""

    def __init__(self, index: Any, *, lowercase: bool = True, **options: Any) -> None:
        super().__init__(index, **options)
        self.lowercase = lowercase

    def _candidates(self, query: str, n: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        rowids = self.index.store.rowids_where("1", []) if allowed is None else allowed
        chunks = self.index.store.chunks_by_rowid(int(r) for r in rowids)
        fold = str.lower if self.lowercase else str
        words = set(fold(query).split())
        scored = [(r, float(len(words & set(fold(c.text).replace(".", " ").split())))) for r, c in chunks.items()]
        return sorted((s for s in scored if s[1] > 0), key=lambda s: (-s[1], s[0]))[:n]

    def _settings(self) -> dict[str, Any]:
        return {**super()._settings(), "lowercase": self.lowercase}


def hits_of(retriever: Retriever) -> list[list[tuple[str, float]]]:
    return [[(h.chunk.id, round(h.score, 6)) for h in retriever.retrieve(q)] for q in QUERIES]


def round_trip(retriever: Retriever, **given: Any) -> Retriever:
    data = json.loads(json.dumps(retriever.to_dict()))  # plain JSON: it can be stored or sent
    again = type(retriever).from_dict(data, **given)
    assert again.to_dict() == retriever.to_dict()
    return again


class TestDenseRetriever:
    def test_to_dict(self, index, embedder):
        data = DenseRetriever(index, embedder, k=3, mmr=0.7).to_dict()
        assert data["type"] == "DenseRetriever" and data["index"] == str(index.path)
        assert data["k"] == 3 and data["mmr"] == 0.7 and data["embedder"] == embedder.to_dict()

    def test_round_trip_opens_the_index_and_the_model(self, index, embedder):
        retriever = DenseRetriever(index, embedder, k=3)
        again = round_trip(retriever)
        try:
            assert again.index is not index and again.embedder is not embedder
            assert hits_of(again) == hits_of(retriever)
        finally:
            again.index.close()

    def test_given_index_and_embedder_are_used(self, index, embedder):
        retriever = DenseRetriever(index, embedder, k=2, min_score=0.1)
        again = round_trip(retriever, index=index, embedder=embedder)
        assert again.index is index and again.embedder is embedder
        assert hits_of(again) == hits_of(retriever)

    def test_a_call_still_overrides_the_constructor(self, index, embedder):
        retriever = DenseRetriever(index, embedder, k=1, filters={"source_glob": "*bread*"})
        hits = retriever.retrieve(QUERIES[1])  # the constructor's k and filters
        assert len(hits) == 1 and hits[0].chunk.doc_id.endswith("bread.txt")
        assert len(retriever.retrieve(QUERIES[1], k=5, filters=Filters())) == 5  # the call's


class TestBM25Retriever:
    def test_to_dict_has_no_embedder(self, index):
        data = BM25Retriever(index).to_dict()
        assert data["type"] == "BM25Retriever" and "embedder" not in data and data["reranker"] is None

    def test_round_trip_keeps_k_and_filters(self, index):
        retriever = BM25Retriever(index, k=2, filters=Filters(source_glob="*guide/*"))
        again = round_trip(retriever, index=index)
        assert again.filters == retriever.filters and again.k == 2
        assert hits_of(again) == hits_of(retriever)
        hits = again.retrieve("frequency vectors inner product")
        assert hits and all("/guide/" in h.chunk.doc_id for h in hits)

    def test_a_foreign_dict_is_refused(self, index, embedder):
        with pytest.raises(ValueError, match="BM25Retriever.from_dict got the settings of a 'DenseRetriever'"):
            BM25Retriever.from_dict(DenseRetriever(index, embedder).to_dict(), index=index)


class TestRetriever:
    @pytest.mark.parametrize("kind", [DenseRetriever, BM25Retriever, HybridRetriever])
    def test_the_base_rebuilds_the_type_named(self, index, embedder, kind):
        retriever = kind(index) if kind is BM25Retriever else kind(index, embedder)
        again = Retriever.from_dict(retriever.to_dict(), index=index, embedder=embedder)
        assert type(again) is kind and hits_of(again) == hits_of(retriever)


class TestHybridRetriever:
    def test_fusion_settings_travel(self, index, embedder):
        retriever = HybridRetriever(index, embedder, fusion="rrf", rrf_k=10, dense_weight=0.3, bm25_weight=0.7,
                                    depth=20, k=4)
        data = retriever.to_dict()
        assert data["type"] == "HybridRetriever"
        assert (data["fusion"], data["rrf_k"], data["dense_weight"], data["bm25_weight"], data["depth"]) == (
            "rrf", 10, 0.3, 0.7, 20)
        again = round_trip(retriever, index=index)
        assert again.fusion == "rrf" and again.weights == [0.3, 0.7] and again.depth == 20
        assert hits_of(again) == hits_of(retriever)

    def test_round_trip_with_its_own_index_and_model(self, index, embedder):
        retriever = HybridRetriever(index, embedder)
        again = round_trip(retriever)
        try:
            assert hits_of(again) == hits_of(retriever)
        finally:
            again.index.close()


class TestReranker:
    def test_a_reranker_travels_by_its_type(self, index, embedder):
        retriever = DenseRetriever(index, embedder, k=3, reranker=ShortestFirst(floor=10))
        assert retriever.to_dict()["reranker"] == {"type": "ShortestFirst", "floor": 10}
        again = round_trip(retriever, index=index, embedder=embedder)
        assert isinstance(again.reranker, ShortestFirst) and again.reranker.floor == 10
        assert hits_of(again) == hits_of(retriever)

    def test_an_unknown_reranker_type_is_refused(self):
        with pytest.raises(ValueError, match="Reranker.from_dict got the settings of a 'Nope'"):
            Reranker.from_dict({"type": "Nope"})


class TestCustomRetriever:
    def test_the_base_options_apply_to_it(self, index):
        retriever = WordRetriever(index, k=2)
        hits = retriever.retrieve("the dough and the bread")
        assert hits[0].chunk.doc_id.endswith("bread.txt") and len(hits) == 2
        only_pasta = retriever.retrieve("the cake", filters={"source_glob": "*pasta*"})
        assert [h.chunk.doc_id.rsplit("/", 1)[-1] for h in only_pasta] == ["pasta.txt"]
        assert all(h.score >= 3 for h in retriever.retrieve("the dough and the bread", min_score=3))

    def test_round_trip(self, index):
        retriever = WordRetriever(index, lowercase=False, k=3, reranker=ShortestFirst())
        data = retriever.to_dict()
        assert data["type"] == "WordRetriever" and data["lowercase"] is False
        again = round_trip(retriever)
        try:
            assert hits_of(again) == hits_of(retriever)
        finally:
            again.index.close()

    def test_the_assembler_uses_it(self, index):
        from contextkit import ContextAssembler

        result = ContextAssembler(2000, retriever=WordRetriever(index)).assemble("how long does the bread rise")
        assert "Knead the dough" in result.prompt
