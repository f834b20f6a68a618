"""Huge text files: streamed load + chunk against the whole-file way, and a streamed ingest.

What it measures, each case in a fresh process (so one case's peak cannot hide another's):

* ``whole``: ``load_file`` + ``TokenChunker.chunk`` on a ``--whole-size`` MiB file (the way
  every text file was read before streaming: the text and its full encoding in memory);
* ``stream``: ``open_text_stream`` + ``TokenChunker.chunk_stream`` on the same file, and on a
  ``--size`` MiB file (default 1 GiB), blocks of ``--block`` MiB;
* ``ingest``: ``contextkit.ingest`` with the real embedder (MiniLM, CPU unless CUDA is there)
  of files of ``--ingest-sizes`` MiB, streamed (``stream_above_bytes`` = 64 KiB), printing
  chunks/s and the peak RSS: the peak must not grow with the file size once the file holds
  several batches (``--batch-chunks``, 512 by default: memory scales with the batch).

The files are Tiny Shakespeare (``/work/shared/data/tinyshakespeare``) repeated, written to
``--workdir`` (default: a temporary folder, removed at the end). Peak RSS is sampled with
psutil every 5 ms and cross-checked with ``getrusage`` (the kernel's high-water mark);
"growth" is the peak minus the RSS after imports and warm-up (tokenizer tables, model).
Chunking is 256 tokens with 32 of overlap, cl100k_base, the ingest defaults.

Run: ``python bench/bench_bigfile.py`` (``--size 1024 --whole-size 64 --ingest-sizes 5,20``).
On a 2-core CPU chunking runs at ~1-2 MB/s and embedding at ~10 chunks/s, so the 1 GiB
stream takes 10-15 minutes and a 20 MiB ingest hours: use ``--ingest-sizes 0.25,1`` there.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare/input.txt"
MiB = 1 << 20


def make_file(path: Path, mib: float) -> Path:
    """``mib`` MiB of Tiny Shakespeare repeated (cut at a line end), reused if already there."""
    want = int(mib * MiB)
    if path.is_file() and path.stat().st_size == want:
        return path
    seed = SHAKESPEARE.read_bytes() if SHAKESPEARE.is_file() else b"To be, or not to be: that is the question.\n" * 30000
    with path.open("wb") as fh:
        left = want
        while left > 0:
            piece = seed[:left]
            fh.write(piece)
            left -= len(piece)
    return path


class _Peak:
    """Peak RSS sampled by a thread (psutil), beside the kernel's high-water mark."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.base = self.peak = self.proc.memory_info().rss
        self.maxrss_base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return {"rss_base": self.base, "rss_peak": self.peak, "growth": self.peak - self.base,
                "maxrss_growth": max(0, maxrss - self.maxrss_base)}


def child(mode: str, path: Path, block_mib: float, batch_chunks: int = 512) -> dict:
    """One measured case, run in its own process; prints its figures as JSON."""
    from contextkit.chunking import TokenChunker
    from contextkit.loaders import SourceFile, load_file, open_text_stream

    chunker = TokenChunker(256, 32, "cl100k_base")
    chunker.chunk("warm up: the encoding, its tables and numpy. " * 5000)
    source = SourceFile(path, path.name)
    size = path.stat().st_size
    if mode == "ingest":
        from contextkit.embedders import Embedder
        from contextkit.ingestion import ingest

        embedder = Embedder()
        embedder.embed(["warm up the model at full batch and length " * 40] * 64)  # activations at their peak
        index_dir = Path(tempfile.mkdtemp(prefix="ck-bigfile-ix-"))
        peak, t0 = _Peak(), time.perf_counter()
        report = ingest([path], index_dir / "ix", embedder=embedder, stream_above_bytes=64 << 10,
                        stream_block_bytes=int(block_mib * MiB), batch_chunks=batch_chunks)
        seconds = time.perf_counter() - t0
        shutil.rmtree(index_dir, ignore_errors=True)
        assert not report.failures, report.failures
        return {"mode": mode, "bytes": size, "seconds": seconds, "chunks": report.chunks_added,
                "tokens": report.tokens, **peak.stop()}
    peak, t0 = _Peak(), time.perf_counter()
    chunks = tokens = 0
    if mode == "whole":
        result = load_file(source)
        for c in chunker.chunk(result.documents[0]):
            chunks, tokens = chunks + 1, tokens + c.token_count
        del result
    else:
        stream = open_text_stream(source, int(block_mib * MiB))
        for c in chunker.chunk_stream(stream.blocks(), path.name, window_chars=int(block_mib * MiB)):
            chunks, tokens = chunks + 1, tokens + c.token_count
    seconds = time.perf_counter() - t0
    return {"mode": mode, "bytes": size, "seconds": seconds, "chunks": chunks, "tokens": tokens, **peak.stop()}


