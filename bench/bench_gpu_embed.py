"""GPU embedding throughput: plain sentence-transformers against a pipelined encoder, same run.

Workload: chunks of about 1,000 characters cut from the PEPs
(``shared/data/python_peps/peps/*.rst``, each file cut at the last whitespace before
1,000 characters; the corpus repeats when ``--n`` asks for more chunks than it holds),
embedded with all-MiniLM-L6-v2 (the offline package's weights), truncated at the
model's 256 word pieces as sentence-transformers does.

Sides, each timed on the same chunks after a warm-up (best of ``--repeats``):

* ``st fp32`` / ``st fp16``: ``SentenceTransformer.encode(chunks)`` with its defaults
  (batch 32, tokenisation on the calling thread between batches); fp16 is the same model
  after ``.half()``. The reference the scale issue quotes: ~2,100 (fp32) and ~2,700
  (fp16) chunks/s on one H200, held back by tokenisation on the CPU.
* ``fast fp16`` / ``fast fp32``: the pipeline this script proposes (not library code yet):
  chunks sorted by length (characters) and cut into large batches (``--batch``, default
  512 on a GPU), so each batch pads to about its own length (to a multiple of 8); a pool
  of ``--workers`` tokenizer *processes* (``--pool thread`` for threads) runs the model's
  Rust tokenizer (its own ``tokenizer.json``, truncation and padding as
  sentence-transformers asks) on batches ahead of the GPU and returns int32 ids and int8
  masks; the main process puts each batch in pinned host memory, copies it to the GPU
  with ``non_blocking`` copies on a separate CUDA stream, runs the transformer in fp16
  (``.half()``) on the compute stream, mean-pools and normalises on the GPU (in float32)
  and copies the vectors back asynchronously into pinned buffers. Why processes: on one
  core the Rust tokenizer alone does ~2,000 chunks/s, and the copy of its output into
  numpy, which holds the GIL, costs another ~16%; with threads that serial part alone
  caps the pool near 10,000 chunks/s, below the goal.
* diagnostics: ``tokenise only`` (the worker pool alone: the CPU ceiling of the pipeline)
  and ``model only`` (forward passes over batches already on the device: the GPU ceiling).
* on a CPU (no CUDA): the fast pipeline runs in fp32 with one tokenizer process, beside
  contextkit's ``Embedder(backend="onnx")`` and ``Embedder(backend="torch")`` (both with
  ``long_text="truncate"``, the same workload), and an fp16 numerics check on a few
  chunks (fp16 on a CPU is slow, so it is not timed as a speed figure).

Vectors of every side are compared with ``st fp32``: the largest absolute difference of
any coordinate and the smallest cosine over all chunks. Tolerance: cosine >= 0.999 for
fp16 sides (fp16 keeps ~3 significant digits), max abs diff <= 1e-4 for fp32 sides.

Goal (scale issue): >= 15,000 chunks/s on one H200 in fp16 with vectors equal within
tolerance to the fp32 path; falls back to the CPU cleanly.

Run: ``python bench/bench_gpu_embed.py`` (on a GPU: 100,000 chunks; on a CPU: 256).
Flags: ``--n``, ``--batch``, ``--workers``, ``--pool process|thread``, ``--prefetch``,
``--repeats``, ``--device``, ``--skip-st``, ``--fp16-check N``, ``--json FILE``.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import argparse
import json
import sys
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
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


# ------------------------------------------------------------ tokenisation
_TOKENIZER: Any = None  # this process's tokenizers.Tokenizer (set by _init_tokenizer)


def _init_tokenizer(config: str, max_length: int, pad_id: int, pad_token: str) -> None:
    """Build the Rust tokenizer from the model tokenizer's own JSON, truncating and padding as
    sentence-transformers asks (``truncation=True, max_length``), padded to a multiple of 8."""
    global _TOKENIZER
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(config)
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=pad_id, pad_token=pad_token, pad_to_multiple_of=8)
    _TOKENIZER = tok


def _tokenise(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids int32, attention_mask int8)`` of one batch, padded to its longest member.

    The Rust ``encode_batch`` runs without the GIL; only the copy into numpy holds it.
    (transformers' ``tokenizer(..., return_tensors=...)`` did the same work at 0.6x the
    speed on one core here: 1,021 vs 1,664 chunks/s.)"""
    enc = _TOKENIZER.encode_batch(texts)
    return (np.array([e.ids for e in enc], dtype=np.int32), np.array([e.attention_mask for e in enc], dtype=np.int8))


