"""An ONNX Runtime path for sentence-transformers encoders on CPU.

Why: on a small CPU, PyTorch spends most of a one-query forward pass in per-op
overhead; ONNX Runtime runs the same graph about 3x faster for a single query
(all-MiniLM-L6-v2, 2 cores: 20 ms -> 7 ms) and as fast for batches. The vectors
are those of the PyTorch model to within 1e-6: the graph is exported from the
loaded weights (eager attention, so the export is exact), not downloaded.

The exported file is cached under ``$CONTEXTKIT_CACHE_DIR`` (default
``~/.cache/contextkit``), keyed by the weights' path, size and modification time,
and written atomically. Only models made of a Transformer, a mean or CLS
Pooling and an optional Normalize module take this path; any other model,
or any failure to export, stays on PyTorch.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from contextkit.errors import InvalidArgumentError

__all__ = ["OnnxEncoder", "onnx_available"]

log = logging.getLogger(__name__)
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def onnx_available() -> bool:
    """True when onnxruntime and onnx (needed to export) are installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


def cache_dir() -> Path:
    return Path(os.environ.get("CONTEXTKIT_CACHE_DIR") or Path.home() / ".cache" / "contextkit")


def _pooling_mode(st_model: Any) -> str | None:
    """``"mean"`` or ``"cls"`` when the model's modules allow the ONNX path, else None."""
    names = [type(m).__name__ for m in st_model]
    if len(names) not in (2, 3) or names[0] != "Transformer" or names[1] != "Pooling":
        return None
    if len(names) == 3 and names[2] != "Normalize":
        return None
    pooling = st_model[1]
    mode = getattr(pooling, "pooling_mode", None)  # sentence-transformers >= 5
    if not isinstance(mode, str) and hasattr(pooling, "get_pooling_mode_str"):
        mode = pooling.get_pooling_mode_str()
    return mode if mode in ("mean", "cls") else None


def _weights_key(st_model: Any, source: str) -> str:
    """A key that changes when the weights change, without hashing gigabytes."""
    auto = st_model[0].auto_model
    h = hashlib.sha256(f"{source}\0{type(auto).__name__}\0{auto.config.to_json_string()}".encode())
    folder = Path(source)
    if folder.is_dir():
        for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
            st = f.stat()
            h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    else:  # a hub name: the resolved snapshot's revision is in the config's commit hash
        h.update(str(getattr(auto.config, "_commit_hash", "")).encode())
    return h.hexdigest()[:24]


def _export(st_model: Any, source: str, target: Path) -> None:
    """Export the transformer with eager attention (SDPA does not export exactly)."""
    import torch
    from transformers import AutoModel

    auto = st_model[0].auto_model
    folder = source if Path(source).is_dir() else auto.name_or_path
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager").eval().to("cpu")
    takes_types = "token_type_ids" in st_model.tokenizer.model_input_names

    class _Wrapped(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state

    names = list(_INPUTS if takes_types else _INPUTS[:2])
    sample = st_model.tokenizer(["an example sentence to trace"], return_tensors="pt")
    args = tuple(sample[n] for n in names)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.part")
    os.close(fd)
    try:
        import warnings

        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _Wrapped(eager), args, tmp, input_names=names, output_names=["last_hidden_state"],
                dynamic_axes={n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]},
                opset_version=17, dynamo=False,
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class OnnxEncoder:
    """Encode texts as a sentence-transformers model would, through ONNX Runtime."""

    def __init__(self, st_model: Any, source: str) -> None:
        import onnxruntime as ort

        mode = _pooling_mode(st_model)
        if mode is None:
            raise InvalidArgumentError("model is not Transformer + mean/CLS Pooling (+ Normalize)")
        self.pooling = mode
        self.tokenizer = st_model.tokenizer
        self.max_length = int(st_model.max_seq_length)
        path = cache_dir() / "onnx" / f"{_weights_key(st_model, source)}.onnx"
        if not path.exists():
            log.info("exporting %s to ONNX at %s (once)", source, path)
            _export(st_model, source, path)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Idle threads sleep rather than spin: spinning took the cores from the FAISS
        # and BM25 steps of a hybrid query (p50 13.5 -> 11.3 ms); batches run as fast.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.path = path

    def encode(self, texts: list[str], batch_size: int = 64) -> Any:
        """Unit-length float32 vectors; batches grouped by length so padding stays small."""
        import numpy as np

        dim = self.session.get_outputs()[0].shape[-1]
        out = np.zeros((len(texts), int(dim) if isinstance(dim, int) else 0), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        for lo in range(0, len(texts), batch_size):
            idx = order[lo : lo + batch_size]
            feats = self.tokenizer(
                [texts[i] for i in idx], padding=True, truncation=True, max_length=self.max_length,
                return_tensors="np",
            )
            hidden = self.session.run(None, {n: feats[n].astype(np.int64) for n in self.input_names})[0]
            if self.pooling == "cls":
                vec = hidden[:, 0]
            else:
                mask = feats["attention_mask"][..., None].astype(np.float32)
                vec = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vec.shape[1]), dtype=np.float32)
            out[idx] = vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
        return out
