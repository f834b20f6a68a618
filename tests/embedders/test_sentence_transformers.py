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
            _ = Embedder(str(tmp_path / "missing-model")).dim
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

    def test_bulk_calls_take_the_pytorch_pipeline_with_the_same_vectors(self, torch_embedder):
        """``backend="auto"``: queries on ONNX, a call of a model batch or more (ingestion) on the PyTorch
        pipeline, which is as fast there and needs no export; the vectors agree either way."""
        pytest.importorskip("onnxruntime")
        from contextkit.embedders import _onnx

        auto = Embedder(backend="auto")
        exports: list[object] = []
        real = _onnx.OnnxEncoder.__init__

        def counting(self, *a, **k):
            exports.append(1)
            real(self, *a, **k)

        texts = [f"Chunk {i} says FAISS searches dense vectors by inner product." * (1 + i % 5) for i in range(70)]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_onnx.OnnxEncoder, "__init__", counting)
            bulk = auto.embed(texts)
            assert exports == [] and auto._pipeline  # bulk: the pipeline, no ONNX encoder built
            one = auto.embed(texts[:3])
            assert exports == [1] and auto.active_backend == "onnx"  # a small call: ONNX
        assert np.abs(bulk[:3] - one).max() < 1e-5
        assert np.abs(bulk - torch_embedder.embed(texts)).max() < 1e-5

    def test_explicit_onnx_on_gpu_device_is_refused(self):
        with pytest.raises(ValueError, match="CPU"):
            Embedder(backend="onnx", device="cuda")

    def test_unknown_backend_is_refused(self):
        with pytest.raises(ValueError, match="backend"):
            Embedder(backend="tensorrt")  # type: ignore[arg-type]

    def test_export_is_cached_once(self, embedder, tmp_path, monkeypatch):
        pytest.importorskip("onnxruntime")
        from contextkit.embedders._onnx import OnnxEncoder

        monkeypatch.setenv("CONTEXTKIT_CACHE_DIR", str(tmp_path))
        first = OnnxEncoder(embedder.model, embedder._path)
        inode = first.path.stat().st_ino  # an export replaces the file; a use only touches it (LRU pruning)
        second = OnnxEncoder(embedder.model, embedder._path)
        assert second.path == first.path and second.path.stat().st_ino == inode
        assert not list(tmp_path.rglob("*.part"))


