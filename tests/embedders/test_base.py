"""The embedder role: ``BaseEmbedder``, ``Embedder``'s serialisation, and an embedder of our own in use."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np
import pytest

from contextkit.embedders import BaseEmbedder, Embedder, MemoryCache

TEXTS = ["FAISS searches dense vectors by inner product.", "Knead the dough and let it rise.",
         " ".join(f"topic{i} alpha beta" for i in range(300))]  # longer than the model's window


class HashingEmbedder(BaseEmbedder):
    """Words hashed into ``dim`` buckets: deterministic, no model, and a real embedder to the code using it."""

    def __init__(self, buckets: int = 64) -> None:
        self.buckets = buckets
        self.model_name = f"hashing-{buckets}"
        self.calls: list[list[str]] = []

    @property
    def dim(self) -> int:
        return self.buckets

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(texts)
        out = np.zeros((len(texts), self.buckets), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.buckets] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def _settings(self) -> dict[str, Any]:
        return {"buckets": self.buckets}


@pytest.fixture(scope="module")
def rebuilt(embedder) -> Embedder:
    return Embedder.from_dict(embedder.to_dict())


class TestEmbedder:
    def test_is_a_base_embedder(self, embedder):
        assert isinstance(embedder, BaseEmbedder)

    def test_to_dict_names_the_type_and_the_settings(self, embedder):
        data = embedder.to_dict()
        assert data["type"] == "Embedder" and data["model"] == embedder.model_name
        assert {"long_text", "backend", "precision", "device", "batch_size", "window_overlap"} <= set(data)
        assert "cache" not in data

    def test_round_trip_gives_the_same_vectors(self, embedder, rebuilt):
        assert rebuilt.to_dict() == embedder.to_dict() and rebuilt is not embedder
        assert rebuilt.model is not embedder.model  # a model of its own, loaded from the dict alone
        assert np.allclose(rebuilt.embed(TEXTS), embedder.embed(TEXTS), atol=1e-6)
        assert rebuilt.last_report == embedder.last_report

    def test_every_setting_travels(self, embedder):
        custom = Embedder(long_text="truncate", backend="torch", precision="fp32", device="cpu", batch_size=8,
                          window_overlap=16, tokenizer_workers=1)
        again = Embedder.from_dict(custom.to_dict())
        assert again.to_dict() == custom.to_dict()
        assert (again.long_text, again.backend, again.precision, again.device, again.batch_size) == (
            "truncate", "torch", "fp32", "cpu", 8)
        vectors = again.embed(TEXTS)
        assert again.last_report.coverage < 1.0  # truncated, as asked
        assert np.allclose(vectors, custom.embed(TEXTS), atol=1e-6)

    def test_the_cache_is_given_not_serialised(self, embedder):
        cache = MemoryCache()
        again = Embedder.from_dict(embedder.to_dict(), cache=cache)
        again._model = embedder.model  # the vectors were checked above; here only the cache matters
        again.embed(TEXTS[:2])
        again.embed(TEXTS[:2])
        assert again.cache is cache and again.last_report.cache_hits == 2
        assert again.to_dict() == embedder.to_dict()

    def test_a_foreign_dict_is_refused(self):
        with pytest.raises(ValueError, match="Embedder.from_dict got the settings of a 'HashingEmbedder'"):
            Embedder.from_dict(HashingEmbedder().to_dict())


class TestCustomEmbedder:
    def test_the_base_needs_dim_encode_and_settings(self):
        with pytest.raises(TypeError, match="abstract"):
            BaseEmbedder()  # type: ignore[abstract]

    def test_embed_gives_normalised_rows_and_a_report(self):
        emb = HashingEmbedder()
        vectors = emb.embed(TEXTS)
        assert vectors.shape == (3, 64) and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        assert emb.last_report.texts == 3 and emb.last_report.model_inputs == 3

    def test_the_cache_skips_texts_seen(self):
        emb = HashingEmbedder()
        emb.cache = MemoryCache()
        first = emb.embed(TEXTS[:2])
        done = []
        second = emb.embed(TEXTS, progress=done.append)
        assert emb.calls[-1] == [TEXTS[2]] and emb.last_report.cache_hits == 2 and done == [3]
        assert np.array_equal(second[:2], first)

    def test_round_trip(self):
        emb = HashingEmbedder(32)
        assert emb.to_dict() == {"type": "HashingEmbedder", "buckets": 32}
        again = HashingEmbedder.from_dict(emb.to_dict())
        assert np.array_equal(again.embed(TEXTS), emb.embed(TEXTS))
        assert type(BaseEmbedder.from_dict(emb.to_dict())) is HashingEmbedder  # the base finds the type named
        assert again.cache_key("x") == emb.cache_key("x") != HashingEmbedder(16).cache_key("x")

    def test_ingest_and_dense_retrieval_use_it(self, small_corpus, tmp_path):
        from contextkit.index import Index
        from contextkit.ingestion import ingest
        from contextkit.retrievers import DenseRetriever

        report = ingest([small_corpus], tmp_path / "ix", embedder=HashingEmbedder())
        assert report.ok and report.chunks_added == 3
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert index.manifest.model == "hashing-64" and index.manifest.dim == 64
            retriever = DenseRetriever(index, HashingEmbedder(), k=1)
            hits = retriever.retrieve("knead the dough")
            again = DenseRetriever.from_dict(retriever.to_dict(), index=index)  # the embedder rebuilt by its type
            assert isinstance(again.embedder, HashingEmbedder) and again.retrieve("knead the dough") == hits
        assert hits[0].chunk.doc_id.endswith("cooking.rst")
        again = ingest([small_corpus], tmp_path / "ix", embedder=HashingEmbedder())
        assert again.files_unchanged == 3 and again.chunks_added == 0
