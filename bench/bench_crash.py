"""Crash safety: ``kill -9`` a real ingestion at random moments, re-run it, compare with a clean ingest.

Each trial starts a real ingestion (real files, the real model, SQLite + FAISS +
BM25 on disk) in its own process, sends it ``SIGKILL`` at a seeded random moment,
checks what the kill left (it must open, FAISS and BM25 must hold exactly the
store's chunks, and every file the store lists must be whole), re-runs the same
ingestion to the end and compares the index with a clean ingest of the same input:
the same chunk ids, texts, offsets and headers, vectors within 1e-4, no duplicate and
no missing chunk, FAISS and BM25 in step with the store, and ``verify_index`` clean.

Kill moments are stratified over the clean run's duration (trial ``i`` of ``n`` is
killed at ``(i + u) / n`` of it, ``u`` uniform), so they cover the whole run; the
phase each one hit (opening, embedding, storing a batch, between batches, saving)
is read from events the ingesting process writes as it goes. A random moment
rarely falls inside a save (milliseconds of a run of seconds), so ``--save-points``
adds one trial per step of :meth:`Index.save` at which the process kills itself:
after the FAISS temporary file is written, after it is renamed to ``vectors.<G>.faiss``,
after the BM25 folder ``bm25.<G>`` is in place, after ``manifest.<G>.json`` is written
(before ``manifest.json`` names it), and after the manifest's temporary file is written;
plus one inside an open transaction.

Processes come from a fork server: one process imports torch and
sentence-transformers and loads the model once (about 20 s on a busy 2-core
machine), then forks a child per run, so a run costs its ingestion only. The
children never share a model that has run (the server does not embed), so torch's
threads start fresh in each.

Run: ``python bench/bench_crash.py`` (20 random kills + 6 at fixed points, 16 files; see bench/README.md).
Flags: ``--kills N``, ``--seed N``, ``--files N``, ``--chars N``, ``--no-save-points``,
``--index-type flat|hnsw|auto`` (hnsw adds to its graph in place; the check reads vectors
back from FAISS, which IVF cannot), ``--json FILE``. The test suite runs a short version
(tests/index/test_reliability.py).
"""

from __future__ import annotations

import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import dataclasses
import json
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"

#: Steps of ``Index.save`` (and one inside a transaction) where a child can kill itself.
SAVE_POINTS = ("save:faiss_tmp", "save:faiss", "save:bm25", "save:gen_manifest", "save:manifest_tmp")
TXN_POINT = "commit:before"


