"""GPU embedding throughput: plain sentence-transformers against contextkit's Embedder, same run.

Workload: chunks of about 1,000 characters cut from the PEPs
(``shared/data/python_peps/peps/*.rst``, each file cut at the last whitespace before
1,000 characters; the corpus repeats when ``--n`` asks for more chunks than it holds),
embedded with all-MiniLM-L6-v2 (the offline package's weights), truncated at the
model's 256 word pieces as sentence-transformers does (``long_text="truncate"`` on
the contextkit side, so both sides do the same work).

Sides, each timed on the same chunks after a warm-up (best of ``--repeats``):

* ``st fp32`` / ``st fp16``: ``SentenceTransformer.encode(chunks)`` with its defaults
  (batch 32, tokenisation on the calling thread between batches); fp16 (GPU only) is the
  same model after ``.half()``. The reference the scale issue quotes: ~2,100 (fp32) and
  ~2,700 (fp16) chunks/s on one H200, held back by tokenisation on the CPU.
* ``contextkit fp16`` / ``contextkit fp32``: the library path,
  ``Embedder(backend="torch", precision=..., long_text="truncate")``, i.e.
  :class:`contextkit.embedders._torch_pipeline.PipelineEncoder`: length-sorted batches (``--batch``,
  default the Embedder's: 512 on a GPU, 64 on a CPU) padded to a multiple of 8, a pool
  of tokenizer workers (``--workers``; processes on a GPU, one thread on a CPU) ahead
  of the model, pinned memory and ``non_blocking`` copies on a side stream, fp16
  autocast, pooling and normalisation in float32 on the device.
* ``tokenise only`` (diagnostic): the Embedder's tokenizer workers alone, the CPU
  ceiling of the pipeline.
* on a CPU also ``contextkit onnx`` (the CPU default when onnxruntime is installed).

Vectors of every side are compared with ``st fp32``: the largest absolute difference of
any coordinate and the smallest cosine over all chunks. Tolerance: cosine >= 0.999 for
fp16 sides (fp16 keeps ~3 significant digits), max abs diff <= 1e-4 for fp32 sides.

Goal (scale issue): >= 15,000 chunks/s on one H200 in fp16 with vectors equal within
tolerance to the fp32 path; falls back to the CPU cleanly; on a CPU the pipeline is not
slower than sentence-transformers' own ``encode`` (ratio printed).

On a GPU, ``--oom-check`` then provokes a real CUDA out-of-memory error: the process
may use only 6 GiB of the device (``torch.cuda.set_per_process_memory_fraction``) and
16,384 chunks go in as one batch; the Embedder must halve the batch until it fits, say
so once, and give the same vectors.

Run: ``python bench/bench_gpu_embed.py`` (on a GPU: 100,000 chunks; on a CPU: 256), or
``--device cpu`` to force the CPU. Flags: ``--n``, ``--batch``, ``--workers``,
``--repeats``, ``--device``, ``--skip-st``, ``--oom-check``, ``--model DIR`` (default:
the offline package's folder), ``--peps DIR`` (default ``shared/data/python_peps/peps``),
``--json FILE``. ``bench/device/`` runs it on a lent GPU machine, which has neither.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------- workload
def chunk_text(text: str, size: int = 1000) -> list[str]:
    """Pieces of at most ``size`` characters, cut at the last whitespace before the limit."""
    out, i = [], 0
    while i < len(text):
        j = min(i + size, len(text))
        if j < len(text):
            cut = max(text.rfind(" ", i + size // 2, j), text.rfind("\n", i + size // 2, j))
            j = cut if cut > i else j
        piece = text[i:j].strip()
        if piece:
            out.append(piece)
        i = j
    return out


def load_chunks(n: int, folder: Path = PEPS) -> tuple[list[str], int]:
    """``n`` chunks of ~1,000 characters (the corpus repeated if needed) and how many distinct ones exist."""
    files = sorted(folder.glob("*.rst"))
    if not files:
        raise SystemExit(f"{folder}: no PEP files")
    chunks: list[str] = []
    for f in files:
        chunks += chunk_text(f.read_text(encoding="utf-8", errors="replace"))
    distinct = len(chunks)
    return [chunks[i % distinct] for i in range(n)], distinct


# ------------------------------------------------------------------ sides
def st_encode(model: Any, chunks: list[str]) -> np.ndarray:
    """sentence-transformers as a user calls it: defaults (batch 32), vectors as numpy."""
    return model.encode(chunks, convert_to_numpy=True, show_progress_bar=False).astype(np.float32)


def tokenise_only(emb: Any, chunks: list[str]) -> int:
    """The Embedder's tokenizer workers alone (no model): word pieces prepared, padding included."""
    enc = emb._pipeline_encoder()
    jobs = [(0, np.arange(i, min(i + enc.batch_size, len(chunks)))) for i in range(0, len(chunks), enc.batch_size)]
    tokens = 0
    for _, _, prep in enc._prepared(chunks, jobs, emb.max_tokens, emb.window_overlap, True):
        tokens += sum(int(ids.size) for _, ids, _ in prep.batches)
    return tokens


