from types import SimpleNamespace

import pytest

import contextkit.retrievers as retrievers
from contextkit.retrievers import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    RetrievalError,
    embedder_for,
    make_retriever,
)

QUERY = "how long should bread dough rise"


def _hits(retriever):
    return [(h.chunk.id, round(h.score, 6)) for h in retriever.retrieve(QUERY, k=3)]


class TestMakeRetriever:
    @pytest.mark.parametrize("mode, cls", [("dense", DenseRetriever), ("bm25", BM25Retriever),
                                           ("hybrid", HybridRetriever)])
    def test_each_mode_is_its_class_with_the_same_hits(self, index, embedder, mode, cls):
        made = make_retriever(mode, index, embedder)
        by_hand = BM25Retriever(index) if cls is BM25Retriever else cls(index, embedder)
        assert type(made) is cls
        assert _hits(made) == _hits(by_hand)

    def test_options_reach_the_retriever(self, index, embedder):
        made = make_retriever("hybrid", index, embedder, fusion="rrf", rrf_k=10, min_score=0.0)
        assert (made.fusion, made.rrf_k) == ("rrf", 10)
        assert _hits(made) == _hits(HybridRetriever(index, embedder, fusion="rrf", rrf_k=10, min_score=0.0))

    def test_bm25_needs_no_embedder(self, index):
        assert not hasattr(make_retriever("bm25", index), "embedder")

    def test_unknown_mode_names_the_valid_ones(self, index, embedder):
        with pytest.raises(RetrievalError, match="dense, bm25 or hybrid, not 'sparse'"):
            make_retriever("sparse", index, embedder)

    def test_exported(self):
        assert {"make_retriever", "embedder_for"} <= set(retrievers.__all__)


class TestEmbedderFor:
    @staticmethod
    def _index(long_text=None):
        recorded = {} if long_text is None else {"long_text": long_text}
        return SimpleNamespace(manifest=SimpleNamespace(model="org/some-model", embedder=recorded))

    def test_the_index_model_and_its_recorded_settings(self):
        built = embedder_for(self._index("truncate"), device="cpu", batch_size=8)
        assert (built.model_name, built.long_text, built.device, built._batch_size) == (
            "org/some-model", "truncate", "cpu", 8)

    def test_windows_when_nothing_was_recorded(self):
        assert embedder_for(self._index()).long_text == "window"

    def test_shared_is_one_model_per_setting(self):
        index = self._index("window")
        assert embedder_for(index, shared=True) is embedder_for(index, shared=True)
        assert embedder_for(index) is not embedder_for(index)

    def test_a_real_index(self, index, embedder):
        built = embedder_for(index)
        assert built.model_name == index.manifest.model == embedder.model_name
        assert built.long_text == index.manifest.embedder.get("long_text", "window")