def run_case(mode: str, path: Path, block_mib: float, batch_chunks: int = 512) -> dict:
    out = subprocess.run([sys.executable, __file__, "_child", mode, str(path), str(block_mib), str(batch_chunks)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{mode} on {path.name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def show(r: dict) -> str:
    mb = r["bytes"] / MiB
    rate = f"{r['chunks'] / r['seconds']:8.1f} chunks/s" if r["mode"] == "ingest" else f"{mb / r['seconds']:6.2f} MiB/s"
    return (f"{r['mode']:7s} {mb:8.1f} MiB  {r['seconds']:8.1f} s  {rate}  {r['chunks']:9d} chunks  "
            f"peak RSS {r['rss_peak'] / MiB:7.0f} MiB  growth {r['growth'] / MiB:7.1f} MiB "
            f"(getrusage {r['maxrss_growth'] / MiB:7.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=1024, help="MiB streamed (load + chunk)")
    parser.add_argument("--whole-size", type=float, default=64, help="MiB loaded and chunked whole, and streamed")
    parser.add_argument("--ingest-sizes", default="5,20", help="MiB ingested with the real embedder, comma-separated")
    parser.add_argument("--block", type=float, default=1, help="MiB read (and chars windowed) at a time")
    parser.add_argument("--batch-chunks", type=int, default=512, help="ingest: chunks embedded and committed together")
    parser.add_argument("--workdir", type=Path, default=None, help="where the generated files go")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ck-bigfile-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        small = make_file(work / f"text-{args.whole_size:g}.txt", args.whole_size)
        print(f"files in {work}; block {args.block:g} MiB; chunks of 256 tokens, overlap 32, cl100k_base", flush=True)
        for mode, path in (("whole", small), ("stream", small)):
            results.append(run_case(mode, path, args.block))
            print(show(results[-1]), flush=True)
        whole, streamed = results[0], results[1]
        assert (whole["chunks"], whole["tokens"]) == (streamed["chunks"], streamed["tokens"]), "streamed != whole"
        print(f"-> at {args.whole_size:g} MiB, whole / stream: RSS growth x{whole['growth'] / max(streamed['growth'], 1):.1f}, "
              f"time x{whole['seconds'] / streamed['seconds']:.2f} (same chunks and tokens)", flush=True)
        if args.size > 0:
            big = make_file(work / f"text-{args.size:g}.txt", args.size)
            results.append(run_case("stream", big, args.block))
            print(show(results[-1]), flush=True)
            print(f"-> stream {args.size:g} MiB / {args.whole_size:g} MiB: RSS growth "
                  f"x{results[-1]['growth'] / max(streamed['growth'], 1):.2f} for x{args.size / args.whole_size:g} "
                  "the bytes", flush=True)
            big.unlink()
        sizes = [float(s) for s in args.ingest_sizes.split(",") if s.strip()]
        ingests = []
        for mib in sizes:
            ingests.append(run_case("ingest", make_file(work / f"ingest-{mib:g}.txt", mib), args.block, args.batch_chunks))
            print(show(ingests[-1]), flush=True)
        if len(ingests) >= 2:
            print(f"-> ingest {sizes[-1]:g} MiB / {sizes[0]:g} MiB: peak RSS x{ingests[-1]['rss_peak'] / ingests[0]['rss_peak']:.2f}, "
                  f"growth x{ingests[-1]['growth'] / max(ingests[0]['growth'], 1):.2f} for x{sizes[-1] / sizes[0]:g} the bytes")
        results += ingests
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        print(json.dumps(child(sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))))
    else:
        main()
