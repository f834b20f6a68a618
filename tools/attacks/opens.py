"""File opens as an attacker who shares the docs folder makes them (issue 33): a file or a folder
swapped for a symlink (or a FIFO, a device node) between the walk that found it and the read that
loads it, and special files (FIFOs, sockets, device nodes) left in a docs folder.

The race is made deterministic: ``python -m contextkit ingest`` runs in another process with a hook
that swaps the file right after discovery (or right after hashing, before the load), so every
run hits the window the issue's 8-of-30 runs hit by chance. One attack races a real thread too."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from tools.attacks._harness import REPO, Fails, check, no_traceback, python, small_corpus

SECRET = "TOPSECRET-7f3a outside the docs folder: the root password is hunter2"

#: ``python -c``: run ``contextkit ARGV`` in this process, with HOOK (code using the name ``swap``) run
#: once right after discovery (``when == "discover"``) or right before the first load (``"load"``).
_RUN_WITH_HOOK = """
import json, os, runpy, sys
import contextkit.ingestion._ingest as ingest_mod
import contextkit.ingestion._steps as steps_mod
import contextkit.ingestion._stream as stream_mod
ARGV, WHEN = json.loads({args!r})
def swap():
{hook}
done = []
def once():
    if not done:
        done.append(1)
        swap()
if WHEN == "discover":
    real = ingest_mod.discover
    def hooked(*a, **k):
        found = real(*a, **k)
        once()
        return found
    ingest_mod.discover = hooked
else:
    for mod, name in ((steps_mod, "load_file"), (stream_mod, "iter_jsonl")):
        real_fn = getattr(mod, name)
        def hooked(*a, _real=real_fn, **k):
            once()
            return _real(*a, **k)
        setattr(mod, name, hooked)
    import contextkit.loaders.text as text_mod
    real_blocks = text_mod.TextStream.blocks
    def blocks(self):
        once()
        return real_blocks(self)
    text_mod.TextStream.blocks = blocks
