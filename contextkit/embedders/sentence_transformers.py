"""``Embedder``: sentence-transformers with no silent truncation and a cache.

all-MiniLM-L6-v2 reads at most 256 word pieces; sentence-transformers drops the
rest without a word. We never do: a text longer than the model's window is
embedded as overlapping windows whose vectors are averaged (weighted by their
length), and :class:`EmbeddingReport` says how many tokens the model saw.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from contextkit.core.errors import (
    EmbeddingMemoryError,
    InvalidArgumentError,
    ModelNotFoundError,
)
from contextkit.embedders.base import (
    DEFAULT_MODEL,
    BaseEmbedder,
    EmbeddingCache,
    EmbeddingReport,
    default_model_path,
    window_pieces,
)

__all__ = ["Embedder"]

log = logging.getLogger(__name__)


class Embedder(BaseEmbedder):
    """Embed texts with a sentence-transformers model.

    ``model`` is any sentence-transformers name or path; ``"default"`` is
    all-MiniLM-L6-v2 (from the offline package when installed). ``long_text``
    is ``"window"`` (overlapping windows, mean-fused; the default) or
    ``"truncate"`` (the model's own behaviour, reported as lost coverage).
    ``backend`` is ``"torch"``, ``"onnx"`` (ONNX Runtime, CPU only; needs
    ``contextkit[onnx]``) or ``"auto"``: ONNX on a CPU when it is installed and
    the model allows it, since it embeds one query several times faster with the same
    vectors (to 1e-6; ``python bench/bench_retrieval.py latency``); PyTorch otherwise. With ``"auto"``, a call of at least one
    model batch of texts (ingestion) runs the PyTorch pipeline below even where
    ONNX is installed: in bulk it is as fast or faster (2 cores, 282 PEP windows:
    0.98-1.00 of ``SentenceTransformer.encode`` against 0.79 for ONNX in slices of
    128 texts), and it needs no ONNX export. The vectors agree either way.

    On PyTorch, models made of a Transformer and mean/CLS pooling run through
    :class:`contextkit.embedders._torch_pipeline.PipelineEncoder`: tokenisation by
    ``tokenizer_workers`` workers in parallel with the model (processes on CUDA,
    one thread on a CPU), length-bucketed batches, pinned memory and non-blocking
    copies on CUDA. ``precision`` is ``"fp16"`` (autocast; cosine >= 0.999 with the
    fp32 vectors), ``"fp32"``, or ``"auto"``: fp16 on CUDA, fp32 elsewhere.
    ``device`` is ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``/``"cuda:N"``
    (falls back to the CPU with a warning when CUDA is not available) or any torch
    device. ``batch_size`` defaults to 512 on CUDA and 64 elsewhere. A batch that
    runs out of memory is halved and retried (kept for the rest of the run, with a
    warning); one text that does not fit raises :class:`EmbeddingMemoryError`.

    ``Embedder.from_dict(e.to_dict())`` embeds alike: :meth:`to_dict` holds every
    constructor value but the cache (pass ``cache=`` to :meth:`from_dict`).
    """

    def __init__(
        self,
        model: str = "default",
        device: str = "auto",
        batch_size: int | None = None,
        window_overlap: int = 32,
        long_text: Literal["window", "truncate"] = "window",
        cache: EmbeddingCache | None = None,
        backend: Literal["auto", "torch", "onnx"] = "auto",
        precision: Literal["auto", "fp32", "fp16"] = "auto",
        tokenizer_workers: int | None = None,
    ) -> None:
        if backend not in ("auto", "torch", "onnx"):
            raise InvalidArgumentError(f"backend must be 'auto', 'torch' or 'onnx', not {backend!r}")
        if precision not in ("auto", "fp32", "fp16"):
            raise InvalidArgumentError(f"precision must be 'auto', 'fp32' or 'fp16', not {precision!r}")
        if backend == "onnx" and precision == "fp16":
            raise InvalidArgumentError("backend='onnx' runs in fp32; use precision='auto' or 'fp32', or backend='torch'")
        if batch_size is not None and batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be at least 1, not {batch_size}")
        if backend == "onnx" and device not in ("auto", "cpu"):
            raise InvalidArgumentError("backend='onnx' runs on the CPU; use device='cpu' or backend='torch'")
        self.model_name = DEFAULT_MODEL if model == "default" else model
        self._path = default_model_path() if model in ("default", DEFAULT_MODEL) else model
        self.device = device
        self._batch_size = batch_size
        self.precision = precision
        self.tokenizer_workers = tokenizer_workers
        self._device: str | None = None
        self._pipeline: Any = None  # a PipelineEncoder, or False when the model cannot take that path
        self._fallback_batch: int | None = None  # lowered by out-of-memory errors on the encode()/ONNX path
        self.window_overlap = window_overlap
        self.long_text = long_text
        self.cache = cache
        self.backend = backend
        self._model: Any = None
        self._onnx: Any = None  # an OnnxEncoder, or False once PyTorch was chosen
        self._max_tokens: int | None = None
        self.report = EmbeddingReport()
        self.last_report = EmbeddingReport()

    # ----------------------------------------------------------- the model
    @classmethod
    def for_index(cls, index: Any, device: str = "auto", batch_size: int | None = None) -> Embedder:
        """The model ``index`` was built with, embedding the way its manifest recorded (``long_text``).

        Query vectors only compare with the index's when the same model embeds them the same way,
        so the model is never a choice here; ``device`` and ``batch_size`` only change speed.
        ``index`` is anything with a ``manifest`` (an :class:`~contextkit.index.Index`, a shard).
        """
        manifest = index.manifest
        return cls(manifest.model, device=device, batch_size=batch_size,
                   long_text=manifest.embedder.get("long_text", "window"))

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = self._load()
        return self._model

    def _load(self) -> Any:
        """The sentence-transformers model; a name that cannot be loaded is one
        :class:`~contextkit.errors.ModelNotFoundError`, found before any download is tried where
        possible (a typo or an LLM name used to cost minutes of Hub retries and a traceback)."""
        from contextkit.embedders._hub import hub_problem, quiet_hub

        if Path(self._path).is_dir():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder needs no hub
        else:
            problem = hub_problem(self._path)
            if problem is not None:
                raise ModelNotFoundError(f"embedding model {self._path!r} cannot be loaded: {problem}")
        from sentence_transformers import SentenceTransformer

        device = self._resolved_device()
        log.info("loading embedding model %s on %s", self._path, device)
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # the library logs; only the CLI draws bars
        except ImportError:  # pragma: no cover
            pass
        try:
            with quiet_hub():
                return SentenceTransformer(self._path, device=device)
        except (OSError, ValueError) as exc:  # hub errors are OSErrors (HTTP) or ValueErrors (a bad name)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ModelNotFoundError(f"embedding model {self._path!r} cannot be loaded: {first}") from None

    def _resolved_device(self) -> str:
        """``auto``: CUDA when available, else the CPU; ``cuda`` without CUDA: the CPU, with a warning."""
        if self._device is None:
            import torch

            device = self.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            elif device.startswith("cuda") and not torch.cuda.is_available():
                log.warning("device=%r: CUDA is not available on this machine (torch %s); embedding on the CPU",
                            device, torch.__version__)
                device = "cpu"
            self._device = device
        return self._device

    @property
    def batch_size(self) -> int:
        """Texts per model batch: as given, else 512 on CUDA and 64 elsewhere."""
        if self._batch_size is not None:
            return self._batch_size
        return 512 if self._resolved_device().startswith("cuda") else 64

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self._batch_size = value

    @property
    def active_precision(self) -> str:
        """``"fp16"`` or ``"fp32"``: ``precision`` with ``auto`` resolved (fp16 on CUDA only)."""
        if self.active_backend == "onnx":
            return "fp32"
        if self.precision != "auto":
            return self.precision
        return "fp16" if self._resolved_device().startswith("cuda") else "fp32"

    @property
    def active_backend(self) -> str:
        """The backend in use: ``"onnx"`` or ``"torch"`` (decided on first use)."""
        return "onnx" if self._onnx_encoder() is not None else "torch"

    def _onnx_encoder(self) -> Any:
        if self._onnx is None:
            self._onnx = self._make_onnx() or False
        return self._onnx or None

    def _make_onnx(self) -> Any:
        if self.backend == "torch":
            return None
        from contextkit.embedders._onnx import OnnxEncoder, onnx_available

        if self._resolved_device() != "cpu":
            if self.backend == "onnx":
                raise InvalidArgumentError("backend='onnx' runs on the CPU, and this machine has a GPU: use backend='torch'")
            return None
        if not onnx_available():
            if self.backend == "onnx":
                raise ImportError("backend='onnx' needs onnxruntime and onnx: pip install 'contextkit[onnx]'")
            return None
        try:
            return OnnxEncoder(self.model, self._path)
        except Exception as exc:  # any export failure keeps PyTorch, which is exact
            if self.backend == "onnx":
                raise RuntimeError(f"could not run {self.model_name} on ONNX Runtime: {exc}") from exc
            log.warning("ONNX path unavailable for %s (%s); using PyTorch", self.model_name, exc)
            return None

    @property
    def dim(self) -> int:
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(get_dim())

    @property
    def max_tokens(self) -> int:
        """Word pieces the model reads per input, special tokens excluded."""
        if self._max_tokens is None:
            tok = self.model.tokenizer
            n_special = len(tok("", add_special_tokens=True)["input_ids"]) - len(tok("", add_special_tokens=False)["input_ids"])
            self._max_tokens = int(self.model.max_seq_length) - n_special
        return self._max_tokens

    def _settings(self) -> dict[str, Any]:
        return {"model": self.model_name, "device": self.device, "batch_size": self._batch_size,
                "window_overlap": self.window_overlap, "long_text": self.long_text, "backend": self.backend,
                "precision": self.precision, "tokenizer_workers": self.tokenizer_workers}

    def settings(self) -> dict[str, Any]:
        """What an index must record to reuse these vectors."""
        return {"model": self.model_name, "dim": self.dim, "max_tokens": self.max_tokens, "long_text": self.long_text,
                "precision": self.active_precision}

    def cache_key(self, text: str) -> str:
        h = hashlib.sha256()
        h.update(f"{self.model_name}\0{self.max_tokens}\0{self.long_text}\0".encode())
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    # ---------------------------------------------------------- embedding
    def embed(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None,
        keys: Sequence[str] | None = None,
    ) -> Any:
        """Normalised float32 vectors, one row per text.

        ``progress`` is called with the number of texts finished as batches complete;
        ``keys`` are the texts' :meth:`cache_key` values when the caller has them.
        """
        texts = list(texts)
        if self.cache is not None and keys is None:
            keys = [self.cache_key(t) for t in texts]
        out, todo = self._from_cache(len(texts), keys)
        report = EmbeddingReport(texts=len(texts), cache_hits=len(texts) - len(todo))
        if report.cache_hits and progress:
            progress(report.cache_hits)
        # Slices, each cached as soon as it is embedded: a crash or Ctrl-C mid-way through a
        # batch loses at most one slice of model work, and progress moves once per slice.
        step = self.slice_size
        for lo, hi, vectors in self._embed_slices([texts[i] for i in todo], step, report):
            part = todo[lo:hi]
            out[part] = vectors
            if self.cache is not None:
                assert keys is not None  # computed above whenever there is a cache
                self.cache.put_vectors({keys[i]: vectors[j] for j, i in enumerate(part)})
            if progress:
                progress(len(part))
        self.report.add(report)
        self.last_report = report
        return out

    @property
    def slice_size(self) -> int:
        """Texts embedded, cached (committed to an index store) and reported to ``progress`` at a time.

        Two model batches (128 texts on a CPU, 1,024 on CUDA; seconds each on a small CPU): small enough
        that a progress bar moves within an ingestion batch and Ctrl-C keeps nearly all the
        vectors made (the next run finds them in the cache), large enough to keep the pipeline full."""
        return max(self.batch_size * 2, 128)

    def _encode(self, texts: list[str]) -> Any:
        """The vectors of ``texts`` with no cache and no report (what :meth:`embed` runs per slice)."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for lo, hi, vectors in self._embed_slices(list(texts), self.slice_size, EmbeddingReport()):
            out[lo:hi] = vectors
        return out

    def close(self) -> None:
        """Stop the tokenizer workers of the PyTorch pipeline, if any (also done at garbage collection)."""
        if self._pipeline:
            self._pipeline.close()
        self._pipeline = None

    def _embed_slices(self, texts: list[str], step: int, report: EmbeddingReport) -> Iterator[tuple[int, int, Any]]:
        """``(lo, hi, vectors)`` for consecutive slices of ``texts``: the pipeline, else one slice at a time."""
        pipeline = self._pipeline_encoder(bulk=len(texts) >= self.batch_size)
        if pipeline is None:
            for lo in range(0, len(texts), step):
                yield lo, min(lo + step, len(texts)), self._embed_uncached(texts[lo : lo + step], report)
            return
        truncate = self.long_text == "truncate"
        for lo, hi, vectors, stats in pipeline.stream(texts, step, self.max_tokens, self.window_overlap, truncate):
            report.model_inputs += stats.model_inputs
            report.windowed_texts += stats.windowed_texts
            report.tokens_total += stats.tokens_total
            report.tokens_seen += stats.tokens_seen
            yield lo, hi, vectors

    def _pipeline_encoder(self, bulk: bool = False) -> Any:
        """The PyTorch pipeline for this call, or None (the ONNX or ``encode`` path). ``bulk``: a call of
        at least one model batch, which takes the pipeline under ``backend="auto"`` (see the class)."""
        if not bulk and self.backend != "torch" and self._onnx_encoder() is not None:
            return None
        if self._pipeline is None:
            self._pipeline = self._make_pipeline() or False
        return self._pipeline or None

    def _make_pipeline(self) -> Any:
        if self.backend == "onnx":
            return None
        from contextkit.embedders._torch_pipeline import (
            PipelineEncoder,
            pipeline_supported,
        )

        if not pipeline_supported(self.model):
            log.info("%s is not Transformer + mean/CLS pooling: embedding through SentenceTransformer.encode",
                     self.model_name)
            return None
        device = self._resolved_device()
        cuda = device.startswith("cuda")
        workers = self.tokenizer_workers
        if workers is None:  # on a CPU the model is the bottleneck: one thread keeps it fed
            workers = max(1, min(16, (os.cpu_count() or 2) - 2)) if cuda else 1
        precision = self.precision if self.precision != "auto" else "fp16" if cuda else "fp32"  # PyTorch's own
        if precision == "fp16" and not cuda:
            log.warning("precision='fp16' on %s: correct but slow (fp16 pays off on CUDA)", device)
        return PipelineEncoder(self.model, device, precision, self.batch_size, workers,
                               "process" if cuda else "thread")

    def _encode_pieces(self, pieces: list[str]) -> Any:
        """The ONNX or ``SentenceTransformer.encode`` path, halving the batch on out-of-memory errors."""
        import numpy as np

        from contextkit.embedders._torch_pipeline import is_out_of_memory

        while True:
            batch = self._fallback_batch or self.batch_size
            try:
                onnx = self._onnx_encoder()
                if onnx is not None:
                    return onnx.encode(pieces, batch_size=batch)
                return self._st_encode(pieces, batch).astype(np.float32, copy=False)
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                if batch == 1:
                    raise EmbeddingMemoryError(
                        f"out of memory on {self._resolved_device()} embedding texts one at a time with "
                        f"{self.model_name} ({str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}); "
                        "free memory or use another device") from exc
                self._fallback_batch = max(1, batch // 2)
                log.warning("out of memory on %s with a batch of %d texts; retrying in batches of %d for the rest "
                            "of this run", self._resolved_device(), batch, self._fallback_batch)
                if self._resolved_device().startswith("cuda"):
                    import torch

                    torch.cuda.empty_cache()

    def _st_encode(self, pieces: list[str], batch: int) -> Any:
        import contextlib

        fp16 = self.active_precision == "fp16"
        ctx: Any = contextlib.nullcontext()
        if fp16:
            import torch

            ctx = torch.autocast(self._resolved_device().split(":")[0], dtype=torch.float16)
        with ctx:
            return self.model.encode(pieces, batch_size=batch, convert_to_numpy=True, normalize_embeddings=True,
                                     show_progress_bar=False)

    def _embed_uncached(self, texts: list[str], report: EmbeddingReport) -> Any:
        import numpy as np

        pieces, owner, weights = self._windows(texts, report)
        report.model_inputs += len(pieces)
        vectors = self._encode_pieces(pieces)
        if len(pieces) == len(texts):
            return vectors
        fused = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(fused, owner, vectors * weights[:, None])
        fused /= np.maximum(np.linalg.norm(fused, axis=1, keepdims=True), 1e-12)
        return fused

    def _windows(self, texts: list[str], report: EmbeddingReport):
        """Split texts longer than the model's window into overlapping windows."""
        import numpy as np

        window = self.max_tokens
        enc = self.model.tokenizer(
            texts, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False
        )
        pieces: list[str] = []
        owner: list[int] = []
        weights: list[float] = []
        for i, (text, spans) in enumerate(zip(texts, enc["offset_mapping"])):
            n = len(spans)
            report.tokens_total += n
            if n <= window or self.long_text == "truncate":
                pieces.append(text)
                owner.append(i)
                weights.append(1.0)
                report.tokens_seen += min(n, window)
                continue
            report.windowed_texts += 1
            report.tokens_seen += n
            for piece, weight in window_pieces(text, spans, window, self.window_overlap):
                pieces.append(piece)
                owner.append(i)
                weights.append(weight)
        return pieces, np.asarray(owner, dtype=np.int64), np.asarray(weights, dtype=np.float32)
