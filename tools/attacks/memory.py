"""Memory attacks (issue 33): text shapes that make tokenisation and chunking blow up, run in a child
process under an address-space cap (``RLIMIT_AS``, as ``ulimit -v``) while the peak resident memory of
the child and its workers is measured.

Once, a valid 300 MiB file of ``=`` drove ingestion to 14.8 GB: tiktoken's pre-tokenizer makes one
piece of a run with no boundary and its byte-pair merge costs ~50 bytes a byte, and the streaming
chunker, finding no stable boundary to end a window at, read the whole file into one window. A 2 GB
sparse file (1.1 MiB of text, then NULs) reached 4.75 GB. Each shape below is one of that class: a
long run of one character (ASCII, accented, emoji, digits), white space alone, one huge line of words,
tab-separated words (no stable boundary and no long run), a base64 blob, minified code, NUL bytes;
through the streaming path (large files), the whole-file path and the parallel cut.

An attack fails when the child dies (the cap was hit: tiktoken aborts on a failed allocation), when
its peak resident memory passes the bound documented in ``docs/guides.md`` (streaming: a few windows
whatever the file; whole files: about ``WHOLE_BYTES_PER_BYTE`` times the file), or when a chunk is
not within ``chunk_size`` as the tokenizer counts it."""

from __future__ import annotations

import base64
import ctypes
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tools.attacks._harness import ENV, check, small_corpus

MiB = 1 << 20
#: Address-space cap of a child that chunks (no torch): a normal small file passes well under it.
CHUNK_CAP_MIB = 2048
#: Address-space cap of ``contextkit ingest`` (torch maps ~1.9 GiB of address space on its own).
INGEST_CAP_MIB = 3584
#: Peak resident memory a streamed file may add to a chunking process that has read a small file.
STREAM_EXTRA_MIB = 256
#: Whole files: peak resident memory per byte of the file, beyond the process's own (base64, a token
#: per 1.4 bytes, is the worst shape measured: 40).
WHOLE_BYTES_PER_BYTE = 48
#: Peak resident memory of an ingest with the model loaded, streaming one hostile file (a small corpus
#: alone: ~700 MiB; a streamed 16 MiB run of ``a``: 820 MiB, 1527 MiB before the fix).
INGEST_PEAK_MIB = 1100

_CHUNK = r"""
import json, sys
from pathlib import Path
from contextkit.chunking import TokenChunker
from contextkit.core.records import Document
from contextkit.loaders import SourceFile, TextStream, load_file
mode, path, workers = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
chunker = TokenChunker(chunk_size=128, chunk_overlap=16, workers=workers)
source = SourceFile(path, path.name)
if mode == "stream":  # as contextkit.ingestion._stream does it: a checking pass, then the windows
    stream = TextStream(source, 1 << 20)
    problem = stream.check()
    chunks = [] if problem else chunker.chunk_stream(stream.blocks(), window_chars=1 << 20)
else:
    result = load_file(source)
    problem = result.errors[0] if result.errors else None
    chunks = [c for doc in result.documents for c in chunker.chunk(doc)]
n = worst = 0
for i, chunk in enumerate(chunks):
    n += 1
    if i % 53 == 0:
        worst = max(worst, chunker.tokenizer.count(chunk.text))
print(json.dumps({"chunks": n, "worst": worst, "failed": problem.reason if problem else None}))
"""


