"""An ONNX Runtime path for sentence-transformers encoders on CPU.

Why: on a small CPU, PyTorch spends most of a one-query forward pass in per-op
overhead; ONNX Runtime runs the same graph much faster for a single query
and as fast for batches (``python bench/bench_retrieval.py latency`` times both backends). The vectors
are those of the PyTorch model to within 1e-6: the graph is exported from the
loaded weights (eager attention, so the export is exact), not downloaded.

The exported file is cached under ``$CONTEXTKIT_CACHE_DIR`` (default
``~/.cache/contextkit``) as ``onnx/<family>-<key>.onnx``, keyed by the model's configuration
and a sample of its weights (size, first and last MiB: a reinstall of the same weights finds
its export), and written atomically; an export replaces the older ones of its family and the
cache keeps at most :data:`KEEP_TOTAL` exports (each is about 90 MB for all-MiniLM-L6-v2). Only models made of a Transformer, a mean or CLS
Pooling and an optional Normalize module take this path; any other model,
or any failure to export, stays on PyTorch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from contextkit.core.atomic import atomic_path
from contextkit.core.errors import InvalidArgumentError

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


_SAMPLE = 1 << 20  # bytes hashed at each end of a weights file
#: Exports kept in the cache: the newest per model family, and this many in all (least recently used go).
KEEP_PER_FAMILY = 1
KEEP_TOTAL = 4


def _config_digest(auto: Any) -> str:
    """The model's configuration, minus where it was loaded from (a reinstall moves it)."""
    config = json.loads(auto.config.to_json_string())
    config.pop("_name_or_path", None)
    return hashlib.sha256(f"{type(auto).__name__}\0{json.dumps(config, sort_keys=True)}".encode()).hexdigest()


def _file_sample(path: Path) -> str:
    """Size and the first and last MiB of a weights file: changes with the weights, not with a reinstall."""
    size = path.stat().st_size
    h = hashlib.sha256(f"{path.name}\0{size}\0".encode())
    with open(path, "rb") as fh:
        h.update(fh.read(_SAMPLE))
        if size > 2 * _SAMPLE:
            fh.seek(-_SAMPLE, os.SEEK_END)
            h.update(fh.read(_SAMPLE))
    return h.hexdigest()


def _weights_key(st_model: Any, source: str) -> tuple[str, str]:
    """``(family, key)``: the family names the architecture (exports of it replace each other), the key
    changes when the weights change, without hashing gigabytes, and not when a reinstall touches them.

    Keyed by modification time before, every reinstall of the same weights exported 90 MB more."""
    auto = st_model[0].auto_model
    family = _config_digest(auto)[:12]
    h = hashlib.sha256(family.encode())
    folder = Path(source)
    if folder.is_dir():
        for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
            h.update(_file_sample(f).encode())
    else:  # a hub name: the resolved snapshot's revision is in the config's commit hash
        h.update(f"{source}\0{getattr(auto.config, '_commit_hash', '')}".encode())
    return family, h.hexdigest()[:24]


def prune_cache(folder: Path, keep: Path, keep_per_family: int = KEEP_PER_FAMILY, keep_total: int = KEEP_TOTAL) -> list[Path]:
    """Delete exports other than ``keep``: older ones of its family beyond ``keep_per_family``, then the
    least recently used beyond ``keep_total``, and leftovers of exports that died (``.part``, over an
    hour old). Returns what was removed; a file another process holds open is simply skipped."""
    import time

    removed: list[Path] = []

    def drop(path: Path) -> None:
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass

    for part in folder.glob("*.onnx.part"):
        with contextlib.suppress(OSError):
            if time.time() - part.stat().st_mtime > 3600:
                drop(part)
    family = keep.name.split("-", 1)[0]
    others = sorted((p for p in folder.glob("*.onnx") if p != keep), key=_last_used, reverse=True)
    same = [p for p in others if p.name.split("-", 1)[0] == family]
    for path in same[max(0, keep_per_family - 1):]:
        drop(path)
    rest = [p for p in others if p.exists()]
    for path in rest[max(0, keep_total - 1):]:
        drop(path)
    return removed


def _last_used(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


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
    import warnings

    temporary = f"{target.stem}.{os.getpid()}.{secrets.token_hex(4)}.onnx.part"  # pruned if an export dies
    with (atomic_path(target, temporary=temporary) as tmp, warnings.catch_warnings(), torch.inference_mode(False),
          torch.no_grad()):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Wrapped(eager), args, str(tmp), input_names=names, output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]},
            opset_version=17, dynamo=False,
        )


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
        family, key = _weights_key(st_model, source)
        path = cache_dir() / "onnx" / f"{family}-{key}.onnx"
        if not path.exists():
            log.info("exporting %s to ONNX at %s (once)", source, path)
            _export(st_model, source, path)
            removed = prune_cache(path.parent, path)
            if removed:
                log.info("removed %d older ONNX export(s) from %s", len(removed), path.parent)
        else:
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: pruning takes the least recently used first
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Idle threads sleep rather than spin: spinning took the cores from the FAISS
        # and BM25 steps of a hybrid query (``python bench/bench_retrieval.py latency``); batches run as fast.
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
