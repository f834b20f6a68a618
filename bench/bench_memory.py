"""Memory stays flat over many assemblies in one process: the RSS curve and its growth.

One index opened read-only, one hybrid retriever and one ``ContextAssembler`` (as a
service holds them); each step is a realistic request: a new query (a word window
drawn from the index's own chunks, seeded), hybrid search, assembly with
instructions and a short history under ``--budget`` tokens, and the report turned
into its summary and JSON (what a service logs). The resident set size (psutil) is
sampled after ``gc.collect()`` and glibc's ``malloc_trim(0)`` every ``--every`` assemblies.

Prints the curve (start, after the warm-up, every 1,000 assemblies, end), the growth
after the warm-up in MB and in bytes per assembly (least-squares slope over the
samples after the warm-up, which one noisy sample cannot swing), and that slope beside
the mean prompt size: a leak of one prompt string per call shows as a slope of about
the prompt's size. ``--leak`` keeps every prompt alive on purpose, to show what a leak
looks like on this curve (a self-check of the method, not a mode to use).
``--fresh-threads`` runs each assembly on a new thread, as a thread-per-request server
does; the open file descriptors are printed beside RSS.

Run: ``python bench/bench_memory.py --index /tmp/scifact.ck-index`` (10,000 assemblies
after 500 of warm-up); without ``--index`` a small index of the first ``--peps`` PEPs
is built first. ``--n 1500`` is the fast version; the suite runs one (tests/test_load.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import gc
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import Request, Server, build_small_index, make_requests

MB = 1024 * 1024


def _trimmer() -> Any:
    """glibc's ``malloc_trim``, or None elsewhere."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _trimmer()


def rss() -> int:
    """Resident bytes after a collection and ``malloc_trim(0)``. Why the trim: memory freed
    earlier in the process (a model load, an ingest) stays resident, and new allocations,
    a leak's included, reuse it without moving RSS; handed back first, RSS follows what lives."""
    import psutil

    gc.collect()
    if _TRIM is not None:
        _TRIM(0)
    return int(psutil.Process().memory_info().rss)


def memory_curve(index_dir: Path, embedder: Any, n: int, warmup: int = 500, every: int = 100,
                 budget: int = 1500, seed: int = 0, leak: bool = False, fresh_threads: bool = False) -> dict[str, Any]:
    """Run ``warmup + n`` assemblies; RSS samples as ``(assemblies done, bytes)``.

    ``fresh_threads``: each assembly on a new thread (a thread-per-request server)."""
    import psutil

    from contextkit.index import Index

    kept: list[str] = []  # only filled with --leak
    samples: list[tuple[int, int]] = []
    errors: list[str] = []
    prompt_chars = 0
    with Index.open(index_dir, read_only=True) as index:
        server = Server(index, embedder, budget=budget)
        queries = [r.query for r in make_requests(index, warmup + n, seed)]
        samples.append((0, rss()))
        fds = [(0, psutil.Process().num_fds())]
        started = time.perf_counter()
        for done, query in enumerate(queries, start=1):
            if fresh_threads:
                box: list[Any] = []
                worker = threading.Thread(target=lambda q=query, box=box: box.append(server.serve(Request("assemble", q))))
                worker.start()
                worker.join()
                out = box[0]
            else:
                out = server.serve(Request("assemble", query))
            if out.error:
                errors.append(out.error)
            else:
                prompt_chars += len(out.prompt or "")
                if leak:
                    kept.append(out.prompt or "")
            if done % every == 0 or done == warmup or done == len(queries):
                samples.append((done, rss()))
                fds.append((done, psutil.Process().num_fds()))
        seconds = time.perf_counter() - started
    after = [(d, b) for d, b in samples if d >= warmup]
    slope = float(np.polyfit([d for d, _ in after], [b for _, b in after], 1)[0]) if len(after) > 2 else 0.0
    base = dict(samples)[warmup] if warmup else samples[0][1]
    return {
        "index": str(index_dir), "assemblies": len(queries), "warmup": warmup, "budget": budget,
        "errors": len(errors), "error_examples": errors[:3], "seconds": seconds, "leak_injected": leak,
        "fresh_threads": fresh_threads, "open_files": fds,
        "samples": samples, "start_mb": samples[0][1] / MB, "after_warmup_mb": base / MB,
        "end_mb": samples[-1][1] / MB, "growth_mb": (samples[-1][1] - base) / MB,
        "peak_after_warmup_mb": max(b for _, b in after) / MB,
        "slope_bytes_per_assembly": slope, "mean_prompt_chars": prompt_chars / max(1, len(queries) - len(errors)),
    }


def print_result(res: dict[str, Any]) -> None:
    print(f"\nindex {res['index']}: {res['assemblies']:,} assemblies ({res['warmup']:,} of warm-up), "
          f"budget {res['budget']:,} tokens, {res['seconds']:.0f} s, errors {res['errors']}"
          + ("  [leak injected]" if res["leak_injected"] else "")
          + ("  [a new thread per assembly]" if res["fresh_threads"] else ""))
    for line in res["error_examples"]:
        print("   ", line)
    warmup, last = res["warmup"], res["samples"][-1][0]
    fds = dict(res["open_files"])
    print("\n  assemblies     RSS MB  open fds")
    for done, rss_bytes in res["samples"]:
        if done in (0, warmup, last) or (done - warmup) % 1000 == 0 and done > warmup:
            label = " start" if done == 0 else " after warm-up" if done == warmup else " end" if done == last else ""
            print(f"  {done:>10,}  {rss_bytes / MB:>9.1f}  {fds.get(done, 0):>8,}{label}")
    print(f"\ngrowth after warm-up: {res['growth_mb']:+.1f} MB over {last - warmup:,} assemblies "
          f"(peak {res['peak_after_warmup_mb']:.1f} MB); slope {res['slope_bytes_per_assembly']:+,.0f} bytes per "
          f"assembly vs a mean prompt of {res['mean_prompt_chars']:,.0f} characters "
          f"(ratio {res['slope_bytes_per_assembly'] / max(1.0, res['mean_prompt_chars']):+.2f}; "
          "about 1 or more = a prompt kept per call)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, help="an index folder (default: build one from the first --peps PEPs)")
    ap.add_argument("--peps", type=int, default=40)
    ap.add_argument("--n", type=int, default=10_000, help="assemblies after the warm-up")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--every", type=int, default=100, help="sample RSS every N assemblies")
    ap.add_argument("--budget", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--leak", action="store_true", help="keep every prompt (shows what a leak looks like)")
    ap.add_argument("--fresh-threads", action="store_true", help="each assembly on a new thread")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from contextkit.embedders import Embedder

    embedder = Embedder()
    _ = embedder.dim  # the model loads here, before any clock
    with tempfile.TemporaryDirectory(prefix="ck-mem-") as tmp:
        index_dir = args.index or build_small_index(Path(tmp), args.peps, embedder)
        res = memory_curve(index_dir, embedder, args.n, args.warmup, args.every, args.budget, args.seed, args.leak,
                           args.fresh_threads)
    print_result(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    sys.exit(1 if res["errors"] else 0)


if __name__ == "__main__":
    main()
