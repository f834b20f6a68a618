"""A file or folder swapped between discovery and loading (issue 33), and special files in a docs folder.

What an attacker who can write in the docs folder does: let the walk find ``a.txt``, then swap it
(or ``sub/``, or the root's parent) for a link to a secret outside, a FIFO, or ``/dev/zero``'s device
node. Every read (loaders, hashing, streams, the PDF worker) goes through ``open_source``: no link
swapped in is followed, only the regular file discovery found is read, and the file is reported.
The swaps are made deterministic (right after ``discover``); one test races a real thread; the
CLI tests run ``python -m contextkit ingest`` in another process with the swap hooked in."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from contextkit.loaders import LoadFailure, SourceFile, TextStream, discover, iter_jsonl, load_file
from loaders.test_loaders import make_pdf

SECRET = "TOPSECRET-7f3a the root password is hunter2"
REPO = Path(__file__).resolve().parents[2]


FORMATS = {
    ".txt": lambda t: t.encode(), ".md": lambda t: f"# T\n\n{t}\n".encode(),
    ".html": lambda t: f"<p>{t}</p>".encode(), ".jsonl": lambda t: json.dumps({"_id": "1", "text": t}).encode(),
    ".pdf": lambda t: make_pdf(t, title=None),
}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the docs, with a secret in every format."""
    folder = tmp_path / "outside"
    folder.mkdir()
    for suffix, make in FORMATS.items():
        (folder / f"secret{suffix}").write_bytes(make(SECRET))
    return folder


def _found(docs: Path, follow_symlinks: bool = False) -> dict[str, SourceFile]:
    return {Path(f.doc_id).name: f for f in discover([docs], follow_symlinks=follow_symlinks).files}


def _leaked(result) -> bool:  # noqa: ANN001 - a LoadResult
    return any(SECRET in d.text for d in result.documents)


def _reason(result) -> str:  # noqa: ANN001 - a LoadResult
    assert result.documents == [] and len(result.errors) == 1, result
    return result.errors[0].reason


@pytest.mark.parametrize("suffix", list(FORMATS))
def test_a_file_swapped_for_a_link_after_discovery_is_not_read(tmp_path: Path, outside: Path, suffix: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / f"a{suffix}").write_bytes(FORMATS[suffix]("harmless words about rivers"))
    source = _found(docs)[f"a{suffix}"]
    (docs / f"a{suffix}").unlink()
    (docs / f"a{suffix}").symlink_to(outside / f"secret{suffix}")
    result = load_file(source)
    assert not _leaked(result)
    assert "symlink" in _reason(result)


def test_a_folder_swapped_for_a_link_after_discovery_is_not_entered(tmp_path: Path, outside: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "sub" / "secret.txt").write_text("harmless words")
    source = _found(docs)["secret.txt"]
    (docs / "sub").rename(tmp_path / "moved")
    (docs / "sub").symlink_to(outside)
    result = load_file(source)
    assert not _leaked(result) and "a folder on its path was replaced by a symlink" in _reason(result)


def test_the_roots_parent_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    docs = tmp_path / "base" / "docs"
    docs.mkdir(parents=True)
    (docs / "a.txt").write_text("harmless words")
    fake = tmp_path / "fake" / "docs"
    fake.mkdir(parents=True)
    (fake / "a.txt").write_text(SECRET)
    source = _found(docs)["a.txt"]
    (tmp_path / "base").rename(tmp_path / "gone")
    (tmp_path / "base").symlink_to(tmp_path / "fake")
    result = load_file(source)
    assert not _leaked(result) and "symlink" in _reason(result)


