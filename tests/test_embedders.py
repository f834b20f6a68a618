import numpy as np
import pytest

from contextkit.embedders import Embedder, MemoryCache


class TestEmbedder:
    def test_vectors_are_normalised(self, embedder):
        vecs = embedder.embed(["a sentence about vectors", "another about bread"])
        assert vecs.shape == (2, 384) and vecs.dtype == np.float32
        assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)

    def test_short_text_matches_plain_sentence_transformers(self, embedder):
        text = "FAISS searches dense vectors."
        ours = embedder.embed([text])[0]
        theirs = embedder.model.encode([text], normalize_embeddings=True)[0]
        assert np.allclose(ours, theirs, atol=1e-5)

    def test_long_text_is_windowed_never_truncated(self, embedder):
        words = " ".join(f"topic{i} alpha beta" for i in range(400))
        vec = embedder.embed([words])
        report = embedder.last_report
        assert report.windowed_texts == 1 and report.model_inputs > 1
        assert report.tokens_seen == report.tokens_total > embedder.max_tokens
        assert report.coverage == 1.0
        assert np.isclose(np.linalg.norm(vec[0]), 1.0, atol=1e-5)
        # every window fits the model: re-tokenise the window texts the model was given
        from contextkit.embedders import EmbeddingReport

        pieces, owner, _ = embedder._windows([words], EmbeddingReport())
        lengths = [len(x) for x in embedder.model.tokenizer(pieces, add_special_tokens=False)["input_ids"]]
        assert max(lengths) <= embedder.max_tokens
        # the windows together cover the text from its first word to its last
        assert words.startswith(pieces[0]) and words.endswith(pieces[-1])

    def test_truncate_mode_reports_lost_tokens(self, embedder):
        trunc = Embedder(long_text="truncate")
        trunc._model = embedder.model  # same loaded model, other policy
        trunc.embed(["word " * 1000])
        assert trunc.last_report.coverage < 0.3

    def test_cache_avoids_model_calls(self, embedder):
        cached = Embedder(cache=MemoryCache())
        cached._model = embedder.model
        first = cached.embed(["one text", "two text"])
        second = cached.embed(["two text", "one text", "three"])
        assert cached.last_report.cache_hits == 2 and cached.last_report.model_inputs == 1
        assert np.allclose(second[0], first[1]) and np.allclose(second[1], first[0])

    def test_cache_key_depends_on_model_and_text(self, embedder):
        other = Embedder("some/other-model")
        other._max_tokens = embedder.max_tokens
        assert embedder.cache_key("x") != embedder.cache_key("y")
        assert embedder.cache_key("x") != other.cache_key("x")

    def test_unknown_model_fails_clearly(self, tmp_path):
        with pytest.raises(Exception) as info:
            Embedder(str(tmp_path / "missing-model")).dim
        assert "missing-model" in str(info.value)


class TestOnnxBackend:
    """The ONNX Runtime path must give PyTorch's vectors, only faster."""

    @pytest.fixture(scope="class")
    def torch_embedder(self):
        return Embedder(backend="torch")

    def test_auto_picks_onnx_on_cpu_when_installed(self, embedder):
        pytest.importorskip("onnxruntime")
        assert embedder.active_backend == "onnx"

    def test_vectors_equal_pytorch(self, embedder, torch_embedder):
        pytest.importorskip("onnxruntime")
        texts = ["a", "FAISS searches dense vectors.", "word " * 40, "long text " * 400, "é 中文 🙂"]
        got, want = embedder.embed(texts), torch_embedder.embed(texts)
        assert np.abs(got - want).max() < 1e-5
        assert embedder.last_report.windowed_texts == 1  # windowing happens before the backend

    def test_explicit_onnx_on_gpu_device_is_refused(self):
        with pytest.raises(ValueError, match="CPU"):
            Embedder(backend="onnx", device="cuda")

    def test_unknown_backend_is_refused(self):
        with pytest.raises(ValueError, match="backend"):
            Embedder(backend="tensorrt")  # type: ignore[arg-type]

    def test_export_is_cached_once(self, embedder, tmp_path, monkeypatch):
        pytest.importorskip("onnxruntime")
        from contextkit._onnx import OnnxEncoder

        monkeypatch.setenv("CONTEXTKIT_CACHE_DIR", str(tmp_path))
        first = OnnxEncoder(embedder.model, embedder._path)
        mtime = first.path.stat().st_mtime_ns
        second = OnnxEncoder(embedder.model, embedder._path)
        assert second.path == first.path and second.path.stat().st_mtime_ns == mtime
        assert not list(tmp_path.rglob("*.part"))
