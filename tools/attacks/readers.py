"""Readers of an index while its owner changes it (issue 33): a reader that cannot write the folder,
a folder swapped under a running reader, ``verify`` beside a running writer, and the advice given
after a creation that was killed.

Every reader and writer here is its own process. The owner's saves between the real ingests are
made by a small writer process through the public ``Index`` API with vectors the model already
made (the store's own), so dozens of generations pass in seconds; the first index of each attack
is a real ``contextkit ingest`` with the real model. A folder the reader cannot write is a
read-only bind mount of the owner's folder (root ignores file modes, so a chmod proves nothing
for it); the attack fails, saying why, where no mount can be made.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tools.attacks._harness import ENV, build_index, check, cli, no_traceback, small_corpus

#: A long-lived reader: one ``Index`` opened read-only, queried (dense by a stored vector, then BM25)
#: until ``stop`` exists; one JSON line per query outcome is summed up at the end.
_READER = r"""
import json, sys, time, traceback
from pathlib import Path
from contextkit.index import Index
from contextkit.retrievers import BM25Retriever
folder, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
index = Index.open(folder, read_only=True)
vector = index.store.vectors_by_rowid([int(index.snapshot_rowids()[0]) if index.snapshot_rowids() is not None
                                       else 1])[0]
bm25 = BM25Retriever(index)
queries, errors, generations, last = 0, [], set(), None
started = time.monotonic()
while True:
    done = stop.exists()
    try:
        with index.snapshot():
            dense = index.search(vector, 3)[0]
            lexical = bm25.retrieve("zebra crossing note", k=50)
            generations.add(index.generation)
            last = {"generation": index.generation, "dense": len(dense),
                    "notes": sorted(h.chunk.doc_id for h in lexical if h.chunk.doc_id.startswith("note-"))}
            if not dense:
                errors.append(f"generation {index.generation}: dense search found nothing")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    queries += 1
    if queries == 1:
        out.with_suffix(".ready").touch()
    if done or time.monotonic() - started > 150:
        break
    time.sleep(0.01)
index.close()
out.write_text(json.dumps({"queries": queries, "errors": errors, "generations": sorted(generations), "last": last}))
"""

#: The owner: ``saves`` saves, each adding one note (a document with the stored vector of chunk 1),
#: ``pause`` seconds apart, in one writable ``Index`` session.
_OWNER = r"""
import sys, time
from pathlib import Path
from contextkit.core.records import Chunk, Document
from contextkit.index import Index
folder, first, saves, pause = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with Index.open(folder) as index:
    vector = index.store.vectors_by_rowid([1])
    for i in range(first, first + saves):
        text = f"Note {i}: a zebra crossing note number {i}."
        doc = Document(id=f"note-{i}", text=text, source=f"note-{i}")
        chunk = Chunk(id=f"note-{i}#0", doc_id=doc.id, ordinal=0, text=text, start=0, end=len(text), token_count=12)
        index.upsert(doc, [chunk], vector)
        index.save()
        time.sleep(pause)