sys.argv = ["contextkit", *ARGV]
runpy.run_module("contextkit", run_name="__main__", alter_sys=True)
"""


def _ingest_hooked(docs: Path, index: Path, hook: str, when: str = "discover", *extra: str,
                   timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``contextkit ingest DOCS --index INDEX --json EXTRA`` with ``hook`` (Python statements) run in the race window."""
    argv = ["ingest", str(docs), "--index", str(index), "--json", *extra]
    body = "\n".join("    " + line for line in hook.strip().splitlines())
    code = _RUN_WITH_HOOK.format(args=json.dumps([argv, when]), hook=body)
    try:
        return python(code, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Fails(f"ingest hung past {timeout:.0f} s after the swap ({hook.strip().splitlines()[-1]})") from None


def _indexed_text(index: Path) -> str:
    """Every chunk's text and every document's metadata in the index's records store, as one string."""
    store = index / "store.sqlite"
    if not store.exists():
        return ""
    with sqlite3.connect(store) as db:
        chunks = [row[0] for row in db.execute("SELECT text FROM chunks")]
        docs = [f"{row[0]} {row[1]}" for row in db.execute("SELECT source, metadata FROM documents")]
    return "\n".join(chunks + docs)


def _failures(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """``{path: reason}`` of the report's failures (the JSON report on stdout)."""
    try:
        report = json.loads(result.stdout[result.stdout.index("{"):])
    except ValueError:
        raise Fails(f"no JSON report (exit {result.returncode}): {result.stderr[-600:]}") from None
    return {f["path"]: f["reason"] for f in report.get("failures", [])}


def _held(result: subprocess.CompletedProcess[str], index: Path, victim: str, what: str) -> None:
    """The run ended normally, the secret is not in the index, and ``victim`` is reported with a reason."""
    no_traceback(result, what)
    check(SECRET not in _indexed_text(index), f"{what}: the file outside the folder was read into the index")
    failures = _failures(result)
    check(any(victim in path for path in failures),
          f"{what}: {victim} was neither loaded from the folder nor reported (failures: {failures})")


def _secrets(work: Path) -> Path:
    """Files outside the docs folder holding :data:`SECRET`, one per format."""
    outside = work / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "secret.md").write_text(f"# Secret\n\n{SECRET}\n")
    (outside / "secret.html").write_text(f"<html><body><p>{SECRET}</p></body></html>\n")
    (outside / "secret.jsonl").write_text(json.dumps({"_id": "s1", "text": SECRET}) + "\n")
    (outside / "secret.pdf").write_bytes(_pdf(SECRET))
    return outside


def _pdf(text: str) -> bytes:
    """A one-page PDF showing ``text``: the test suite's maker (tests/loaders/test_loaders.py)."""
    sys.path.insert(0, str(REPO / "tests"))
    from loaders.test_loaders import make_pdf

    return make_pdf(text, title=None)


def _each_format(docs: Path) -> list[str]:
    """One harmless file per format in ``docs``; their names."""
    (docs / "a.txt").write_text("A plain note about towers.\n")
    (docs / "b.md").write_text("# B\n\nA markdown note about rivers.\n")
    (docs / "c.html").write_text("<p>An HTML note about mountains.</p>\n")
    (docs / "d.jsonl").write_text(json.dumps({"_id": "d1", "text": "A JSONL note about bread."}) + "\n")
    (docs / "e.pdf").write_bytes(_pdf("A PDF note about lakes."))
    return ["a.txt", "b.md", "c.html", "d.jsonl", "e.pdf"]


_SWAP_ALL = """
import os
for name, target in {pairs!r}:
    os.remove(name)
    os.symlink(target, name)
"""


def _swap_every_format(work: Path, when: str, *extra: str) -> None:
    docs = small_corpus(work / "docs", 2)
    outside = _secrets(work)
    names = _each_format(docs)
    pairs = [(str(docs / n), str(outside / f"secret{Path(n).suffix}")) for n in names]
    result = _ingest_hooked(docs, work / "ix", _SWAP_ALL.format(pairs=pairs), when, *extra)
    for name in names:
        _held(result, work / "ix", name, f"{name} swapped for a link ({when})")
    check(result.returncode == 0, f"ingest exit {result.returncode}: the other files were not kept")


def attack_every_format_swapped_for_a_link_after_discovery(work: Path) -> None:
    _swap_every_format(work, "discover")


def attack_every_format_swapped_for_a_link_between_hash_and_load(work: Path) -> None:
    _swap_every_format(work, "load")


def attack_streamed_files_swapped_for_a_link(work: Path) -> None:
    """``--stream-above 0``: text and JSONL are read block by block (TextStream, iter_jsonl)."""
    _swap_every_format(work, "discover", "--stream-above", "0")


def attack_folder_swapped_for_a_link_after_discovery(work: Path) -> None:
    docs = small_corpus(work / "docs", 2)
    (docs / "sub").mkdir()
    (docs / "sub" / "secret.txt").write_text("Harmless words about the sea.\n")
    outside = work / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    hook = f"os.rename({str(docs / 'sub')!r}, {str(docs / '.old')!r}); os.symlink({str(outside)!r}, {str(docs / 'sub')!r})"
    result = _ingest_hooked(docs, work / "ix", hook)
    _held(result, work / "ix", "secret.txt", "a folder swapped for a link")


def attack_parent_of_the_root_swapped_for_a_link(work: Path) -> None:
    """The folder named is ``base/docs``; after discovery ``base`` becomes a link to a look-alike tree."""
    base = work / "base"
    docs = small_corpus(base / "docs", 1)
    (docs / "note.txt").write_text("Harmless words about the sea.\n")
    fake = work / "fake" / "docs"
    fake.mkdir(parents=True)
    (fake / "note.txt").write_text(SECRET + "\n")
    (fake / "doc0.txt").write_text(SECRET + "\n")
    hook = f"os.rename({str(base)!r}, {str(work / 'gone')!r}); os.symlink({str(work / 'fake')!r}, {str(base)!r})"
    result = _ingest_hooked(docs, work / "ix", hook)
    _held(result, work / "ix", "note.txt", "the root's parent swapped for a link")


def attack_file_swapped_for_a_fifo_after_discovery(work: Path) -> None:
    docs = small_corpus(work / "docs", 2)
    (docs / "notes.txt").write_text("Harmless words about the sea.\n")
    hook = f"os.remove({str(docs / 'notes.txt')!r}); os.mkfifo({str(docs / 'notes.txt')!r})"
    result = _ingest_hooked(docs, work / "ix", hook, timeout=90)
    _held(result, work / "ix", "notes.txt", "a file swapped for a FIFO")


def attack_file_swapped_for_a_device_after_discovery(work: Path) -> None:
    """A character device (``/dev/zero``'s numbers): endless bytes for a reader that opens it."""
    docs = small_corpus(work / "docs", 2)
    (docs / "notes.txt").write_text("Harmless words about the sea.\n")
    zero = os.stat("/dev/zero").st_rdev
    hook = (f"os.remove({str(docs / 'notes.txt')!r}); "
            f"os.mknod({str(docs / 'notes.txt')!r}, 0o600 | {stat.S_IFCHR}, {zero})")
    result = _ingest_hooked(docs, work / "ix", hook, timeout=90)
    _held(result, work / "ix", "notes.txt", "a file swapped for a device node")


def attack_special_files_in_the_folder_are_reported(work: Path) -> None:
    """A FIFO, a socket and a device node named like documents: each reported with a reason, no hang."""
    docs = small_corpus(work / "docs", 2)
    os.mkfifo(docs / "pipe.md")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(docs / "chat.txt"))
    os.mknod(docs / "zero.txt", 0o600 | stat.S_IFCHR, os.stat("/dev/zero").st_rdev)
    try:
        result = _ingest_hooked(docs, work / "ix", "pass", timeout=90)
    finally:
        sock.close()
    no_traceback(result, "ingest")
    check(result.returncode == 0, f"ingest exit {result.returncode}")
    failures = _failures(result)
    for name in ("pipe.md", "chat.txt", "zero.txt"):
        check(any(name in path for path in failures), f"{name} (not a regular file) was passed by silently: {failures}")


