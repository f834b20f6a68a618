"""File names the OS gives as bytes that are not UTF-8 (issue 33): ingested under a stable, printable id.

On 59edf24 one Latin-1 ``café.txt`` stopped the whole run with a 50-line ``UnicodeEncodeError``
traceback (the surrogate-escaped name reached SQLite), and every re-run failed the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32" or sys.getfilesystemencoding() != "utf-8",
                                reason="needs a POSIX file system that takes any bytes as a name")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "contextkit", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def latin1_folder(tmp_path):
    folder = os.fsencode(tmp_path / "docs")
    os.makedirs(folder + b"/d\xe9j\xe0")  # a folder whose name is Latin-1 too
    with open(folder + b"/caf\xe9.txt", "wb") as f:
        f.write(b"Coffee notes. The espresso machine needs descaling every month.")
    with open(folder + b"/d\xe9j\xe0/th\xe9.txt", "wb") as f:
        f.write(b"Tea notes. Green tea steeps for two minutes at 80 degrees.")
    with open(folder + b"/plain.txt", "wb") as f:
        f.write(b"A plain file about bread and flour.")
    return tmp_path / "docs"


def test_every_file_is_ingested_and_found_again(tmp_path, latin1_folder):
    index = str(tmp_path / "ix")
    run = _cli("ingest", str(latin1_folder), "--index", index, "--json", "-q")
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["files_new"] == 3 and report["failures"] == []
    found = _cli("search", "espresso descaling", "--index", index, "-k", "1", "--json")
    hit = json.loads(found.stdout)["hits"][0]  # best first
    assert hit["doc_id"].endswith("caf\\xe9.txt")  # the byte, written out: printable, storable
    again = json.loads(_cli("ingest", str(latin1_folder), "--index", index, "--json", "-q").stdout)
    assert again["files_unchanged"] == 3 and again["files_new"] == 0  # the same bytes, the same id


def test_prune_finds_a_removed_file_by_the_same_id(tmp_path, latin1_folder):
    index = str(tmp_path / "ix")
    assert _cli("ingest", str(latin1_folder), "--index", index, "-q").returncode == 0
    os.remove(os.fsencode(latin1_folder) + b"/caf\xe9.txt")
    run = _cli("ingest", str(latin1_folder), "--index", index, "--prune", "--json", "-q")
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["files_removed"] == 1


def test_a_valid_name_keeps_its_id():
    from contextkit.loaders._common import storable_id

    assert storable_id("café/日本.txt") == "café/日本.txt"
    assert storable_id(os.fsdecode(b"caf\xe9.txt")) == "caf\\xe9.txt"
