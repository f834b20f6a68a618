"""A read-only index folder (a read-only mount, files the user cannot write): every read works (issue 16).

The folder is made read-only by a read-only bind mount, which binds root too (root ignores file
permissions, so a ``chmod -R a-w`` copy proves nothing for it); where the test cannot mount
(not root, or no mount namespace) it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import contextkit.cli.index  # noqa: F401  (registers verify / repair on the app)
from contextkit.cli import app
from contextkit.errors import IndexReadOnlyError
from contextkit.index import Index, verify_index
from contextkit.search import search_index

runner = CliRunner()


def _mount_read_only(source: Path, target: Path) -> str | None:
    """Bind ``source`` at ``target`` read-only; None when done, else why it cannot be."""
    if os.geteuid() != 0:
        return "needs root for a read-only bind mount (a chmod'ed copy would do for a normal user)"
    target.mkdir(exist_ok=True)
    for cmd in (["mount", "--bind", str(source), str(target)], ["mount", "-o", "remount,ro,bind", str(target)]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            subprocess.run(["umount", str(target)], capture_output=True)
            return f"{' '.join(cmd[:3])} failed: {done.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def mounted(tmp_path_factory, embedder):
    """An ingested index, and the same folder through a read-only bind mount."""
    from contextkit.ingestion import ingest

    base = tmp_path_factory.mktemp("ro")
    docs = base / "docs"
    docs.mkdir()
    for i, topic in enumerate(["volcanoes and lava", "glaciers and ice", "bread dough and yeast"]):
        (docs / f"d{i}.txt").write_text(f"A short note about {topic}. It says more about {topic}.\n", encoding="utf-8")
    ingest([docs], base / "ix", embedder=embedder)
    mnt = base / "mnt"
    why = _mount_read_only(base / "ix", mnt)
    if why:
        pytest.skip(why)
    try:
        yield base / "ix", mnt, docs
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


class TestReadOnlyFolder:
    def test_the_mount_is_read_only(self, mounted):
        _, mnt, _ = mounted
        with pytest.raises(OSError):
            (mnt / "probe").write_text("x")

    @pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
    def test_search_in_every_mode(self, mounted, mode):
        ix, mnt, _ = mounted
        got = [h.chunk.doc_id for h in search_index(mnt, "glaciers and ice", k=2, mode=mode)]
        want = [h.chunk.doc_id for h in search_index(ix, "glaciers and ice", k=2, mode=mode)]
        assert got and got == want and got[0].endswith("d1.txt")

    def test_cli_search_assemble_info_and_verify(self, mounted):
        _, mnt, _ = mounted
        search = runner.invoke(app, ["search", "bread dough", "--index", str(mnt), "--mode", "bm25", "--json"])
        assert search.exit_code == 0 and "d2.txt" in search.stdout, search.output
        assemble = runner.invoke(app, ["assemble", "bread dough", "--index", str(mnt), "--budget", "300"])
        assert assemble.exit_code == 0 and "yeast" in assemble.stdout, assemble.output
        info = runner.invoke(app, ["info", "--index", str(mnt), "--json"])
        assert info.exit_code == 0 and json.loads(info.stdout)["counts"]["chunks"] == 3, info.output
        verify = runner.invoke(app, ["verify", "--index", str(mnt), "--json"])
        report = json.loads(verify.stdout)
        assert verify.exit_code == 0 and report["ok"], report
        assert [c["file"] for c in report["checks"] if c["status"] == "read-only"] == ["(folder)"]

    def test_verify_calls_a_healthy_store_healthy(self, mounted):
        _, mnt, _ = mounted
        report = verify_index(mnt)
        assert report.ok and {c.file: c.status for c in report.checks}["store.sqlite"] == "ok"

    def test_python_api_read_only(self, mounted):
        _, mnt, _ = mounted
        with Index.open(mnt, read_only=True) as index:
            assert len(index) == 3 and index.info()["counts"]["chunks"] == 3

    def test_writes_say_read_only_in_one_line(self, mounted, embedder):
        _, mnt, docs = mounted
        with pytest.raises(IndexReadOnlyError, match="read-only"):
            Index.open(mnt)
        with pytest.raises(IndexReadOnlyError, match="read-only"):
            Index.create(mnt / "new", model="m", dim=8)
        ingest = runner.invoke(app, ["ingest", str(docs), "--index", str(mnt)])
        assert ingest.exit_code == 1 and "read-only" in ingest.output and "Traceback" not in ingest.output
        repair = runner.invoke(app, ["repair", "--index", str(mnt)])
        assert "Traceback" not in repair.output
        with Index.open(mnt, read_only=True) as index:
            with pytest.raises(IndexReadOnlyError, match="opened read-only"):
                index.save()


def test_mount_helper_reports_why_it_cannot(tmp_path):
    """The skip reason is a sentence, never a crash (what a non-root run sees)."""
    if os.geteuid() == 0:
        pytest.skip("root: the helper mounts")
    assert "root" in (_mount_read_only(tmp_path, tmp_path / "m") or "")


