"""Generations on disk: the files of each saved generation, readers' leases on them, and their cleanup.

Why: a service answers queries from an index while a job re-ingests into it. A reader must
see one committed generation whole (FAISS vectors, BM25 arrays and store rows of the same
save), and a writer must never change a file that a reader of an older generation may still
be reading. So every derived file is named by the generation that wrote it
(``vectors.12.faiss``, ``bm25.12/``), written once and never changed; each save writes
``manifest.<G>.json`` (the full manifest of generation G) and then ``manifest.json`` (the
pointer to the current one, the same bytes), each by an atomic rename.

A reader leases a generation by a shared ``flock`` on its ``manifest.<G>.json``: the lock
needs no write permission (read-only folders and mounts work) and disappears with the
reader's process if it crashes. After each save the writer tries an exclusive lock on every
older ``manifest.<g>.json``: an unheld one is collected (its files not named by a generation
still needed, then the manifest itself, are deleted while the writer holds the lock); a held
one stays with every file it names. Rows the store removed since a leased generation stay
too (``retired_chunks``, purged below the oldest generation still needed). The proof of the
reader's side is in :func:`lease_current`: a lease counts only when taken on a manifest that is
still linked, and the writer deletes only under the exclusive lock, after ``manifest.json``
already names a newer generation.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from contextkit.core.errors import IndexCorruptError, IndexFolderError
from contextkit.index._safe_files import not_regular, open_regular, opened

__all__ = ["GenerationFiles", "Lease", "collect_generations", "generation_manifest", "lease_current",
           "irregular_files", "read_manifest_bytes", "writer_active"]

log = logging.getLogger(__name__)

#: Names a save writes per generation (and temporaries of them), and the single-generation names of
#: an index folder written before generations had their own files.
_GENERATION_NAME = re.compile(r"^(vectors\.\d+\..+|bm25\.\d+(\.tmp)?|manifest\.\d+\.json(\.tmp)?)$")
LEGACY_NAMES = ("vectors.faiss", "vectors.f16.npy", "vectors.ids.npy", "vectors.delta.npy", "vectors.delta_ids.npy",
                "vectors.deleted.npy", "bm25")
#: How long a reader retries while writers keep replacing the generation it is about to lease.
_LEASE_TRIES = 200
#: The largest manifest read (a real one is a few KiB; a hostile one is refused, not read whole).
MAX_MANIFEST_BYTES = 4 << 20


def generation_manifest(generation: int) -> str:
    """The name of generation ``generation``'s own manifest (also its lease file)."""
    return f"manifest.{generation}.json"


def read_manifest_bytes(path: Path) -> bytes:
    """``manifest.json``'s bytes, refusing a file too large to be one, or not a regular file (a crafted folder:
    a FIFO would make the read wait forever, a link to ``/dev/zero`` would never end)."""
    with opened(path) as fh:
        data = fh.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise IndexCorruptError(f"{path}: over {MAX_MANIFEST_BYTES >> 20} MiB, not a manifest; `contextkit repair "
                                f"--index {path.parent}` restores it from the store", file=path.name)
    return data


