"""Reliability of an index folder: kill -9, full disk, permissions, damaged files; real model, real files.

Ingestions run in processes forked from one warm server (bench/bench_crash.py:
torch, sentence-transformers and the model are loaded once, ~15-20 s), so each
killed or failing run costs only its own few seconds. The long version, 20 kills,
is ``python bench/bench_crash.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import contextkit.cli.index  # noqa: F401  (registers verify / repair on the app)
from contextkit.cli import app
from contextkit.index import (
    Index,
    IndexCorruptError,
    IndexWriteError,
    _checksums,
    repair_index,
    verify_index,
)
from contextkit.search import search_index

from .conftest import derived_path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_crash", REPO / "bench" / "bench_crash.py")
bench_crash = importlib.util.module_from_spec(_spec)
sys.modules["bench_crash"] = bench_crash
_spec.loader.exec_module(bench_crash)

#: Small files and small chunks: several batches (so kills fall between commits) in ~3 s.
CHUNKING = {"chunk_size": 64, "chunk_overlap": 8}
CONFIG = {**CHUNKING, "batch_chunks": 1}
CLI_CHUNKING = ["--chunk-size", "64", "--overlap", "8", "-q"]
runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_data):
    srv = bench_crash.ForkServer(tmp_path_factory.mktemp("jobs"), backend="auto")
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, shared_data) -> Path:
    return bench_crash.make_corpus(tmp_path_factory.mktemp("corpus") / "peps", files=6, chars=700)


@pytest.fixture(scope="module")
def clean(server, corpus, tmp_path_factory):
    """A clean, uninterrupted ingest of the corpus: what every other run must end up equal to."""
    ix = tmp_path_factory.mktemp("clean") / "ix"
    child = server.ingest([corpus], ix, **CONFIG)
    assert child.wait() == 0, child.stderr
    seconds = time.monotonic() - child.started
    want = bench_crash.snapshot(ix)
    assert not want.problems and len(want.files) == 6 and len(want.chunks) >= 12
    return ix, want, seconds, child.events()


def one_error_line(stderr: str) -> str:
    text = stderr.strip()
    assert "Traceback" not in text, text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def ingest_cli(corpus: Path, ix: Path) -> list[str]:
    return ["ingest", corpus, "--index", ix, *CLI_CHUNKING]


# ------------------------------------------------------------------------------------ kill -9
class TestKill:
    def test_kill_9_at_random_moments_then_rerun_equals_a_clean_ingest(self, server, corpus, clean, tmp_path):
        _, want, full_s, events = clean
        rng = random.Random(20240611)
        batches = sum(1 for _, name in events if name == "embed+")
        assert batches >= 3
        trials = [
            ("time", rng.uniform(0.15, 0.85) * full_s),  # anywhere in the run
            ("embedding", rng.randint(2, batches)),  # inside the k-th batch's embedding
            ("point", bench_crash.TXN_POINT),  # a batch written, its transaction not committed
            *[("point", p) for p in rng.sample(bench_crash.SAVE_POINTS, 2)],  # inside the final save
        ]
        phases = []
        for n, (how, arg) in enumerate(trials):
            ix = tmp_path / f"ix{n}"
            if how == "point":
                child = server.ingest([corpus], ix, crash=arg, **CONFIG)
            else:
                child = server.ingest([corpus], ix, **CONFIG)
                if how == "time":
                    time.sleep(max(0.0, arg - (time.monotonic() - child.started)))
                else:
                    deadline = time.monotonic() + 60
                    while sum(1 for _, e in child.events() if e == "embed+") < arg:
                        assert time.monotonic() < deadline, child.events()
                        time.sleep(0.005)
                    time.sleep(rng.uniform(0.0, 0.01))
                child.kill()
            assert child.wait() == -signal.SIGKILL, (how, arg, child.events(), child.stderr[-2000:])
            phase = bench_crash.phase_at(child.events())  # its last event before the kill
            phases.append(f"{how} {arg}: {phase}")
            if (ix / "manifest.json").exists():  # what the kill left opens, consistent, whole files only
                partial = bench_crash.snapshot(ix)
                assert bench_crash.partial_problems(partial, want) == [], phases[-1]
            rerun = server.ingest([corpus], ix, **CONFIG)
            assert rerun.wait() == 0, rerun.stderr
            assert bench_crash.compare(bench_crash.snapshot(ix), want) == [], phases[-1]
            assert verify_index(ix).ok, verify_index(ix).problems
        print("\n".join(phases))
        assert "embedding" in phases[1], phases
        assert sum("save step" in p for p in phases) == 2 and "transaction" in phases[2], phases


# ------------------------------------------------------------------------- write failures
class TestWriteFailures:
    def test_permission_error_mid_ingest(self, server, corpus, clean, tmp_path):
        if not bench_crash.can_make_read_only(tmp_path):
            pytest.skip("cannot make a folder read-only for this user here")
        _, want, _, _ = clean
        ix = tmp_path / "ix"
        child = server.cli(ingest_cli(corpus, ix), fault="readonly_after_commit", batch_chunks=1)
        rc = child.wait()
        bench_crash.make_writable(ix)
        assert "made read-only" in [e for _, e in child.events()]
        line = one_error_line(child.stderr)
        assert rc == 1 and "could not write vectors.faiss" in line, line
        assert "permission denied" in line or "not permitted" in line, line
        assert "last committed state" in line
        # the committed batches are intact: the index opens, consistent, whole files only
        partial = bench_crash.snapshot(ix)
        assert bench_crash.partial_problems(partial, want) == [] and partial.files
        search = server.cli(["search", "What is a PEP?", "--index", ix, "-k", "3", "--json"])
        assert search.wait() == 0, search.stderr
        assert len(json.loads(search.stdout)["hits"]) == 3
        # the derived files lag the store: verify says so, repair fixes it
        lagging = runner.invoke(app, ["verify", "--index", str(ix)])
        assert lagging.exit_code == 1 and "stale" in lagging.output
        assert runner.invoke(app, ["repair", "--index", str(ix)]).exit_code == 0
        assert runner.invoke(app, ["verify", "--index", str(ix)]).exit_code == 0
        rerun = server.cli(ingest_cli(corpus, ix))
        assert rerun.wait() == 0, rerun.stderr
        assert bench_crash.compare(bench_crash.snapshot(ix), want) == []

    def test_disk_full_mid_ingest_on_a_real_small_file_system(self, server, corpus, clean, tmp_path):
        _, want, _, _ = clean
        small = tmp_path / "small"
        small.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)],
                                 capture_output=True).returncode == 0 if os.geteuid() == 0 else False
        if not mounted:
            pytest.skip("cannot mount a small tmpfs here (needs root); the simulated ENOSPC test covers it")
        try:
            ix = small / "ix"
            child = server.cli(ingest_cli(corpus, ix), fault="fill_disk_after_commit", batch_chunks=1)
            rc = child.wait()
            assert "disk filled" in [e for _, e in child.events()]
            line = one_error_line(child.stderr)
            assert rc == 1 and "the disk is full" in line and "last committed state" in line, line
            assert os.statvfs(small).f_bavail == 0  # still full: the last committed state must open as it is
            partial = bench_crash.snapshot(ix)
            assert bench_crash.partial_problems(partial, want) == [] and partial.files
            hits = search_index(ix, "PEP purpose and guidelines", k=3, mode="bm25")
            assert hits and all(h.chunk.doc_id in partial.files for h in hits)
            (small / "filler").unlink()
            rerun = server.cli(ingest_cli(corpus, ix))
            assert rerun.wait() == 0, rerun.stderr
            assert bench_crash.compare(bench_crash.snapshot(ix), want) == []
            assert verify_index(ix).ok
        finally:
            subprocess.run(["umount", "-l", str(small)], capture_output=True)

    def test_enospc_while_saving_simulated(self, server, corpus, clean, tmp_path):
        """The OS error alone is simulated (fsync of the files being saved fails with ENOSPC); the rest is real."""
        _, want, _, _ = clean
        ix = tmp_path / "ix"
        child = server.cli(ingest_cli(corpus, ix), fault="enospc_fsync", batch_chunks=1)
        line = one_error_line(child.stderr if child.wait() else "")
        assert child.returncode == 1 and "could not write vectors.faiss: the disk is full" in line, line
        assert not (ix / "vectors.faiss.tmp").exists()
        partial = bench_crash.snapshot(ix)
        assert bench_crash.partial_problems(partial, want) == [] and len(partial.files) == 6
        rerun = server.cli(ingest_cli(corpus, ix))
        assert rerun.wait() == 0, rerun.stderr
        assert bench_crash.compare(bench_crash.snapshot(ix), want) == [] and verify_index(ix).ok

    def test_write_error_in_process_is_an_index_write_error(self, tmp_path, monkeypatch):
        rng = np.random.default_rng(3)
        with Index.create(tmp_path / "ix", model="m", dim=8) as index:
            add(index, rng, "a", 5)
            add(index, rng, "b", 3)

            def no_space(*args, **kwargs):
                raise OSError(28, "No space left on device")

            monkeypatch.setattr("contextkit.index._index.atomic_write", no_space)
            with pytest.raises(IndexWriteError, match="could not write manifest.json: the disk is full"):
                index.save()
            monkeypatch.undo()
        with Index.open(tmp_path / "ix", read_only=True) as index:  # the manifest lags: rebuilt, all there
            assert len(index) == 8


def add(index: Index, rng, doc: str, n: int) -> None:
    from contextkit.records import Chunk

    texts = [f"{doc} word{i} text" for i in range(n)]
    chunks = [Chunk(id=f"{doc}::{i}", doc_id=doc, ordinal=i, text=t, start=100 * i, end=100 * i + len(t),
                    token_count=3) for i, t in enumerate(texts)]
    vecs = rng.standard_normal((n, index.manifest.dim)).astype(np.float32)
    index.begin()
    index.store.put_document(doc, doc, doc, "sha", 10, {})
    index.add_chunks(chunks, vecs / np.linalg.norm(vecs, axis=1, keepdims=True), [f"{doc}-{i}" for i in range(n)])
    index.commit()


# ------------------------------------------------------------------------------ damage
def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 3] ^= 0x04
    path.write_bytes(bytes(data))


def largest_bm25_file(folder: Path) -> Path:
    return max((p for p in derived_path(folder, "bm25").iterdir() if p.suffix == ".npy"), key=lambda p: p.stat().st_size)


def search_results(ix: Path, queries: np.ndarray) -> tuple:
    """Dense results for stored vectors as queries, and BM25 results, through the public paths."""
    with Index.open(ix, read_only=True) as index:
        dense = [[(h.chunk.id, round(h.score, 5)) for h in hits] for hits in index.search(queries, 5)]
    sparse = [(h.chunk.id, round(h.score, 5)) for h in search_index(ix, "PEP process guidelines", 5, mode="bm25")]
    return dense, sparse


class TestDamage:
    @pytest.fixture()
    def damaged(self, clean, tmp_path):
        src = clean[0]
        ix = tmp_path / "ix"
        shutil.copytree(src, ix, ignore=shutil.ignore_patterns(".lock"))
        with Index.open(ix, read_only=True) as index:
            queries = index.store.vectors_by_rowid([1, 5, 9])
        return ix, queries, search_results(ix, queries)

    @pytest.mark.parametrize("name, damage, file", [
        ("truncated vectors.faiss", lambda ix: truncate(derived_path(ix, "vectors.faiss")), "vectors.faiss"),
        ("bit-flipped vectors.faiss", lambda ix: flip_bit(derived_path(ix, "vectors.faiss")), "vectors.faiss"),
        ("truncated bm25 file", lambda ix: truncate(largest_bm25_file(ix)), "bm25/"),
        ("bit-flipped bm25 file", lambda ix: flip_bit(derived_path(ix, "bm25/vocab.index.json")),
         "bm25/vocab.index.json"),
        ("corrupt manifest JSON", lambda ix: (ix / "manifest.json").write_text('{"format_version": 1, "mod'),
         "manifest.json"),
        ("manifest deleted", lambda ix: (ix / "manifest.json").unlink(), "manifest.json"),
    ])
    def test_derived_damage_is_detected_and_repaired(self, damaged, name, damage, file):
        ix, queries, before = damaged
        damage(ix)
        with pytest.raises(IndexCorruptError) as caught:
            Index.open(ix, read_only=True)
        assert caught.value.file.startswith(file), str(caught.value)
        stem, _, rest = caught.value.file.partition("/") if "/" in caught.value.file else \
            caught.value.file.partition(".")
        found = re.search(rf"{re.escape(stem)}(\.\d+)?[./]{re.escape(rest)}", str(caught.value))
        assert found, str(caught.value)  # the file's own name in this generation, e.g. vectors.4.faiss
        named = found.group(0)
        search = runner.invoke(app, ["search", "PEP", "--index", str(ix), "--mode", "bm25"])
        assert search.exit_code == 1 and named in search.output  # a clear error, no traceback
        verify = runner.invoke(app, ["verify", "--index", str(ix), "--json"])
        report = json.loads(verify.stdout)
        assert verify.exit_code == 1 and not report["ok"]
        bad = [c for c in report["checks"] if c["status"] in ("corrupt", "missing", "mismatch")]
        assert [c["file"] for c in bad] == [caught.value.file] and bad[0]["repairable"], report
        table = runner.invoke(app, ["verify", "--index", str(ix)])
        assert table.exit_code == 1 and caught.value.file.split("/")[0] in table.output and "repair" in table.output
        fixed = runner.invoke(app, ["repair", "--index", str(ix)])
        assert fixed.exit_code == 0, fixed.output
        assert runner.invoke(app, ["verify", "--index", str(ix)]).exit_code == 0
        assert search_results(ix, queries) == before

    def test_truncated_store_is_detected_and_reported_unrepairable(self, damaged):
        ix, _, _ = damaged
        before = {p.name: p.read_bytes() for p in ix.iterdir() if p.is_file() and p.name != "store.sqlite"}
        truncate(ix / "store.sqlite")
        with pytest.raises(IndexCorruptError, match="store.sqlite: damaged: truncated") as caught:
            Index.open(ix, read_only=True)
        assert caught.value.file == "store.sqlite"
        verify = runner.invoke(app, ["verify", "--index", str(ix), "--json"])
        report = json.loads(verify.stdout)
        store = next(c for c in report["checks"] if c["file"] == "store.sqlite")
        assert verify.exit_code == 1 and store["status"] == "corrupt" and store["repairable"] is False
        repair = runner.invoke(app, ["repair", "--index", str(ix)])
        assert repair.exit_code == 1
        assert "cannot repair" in repair.stdout and "could not repair store.sqlite" in repair.stderr
        assert "source of truth" in repair.stderr and "restore a backup or re-ingest" in repair.stderr
        assert {p.name: p.read_bytes() for p in ix.iterdir() if p.is_file() and p.name != "store.sqlite"} == before

    def test_damaged_store_pages_fail_integrity_check(self, damaged):
        ix, _, _ = damaged
        data = bytearray((ix / "store.sqlite").read_bytes())
        page = 4096
        for offset in range(2 * page, len(data), page):  # garble every page's header but the first two
            data[offset : offset + 8] = b"\xff" * 8
        (ix / "store.sqlite").write_bytes(bytes(data))
        report = verify_index(ix)
        store = next(c for c in report.checks if c.file == "store.sqlite")
        assert store.status == "corrupt" and store.repairable is False and "integrity_check" in store.detail
        assert not repair_index(ix).ok


class TestChecksumsAndSaves:
    def test_open_checks_large_files_by_size_and_ends_verify_by_every_byte(self, tmp_path, monkeypatch):
        monkeypatch.setattr(_checksums, "FULL_CHECK_ON_OPEN", 1024)
        monkeypatch.setattr(_checksums, "SAMPLE_BYTES", 256)
        rng = np.random.default_rng(1)
        with Index.create(tmp_path / "ix", model="m", dim=16) as index:
            add(index, rng, "a", 40)  # vectors.faiss ~ 3 KB: over the (patched) full-check limit
        faiss_file = derived_path(tmp_path / "ix", "vectors.faiss")
        assert faiss_file.stat().st_size > 1024
        flip_bit(faiss_file)  # in the middle: outside the first and last 256 bytes
        Index.open(tmp_path / "ix", read_only=True).close()  # the documented trade-off: not seen on open
        report = verify_index(tmp_path / "ix")
        assert [(c.file, c.status) for c in report.problems] == [("vectors.faiss", "corrupt")]
        assert "bit flip" in report.problems[0].detail
        truncate(faiss_file)
        with pytest.raises(IndexCorruptError, match=rf"{faiss_file.name}: damaged: .* bytes, manifest.json records"):
            Index.open(tmp_path / "ix", read_only=True)

    def test_a_crash_while_rewriting_saved_files_is_lag_not_damage(self, tmp_path, monkeypatch):
        """A save at an unchanged generation first moves the store on, so a crash inside it is repaired by open."""
        rng = np.random.default_rng(2)
        with Index.create(tmp_path / "ix", model="m", dim=8) as index:
            add(index, rng, "a", 6)
        index = Index.open(tmp_path / "ix")
        gen = index.store.generation()
        real_replace = os.replace

        def crash_after_faiss(src, dst):
            real_replace(src, dst)
            if str(dst).endswith(".faiss"):
                raise KeyboardInterrupt("simulated crash after vectors.faiss was replaced")

        monkeypatch.setattr(os, "replace", crash_after_faiss)
        with pytest.raises(KeyboardInterrupt):
            index.save(force=True)
        monkeypatch.undo()
        index._release()  # the process "died": no close(), no save
        assert json.loads((tmp_path / "ix" / "manifest.json").read_text())["generation"] == gen
        with Index.open(tmp_path / "ix", read_only=True) as again:  # lags the store: rebuilt, not refused
            assert again.store.generation() == gen + 1 and len(again) == 6
        assert [c.status for c in verify_index(tmp_path / "ix").problems] == ["stale", "stale"]

    def test_unchanged_index_is_not_rewritten(self, tmp_path):
        rng = np.random.default_rng(4)
        with Index.create(tmp_path / "ix", model="m", dim=8) as index:
            add(index, rng, "a", 3)
        faiss_file = derived_path(tmp_path / "ix", "vectors.faiss")
        stamp = faiss_file.stat().st_mtime_ns
        with Index.open(tmp_path / "ix") as index:
            index.save()
        assert derived_path(tmp_path / "ix", "vectors.faiss") == faiss_file and faiss_file.stat().st_mtime_ns == stamp

    def test_an_index_without_checksums_still_opens_and_gets_them_on_save(self, tmp_path):
        rng = np.random.default_rng(5)
        with Index.create(tmp_path / "ix", model="m", dim=8) as index:
            add(index, rng, "a", 3)
        manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
        del manifest["checksums"]  # as written by contextkit before checksums
        (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert len(index) == 3
        assert {c.status for c in verify_index(tmp_path / "ix").checks} == {"ok", "unchecked"}
        with Index.open(tmp_path / "ix") as index:
            index.save()
        assert verify_index(tmp_path / "ix").ok
        assert "vectors.faiss" in json.loads((tmp_path / "ix" / "manifest.json").read_text())["checksums"]

    def test_a_store_without_its_manifest_is_not_taken_for_an_empty_folder(self, tmp_path):
        rng = np.random.default_rng(6)
        with Index.create(tmp_path / "ix", model="m", dim=8) as index:
            add(index, rng, "a", 4)
        (tmp_path / "ix" / "manifest.json").unlink()
        with pytest.raises(IndexCorruptError, match="manifest.json is missing"):
            Index.create(tmp_path / "ix", model="m", dim=8)
        assert repair_index(tmp_path / "ix").ok
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert len(index) == 4 and index.manifest.dim == 8

    def test_leftovers_of_an_interrupted_save_are_harmless_and_removed(self, tmp_path):
        rng = np.random.default_rng(7)
        with Index.create(tmp_path / "ix", model="m", dim=8) as index:
            add(index, rng, "a", 3)
        (tmp_path / "ix" / "vectors.faiss.tmp").write_bytes(b"half a file")
        (tmp_path / "ix" / "bm25.old").mkdir()
        report = verify_index(tmp_path / "ix")
        assert report.ok and {c.file for c in report.checks if c.status == "leftover"} == {"vectors.faiss.tmp",
                                                                                          "bm25.old"}
        assert repair_index(tmp_path / "ix").ok
        assert not (tmp_path / "ix" / "vectors.faiss.tmp").exists() and not (tmp_path / "ix" / "bm25.old").exists()