class TestPipeline:
    """The PyTorch pipeline (tokeniser workers, length buckets, OOM back-off), run on the CPU."""

    TEXTS = ["a", "  FAISS searches dense vectors.  ", "word " * 40, "long text " * 400, "é 中文 🙂",
             "bread " * 90, "x" * 3000, "short"] * 3

    @pytest.fixture(scope="class")
    @classmethod
    def torch_embedder(cls, embedder):
        emb = Embedder(backend="torch", device="cpu")
        emb._model = embedder.model  # the session's loaded model
        yield emb
        emb.close()

    @pytest.fixture(scope="class")
    @classmethod
    def reference(cls, embedder):
        """The same texts through SentenceTransformer.encode (the pipeline switched off)."""
        plain = Embedder(backend="torch", device="cpu")
        plain._model = embedder.model
        plain._pipeline = False
        vectors = plain.embed(cls.TEXTS)
        return vectors, plain.last_report

    def test_vectors_order_and_report_equal_sentence_transformers(self, torch_embedder, reference):
        want, want_report = reference
        got = torch_embedder.embed(self.TEXTS)
        assert torch_embedder._pipeline_encoder() is not None  # the pipeline ran, not encode()
        assert np.abs(got - want).max() < 1e-5  # same rows in the same (input) order
        assert torch_embedder.last_report == want_report

    def test_the_caller_never_runs_in_inference_mode(self, torch_embedder):
        """Between slices the caller's code (caching vectors, a training loop) runs with torch's modes as it set them."""
        import torch

        enc = torch_embedder._pipeline_encoder()
        slices = 0
        for *_, stats in enc.stream(self.TEXTS, 4, torch_embedder.max_tokens, torch_embedder.window_overlap, False):
            assert not torch.is_inference_mode_enabled() and stats.model_inputs > 0
            slices += 1
        assert slices == -(-len(self.TEXTS) // 4)

    def test_tokenizer_processes_give_the_same_vectors(self, embedder, reference):
        """The spawned tokenizer processes that CUDA uses, run here on the CPU: same rows, same report."""
        from concurrent.futures import ProcessPoolExecutor

        from contextkit.embedders._torch_pipeline import PipelineEncoder

        emb = Embedder(backend="torch", device="cpu", batch_size=4)
        emb._model = embedder.model
        emb._pipeline = PipelineEncoder(embedder.model, "cpu", "fp32", batch_size=4, workers=2, pool="process")
        try:
            assert isinstance(emb._pipeline._pool, ProcessPoolExecutor)  # spawned, not the thread fallback
            got = emb.embed(self.TEXTS)
            assert np.abs(got - reference[0]).max() < 1e-5
            assert emb.last_report == reference[1]
        finally:
            emb.close()

    def test_fp16_within_tolerance_of_fp32(self, embedder, reference):
        emb = Embedder(backend="torch", device="cpu", precision="fp16")
        emb._model = embedder.model
        got = emb.embed(self.TEXTS[:8])
        cosines = np.sum(got * reference[0][:8], axis=1)
        assert cosines.min() >= 0.999
        assert emb.settings()["precision"] == "fp16"

    def test_precision_is_recorded_and_checked(self, embedder, torch_embedder):
        assert torch_embedder.settings()["precision"] == "fp32"  # auto on a CPU
        with pytest.raises(ValueError, match="precision"):
            Embedder(precision="fp8")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="onnx"):
            Embedder(backend="onnx", precision="fp16")

    def test_out_of_memory_halves_the_batch_and_keeps_the_vectors(self, embedder, reference, caplog,
                                                                   monkeypatch):
        import logging

        import torch

        emb = Embedder(backend="torch", device="cpu", batch_size=16)
        emb._model = embedder.model
        auto = embedder.model[0].auto_model
        forward = auto.forward
        sizes = []

        def tight(*args, **kwargs):  # a device that fits at most 3 texts per batch
            n = int((kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0])
            sizes.append(n)
            if n > 3:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return forward(*args, **kwargs)

        monkeypatch.setattr(auto, "forward", tight)
        with caplog.at_level(logging.WARNING, logger="contextkit"):
            got = emb.embed(self.TEXTS)
        assert np.abs(got - reference[0]).max() < 1e-5
        warnings = [r.getMessage() for r in caplog.records if "out of memory" in r.getMessage()]
        assert warnings and "batch of 16" in warnings[0] and "batches of 8" in warnings[0]
        assert emb._pipeline.max_batch == 2  # kept for the rest of the run: no batch above it is tried again
        before = len(sizes)
        emb.embed(self.TEXTS[:6])
        assert max(sizes[before:]) <= 2

    def test_out_of_memory_on_one_text_is_a_clear_error(self, embedder, monkeypatch):
        import torch

        from contextkit.embedders import EmbeddingMemoryError

        emb = Embedder(backend="torch", device="cpu")
        emb._model = embedder.model
        auto = embedder.model[0].auto_model

        def never(*args, **kwargs):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")

        monkeypatch.setattr(auto, "forward", never)
        with pytest.raises(EmbeddingMemoryError, match="single text of"):
            emb.embed(["one text", "another"])

    def test_out_of_memory_on_the_encode_path_backs_off_too(self, embedder, reference, monkeypatch, caplog):
        import logging

        import torch

        emb = Embedder(backend="torch", device="cpu", batch_size=8)
        emb._model = embedder.model
        emb._pipeline = False  # a model the pipeline cannot take goes through SentenceTransformer.encode
        encode = emb._st_encode

        def tight(pieces, batch):
            if batch > 2:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")
            return encode(pieces, batch)

        monkeypatch.setattr(emb, "_st_encode", tight)
        with caplog.at_level(logging.WARNING, logger="contextkit"):
            got = emb.embed(self.TEXTS)
        assert np.abs(got - reference[0]).max() < 1e-5 and emb._fallback_batch == 2
        assert any("batch of 8" in r.getMessage() for r in caplog.records)

    def test_cuda_without_a_gpu_falls_back_to_the_cpu_with_a_warning(self, caplog):
        import logging

        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
        emb = Embedder(device="cuda")
        with caplog.at_level(logging.WARNING, logger="contextkit"):
            assert emb._resolved_device() == "cpu"
        assert any("CUDA is not available" in r.getMessage() for r in caplog.records)
        assert Embedder(device="auto")._resolved_device() == "cpu" and emb.batch_size == 64


class TestSlices:
    """Within one ingestion batch (512 chunks), progress moves and vectors are kept slice by slice,
    so a bar does not sit at zero and Ctrl-C keeps what was embedded (issue 18)."""

    def test_progress_and_cache_every_slice_and_an_interrupt_keeps_them(self, embedder):
        texts = [f"note number {i} about bread" for i in range(3 * embedder.slice_size + 5)]

        class Interrupting(MemoryCache):
            puts = 0

            def put_vectors(self, items):
                super().put_vectors(items)
                self.puts += 1
                if self.puts == 2:
                    raise KeyboardInterrupt

        cache, seen = Interrupting(), []
        saved = embedder.cache
        embedder.cache = cache
        try:
            with pytest.raises(KeyboardInterrupt):
                embedder.embed(texts, progress=seen.append)
        finally:
            embedder.cache = saved
        assert embedder.slice_size <= 128 or embedder.batch_size > 64  # two model batches on a CPU
        assert seen == [embedder.slice_size]  # the first slice reported before the interrupt
        kept = cache.get_vectors([embedder.cache_key(t) for t in texts])
        assert len(kept) == 2 * embedder.slice_size  # both slices embedded before Ctrl-C are kept