# =============================================================================== the server
def _serve() -> None:
    """The fork server's main loop: one JSON job per stdin line, one child per job."""
    t0 = time.perf_counter()
    import faiss  # noqa: F401

    import contextkit.cli  # noqa: F401
    import contextkit.cli.index  # noqa: F401  (registers verify / repair)
    import contextkit.ingestion  # noqa: F401
    from contextkit.embedders import Embedder
    from contextkit.index._bm25 import _bm25s
    from contextkit.tokenizers import TiktokenTokenizer

    _bm25s()  # bm25s and its logging set-up, once
    TiktokenTokenizer("cl100k_base")  # the default chunker's tokenizer (offline, cached per process)
    backend = os.environ.get("CK_CRASH_BACKEND", "torch")
    embedder = Embedder(backend=backend)  # type: ignore[arg-type]
    _ = embedder.dim  # loads the weights; no inference here, so no thread pool to inherit
    sys.stdout.write(json.dumps({"ready": round(time.perf_counter() - t0, 2)}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        job = json.loads(line)
        if job.get("kind") == "exit":
            break
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                code = _child(job, embedder)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - what an uncaught exception prints
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        sys.stdout.write(json.dumps({"pid": pid, "returncode": rc}) + "\n")
        sys.stdout.flush()


def _child(job: dict, embedder: Any) -> int:
    """Run one job in the forked child: stdout/stderr to files, events to a file, faults installed."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    events = os.open(job["events"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    t0 = time.monotonic()

    def emit(name: str) -> None:  # one write() per event: whole lines even under SIGKILL
        os.write(events, f"{time.monotonic() - t0:.4f} {name}\n".encode())

    _install_hooks(emit, job.get("crash"), job.get("fault"), job.get("batch_chunks"))
    emit("start")
    if job["kind"] == "cli":
        from contextkit.cli import main

        sys.argv = ["contextkit", *job["argv"]]
        main()
        return 0
    from contextkit.ingestion import IngestConfig, ingest

    config = IngestConfig(**job.get("config", {}))
    ingest(job["paths"], job["index"], config, embedder=embedder)
    emit("done")
    return 0


def _install_hooks(emit, crash: str | None, fault: str | None, batch_chunks: int | None = None) -> None:
    """Events at each phase; ``crash``: SIGKILL itself at that point; ``fault``: an environment failure.

    ``batch_chunks`` overrides the setting for a CLI run (the command has no flag for it).
    """
    import errno

    from contextkit.embedders import Embedder
    from contextkit.index import _index
    from contextkit.ingestion import _ingest as ingest_mod

    def die(point: str) -> None:
        emit(f"kill {point}")
        os.kill(os.getpid(), signal.SIGKILL)

    embed = Embedder.embed

    def embed_hook(self, *args, **kwargs):
        emit("embed+")
        try:
            return embed(self, *args, **kwargs)
        finally:
            emit("embed-")

    Embedder.embed = embed_hook

    open_index = ingest_mod.open_index

    def open_hook(*args, **kwargs):
        result = open_index(*args, **kwargs)
        emit("opened")
        return result

    ingest_mod.open_index = open_hook

    if batch_chunks is not None:
        run_batches = ingest_mod.run_batches

        def batches_hook(todo, run):
            run = dataclasses.replace(run, config=run.config.with_options(batch_chunks=batch_chunks))
            return run_batches(todo, run)

        ingest_mod.run_batches = batches_hook

    commits = {"n": 0}
    commit = _index.Index.commit

    def commit_hook(self):
        commits["n"] += 1
        if crash == TXN_POINT and commits["n"] == 2:
            die(crash)
        commit(self)
        emit(f"commit {commits['n']}")
        if fault == "readonly_after_commit" and commits["n"] == 1:
            _make_read_only(self.path)
            emit("made read-only")
        if fault == "fill_disk_after_commit" and commits["n"] == 1:
            _fill_disk(self.path.parent / "filler")
            emit("disk filled")

    _index.Index.commit = commit_hook

    save = _index.Index.save

    def save_hook(self, *args, **kwargs):
        emit("save+")
        try:
            return save(self, *args, **kwargs)
        finally:
            emit("save-")

    _index.Index.save = save_hook

    replace = os.replace

    def replace_hook(src, dst, *args, **kwargs):
        name, src_name = os.path.basename(os.fspath(dst)), os.path.basename(os.fspath(src))
        if not commits["n"]:  # save points fire in the save after data was committed, not in Index.create's
            return replace(src, dst, *args, **kwargs)
        faiss_file = re.fullmatch(r"vectors\.\d+\.faiss", name) is not None
        if crash == "save:faiss_tmp" and faiss_file:
            die(crash)
        if crash == "save:manifest_tmp" and name == "manifest.json":
            die(crash)
        result = replace(src, dst, *args, **kwargs)
        emit(f"replaced {name}")
        if crash == "save:faiss" and faiss_file:
            die(crash)
        if crash == "save:gen_manifest" and re.fullmatch(r"manifest\.\d+\.json", name):
            die(crash)
        if crash == "save:bm25" and re.fullmatch(r"bm25\.\d+", name) and src_name == f"{name}.tmp":
            die(crash)
        return result

    os.replace = replace_hook

    if fault == "enospc_fsync":  # the simulated disk-full: fsync of a file being saved fails like the OS would
        fsync = os.fsync

        def fsync_hook(fd):
            if not commits["n"]:  # mid-ingest: after the first batch is committed
                return fsync(fd)
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.endswith(".tmp"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return fsync(fd)

        os.fsync = fsync_hook


def _fill_disk(filler: Path) -> None:
    """Write ``filler`` until the file system has no byte left (another process filling the disk)."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
            block = b"\0" * size
            try:
                while True:
                    os.write(fd, block)
            except OSError:
                continue
    finally:
        os.close(fd)


def _make_read_only(folder: Path) -> None:
    """Make ``folder`` refuse new files: chmod for a user, ``chattr +i`` for root (who ignores modes)."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
    else:
        subprocess.run(["chattr", "+i", str(folder)], check=True, capture_output=True)


def make_writable(folder: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)
    os.chmod(folder, 0o755)


def can_make_read_only(folder: Path) -> bool:
    """Whether :func:`_make_read_only` really stops this process from creating files in ``folder``."""
    probe = folder / "probe"
    probe.mkdir(parents=True, exist_ok=True)
    try:
        _make_read_only(probe)
    except (OSError, subprocess.CalledProcessError):
        return False
    try:
        (probe / "x").write_text("x")
    except OSError:
        return True
    else:
        return False
    finally:
        make_writable(probe)
        shutil.rmtree(probe, ignore_errors=True)


# =============================================================================== the client
@dataclass
class Child:
    pid: int
    server: ForkServer
    events_path: Path
    stdout_path: Path
    stderr_path: Path
    started: float
    returncode: int | None = None

    def wait(self, timeout: float = 300.0) -> int:
        if self.returncode is None:
            msg = self.server._next(timeout)
            assert msg.get("pid") == self.pid, msg
            self.returncode = int(msg["returncode"])
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def events(self) -> list[tuple[float, str]]:
        if not self.events_path.is_file():
            return []
        out = []
        for line in self.events_path.read_text().splitlines():
            t, _, name = line.partition(" ")
            out.append((float(t), name))
        return out

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


class ForkServer:
    """A warm Python with contextkit and the model loaded, forking one child per job."""

    def __init__(self, workdir: Path, backend: str = "torch") -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CK_CRASH_BACKEND": backend, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._n = 0
        self.ready_s: float | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                self._lines.put(json.loads(line))
        self._lines.put({"eof": True})

    def _next(self, timeout: float) -> dict:
        try:
            msg = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"fork server: nothing after {timeout} s") from None
        if msg.get("eof"):
            raise RuntimeError(f"fork server exited (code {self.proc.poll()})")
        return msg

    def wait_ready(self, timeout: float = 300.0) -> float:
        if self.ready_s is None:
            self.ready_s = float(self._next(timeout)["ready"])
        return self.ready_s

    def spawn(self, job: dict) -> Child:
        self.wait_ready()
        self._n += 1
        base = self.workdir / f"job{self._n:03d}"
        job = {**job, "events": str(base) + ".events", "stdout": str(base) + ".out", "stderr": str(base) + ".err"}
        started = time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        msg = self._next(60)
        return Child(int(msg["pid"]), self, Path(job["events"]), Path(job["stdout"]), Path(job["stderr"]), started)

    def ingest(self, paths: list[Path], index: Path, crash: str | None = None, **config: Any) -> Child:
        return self.spawn({"kind": "ingest", "paths": [str(p) for p in paths], "index": str(index),
                           "config": config, "crash": crash})

    def cli(self, argv: list[Any], fault: str | None = None, batch_chunks: int | None = None) -> Child:
        return self.spawn({"kind": "cli", "argv": [str(a) for a in argv], "fault": fault,
                           "batch_chunks": batch_chunks})

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"kind": "exit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(1)  # holds nothing worth a slow interpreter shutdown (torch's takes seconds)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# =============================================================================== checks
def make_corpus(dest: Path, files: int, chars: int, skip: int = 0) -> Path:
    """The first ``files`` PEPs (after ``skip``), each cut to ``chars`` characters."""
    dest.mkdir(parents=True, exist_ok=True)
    for p in sorted(PEPS.glob("*.rst"))[skip : skip + files]:
        (dest / p.name).write_text(p.read_text(encoding="utf-8")[:chars], encoding="utf-8")
    return dest


@dataclass
class Snapshot:
    chunks: dict[str, tuple]  # id -> (doc_id, ordinal, start, end, header, text, file)
    vectors: dict[str, np.ndarray]
    files: dict[str, str]  # path -> sha256
    problems: list[str] = field(default_factory=list)


def snapshot(index_dir: Path) -> Snapshot:
    """What an index holds, read through plain SQLite, plus the consistency of its derived parts."""
    from contextkit.index import Index

    problems: list[str] = []
    with Index.open(index_dir, read_only=True) as index:  # rebuilds lagging derived files in memory
        db = index.store.db
        rows = db.execute("SELECT c.rowid, c.id, c.doc_id, c.ordinal, c.start, c.end, c.header, c.text, d.file, "
                          "v.vector FROM chunks c LEFT JOIN documents d ON d.id = c.doc_id "
                          "LEFT JOIN vectors v ON v.key = c.vector_key ORDER BY c.rowid").fetchall()
        files = dict(db.execute("SELECT path, sha256 FROM files"))
        chunks: dict[str, tuple] = {}
        vectors: dict[str, np.ndarray] = {}
        rowids = []
        for rowid, cid, doc_id, ordinal, start, end, header, text, file, blob in rows:
            if cid in chunks:
                problems.append(f"duplicate chunk {cid}")
            if blob is None:
                problems.append(f"chunk {cid} has no vector")
                continue
            chunks[cid] = (doc_id, ordinal, start, end, header, text, file)
            vectors[cid] = np.frombuffer(blob, dtype=np.float32)
            rowids.append(rowid)
        if len(index) != len(rows):
            problems.append(f"FAISS holds {len(index)} vectors, the store {len(rows)} chunks")
        else:
            faiss_ids = np.sort(__import__("faiss").vector_to_array(index._faiss.id_map))
            if not np.array_equal(faiss_ids, np.asarray(rowids, dtype=np.int64)):
                problems.append("FAISS ids differ from the store's chunk rowids")
            for rowid, cid in zip(rowids, chunks):
                if not np.allclose(index._faiss.reconstruct(int(rowid)), vectors[cid], atol=1e-6):
                    problems.append(f"FAISS vector of {cid} differs from the stored one")
                    break
        bm25 = index.bm25
        if not np.array_equal(np.sort(bm25.rowids), np.asarray(rowids, dtype=np.int64)):
            problems.append("BM25 chunks differ from the store's")
    keys = [(c[0], c[1]) for c in chunks.values()]
    if len(set(keys)) != len(keys):
        problems.append("two chunks share a document and ordinal")
    return Snapshot(chunks, vectors, files, problems)


def compare(got: Snapshot, want: Snapshot, atol: float = 1e-4) -> list[str]:
    """Differences between an index and the clean one (empty: equal)."""
    diffs = list(got.problems)
    missing = sorted(set(want.chunks) - set(got.chunks))
    extra = sorted(set(got.chunks) - set(want.chunks))
    if missing:
        diffs.append(f"{len(missing)} chunks missing, e.g. {missing[0]}")
    if extra:
        diffs.append(f"{len(extra)} chunks too many, e.g. {extra[0]}")
    for cid in sorted(set(got.chunks) & set(want.chunks)):
        if got.chunks[cid][:6] != want.chunks[cid][:6]:
            diffs.append(f"{cid}: text, offsets or header differ")
            break
        gap = float(np.max(np.abs(got.vectors[cid] - want.vectors[cid])))
        if gap > atol:
            diffs.append(f"{cid}: vectors differ by {gap:.2e}")
            break
    if got.files != want.files:
        diffs.append("the files table differs")
    return diffs


def partial_problems(partial: Snapshot, want: Snapshot) -> list[str]:
    """What is wrong with the state a kill left: it must be consistent and hold whole files only."""
    problems = list(partial.problems)
    for path in partial.files:
        have = sorted(c for c, v in partial.chunks.items() if v[6] == path)
        full = sorted(c for c, v in want.chunks.items() if v[6] == path)
        if have != full:
            problems.append(f"{path}: {len(have)} of its {len(full)} chunks (a partial file)")
    listed = set(partial.files)
    strays = [c for c, v in partial.chunks.items() if v[6] not in listed]
    if strays:
        problems.append(f"{len(strays)} chunks of files the store does not list, e.g. {strays[0]}")
    return problems


def phase_at(events: list[tuple[float, str]], t: float | None = None) -> str:
    """The phase of an ingestion at time ``t`` (its last event), from its events."""
    state = "starting"
    for when, name in events:
        if t is not None and when > t:
            break
        if name.startswith("kill "):
            return f"save step {name[5:]}" if "save:" in name else f"in a transaction ({name[5:]})"
        state = {"start": "opening the index", "opened": "loading/chunking", "embed+": "embedding",
                 "embed-": "storing a batch (transaction)", "save+": "saving", "save-": "closing",
                 "done": "finished"}.get(name, state)
        if name.startswith("commit"):
            state = "loading/chunking (between batches)"
        elif name.startswith("replaced") and state.startswith("saving"):
            state = f"saving (after {name[9:]})"
    return state


# =============================================================================== the benchmark
def run_trials(server: ForkServer, corpus: Path, work: Path, kills: int, seed: int, save_points: bool,
               config: dict, log=print) -> dict:
    from contextkit.index import verify_index

    rng = random.Random(seed)
    clean = work / "clean"
    t0 = time.monotonic()
    child = server.ingest([corpus], clean, **config)
    if child.wait() != 0:
        raise RuntimeError(f"clean ingest failed: {child.stderr[-2000:]}")
    first_s = time.monotonic() - child.started
    want = snapshot(clean)
    if want.problems:
        raise RuntimeError(f"clean index inconsistent: {want.problems}")
    # the first run pays cold caches (ONNX export lookup, page cache): time a second one to spread the kills over
    warm = server.ingest([corpus], work / "warm", **config)
    if warm.wait() != 0:
        raise RuntimeError(f"second clean ingest failed: {warm.stderr[-2000:]}")
    full_s = min(first_s, time.monotonic() - warm.started)
    if compare(snapshot(work / "warm"), want):
        raise RuntimeError("two clean ingests differ")
    shutil.rmtree(work / "warm", ignore_errors=True)
    log(f"clean ingest: {len(want.files)} files, {len(want.chunks)} chunks in {full_s:.1f} s (first run "
        f"{first_s:.1f} s); events: {', '.join(n for _, n in child.events() if not n.startswith('replaced'))[:300]}")
    trials: list[dict[str, Any]] = []
    plan: list[tuple[str, Any]] = [("time", (i + rng.random()) / kills * full_s) for i in range(kills)]
    if save_points:
        plan += [("point", p) for p in (TXN_POINT, *SAVE_POINTS)]
    header = f"{'#':>3} {'kill at':>8} {'phase hit':<38} {'files kept':>10} {'rerun s':>8}  verdict"
    log(header)
    log("-" * len(header))
    for n, (how, arg) in enumerate(plan, 1):
        ix = work / f"trial{n:02d}"
        if how == "time":
            child = server.ingest([corpus], ix, **config)
            time.sleep(max(0.0, arg - (time.monotonic() - child.started)))
            killed_at = time.monotonic() - child.started
            child.kill()
            rc = child.wait()
            # a killed process writes no event after the kill: its last event is the phase it was in
            phase = phase_at(child.events()) if rc == -signal.SIGKILL else "finished before the kill"
        else:
            child = server.ingest([corpus], ix, crash=arg, **config)
            rc = child.wait()
            killed_at = time.monotonic() - child.started
            phase = phase_at(child.events())
            if rc != -signal.SIGKILL:
                phase = f"{arg} not reached (rc {rc})"
        trial: dict[str, Any] = {"trial": n, "kind": how, "kill_s": round(killed_at, 3), "phase": phase,
                                 "returncode": rc}
        problems: list[str] = []
        kept = 0
        if (ix / "manifest.json").exists():
            try:
                partial = snapshot(ix)
                kept = len(partial.files)
                problems += [f"after the kill: {p}" for p in partial_problems(partial, want)]
            except Exception as exc:  # noqa: BLE001 - reported as the verdict
                problems.append(f"after the kill the index does not open: {exc}")
        rerun = server.ingest([corpus], ix, **config)
        rerun_rc = rerun.wait()
        rerun_s = time.monotonic() - rerun.started
        if rerun_rc != 0:
            problems.append(f"re-run failed (rc {rerun_rc}): {rerun.stderr.strip().splitlines()[-1:]}")
        else:
            problems += compare(snapshot(ix), want)
            report = verify_index(ix)
            problems += [f"verify: {c.file} {c.status}: {c.detail}" for c in report.problems]
        trial.update(files_kept=kept, rerun_s=round(rerun_s, 2), equal=not problems, problems=problems)
        trials.append(trial)
        verdict = "equal to the clean ingest" if not problems else "DIFFERENT: " + "; ".join(problems)[:200]
        log(f"{n:>3} {killed_at:>7.2f}s {phase[:38]:<38} {kept:>10} {rerun_s:>8.1f}  {verdict}")
        shutil.rmtree(ix, ignore_errors=True)
    equal = sum(t["equal"] for t in trials)
    killed = sum(t["returncode"] == -signal.SIGKILL for t in trials)
    random_killed = sum(t["returncode"] == -signal.SIGKILL for t in trials if t["kind"] == "time")
    phases: dict[str, int] = {}
    for t in trials:
        if t["kind"] == "time" and t["returncode"] == -signal.SIGKILL:
            key = t["phase"].split(" (")[0]
            phases[key] = phases.get(key, 0) + 1
    log(f"total: {equal}/{len(trials)} re-runs equal to the clean ingest; {killed} runs killed by SIGKILL: "
        f"{random_killed} of {kills} at random moments ({', '.join(f'{n} {k}' for k, n in phases.items())}), "
        f"{killed - random_killed} at save/transaction points; {time.monotonic() - t0:.0f} s")
    return {"clean": {"files": len(want.files), "chunks": len(want.chunks), "seconds": round(full_s, 2)},
            "trials": trials, "equal": equal, "killed": killed, "total": len(trials)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--chunk-size", type=int, default=128)
    parser.add_argument("--batch-chunks", type=int, default=4)
    parser.add_argument("--no-save-points", action="store_true")
    parser.add_argument("--backend", default="auto", choices=["torch", "onnx", "auto"])
    parser.add_argument("--index-type", default="flat", choices=["flat", "hnsw", "auto"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.serve:
        _serve()
        return
    import logging

    logging.basicConfig(level=logging.ERROR)  # "rebuilding" warnings of each reopened killed index: expected
    work = Path(tempfile.mkdtemp(prefix="ck-crash-"))
    try:
        corpus = make_corpus(work / "corpus", args.files, args.chars)
        with ForkServer(work / "jobs", backend=args.backend) as server:
            print(f"fork server ready in {server.wait_ready():.1f} s (imports + model load, once)")
            config = {"chunk_size": args.chunk_size, "chunk_overlap": 16, "batch_chunks": args.batch_chunks,
                      "index_type": args.index_type}
            result = run_trials(server, corpus, work, args.kills, args.seed, not args.no_save_points, config)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if result["equal"] == result["total"] else 1)


if __name__ == "__main__":
    main()