# ----------------------------------------------------------------------------- measuring


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (the chunker's worker processes), in KiB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith("VmRSS")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return total


def watch(argv: Sequence[str], cap_mib: int, timeout: float = 180) -> tuple[int, int, str, str]:
    """Run ``argv`` under an address-space cap; ``(exit status, peak resident MiB of its tree, out, err)``.

    Killed after ``timeout`` seconds (exit -9), within run.py's own limit, so a slow blow-up still
    reports its peak; and killed with this process (``PR_SET_PDEATHSIG``), so none is left behind."""
    cap = cap_mib * MiB

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    peak = 0
    with subprocess.Popen(list(argv), env=ENV, preexec_fn=limit, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, errors="replace") as child:
        out_err: list[str] = []
        import threading

        reader = threading.Thread(target=lambda: out_err.extend(child.communicate()), daemon=True)
        reader.start()
        started = time.monotonic()
        while reader.is_alive():
            peak = max(peak, _tree_rss_kib(child.pid))
            if time.monotonic() - started > timeout:
                child.kill()
            reader.join(0.05)
    out, err = (out_err + ["", ""])[:2]
    return child.returncode, peak // 1024, out, err


def _chunk_file(path: Path, mode: str, workers: int = 1, cap_mib: int = CHUNK_CAP_MIB) -> tuple[dict, int]:
    """Chunk ``path`` in a child (``stream`` or ``whole``) under the cap: its JSON summary and peak MiB."""
    rc, peak, out, err = watch([sys.executable, "-c", _CHUNK, mode, str(path), str(workers)], cap_mib)
    if rc != 0:
        _note(f"{path.name} {mode}: {'still running after 180 s' if rc == -9 else 'died'} (exit {rc}) at a "
              f"peak of {peak} MiB under a {cap_mib} MiB cap")
    check(rc == 0, f"{path.name} ({mode}): the chunking process died (exit {rc}, peak {peak} MiB, "
                   f"cap {cap_mib} MiB): {err.strip()[-300:]}")
    return json.loads(out.strip().splitlines()[-1]), peak


_baselines: dict[str, int] = {}


def _baseline(work: Path, mode: str) -> int:
    """Peak MiB of the same child chunking a small normal file: what the bounds are added to."""
    if mode not in _baselines:
        path = work / "normal.txt"
        path.write_text("The Eiffel Tower is 330 metres tall and stands in Paris.\n" * 200)
        _baselines[mode] = _chunk_file(path, mode)[1]
        path.unlink()
    return _baselines[mode]


def _note(line: str) -> None:
    """Print a measurement, and append it to ``$CK_MEMORY_LOG`` when set (run.py shows only HOLDS/FAILS)."""
    print(line)
    if os.environ.get("CK_MEMORY_LOG"):
        with open(os.environ["CK_MEMORY_LOG"], "a") as fh:
            fh.write(line + "\n")


def _write(path: Path, piece: Callable[[], str], size: int) -> Path:
    """Write about ``size`` bytes of text made of ``piece()`` repeated, a megabyte at a time."""
    with open(path, "w", encoding="utf-8") as fh:
        written = 0
        while written < size:
            block = piece()
            fh.write(block)
            written += len(block.encode())
    return path


def _hostile(work: Path, name: str, unit: str, size: int, mode: str = "stream", workers: int = 1) -> None:
    """Chunk a file of ``unit`` repeated to ``size`` bytes; fail above the documented peak (white space
    alone makes no chunk: a chunk of white space only is dropped)."""
    block = unit * max(1, MiB // len(unit.encode()))
    path = _write(work / f"{name}.txt", lambda: block, size)
    base = _baseline(work, mode)
    summary, peak = _chunk_file(path, mode, workers)
    path.unlink()
    bound = base + (STREAM_EXTRA_MIB if mode == "stream" else WHOLE_BYTES_PER_BYTE * size // MiB)
    _note(f"{name} {mode}{f' workers={workers}' if workers > 1 else ''}: {size // MiB} MiB, peak {peak} MiB "
          f"(bound {bound}, small file {base}), {summary}")
    check(summary["failed"] is None, f"{name}: reported as failed: {summary['failed']}")
    check((summary["chunks"] > 0 or unit.isspace()) and summary["worst"] <= 128, f"{name}: chunks {summary}")
    check(peak <= bound, f"{name} ({size // MiB} MiB, {mode}): peak {peak} MiB, above the bound of "
                         f"{bound} MiB (a small file: {base} MiB)")


# ----------------------------------------------------------------------------- streaming


STREAM_SIZE = 16 * MiB


def attack_stream_run_of_equals(work: Path) -> None:
    _hostile(work, "equals", "=", STREAM_SIZE)


def attack_stream_run_of_letters(work: Path) -> None:
    _hostile(work, "letters", "a", STREAM_SIZE)


def attack_stream_run_of_accented(work: Path) -> None:
    _hostile(work, "accented", "é", STREAM_SIZE)


def attack_stream_run_of_emoji(work: Path) -> None:
    _hostile(work, "emoji", "\U0001F600", STREAM_SIZE)


def attack_stream_run_of_digits(work: Path) -> None:
    _hostile(work, "digits", "7", STREAM_SIZE)


def attack_stream_white_space(work: Path) -> None:
    _hostile(work, "spaces", " " * 4000 + "\n" * 100 + "\t", STREAM_SIZE)


def attack_stream_one_line_of_words(work: Path) -> None:
    random.seed(7)
    words = " ".join(random.choice(["alpha", "beta", "gamma", "delta", "epsilon."]) for _ in range(200_000)) + " "
    _hostile(work, "words", words, STREAM_SIZE)


def attack_stream_tab_separated(work: Path) -> None:
    """No stable boundary at all (tiktoken restarts only at a space or a line start) and no long run."""
    _hostile(work, "tabs", "word\t", STREAM_SIZE)


def attack_stream_base64_blob(work: Path) -> None:
    blob = base64.b64encode(random.Random(5).randbytes(3 * MiB // 4)).decode()
    _hostile(work, "base64", blob, STREAM_SIZE)


def attack_stream_minified_code(work: Path) -> None:
    code = "a=function(b){return(b*2)};if(x<3){y=[1,2,3].map(a)}else{z.q(\"k\",{p:1})};"  # no space at all
    _hostile(work, "minified", code, STREAM_SIZE)


# ----------------------------------------------------------------------------- whole files


WHOLE_SIZE = 8 * MiB


def attack_whole_run_of_equals(work: Path) -> None:
    _hostile(work, "equals", "=", WHOLE_SIZE, mode="whole")


def attack_whole_run_of_emoji(work: Path) -> None:
    _hostile(work, "emoji", "\U0001F600", WHOLE_SIZE, mode="whole")


def attack_whole_base64_blob(work: Path) -> None:
    blob = base64.b64encode(random.Random(6).randbytes(3 * MiB // 4)).decode()
    _hostile(work, "base64", blob, WHOLE_SIZE, mode="whole")


def attack_parallel_run_of_letters(work: Path) -> None:
    """The parallel cut (workers=2) of a whole file with no stable boundary."""
    _hostile(work, "letters", "a", WHOLE_SIZE, mode="whole", workers=2)


# ----------------------------------------------------------------------------- NUL bytes


def attack_sparse_file_streamed(work: Path) -> None:
    """A 2 GB sparse file: 1.1 MiB of text, then a hole (NUL bytes that cost no disk)."""
    path = work / "sparse.txt"
    _write(path, lambda: "Sparse files read as NUL bytes past their text.\n" * 1000, 1100 * 1024)
    os.truncate(path, 2 << 30)
    summary, peak = _chunk_file(path, "stream")
    check(summary["failed"] is not None and "sparse" in summary["failed"],
          f"a sparse file was not reported (peak {peak} MiB): {summary}")
    _note(f"sparse streamed: {summary['failed']}, peak {peak} MiB")


def attack_nul_bytes_streamed(work: Path) -> None:
    """Text, then 40 MiB of NUL bytes actually written (no hole)."""
    path = work / "nul.txt"
    _write(path, lambda: "Then binary garbage follows.\n" * 1000, 1 * MiB)
    with open(path, "ab") as fh:
        for _ in range(40):
            fh.write(b"\x00" * MiB)
    summary, peak = _chunk_file(path, "stream")
    path.unlink()
    check(summary["failed"] is not None and "NUL" in summary["failed"],
          f"a file of NUL bytes was not reported (peak {peak} MiB): {summary}")


def attack_nul_bytes_whole(work: Path) -> None:
    """A small file (read whole) whose NUL bytes start after the first 8 KiB the binary sniff reads."""
    path = work / "nul_small.txt"
    path.write_bytes(b"Plain text first.\n" * 1000 + b"\x00" * (4 * MiB))
    summary, _ = _chunk_file(path, "whole")
    check(summary["failed"] is not None and "NUL" in summary["failed"], f"NUL bytes were chunked: {summary}")


# ----------------------------------------------------------------------------- the CLI


def _ingest(work: Path, files: Path, *extra: str) -> tuple[int, int, str]:
    rc, peak, out, err = watch([sys.executable, "-m", "contextkit", "ingest", str(files), "--index",
                                str(work / "idx"), "--quiet", "--json", *extra], INGEST_CAP_MIB, timeout=220)
    _note(f"ingest {files.name} {' '.join(extra)}: exit {rc}, peak {peak} MiB (cap {INGEST_CAP_MIB} MiB)")
    check(rc in (0, 1), f"ingest died (exit {rc}, peak {peak} MiB, cap {INGEST_CAP_MIB} MiB): {err.strip()[-400:]}")
    check("Traceback" not in err, f"a traceback reached the user: {err[-600:]}")
    return rc, peak, out


def attack_ingest_streams_a_run_of_letters(work: Path) -> None:
    """``contextkit ingest`` of a 16 MiB run of ``a`` (streamed: above --stream-above 4) beside normal files."""
    folder = small_corpus(work / "corpus", 2)
    _write(folder / "run.txt", lambda: "a" * MiB, 16 * MiB)
    rc, peak, out = _ingest(work, folder, "--stream-above", "4")
    report = json.loads(out)
    check(rc == 0 and not report.get("failures"), f"ingest failed: {out[-600:]}")
    check(peak <= INGEST_PEAK_MIB, f"ingest peaked at {peak} MiB, above {INGEST_PEAK_MIB} MiB")
    _note(f"ingest of a 16 MiB run: peak {peak} MiB, {report.get('chunks_added')} chunks")


def attack_ingest_reports_a_sparse_file(work: Path) -> None:
    """``contextkit ingest`` of a 2 GB sparse file beside normal files: reported by name, the rest indexed."""
    folder = small_corpus(work / "corpus", 2)
    path = folder / "sparse.txt"
    _write(path, lambda: "Sparse files read as NUL bytes past their text.\n" * 1000, 1100 * 1024)
    os.truncate(path, 2 << 30)
    rc, peak, out = _ingest(work, folder)
    report = json.loads(out)
    check(any(f["path"].endswith("sparse.txt") and "sparse" in f["reason"] for f in report.get("failures", [])),
          f"the sparse file was not reported by name and reason (peak {peak} MiB): {out[-600:]}")
    check(report.get("documents") == 2, f"the normal files were not indexed: {out[-600:]}")
    check(peak <= INGEST_PEAK_MIB, f"ingest peaked at {peak} MiB, above {INGEST_PEAK_MIB} MiB")
