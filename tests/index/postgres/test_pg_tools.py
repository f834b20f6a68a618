"""``index copy``, ``verify`` and ``repair`` on a database index, and the CLI a user types with a DSN.

The sceptic's questions: does a folder copied into the database (and back) answer exactly as it did;
does a re-ingest into the copy re-embed nothing; does verify find damage a person or a bug could make
in the tables (lost BM25 counts, a changed text), and does repair fix what it says it can; does the
CLI take ``--index postgresql://...`` everywhere without ever printing the password?
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextkit import ingest, search_index
from contextkit.core.errors import IndexExistsError
from contextkit.index import Index, repair_index, verify_index
from contextkit.index.copy import copy_index
from tests._postgres import with_schema


@pytest.fixture
def folder_index(small_corpus: Path, tmp_path: Path, embedder) -> str:
    path = str(tmp_path / "small.ck-index")
    ingest([small_corpus], path, embedder=embedder)
    return path


def _hits(path: str) -> list[list[tuple[str, float]]]:
    return [[(h.chunk.id, round(h.score, 5)) for h in search_index(path, q, k=4, mode=mode)]
            for q in ("dense vectors by inner product", "bread dough", "term frequency")
            for mode in ("dense", "bm25", "hybrid")]


def test_copy_there_and_back_answers_the_same(folder_index: str, pg_dsn: str, tmp_path: Path,
                                              small_corpus: Path, embedder) -> None:
    report = copy_index(folder_index, pg_dsn)
    assert report.chunks > 0 and report.files == 3 and report.documents == 3
    assert _hits(pg_dsn) == _hits(folder_index)
    back = str(tmp_path / "back.ck-index")
    copy_index(pg_dsn, back)
    assert _hits(back) == _hits(folder_index)
    with Index.open(folder_index, read_only=True) as a, Index.open(pg_dsn, read_only=True) as b:
        assert a.manifest.bm25 == b.manifest.bm25 and a.manifest.chunker == b.manifest.chunker
    again = ingest([small_corpus], pg_dsn, embedder=embedder)  # the copy knows every file: nothing to do
    assert again.files_unchanged == 3 and again.chunks_added == 0
    with pytest.raises(IndexExistsError):
        copy_index(folder_index, pg_dsn)  # never into an index with rows


def test_verify_finds_damage_and_repair_fixes_what_it_can(folder_index: str, pg_dsn: str) -> None:
    copy_index(folder_index, pg_dsn)
    assert verify_index(pg_dsn).ok
    with Index.open(pg_dsn) as index:
        index.store.db.execute("DELETE FROM postings WHERE rowid IN (SELECT min(rowid) FROM chunks)")
    report = verify_index(pg_dsn)
    assert [c.file for c in report.problems] == ["postings"] and report.problems[0].repairable
    fixed = repair_index(pg_dsn)
    assert fixed.ok and [a.action for a in fixed.actions] == ["rebuilt"]
    assert _hits(pg_dsn) == _hits(folder_index)
    with Index.open(pg_dsn) as index:
        index.store.db.execute("UPDATE chunks SET text = text || ' tampered' WHERE rowid = (SELECT max(rowid) FROM chunks)")
    report = verify_index(pg_dsn)
    assert any(c.file == "chunks" and c.status == "corrupt" and c.repairable is False for c in report.problems)
    assert not repair_index(pg_dsn).ok  # a changed text cannot be rebuilt: re-ingest


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "contextkit", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_the_cli_with_a_dsn_never_prints_the_password(pg_server: str, small_corpus: Path, tmp_path: Path) -> None:
    dsn = with_schema(pg_server.replace("postgres:@", "postgres:Sup3rSecret@"), "cli_pw")
    runs = [
        _cli("ingest", str(small_corpus), "--index", dsn, "--json"),
        _cli("search", "bread dough", "--index", dsn, "--json"),
        _cli("info", "--index", dsn, "--json"),
        _cli("assemble", "how long to knead bread?", "--index", dsn, "--budget", "300", "--json"),
        _cli("verify", "--index", dsn, "--json"),
        _cli("index", "copy", dsn, str(tmp_path / "copy.ck-index"), "--json"),
        _cli("search", "bread", "--index", with_schema(pg_server, "no_such_schema")),
        _cli("search", "bread", "--index", "postgresql://me:Sup3rSecret@127.0.0.1:1/x"),
    ]
    for run in runs:
        assert "Sup3rSecret" not in run.stdout + run.stderr
        assert "Traceback" not in run.stderr
    assert [r.returncode for r in runs] == [0, 0, 0, 0, 0, 0, 1, 1], [r.stderr[-300:] for r in runs]
    first = json.loads(runs[1].stdout)["hits"][0]
    assert "cooking.rst" in first["id"]
    info = json.loads(runs[2].stdout)
    assert info["backend"] == "postgresql" and info["counts"]["files"] == 3
    assert "no index here" in runs[6].stderr and "cannot connect" in runs[7].stderr
    assert "me@127.0.0.1:1/x" in runs[7].stderr