def _stored_dtype(path: str) -> str:
    """The dtype of the model's stored weights (bench/device/ ships them as float16 to fit its transfer limit)."""
    try:
        from safetensors import safe_open

        with safe_open(str(Path(path) / "model.safetensors"), "pt") as f:
            return str(f.get_tensor(next(iter(f.keys()))).dtype)
    except Exception as exc:  # noqa: BLE001 - a hub name or another format: informative only
        return f"unknown ({type(exc).__name__})"


def oom_check(st32: Any, chunks: list[str], ref: np.ndarray, device: str) -> dict[str, Any]:
    """A real CUDA out-of-memory error: 6 GiB allowed, 16,384 chunks as one batch; the batch must back off."""
    import logging

    import torch

    from contextkit.embedders import Embedder

    n = min(len(chunks), 16_384)
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, 6 * 2**30 / total), device)
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("contextkit").addHandler(handler)
    emb = Embedder(backend="torch", device=device, precision="fp16", long_text="truncate", batch_size=n)
    emb._model = st32
    out: dict[str, Any] = {"chunks": n, "batch asked": n, "memory allowed GiB": 6}
    try:
        t0 = time.perf_counter()
        vecs = emb.embed(chunks[:n])
        out["seconds"] = time.perf_counter() - t0
        out["batch kept"] = emb._pipeline_encoder().max_batch
        out.update(compare(vecs, ref[:n]))
        out["warnings"] = [m for m in messages if "out of memory" in m]
        out["ok"] = bool(out["warnings"]) and out["batch kept"] < n and out["min_cosine"] >= 0.999
    except Exception as exc:  # noqa: BLE001 - the check's result, printed, not a crash of the whole bench
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["ok"] = False
    finally:
        emb.close()
        logging.getLogger("contextkit").removeHandler(handler)
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()
    print(f"\nout-of-memory check (6 GiB allowed, {n:,} chunks in one batch): "
          + ("passed" if out["ok"] else "FAILED") + f": {json.dumps(out, default=str)}")
    return out


# ------------------------------------------------------------------ timing
def timed(fn, repeats: int, sync=None) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        result = fn()
        if sync:
            sync()
        best = min(best, time.perf_counter() - t0)
    return best, result


