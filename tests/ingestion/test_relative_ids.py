"""Ids relative to the folder the user named (issue 31): no absolute local path reaches a prompt.

On 6e3bcce ``contextkit ingest /home/me/proj/docs`` stored every file as ``/home/me/proj/docs/a.md``
and every prompt cited it so: a user name and a home folder's layout sent to the model provider
with each question. Now the id is the folder's name and the path inside it (``docs/a.md``); an index
an older version built keeps working and takes the new ids on its next ingest, and two folders
that would give one id cannot silently replace each other's files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextkit.index import Index
from contextkit.ingestion import ingest, preview_ingest
from contextkit.loaders import discovery
from contextkit.search import search_index

BREAD = "# Bread\n\nKnead the dough for ten minutes, then let it rise for an hour at 24 degrees.\n"
TEA = "# Tea\n\nGreen tea steeps for two minutes at 80 degrees; black tea for four at 95.\n"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "contextkit", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def _folder(root: Path, name: str = "docs", bread: str = BREAD) -> Path:
    folder = root / name
    (folder / "guide").mkdir(parents=True)
    (folder / "bread.md").write_text(bread, encoding="utf-8")
    (folder / "guide" / "tea.md").write_text(TEA, encoding="utf-8")
    return folder


def _files(index: Path) -> set[str]:
    with Index.open(index, read_only=True) as idx:
        return set(idx.store.file_hashes())


def _bread(index: Path) -> str:
    hits = search_index(index, "dough knead", k=5, mode="bm25")
    return " ".join(hit.chunk.text for hit in hits if hit.chunk.doc_id == "docs/bread.md")


def test_an_absolute_folder_never_puts_its_path_in_a_prompt(tmp_path: Path):
    home = tmp_path / "home" / "alice" / "projects"
    docs = _folder(home).resolve()
    work = tmp_path / "elsewhere"
    work.mkdir()
    run = _cli("ingest", str(docs), "--index", "my.ck-index", "--json", "-q", cwd=work)
    assert run.returncode == 0, run.stderr[-2000:]
    prompt = _cli("assemble", "How long do I knead bread dough?", "--index", "my.ck-index", "--budget", "400",
                  "--messages", "messages.json", "-q", cwd=work)
    assert prompt.returncode == 0, prompt.stderr[-2000:]
    found = _cli("search", "green tea", "--index", "my.ck-index", "--json", cwd=work)
    for text in (prompt.stdout, found.stdout, (work / "messages.json").read_text(encoding="utf-8")):
        assert "alice" not in text and str(tmp_path) not in text
    assert 'source="docs/bread.md"' in prompt.stdout  # lean markup (the default): a citation id, the source once
    assert {hit["doc_id"] for hit in json.loads(found.stdout)["hits"]} <= {"docs/bread.md", "docs/guide/tea.md"}


def test_an_index_with_absolute_ids_takes_the_new_ones_without_embedding(tmp_path: Path, embedder,
                                                                         monkeypatch: pytest.MonkeyPatch):
    docs = _folder(tmp_path).resolve()
    index = tmp_path / "ix"
    with monkeypatch.context() as old:  # the ids an older contextkit gave: the folder as typed
        old.setattr(discovery, "_id_prefixes", lambda paths: [Path(p).as_posix() for p in paths])
        ingest([docs], index, embedder=embedder)
    assert _files(index) == {f"{docs.as_posix()}/bread.md", f"{docs.as_posix()}/guide/tea.md"}
    preview = preview_ingest([docs], index, measure_speed=False)  # --dry-run counts them as the run will
    assert (preview.new, preview.duplicates) == (2, 0)
    assert any("would be stored again under ids relative" in n.reason for n in preview.notes)
    report = ingest([docs], index, embedder=embedder)
    assert _files(index) == {"docs/bread.md", "docs/guide/tea.md"}
    assert report.embedding.cache_hits == report.chunks_added and report.chunks_added > 0  # nothing embedded
    assert any("indexed before under absolute paths" in n.reason for n in report.notes)
    assert not any("--prune removes them" in n.reason for n in report.notes)  # the old ids are gone, not stale
    again = ingest([docs], index, embedder=embedder)
    assert again.files_unchanged == 2 and again.notes == []


def test_two_folders_of_one_name_do_not_replace_each_other(tmp_path: Path, embedder):
    first = _folder(tmp_path / "a").resolve()
    second = _folder(tmp_path / "b", bread="# Rye\n\nRye dough is sticky; do not knead it long.\n").resolve()
    index = tmp_path / "ix"
    ingest([first], index, embedder=embedder)
    report = ingest([second], index, embedder=embedder)
    refused = {f.path: f.reason for f in report.failures}
    assert set(refused) == {"docs/bread.md", "docs/guide/tea.md"}  # each names both files
    assert str(first / "bread.md") in refused["docs/bread.md"] and str(second / "bread.md") in refused["docs/bread.md"]
    assert "Knead the dough" in _bread(index)
    replaced = ingest([second], index, embedder=embedder, prune=True)
    assert replaced.failures == []
    assert "Rye dough" in _bread(index)


def test_both_folders_in_one_run_keep_apart(tmp_path: Path, embedder):
    first, second = _folder(tmp_path / "a").resolve(), _folder(tmp_path / "b", bread="# Rye\n\nRye.\n").resolve()
    report = ingest([first, second], tmp_path / "ix", embedder=embedder, skip_duplicates=False)
    assert report.failures == []
    assert _files(tmp_path / "ix") == {f"{side}/docs/{name}" for side in "ab" for name in ("bread.md", "guide/tea.md")}
    assert os.path.isdir(tmp_path / "ix")