# ------------------------------------------------------------------ sides
def st_encode(model: Any, chunks: list[str]) -> np.ndarray:
    """sentence-transformers as a user calls it: defaults (batch 32), vectors as numpy."""
    return model.encode(chunks, convert_to_numpy=True, show_progress_bar=False).astype(np.float32)


class FastEncoder:
    """Length-sorted batches, tokenised by a worker pool ahead of the model, pinned memory,
    asynchronous copies on a side stream, fp16 forward pass, mean pooling on the device."""

    def __init__(self, st_model: Any, device: str, dtype: str, batch: int, workers: int, prefetch: int,
                 pool: str = "process") -> None:
        import multiprocessing

        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.tokenizer = st_model.tokenizer
        self.max_length = int(st_model.max_seq_length)
        self.model = st_model[0].auto_model
        self.dtype = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        if next(self.model.parameters()).dtype != self.dtype:
            raise ValueError(f"the model given is {next(self.model.parameters()).dtype}, not {self.dtype}")
        self.batch, self.workers, self.prefetch = batch, workers, max(prefetch, workers)
        self.copy_stream = torch.cuda.Stream(device=self.device) if self.cuda else None
        get_dim = getattr(st_model, "get_embedding_dimension", None) or st_model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        hf = st_model.tokenizer
        init = (hf.backend_tokenizer.to_str(), self.max_length, hf.pad_token_id, hf.pad_token)
        _init_tokenizer(*init)  # for the thread pool and for workers=0
        self._pool: Any = None
        if workers > 0 and pool == "process":
            # processes: no GIL at all (the copy into numpy holds it, ~16% of the work); "spawn"
            # because CUDA is already initialised in this process
            self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_tokenizer, initargs=init)
            list(self._pool.map(_tokenise, [["warm up"]] * workers))
        elif workers > 0:
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="tokenise")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    # -- CPU side
    def _host(self, arrays: tuple[np.ndarray, np.ndarray]) -> tuple[Any, Any]:
        """Torch tensors of a tokenised batch, in pinned memory on a GPU (int32 / int8: less to copy)."""
        ids, mask = (self.torch.from_numpy(a) for a in arrays)
        if self.cuda:
            ids, mask = ids.pin_memory(), mask.pin_memory()
        return ids, mask

    def batches(self, chunks: list[str]) -> list[np.ndarray]:
        # Longest first: the largest batch shape (and memory peak) comes first; neighbours pad alike.
        order = np.argsort([-len(c) for c in chunks], kind="stable")
        return [order[i: i + self.batch] for i in range(0, len(chunks), self.batch)]

    def prepared(self, chunks: list[str]):
        """Yield ``(indices, ids, mask)`` in order, tokenised up to ``prefetch`` batches ahead."""
        plan = self.batches(chunks)
        if self._pool is None:
            for idx in plan:
                yield (idx, *self._host(_tokenise([chunks[i] for i in idx])))
            return
        pending: deque = deque()
        todo = iter(plan)
        for idx in todo:
            pending.append((idx, self._pool.submit(_tokenise, [chunks[i] for i in idx])))
            if len(pending) >= self.prefetch:
                break
        while pending:
            idx, fut = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, self._pool.submit(_tokenise, [chunks[i] for i in nxt])))
            yield (idx, *self._host(fut.result()))

    # -- device side
    def _forward(self, ids: Any, mask: Any) -> Any:
        torch = self.torch
        ids, mask = ids.long(), mask.long()  # widened on the device, after the (smaller) copy
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(torch.float32)
        vec = (hidden.to(torch.float32) * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(vec, dim=1)

    def encode(self, chunks: list[str]) -> np.ndarray:
        torch = self.torch
        out = np.empty((len(chunks), self.dim), dtype=np.float32)
        results: list[tuple[np.ndarray, Any]] = []
        with torch.inference_mode():
            for idx, ids, mask in self.prepared(chunks):
                if self.cuda:
                    with torch.cuda.stream(self.copy_stream):
                        ids_d = ids.to(self.device, non_blocking=True)
                        mask_d = mask.to(self.device, non_blocking=True)
                    compute = torch.cuda.current_stream(self.device)
                    compute.wait_stream(self.copy_stream)
                    ids_d.record_stream(compute)  # the caching allocator must not reuse them early
                    mask_d.record_stream(compute)
                    vec = self._forward(ids_d, mask_d)
                    host = torch.empty(vec.shape, dtype=torch.float32, pin_memory=True)
                    host.copy_(vec, non_blocking=True)
                    results.append((idx, host))
                else:
                    out[idx] = self._forward(ids, mask).numpy()
            if self.cuda:
                torch.cuda.synchronize(self.device)
                for idx, host in results:
                    out[idx] = host.numpy()
        return out

    def tokenise_only(self, chunks: list[str]) -> int:
        tokens = 0
        for _, _, mask in self.prepared(chunks):
            tokens += int(mask.sum())
        return tokens

    def model_only(self, chunks: list[str]) -> tuple[list[Any], Any]:
        """Batches already on the device, and a function running the model over them."""
        torch = self.torch
        on_device = [(ids.to(self.device), mask.to(self.device)) for _, ids, mask in self.prepared(chunks)]

        def run() -> None:
            with torch.inference_mode():
                for ids, mask in on_device:
                    self._forward(ids, mask)
            if self.cuda:
                torch.cuda.synchronize(self.device)

        return on_device, run


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
    ap.add_argument("--batch", type=int, default=None, help="fast pipeline batch (default: 512 on a GPU, 64 on a CPU)")
    ap.add_argument("--workers", type=int, default=None,
                    help="tokenizer workers (default: CPUs - 2 on a GPU, at most 16; 1 on a CPU)")
    ap.add_argument("--pool", choices=("process", "thread"), default="process",
                    help="tokenizer workers: processes (default; no GIL) or threads")
    ap.add_argument("--prefetch", type=int, default=None, help="batches tokenised ahead (default 2 x workers)")
    ap.add_argument("--repeats", type=int, default=None, help="best of N (default 3 on a GPU, 1 on a CPU)")
    ap.add_argument("--skip-st", action="store_true", help="skip plain sentence-transformers (the slow sides)")
    ap.add_argument("--fp16-check", type=int, default=32, help="CPU only: chunks for the fp16 numerics check")
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
    batch = args.batch or (512 if gpu else 64)
    workers = args.workers if args.workers is not None else (max(1, min(16, (os.cpu_count() or 2) - 2)) if gpu else 1)
    repeats = args.repeats or (3 if gpu else 1)
    prefetch = args.prefetch or 2 * max(1, workers)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # parallelism comes from our threads

    chunks, distinct = load_chunks(n)
    path = default_model_path()
    where = torch.cuda.get_device_name(device) if gpu else f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    res: dict[str, Any] = {"n": n, "distinct_chunks": distinct, "device": where, "torch": torch.__version__,
                           "batch": batch, "workers": workers, "pool": args.pool, "prefetch": prefetch, "repeats": repeats,
                           "mean_chars": float(np.mean([len(c) for c in chunks])), "model": path}
    log(f"{n:,} chunks (~{res['mean_chars']:.0f} characters; {distinct:,} distinct in the PEPs) on {where}; "
        f"model {path}")
    sync = (lambda: torch.cuda.synchronize(device)) if gpu else None
    warm = chunks[: min(len(chunks), 2 * batch)]
    rows: list[dict[str, Any]] = []
    vectors: dict[str, np.ndarray] = {}

    def add(name: str, seconds: float, vecs: np.ndarray | None, note: str = "") -> None:
        row = {"side": name, "seconds": seconds, "chunks/s": n / seconds, "note": note}
        if vecs is not None:
            vectors[name] = vecs
        rows.append(row)
        log(f"{name}: {n / seconds:,.0f} chunks/s ({seconds:.2f} s)")

    st32 = SentenceTransformer(path, device=device)
    st32.eval()
    lengths = np.array([len(t) for t in st32.tokenizer(chunks[:2000], truncation=False, verbose=False)["input_ids"]])
    tokens = int(np.minimum(lengths, st32.max_seq_length).sum())
    truncated = float(np.mean(lengths > st32.max_seq_length))
    res["tokens_per_chunk"] = tokens / min(len(chunks), 2000)
    res["share_truncated"] = truncated
    log(f"word pieces per chunk after truncation at {st32.max_seq_length}: {res['tokens_per_chunk']:.0f}; "
        f"chunks longer than the window: {truncated:.0%}")

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

    # the pipeline
    fast_dtypes = ["fp16", "fp32"] if gpu else ["fp32"]
    for dt in fast_dtypes:
        model = SentenceTransformer(path, device=device).eval()
        if dt == "fp16":
            model = model.half()
        enc = FastEncoder(model, device, dt, batch, workers, prefetch, args.pool)
        try:
            enc.encode(warm)
            seconds, v = timed(lambda: enc.encode(chunks), repeats, sync)
            add(f"fast {dt}", seconds, v, f"batch {batch}, {workers} tokenizer {args.pool}(es), "
                + ("pinned memory, copy stream" if gpu else "CPU"))
            if dt == fast_dtypes[0]:
                seconds, toks = timed(lambda: enc.tokenise_only(chunks), repeats)
                add("tokenise only", seconds, None, f"{workers} {args.pool}(es): the CPU ceiling ({toks / seconds:,.0f} "
                    "word pieces/s, padding included)")
                on_device, run = enc.model_only(chunks)
                run()
                seconds, _ = timed(run, repeats, sync)
                add(f"model only {dt}", seconds, None, "batches already on the device: the model ceiling")
                del on_device
        finally:
            enc.close()
        del model, enc
        if gpu:
            torch.cuda.empty_cache()

    if not gpu:
        # contextkit's own CPU paths, same workload (truncation, as sentence-transformers)
        for backend in ("onnx", "torch"):
            try:
                emb = Embedder(backend=backend, long_text="truncate", device="cpu")
                emb.embed(warm)
                seconds, v = timed(lambda: emb.embed(chunks), repeats)
                add(f"contextkit {backend}", seconds, v, f"Embedder(backend={backend!r}, long_text='truncate'), "
                    f"batch {emb.batch_size}")
            except Exception as exc:  # noqa: BLE001 - a missing optional backend is a row, not a crash
                rows.append({"side": f"contextkit {backend}", "note": f"skipped: {exc}"})
                log(f"contextkit {backend}: skipped ({exc})")
        # fp16 numerics on a few chunks (not a speed figure on a CPU)
        few = chunks[: args.fp16_check]
        try:
            m16 = SentenceTransformer(path, device="cpu").half().eval()
            enc16 = FastEncoder(m16, "cpu", "fp16", batch, 0, 2)
            v16 = enc16.encode(few)
            enc16.close()
            res["cpu_fp16_check"] = {"chunks": len(few), **compare(v16, ref[: len(few)])}
        except Exception as exc:  # noqa: BLE001
            res["cpu_fp16_check"] = {"skipped": str(exc)}

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
    table(rows, ["side", "chunks/s", "seconds", "x st fp32", "max_abs_diff", "min_cosine", "within tolerance", "note"],
          f"{n:,} chunks of ~{res['mean_chars']:.0f} characters ({res['tokens_per_chunk']:.0f} word pieces after "
          f"truncation; {res['share_truncated']:.0%} truncated), all-MiniLM-L6-v2, {where}, best of {repeats}; "
          "vectors compared with st fp32")
    if "cpu_fp16_check" in res:
        c = res["cpu_fp16_check"]
        print("\nfp16 numerics on the CPU (fast pipeline in fp16 vs st fp32, not timed): " + (
            f"{c['chunks']} chunks, max abs diff {c['max_abs_diff']:.2e}, min cosine {c['min_cosine']:.6f}"
            if "skipped" not in c else f"skipped ({c['skipped']})"))
    fast = next((r for r in rows if r["side"] == ("fast fp16" if gpu else "fast fp32")), None)
    if gpu and fast:
        ok = fast["chunks/s"] >= 15_000 and fast.get("within tolerance") == "yes"
        print(f"\ngoal (>= 15,000 chunks/s in fp16 on one GPU, vectors within tolerance): "
              f"{fast['chunks/s']:,.0f} chunks/s, {'met' if ok else 'NOT met'}")
    elif fast:
        ratio = f" ({fast['x st fp32']:.2f}x plain sentence-transformers)" if "x st fp32" in fast else ""
        print(f"\nno GPU here: the pipeline ran on the CPU in fp32 at {fast['chunks/s']:,.1f} chunks/s{ratio}; "
              "the 15,000 chunks/s goal is for one H200")
    res["rows"] = rows
    res["threads_alive"] = threading.active_count()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