def writer_active(folder: Path) -> bool:
    """Whether a writer holds ``folder/.lock`` now (a probe by a brief exclusive lock, which needs no write
    permission; a writer starting at that instant retries its lock for a moment, see ``Index._lock``).
    A ``.lock`` that is not a regular file is held by no writer (a writer refuses it): False, and
    :func:`lock_problem` says why."""
    try:
        fd = open_regular(folder / ".lock")
    except (OSError, IndexCorruptError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases the lock if we took it
    return False


def irregular_files(folder: Path) -> list[tuple[str, str]]:
    """``(name, why)`` of each file of the index in ``folder`` that is not a plain file (a link, FIFO, device),
    and each BM25 folder that is not a plain folder or holds such a file: what ``verify`` reports. Why: every
    reader refuses them, but a report should name them all, not the first one a read meets. Costs a
    listing of the folder and of each BM25 folder."""
    found: list[tuple[str, str]] = []
    for entry in sorted(os.listdir(folder)):
        ours = entry in (".lock", "manifest.json") or entry.startswith("store.sqlite") or \
            _GENERATION_NAME.match(entry) is not None or entry in LEGACY_NAMES
        if not ours:
            continue
        path = folder / entry
        if entry.startswith("bm25") and path.is_dir() and not path.is_symlink():
            try:
                names = sorted(os.listdir(path))
            except FileNotFoundError:  # a writer's save retired this generation since the folder was listed
                continue
            found += [(f"{entry}/{name}", why) for name in names if (why := not_regular(path / name)) is not None]
        elif (why := not_regular(path)) is not None:
            found.append((entry, why))
    return found


@dataclass
class Lease:
    """A reader's hold on one generation: the open, share-locked ``manifest.<G>.json`` (None: legacy folder)."""

    fd: int | None
    data: bytes

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


def lease_current(folder: Path) -> Lease:
    """Lease the generation ``manifest.json`` names now; the lease carries ``manifest.json``'s bytes.

    Why it is safe: the lease is a shared lock on ``manifest.<G>.json`` taken while that file is
    still linked (checked by ``fstat`` after the lock). The writer deletes a generation's files
    only while it holds the exclusive lock on the same file, and only for a generation that
    ``manifest.json`` no longer names; so either the reader's lock came first (the writer sees it
    and keeps the files) or the writer's did (the reader then finds the file unlinked or gone and
    reads ``manifest.json`` again). A folder without per-generation manifests (written by an
    older contextkit) gets no lease: its single set of files is read as it is.
    """
    pointer = folder / "manifest.json"
    for attempt in range(_LEASE_TRIES):
        data = read_manifest_bytes(pointer)
        try:
            parsed = json.loads(data)
            gen, files = int(parsed["generation"]), parsed.get("files")
        except (ValueError, KeyError, TypeError):
            return Lease(None, data)  # unreadable: the caller's parse names the problem
        if not files:
            return Lease(None, data)  # the older layout: one set of files, read as it is
        try:  # a FIFO here would block the open; a link may point anywhere: refused (IndexCorruptError)
            fd = open_regular(folder / generation_manifest(gen))
        except FileNotFoundError:
            if read_manifest_bytes(pointer) == data:  # no lease file for what it names (restored by hand):
                return Lease(None, data)  # read it as it is
            time.sleep(0.001 * min(attempt, 20))  # collected between our two reads: read the pointer again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            time.sleep(0.001 * min(attempt, 20))  # the writer is collecting it
            continue
        if os.fstat(fd).st_nlink == 0:
            os.close(fd)
            continue
        return Lease(fd, data)  # the pointer's bytes, read before the lease: they describe generation gen
    raise IndexFolderError(f"{folder}: the index changed {_LEASE_TRIES} times while it was being opened; try again")


@dataclass
class GenerationFiles:
    """What one generation's manifest names: its generation and the top-level names of its files."""

    generation: int
    names: frozenset[str]


def _held_generation(folder: Path, name: str) -> tuple[int | None, GenerationFiles | None]:
    """Try the exclusive lock on an older ``manifest.<g>.json``: (its fd when free, None) or (None, its files)."""
    from contextkit.index._manifest import IndexManifest

    try:
        fd = open_regular(folder / name)
    except (FileNotFoundError, IndexCorruptError):  # gone, or not a file we wrote: left as it is
        return None, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, None
    except OSError:
        pass
    try:
        manifest = IndexManifest.model_validate_json(os.read(fd, MAX_MANIFEST_BYTES))
        return None, GenerationFiles(manifest.generation, manifest.top_level_names())
    except ValueError:  # a reader holds a manifest we cannot read: keep everything, collect another time
        return None, GenerationFiles(-1, frozenset({"*"}))
    finally:
        os.close(fd)


def collect_generations(folder: Path, current_generation: int, current_names: frozenset[str]) -> int:
    """Delete what no reader can need any more; the oldest generation still needed (for the store's purge),
    -1 when a held generation's manifest cannot be read (then nothing is deleted).

    Called by the writer (it holds ``.lock``) after ``manifest.json`` names ``current_generation``;
    also after a crash, from the next writer's open, so nothing is left behind for long."""
    free, held = _older_generations(folder, current_generation)
    try:
        if any(g.generation < 0 for g in held):
            return -1
        keep = set(current_names) | {name for g in held for name in g.names}
        for entry in os.listdir(folder):
            unneeded = entry not in keep and entry != "manifest.json" and \
                re.fullmatch(r"manifest\.\d+\.json", entry) is None
            if unneeded and (_GENERATION_NAME.match(entry) or entry in LEGACY_NAMES):
                _remove(folder / entry)
        for entry, _ in free:
            _remove(folder / entry)
    finally:
        for _, fd in free:
            os.close(fd)
    return min([current_generation, *(g.generation for g in held)])


def _older_generations(folder: Path, current_generation: int) -> tuple[list[tuple[str, int]], list[GenerationFiles]]:
    """The older generations' manifests: those free (exclusively locked now, with the fd) and those held."""
    free: list[tuple[str, int]] = []
    held: list[GenerationFiles] = []
    for entry in os.listdir(folder):
        found = re.fullmatch(r"manifest\.(\d+)\.json", entry)
        if not found or int(found.group(1)) == current_generation:
            continue
        fd, files = _held_generation(folder, entry)
        if fd is not None:
            free.append((entry, fd))
        elif files is not None:
            held.append(files)
    return free, held


def _remove(target: Path) -> None:
    try:
        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("%s: could not remove %s (%s)", target.parent, target.name, exc)