def compare(vecs: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    cos = np.sum(vecs * ref, axis=1) / (np.linalg.norm(vecs, axis=1) * np.linalg.norm(ref, axis=1))
    return {"max_abs_diff": float(np.max(np.abs(vecs - ref))), "min_cosine": float(np.min(cos)),
            "mean_cosine": float(np.mean(cos))}


def table(rows: list[dict[str, Any]], cols: list[str], title: str) -> None:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1 else f"{v:,.1f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for x in cells:
        print("  ".join(v.rjust(w) for v, w in zip(x, widths)))


# -------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=None, help="chunks (default: 100,000 on a GPU, 256 on a CPU)")
    ap.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default: the Embedder's, 512 GPU / 64 CPU)")
    ap.add_argument("--workers", type=int, default=None,
                    help="tokenizer workers (default: the Embedder's, CPUs - 2 processes on a GPU, 1 thread on a CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="best of N (default 3 on a GPU, 1 on a CPU)")
    ap.add_argument("--skip-st", action="store_true", help="skip timing plain sentence-transformers (the slow sides)")
    ap.add_argument("--oom-check", action="store_true", help="on a GPU: provoke a real out-of-memory error")
    ap.add_argument("--model", default=None, help="model folder or name (default: the offline package's folder)")
    ap.add_argument("--peps", type=Path, default=PEPS, help="folder of PEP .rst files (the workload)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    from contextkit.embedders import Embedder, default_model_path

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device.startswith("cuda") and not torch.cuda.is_available():
        log(f"--device {device}: CUDA is not available here; falling back to the CPU")
        device = "cpu"
    gpu = device.startswith("cuda")
    n = args.n or (100_000 if gpu else 256)
    repeats = args.repeats or (3 if gpu else 1)

    chunks, distinct = load_chunks(n, args.peps)
    path = args.model or default_model_path()
    where = torch.cuda.get_device_name(device) if gpu else f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    res: dict[str, Any] = {"n": n, "distinct_chunks": distinct, "device": where, "torch": torch.__version__,
                           "repeats": repeats, "mean_chars": float(np.mean([len(c) for c in chunks])), "model": path}
    log(f"{n:,} chunks (~{res['mean_chars']:.0f} characters; {distinct:,} distinct in the PEPs) on {where}; "
        f"model {path}")
    sync = (lambda: torch.cuda.synchronize(device)) if gpu else None
    rows: list[dict[str, Any]] = []
    vectors: dict[str, np.ndarray] = {}

    def add(name: str, seconds: float, vecs: np.ndarray | None, note: str = "") -> None:
        row = {"side": name, "seconds": seconds, "chunks/s": n / seconds, "note": note}
        if vecs is not None:
            vectors[name] = vecs
        rows.append(row)
        log(f"{name}: {n / seconds:,.0f} chunks/s ({seconds:.2f} s)")

    st32 = SentenceTransformer(path, device=device).float()  # fp32 whatever dtype the weights are stored in
    st32.eval()
    res["weights_stored_as"] = _stored_dtype(path)
    lengths = np.array([len(t) for t in st32.tokenizer(chunks[:2000], truncation=False, verbose=False)["input_ids"]])
    res["tokens_per_chunk"] = float(np.minimum(lengths, st32.max_seq_length).mean())
    res["share_truncated"] = float(np.mean(lengths > st32.max_seq_length))
    log(f"word pieces per chunk after truncation at {st32.max_seq_length}: {res['tokens_per_chunk']:.0f}; "
        f"chunks longer than the window: {res['share_truncated']:.0%}")
    warm = chunks[: min(len(chunks), 1024 if gpu else 64)]

    # reference: plain sentence-transformers, fp32 (also needed for the comparison when --skip-st)
    st_encode(st32, warm)
    if args.skip_st:
        ref = st_encode(st32, chunks)
        vectors["st fp32"] = ref
    else:
        seconds, ref = timed(lambda: st_encode(st32, chunks), repeats, sync)
        add("st fp32", seconds, ref, "SentenceTransformer.encode defaults (batch 32)")
        if gpu:
            st16 = SentenceTransformer(path, device=device).half().eval()
            st_encode(st16, warm)
            seconds, v = timed(lambda: st_encode(st16, chunks), repeats, sync)
            add("st fp16", seconds, v, "the same after .half()")
            del st16

    # the library path: one Embedder per precision, sharing the loaded fp32 model (autocast does fp16)
    for precision in (["fp16", "fp32"] if gpu else ["fp32"]):
        emb = Embedder(backend="torch", device=device, precision=precision, long_text="truncate",
                       batch_size=args.batch, tokenizer_workers=args.workers)
        emb._model = st32
        try:
            emb.embed(warm)
            seconds, v = timed(lambda e=emb: e.embed(chunks), repeats, sync)
            enc = emb._pipeline_encoder()
            kind = "process" if gpu else "thread"
            add(f"contextkit {precision}", seconds, v, f"Embedder(backend='torch', precision={precision!r}): batch "
                f"{emb.batch_size}, {enc.workers} tokenizer {kind}(es)" + (", pinned memory, copy stream" if gpu else ""))
            if not any(r["side"] == "tokenise only" for r in rows):  # once, with the first Embedder's workers
                seconds, toks = timed(lambda e=emb: tokenise_only(e, chunks), repeats)
                add("tokenise only", seconds, None, f"the {enc.workers} worker(s) alone: the CPU ceiling "
                    f"({toks / seconds:,.0f} word pieces/s, padding included)")
        finally:
            emb.close()
        if gpu:
            torch.cuda.empty_cache()

    if not gpu:
        try:
            emb = Embedder(model=path, backend="onnx", long_text="truncate", device="cpu")
            emb.embed(warm)
            seconds, v = timed(lambda: emb.embed(chunks), repeats)
            add("contextkit onnx", seconds, v, f"Embedder(backend='onnx', long_text='truncate'), batch {emb.batch_size}")
        except Exception as exc:  # noqa: BLE001 - a missing optional backend is a row, not a crash
            rows.append({"side": "contextkit onnx", "note": f"skipped: {exc}"})
            log(f"contextkit onnx: skipped ({exc})")

    for row in rows:
        name = row["side"]
        if name in vectors and name != "st fp32":
            cmp = compare(vectors[name], ref)
            row.update(cmp)
            tol_ok = cmp["min_cosine"] >= 0.999 if "fp16" in name else cmp["max_abs_diff"] <= 1e-4
            row["within tolerance"] = "yes" if tol_ok else "NO"
    st_rate = {r["side"]: r["chunks/s"] for r in rows if "chunks/s" in r}
    for row in rows:
        if "chunks/s" in row and "st fp32" in st_rate:
            row["x st fp32"] = row["chunks/s"] / st_rate["st fp32"]
        if "chunks/s" in row and "st fp16" in st_rate:
            row["x st fp16"] = row["chunks/s"] / st_rate["st fp16"]
    cols = ["side", "chunks/s", "seconds", "x st fp32"] + (["x st fp16"] if gpu else []) + [
        "max_abs_diff", "min_cosine", "within tolerance", "note"]
    table(rows, cols, f"{n:,} chunks of ~{res['mean_chars']:.0f} characters ({res['tokens_per_chunk']:.0f} word "
          f"pieces after truncation; {res['share_truncated']:.0%} truncated), all-MiniLM-L6-v2, {where}, best of "
          f"{repeats}; vectors compared with st fp32")
    fast = next((r for r in rows if r["side"] == ("contextkit fp16" if gpu else "contextkit fp32")), None)
    if gpu and fast:
        ok = fast["chunks/s"] >= 15_000 and fast.get("within tolerance") == "yes"
        print(f"\ngoal (>= 15,000 chunks/s in fp16 on one GPU, vectors within tolerance): "
              f"{fast['chunks/s']:,.0f} chunks/s, {'met' if ok else 'NOT met'}")
    elif fast:
        ratio = f" = {fast['x st fp32']:.2f}x plain sentence-transformers" if "x st fp32" in fast else ""
        print(f"\nno GPU here: the library pipeline ran on the CPU in fp32 at {fast['chunks/s']:,.1f} chunks/s{ratio} "
              "(goal on a CPU: not slower, ratio >= ~1 within noise); the 15,000 chunks/s goal is for one H200")
    if gpu and args.oom_check:
        res["oom_check"] = oom_check(st32, chunks, ref, device)
    res["rows"] = rows
    res["threads_alive"] = threading.active_count()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