def test_a_file_replaced_by_another_file_is_not_read(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("harmless words")
    source = _found(docs)["a.txt"]
    (tmp_path / "other.txt").write_text(SECRET)
    os.replace(tmp_path / "other.txt", docs / "a.txt")  # a hard link or a rename: no symlink anywhere
    result = load_file(source)
    assert not _leaked(result) and "replaced by another file" in _reason(result)
    from contextkit.loaders import source_digest

    with pytest.raises(LoadFailure, match="replaced by another file"):
        source_digest(source)


def test_streams_and_hashing_refuse_a_swapped_link(tmp_path: Path, outside: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.txt", "b.jsonl"):
        (docs / name).write_bytes(FORMATS[Path(name).suffix]("harmless words"))
    found = _found(docs)
    for name, secret in (("a.txt", "secret.txt"), ("b.jsonl", "secret.jsonl")):
        (docs / name).unlink()
        (docs / name).symlink_to(outside / secret)
    from contextkit.loaders import source_digest

    problem = TextStream(found["a.txt"]).check()
    assert problem is not None and "symlink" in problem.reason
    assert TextStream(found["a.txt"]).metadata["title"] == "a.txt"  # the head is not read either
    with pytest.raises(LoadFailure, match="symlink"):
        list(iter_jsonl(found["b.jsonl"]))
    with pytest.raises(LoadFailure, match="symlink"):
        source_digest(found["a.txt"])


def test_a_file_swapped_for_a_fifo_or_a_device_is_refused_without_blocking(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("harmless words")
    (docs / "b.txt").write_text("harmless words")
    found = _found(docs)
    (docs / "a.txt").unlink()
    os.mkfifo(docs / "a.txt")  # no writer: a blocking open would wait forever
    results: list = []
    loader = threading.Thread(target=lambda: results.append(load_file(found["a.txt"])), daemon=True)
    loader.start()
    loader.join(10)
    if loader.is_alive():  # unblock the reader (7f7ba2f: open() waited for a writer), then fail
        os.close(os.open(docs / "a.txt", os.O_WRONLY | os.O_NONBLOCK))
        loader.join(10)
        pytest.fail("loading a file swapped for a FIFO blocked")
    assert "not a regular file (a FIFO)" in _reason(results[0])
    if os.geteuid() == 0:  # making a device node needs root
        (docs / "b.txt").unlink()
        os.mknod(docs / "b.txt", 0o600 | stat.S_IFCHR, os.stat("/dev/zero").st_rdev)
        assert "not a regular file (a character device)" in _reason(load_file(found["b.txt"]))


def test_special_files_in_a_folder_are_reported_not_passed_by(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ok.txt").write_text("fine")
    os.mkfifo(docs / "pipe.md")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(docs / "chat.txt"))
    os.symlink(docs / "pipe.md", docs / "to-pipe.txt")
    try:
        found = discover([docs])
    finally:
        sock.close()
    reasons = {Path(e.path).name: e.reason for e in found.errors}
    assert [Path(f.doc_id).name for f in found.files] == ["ok.txt"]
    assert reasons["pipe.md"] == "not a regular file (a FIFO): not read"
    assert reasons["chat.txt"] == "not a regular file (a socket): not read"
    assert reasons["to-pipe.txt"] == "symlink target is not a regular file (a FIFO): not read"
    assert "not a regular file (a FIFO)" in discover([docs / "pipe.md"]).errors[0].reason


def test_follow_symlinks_reads_what_the_walk_followed(tmp_path: Path, outside: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "linked.txt").symlink_to(outside / "secret.txt")
    found = _found(docs, follow_symlinks=True)
    assert _leaked(load_file(found["linked.txt"]))  # documented: links found by the walk are followed
    assert found["linked.txt"].path == (outside / "secret.txt").resolve()


def test_a_source_made_by_hand_is_opened_as_named(tmp_path: Path, outside: Path) -> None:
    """No discovery, no identity: the path is the caller's, links followed (as a file named on the CLI)."""
    (tmp_path / "link.txt").symlink_to(outside / "secret.txt")
    assert _leaked(load_file(SourceFile(tmp_path / "link.txt", "link.txt")))
    os.mkfifo(tmp_path / "p.txt")
    from contextkit.loaders import open_source

    with pytest.raises(Exception, match="FIFO"):
        open_source(SourceFile(tmp_path / "p.txt", "p.txt"))


def test_a_racing_thread_never_gets_a_file_outside_read(tmp_path: Path, outside: Path) -> None:
    """A thread swaps ``a.txt`` and ``sub/`` for links outside as fast as it can while the folder is
    walked and loaded for 3 s (on the old code about 1 load in 50 read the secret)."""
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text("plain words")
    (docs / "sub" / "secret.txt").write_text("plain words")
    stop = threading.Event()
    errors: list[BaseException] = []

    def racer() -> None:
        try:
            while not stop.is_set():
                os.symlink(outside / "secret.txt", docs / ".link")
                os.replace(docs / ".link", docs / "a.txt")
                (docs / ".plain").write_text("plain words")
                os.replace(docs / ".plain", docs / "a.txt")
                os.rename(docs / "sub", docs / ".sub")
                os.symlink(outside, docs / "sub")
                os.remove(docs / "sub")
                os.rename(docs / ".sub", docs / "sub")
        except BaseException as exc:  # noqa: BLE001 - shown by the assertion below
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=racer, daemon=True)
    thread.start()
    loads = leaks = 0
    try:
        ends = time.monotonic() + 3
        while time.monotonic() < ends:
            for source in discover([docs]).files:
                loads += 1
                leaks += _leaked(load_file(source))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)
    assert not errors and loads > 100
    assert leaks == 0, f"{leaks} of {loads} loads read a file outside the folder"


# ------------------------------------------------------------------ the CLI, in another process
_HOOKED = """
import os, runpy, sys
import contextkit.ingestion._ingest as m
real = m.discover
def hooked(*a, **k):
    found = real(*a, **k)
    for name, target in {swaps!r}:
        os.remove(name)
        if target == "fifo":
            os.mkfifo(name)
        else:
            os.symlink(target, name)
    return found
m.discover = hooked
sys.argv = ["contextkit", *{argv!r}]
runpy.run_module("contextkit", run_name="__main__", alter_sys=True)
"""


def _ingest_with_swaps(docs: Path, index: Path, swaps: list[tuple[str, str]]) -> subprocess.CompletedProcess[str]:
    code = _HOOKED.format(swaps=swaps, argv=["ingest", str(docs), "--index", str(index), "--json"])
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_cli_ingest_reports_every_swapped_file_and_reads_none_outside(tmp_path: Path, outside: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.txt").write_text("The Rhine flows from the Alps to the North Sea.\n")
    swaps = []
    for suffix in FORMATS:
        (docs / f"a{suffix}").write_bytes(FORMATS[suffix]("harmless words about rivers"))
        swaps.append((str(docs / f"a{suffix}"), str(outside / f"secret{suffix}")))
    (docs / "pipe.txt").write_text("harmless words")
    swaps.append((str(docs / "pipe.txt"), "fifo"))
    result = _ingest_with_swaps(docs, tmp_path / "ix", swaps)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    failures = {Path(f["path"]).name: f["reason"] for f in json.loads(result.stdout)["failures"]}
    assert set(failures) == {*(f"a{s}" for s in FORMATS), "pipe.txt"}
    assert all("symlink" in failures[f"a{s}"] for s in FORMATS) and "FIFO" in failures["pipe.txt"]
    with sqlite3.connect(tmp_path / "ix" / "store.sqlite") as db:
        texts = [row[0] for row in db.execute("SELECT text FROM chunks")]
    assert texts and not any(SECRET in t for t in texts)