"""


def _python(code: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, errors="replace")


def _owner(folder: Path, first: int, saves: int, pause: float = 0.05) -> None:
    proc = _python(_OWNER, folder, first, saves, pause)
    _, err = proc.communicate(timeout=240)
    check(proc.returncode == 0, f"the owner's writer failed ({proc.returncode}): {err[-600:]}")


def _start_reader(folder: Path, work: Path, name: str) -> tuple[subprocess.Popen[str], Path, Path]:
    """A long-lived reader process of ``folder``, returned once it has answered its first query."""
    stop, out = work / f"{name}.stop", work / f"{name}.json"
    proc = _python(_READER, folder, stop, out)
    deadline = time.monotonic() + 120
    while not out.with_suffix(".ready").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    check(out.with_suffix(".ready").exists(), f"{name}: the reader never answered a query: "
                                              f"{proc.communicate(timeout=60)[1][-800:] if proc.poll() is not None else 'hung'}")
    return proc, stop, out


def _finish_reader(reader: tuple[subprocess.Popen[str], Path, Path], name: str) -> dict:
    proc, stop, out = reader
    stop.touch()
    _, err = proc.communicate(timeout=200)
    check(out.is_file(), f"{name}: the reader died ({proc.returncode}): {err[-800:]}")
    result = json.loads(out.read_text())
    errors = result["errors"]
    check(not errors, f"{name}: {len(errors)} of {result['queries']} queries failed, e.g. {errors[0] if errors else ''}")
    return result


def _mount_read_only(source: Path, target: Path) -> None:
    target.mkdir(exist_ok=True)
    for cmd in (["mount", "--bind", str(source), str(target)], ["mount", "-o", "remount,ro,bind", str(target)]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            subprocess.run(["umount", str(target)], capture_output=True)
            check(False, f"cannot set up a folder the reader cannot write ({' '.join(cmd[:3])}: "
                         f"{done.stderr.strip()}); run as root with mount rights")


def _unmount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], capture_output=True)


# ------------------------------------------------------------------------------- finding 1
def attack_read_only_reader_follows_the_owners_saves(work: Path) -> None:
    """A long-lived reader of a folder it cannot write (the owner's folder through a read-only mount),
    opened when no writer ran, queries while the owner saves 24 generations in two sessions (the
    second after the owner closed, so SQLite's WAL was checkpointed into the file and removed): no
    query may fail, and the reader must reach the owner's last generation and see its last note."""
    ix, mnt = work / "ix", work / "mnt"
    build_index(small_corpus(work / "docs", 3), ix)
    _mount_read_only(ix, mnt)
    try:
        reader = _start_reader(mnt, work, "reader")
        _owner(ix, 0, 12)
        time.sleep(1.0)  # the reader queries the checkpointed file with no writer attached
        _owner(ix, 12, 12)
        time.sleep(1.0)
        result = _finish_reader(reader, "reader on the read-only mount")
        final = json.loads((ix / "manifest.json").read_text())["generation"]
        check(result["last"]["generation"] == final,
              f"the reader stayed on generation {result['last']['generation']}, the owner saved {final}")
        check("note-23" in result["last"]["notes"], f"the reader's last answer misses the last note: {result['last']}")
    finally:
        _unmount(mnt)


def attack_read_only_reader_opened_while_the_owner_writes(work: Path) -> None:
    """The same, with the reader opened while the owner's session is open (its ``-wal`` and ``-shm``
    exist), then the owner closing and a new owner session saving again; and a second reader opened
    after everything, on the folder as the owner left it."""
    ix, mnt = work / "ix", work / "mnt"
    build_index(small_corpus(work / "docs", 3), ix)
    _mount_read_only(ix, mnt)
    try:
        owner = _python(_OWNER, ix, 0, 40, 0.15)
        time.sleep(3.0)
        reader = _start_reader(mnt, work, "reader")
        _, err = owner.communicate(timeout=240)
        check(owner.returncode == 0, f"the owner's writer failed: {err[-600:]}")
        _owner(ix, 40, 8)
        time.sleep(1.0)
        result = _finish_reader(reader, "reader opened beside the owner")
        check("note-47" in result["last"]["notes"], f"the reader never saw the owner's last save: {result['last']}")
        search = cli(["search", "zebra crossing note 47", "--index", str(mnt), "--mode", "bm25", "-k", "3", "--json"])
        no_traceback(search, "search on the read-only mount")
        check(search.returncode == 0 and "note-47" in search.stdout, f"a fresh reader: {search.stderr[-400:]}")
        verify = cli(["verify", "--index", str(mnt), "--json"])
        report = json.loads(verify.stdout or "{}")
        check(verify.returncode == 0 and report.get("ok"), f"verify on the mount: {verify.stdout[-600:]}")
    finally:
        _unmount(mnt)


# ------------------------------------------------------------------------------- finding 2
def _two_indexes(work: Path) -> tuple[Path, Path]:
    """``ix-a`` (a real ingest) and ``ix-b`` (a copy of it with 5 more notes: another folder, other generations)."""
    a, b = work / "ix-a", work / "ix-b"
    build_index(small_corpus(work / "docs", 3), a)
    shutil.copytree(a, b, symlinks=True)
    _owner(b, 100, 5)
    return a, b


def _swap_link(link: Path, target: Path) -> None:
    """``ln -s target tmp && mv -T tmp link``: the atomic way to point a path at another folder."""
    tmp = link.with_name(link.name + ".tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def attack_symlink_swap_under_a_running_reader(work: Path) -> None:
    """A reader opened ``current`` (a symlink to ``ix-a``); ``current`` is swapped atomically to a rebuilt
    ``ix-b``, back, and again, while the reader queries, and ``ix-a``'s owner saves meanwhile: no query
    may fail or mix the two folders; a reader opened afterwards serves ``ix-b``."""
    a, b = _two_indexes(work)
    current = work / "current"
    os.symlink(a, current)
    reader = _start_reader(current, work, "reader")
    for target in (b, a, b):
        _swap_link(current, target)
        time.sleep(1.0)
    _owner(a, 200, 3)
    time.sleep(1.0)
    result = _finish_reader(reader, "reader of a swapped symlink")
    notes = result["last"]["notes"]
    check(not any(n.startswith("note-10") for n in notes) or not any(n.startswith("note-20") for n in notes),
          f"one answer mixed the two folders: {notes}")
    search = cli(["search", "zebra crossing note", "--index", str(current), "--mode", "bm25", "-k", "10", "--json"])
    no_traceback(search, "search after the swap")
    check(search.returncode == 0 and "note-100" in search.stdout, f"a new reader of current: {search.stdout[-400:]}")


def attack_folder_renamed_over_under_a_running_reader(work: Path) -> None:
    """``mv ix ix.old && mv ix.new ix`` while a reader of ``ix`` runs (the swap without a symlink): the
    reader may keep its folder or say it must be opened again, but never that the index is damaged."""
    a, b = _two_indexes(work)
    reader = _start_reader(a, work, "reader")
    os.rename(a, work / "ix-a.old")
    os.rename(b, a)
    time.sleep(1.5)
    proc, stop, out = reader
    stop.touch()
    _, err = proc.communicate(timeout=200)
    check(out.is_file(), f"the reader died ({proc.returncode}): {err[-800:]}")
    result = json.loads(out.read_text())
    damage = [e for e in result["errors"] if any(w in e.lower() for w in ("corrupt", "damaged", "repair", "restore",
                                                                           "replaced or restored"))]
    check(not damage, f"{len(damage)} of {result['queries']} queries called a swapped folder damaged: {damage[0] if damage else ''}")


# ------------------------------------------------------------------------------- finding 3
_VERIFY_LOOP = r"""
import json, sys, time
from pathlib import Path
from contextkit.index import verify_index
folder, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
runs, false = 0, []
while not stop.exists():
    report = verify_index(folder, full=runs % 2 == 0)
    runs += 1
    false += [f"{c.file}: {c.status}: {c.detail}" for c in report.checks if c.problem or c.status == "leftover"]
out.write_text(json.dumps({"runs": runs, "false": false}))
"""


def attack_verify_beside_a_running_writer(work: Path) -> None:
    """``verify`` (in a loop, full and quick) while another process saves generation after generation, and
    ``contextkit verify`` while a real ``contextkit ingest`` adds files: a healthy index must never be
    reported missing, corrupt, stale, mismatched or left over from an interrupted save."""
    ix = work / "ix"
    docs = small_corpus(work / "docs", 3)
    build_index(docs, ix)
    stop, out = work / "verify.stop", work / "verify.json"
    loop = _python(_VERIFY_LOOP, ix, stop, out)
    _owner(ix, 0, 30, 0.02)
    stop.touch()
    _, err = loop.communicate(timeout=200)
    check(out.is_file(), f"the verify loop died: {err[-800:]}")
    result = json.loads(out.read_text())
    check(result["runs"] > 0, "verify never ran")
    check(not result["false"], f"{len(result['false'])} false reports in {result['runs']} runs beside a writer, "
                               f"e.g. {result['false'][0] if result['false'] else ''}")
    for i in range(20):
        (docs / f"more{i}.txt").write_text(f"Another file {i} about tides and the moon. " * 40)
    ingest = subprocess.Popen([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(ix), "--quiet"],
                              env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reports = []
    while ingest.poll() is None:
        done = cli(["verify", "--index", str(ix), "--json"])
        if ingest.poll() is None:
            reports.append(done)
    check(ingest.returncode == 0, f"the ingest beside verify failed: {ingest.stderr.read() if ingest.stderr else ''}")
    for done in reports:
        no_traceback(done, "verify beside ingest")
        report = json.loads(done.stdout)
        bad = [f"{c['file']}: {c['status']}" for c in report["checks"]
               if c["status"] in ("missing", "corrupt", "stale", "mismatch", "leftover")]
        check(done.returncode == 0 and not bad, f"contextkit verify beside a running ingest: exit {done.returncode}, {bad}")


# ------------------------------------------------------------------------------- finding 4
def _killed_creation(work: Path, delay: float) -> Path:
    """A first ``contextkit ingest`` into a new folder, killed (SIGKILL) ``delay`` seconds in; the folder
    it left (the attack fails if the kill came too late to leave one without a committed generation)."""
    docs = small_corpus(work / "docs", 3)
    ix = work / "ix"
    proc = subprocess.Popen([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(ix), "--quiet"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (ix / ".lock").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.002)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return ix


def _advice_after_killed_creation(work: Path, ix: Path) -> None:
    for command in ("verify", "repair"):
        done = cli([command, "--index", str(ix)])
        no_traceback(done, command)
        said = " ".join((done.stdout + done.stderr).split())
        check("backup" not in said.lower(), f"{command} after a killed creation advises a backup: {said[-500:]}")
        check("ingest" in said.lower(), f"{command} does not say to run the ingest again: {said[-500:]}")
        check(done.returncode == 1, f"{command} exit {done.returncode} for a folder that holds no index yet")
    again = cli(["ingest", str(work / "docs"), "--index", str(ix), "--quiet"])
    check(again.returncode == 0, f"the advised re-run failed: {again.stderr[-400:]}")
    final = cli(["verify", "--index", str(ix), "--json"])
    check(final.returncode == 0, f"verify after the re-run: {final.stdout[-400:]}")


def attack_killed_index_creation_gets_accurate_advice(work: Path) -> None:
    """``kill -9`` of the first ingest into a new folder while it creates the index (just after it took the
    writer lock): ``verify`` and ``repair`` must say no index was committed yet and to run the ingest again
    (exit 1), not to restore a backup; the re-run must then work."""
    ix = _killed_creation(work, 0.0)
    check(not (ix / "manifest.json").exists(), "setup: the kill came after the index was created")
    _advice_after_killed_creation(work, ix)


def attack_every_uncommitted_creation_state_gets_accurate_advice(work: Path) -> None:
    """What a creation killed at each of its steps can leave, made exactly with contextkit's own store: the
    folder with only ``.lock``; an empty ``store.sqlite``; the store's schema; the schema and the copy of
    the settings (written just before the first manifest); and a half-written manifest temporary. Each
    must be called an unfinished creation (exit 1, run the ingest again), never damage to restore."""
    from contextkit.index._manifest import SETTINGS_FIELDS, IndexManifest
    from contextkit.index._store import RecordStore

    docs = small_corpus(work / "docs", 3)
    settings = json.dumps(IndexManifest(model="sentence-transformers/all-MiniLM-L6-v2", dim=384)
                          .model_dump(include=set(SETTINGS_FIELDS)), sort_keys=True)
    states = {"lock-only": (), "empty-store": ("file",), "schema": ("schema",),
              "settings-copy": ("schema", "settings"), "manifest-temp": ("schema", "settings", "tmp")}
    for name, parts in states.items():
        ix = work / name
        ix.mkdir()
        (ix / ".lock").touch()
        if "file" in parts:
            (ix / "store.sqlite").touch()
        if "schema" in parts:
            store = RecordStore(ix / "store.sqlite", 384)
            if "settings" in parts:
                with store.transaction():
                    store.set_meta("manifest_settings", settings)
            store.close()
        if "tmp" in parts:
            (ix / "manifest.json.tmp").write_text('{"format_version": 1, "mod')
        for command in ("verify", "repair"):
            done = cli([command, "--index", str(ix)])
            no_traceback(done, f"{command} ({name})")
            said = " ".join((done.stdout + done.stderr).split()).lower()
            check("backup" not in said and "ingest" in said and done.returncode == 1,
                  f"{command} on a creation killed at '{name}': exit {done.returncode}, {said[-400:]}")
    again = cli(["ingest", str(docs), "--index", str(work / "settings-copy"), "--quiet"])
    check(again.returncode == 0, f"ingest into the unfinished folder failed: {again.stderr[-400:]}")