def attack_follow_symlinks_still_follows_links_found_by_the_walk(work: Path) -> None:
    """``--follow-symlinks`` (documented: links leading outside are followed) keeps working, and a
    link swapped in after discovery is still not what gets read."""
    docs = small_corpus(work / "docs", 1)
    shared = work / "shared"
    shared.mkdir()
    (shared / "linked.txt").write_text("A linked note about glaciers, taken on purpose.\n")
    os.symlink(shared / "linked.txt", docs / "linked.txt")
    (docs / "late.txt").write_text("Harmless words about the sea.\n")
    outside = work / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    hook = f"os.remove({str(docs / 'late.txt')!r}); os.symlink({str(outside / 'secret.txt')!r}, {str(docs / 'late.txt')!r})"
    result = _ingest_hooked(docs, work / "ix", hook, "discover", "--follow-symlinks")
    _held(result, work / "ix", "late.txt", "--follow-symlinks, a link swapped in after discovery")
    check("glaciers" in _indexed_text(work / "ix"), "--follow-symlinks no longer follows a link found by the walk")


_RACE = """
import os, sys, threading, time
from pathlib import Path
from contextkit.loaders import discover, load_file
docs, secret_file, secret_dir, rounds = {docs!r}, {secret_file!r}, {secret_dir!r}, {rounds}
stop = threading.Event()
def racer():
    link, plain = docs + "/.link", docs + "/.plain"
    dlink = docs + "/.dlink"
    while not stop.is_set():
        os.symlink(secret_file, link); os.replace(link, docs + "/a.txt")
        with open(plain, "w") as fh: fh.write("plain words")
        os.replace(plain, docs + "/a.txt")
        os.rename(docs + "/sub", docs + "/.subdir"); os.symlink(secret_dir, docs + "/sub")
        os.remove(docs + "/sub"); os.rename(docs + "/.subdir", docs + "/sub")
sys.setswitchinterval(1e-5)  # switch threads often: many more interleavings a second
thread = threading.Thread(target=racer, daemon=True)
thread.start()
leaks = 0
ends = time.monotonic() + rounds
while time.monotonic() < ends:
    found = discover([docs])
    for source in found.files:
        result = load_file(source)
        leaks += any("TOPSECRET" in d.text for d in result.documents)
stop.set(); thread.join()
print("LEAKS", leaks)
"""


def attack_racing_thread_swaps_files_and_folders(work: Path) -> None:
    """A thread swaps ``a.txt`` and ``sub/`` for links outside while the folder is walked and loaded for 8 s."""
    docs = work / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text("plain words")
    (docs / "sub" / "b.txt").write_text("plain words")
    outside = work / "outside"
    outside.mkdir()
    (outside / "b.txt").write_text(SECRET)
    (outside / "secret.txt").write_text(SECRET)
    code = _RACE.format(docs=str(docs), secret_file=str(outside / "secret.txt"), secret_dir=str(outside), rounds=8)
    result = python(code, timeout=150)
    no_traceback(result, "racing loads")
    leaks = [line for line in result.stdout.splitlines() if line.startswith("LEAKS")]
    check(leaks, f"the race did not finish: {result.stderr[-600:]}")
    check(leaks[-1] == "LEAKS 0", f"a racing thread got a file outside the folder read: {leaks[-1]} loads in 8 s")
