"""Integrity of an index folder: checksums and ``verify`` (``repair`` is in :mod:`.repair`).

What is checked, and when
-------------------------
``store.sqlite`` is the source of truth (files, documents, chunks, vectors); every
other file is derived from it and stamped with the store's *generation*:

* ``vectors.faiss`` and every file of ``bm25/``: :meth:`Index.save` records each
  one's size, SHA-256, a *sample* SHA-256 (its size, first MiB and last MiB) and a
  *spread* SHA-256 (64 blocks of 16 KiB evenly between the two) in ``manifest.json``.
  :meth:`Index.open` compares sizes and hashes before reading anything: the full
  SHA-256 for files up to :data:`FULL_CHECK_ON_OPEN` (8 MiB), the sample and spread
  hashes for larger ones, so opening a 15 GB FAISS file (10M vectors of 384 floats)
  costs 3 MiB of reads (a few ms), not a full hash (a read and SHA-256 of every
  byte) on top of FAISS's own read. A process hashes a file once while it stays as
  it was (its device, inode, size, mtime and ctime: any write, rename over it or
  ``utime`` moves the ctime; see ``check_file_on_open``), so opening the same index
  again, as ``search_index`` does each call, reads no file twice to check it. A
  truncated or extended file is always
  caught on open (its size), and so is damage at either end or in any run longer than
  1/63 of the file (a hole left by a failed copy, a zeroed range: it always covers a
  spread block). A bit flip or one bad vector elsewhere in a file over 8 MiB is not
  seen on open (the chance is the sampled share, 3 MiB of the file); ``contextkit
  verify`` hashes every byte and finds it. Manifests written before the spread hash
  have none: their files are checked by size and ends until the next save.
* ``store.sqlite`` changes between saves (SQLite WAL), so no checksum of it is
  kept. :meth:`Index.open` checks its header (magic, page count against the file
  size when no WAL is pending) and its generation against the manifest's (a store
  older than the manifest was replaced or restored); ``verify`` runs
  ``PRAGMA integrity_check`` and checks that every chunk has a vector of the
  right size. A damaged store cannot be rebuilt from anything else: ``repair``
  says so and changes nothing.
* ``manifest.json`` must parse and validate; the store keeps a copy of its
  settings (model, dimension, chunker...), so ``repair`` can restore a lost or
  damaged manifest.

* Values bound to their rows (full verify only; :mod:`._row_checks`): each FAISS id's vector
  against that row's vector in the store (flat and HNSW; IVF cannot give vectors back), BM25
  against a BM25 built afresh from the store's texts (:mod:`._bm25_check`: the live rowids in
  order, each chunk's length, every term's live postings and counts),
  each chunk's header and text against the hash stored beside them (``text_sha``; also checked
  on every read of a chunk, cheap beside the read), and the manifest's counts against the store's
  (a wrong count is the manifest's fault, never blamed on the store: repair rewrites it).
* A store holding schema objects contextkit does not create (a trigger, a view, another
  table) is refused by every open and reported here; it is read with ``trusted_schema`` off.
* A folder that cannot be written (a read-only mount, another user's files) is reported as
  ``read-only``; every check above still runs (SQLite opens the store ``mode=ro``, and
  ``immutable=1``, guarded, when no owner's session is open: see ``ReadOnlyOpener`` in
  :mod:`._manifest`).
* Beside a running writer (``.lock`` held: ``busy``) verify checks the generation
  ``manifest.json`` names when it starts, leased, against one read transaction of the store:
  the writer's commits since, its temporary files and its next generation's files are work in
  progress, never reported. A failing check is made again on the newer generation when the
  writer saved one meanwhile.
* A folder whose creation (the first ingest) stopped before its first save (no
  ``manifest.json``, a store with no chunks) is ``unfinished``: nothing was lost, run the ingest
  again; ``repair`` has nothing to rebuild and says the same.

Derived files whose generation lags the store while no writer runs (a write was interrupted:
crash, kill, full disk) are not damaged: :meth:`Index.open` rebuilds them (in memory
when read-only). ``verify`` reports them as ``stale`` (so every read-only open
pays that rebuild until the next write or ``repair``).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import numpy as np
from pydantic import BaseModel, Field

from contextkit.core.errors import IndexFolderError
from contextkit.index._bm25 import BM25Index
from contextkit.index._bm25_check import bm25_differs
from contextkit.index._bm25_files import read_meta
from contextkit.index._checksums import check_file, npy_load, sqlite_header_problem
from contextkit.index._disk import LEFTOVERS
from contextkit.index._faiss_kinds import DELTA_FILES, read_faiss, structure_problem
from contextkit.index._generations import irregular_files, lease_current, read_manifest_bytes, writer_active
from contextkit.index._manifest import (
    SETTINGS_FIELDS,
    IndexManifest,
    connect_ro,
    describe_invalid,
    settings_copy,
    stored_chunks,
)
from contextkit.index._pg_dsn import is_dsn, location_name
from contextkit.index._pg_verify import database_checks
from contextkit.index._row_checks import (
    counts_differ,
    faiss_rows_differ,
    ivf_lists_differ,
    text_hash_mismatches,
)
from contextkit.index._schema import parse_generation, value_problems
from contextkit.index._store import schema_problem

__all__ = ["FileCheck", "Status", "VerifyReport", "verify_index"]

Status = Literal["ok", "missing", "corrupt", "stale", "mismatch", "unchecked", "leftover", "busy", "read-only",
                 "unfinished"]
PROBLEMS = frozenset({"missing", "corrupt", "stale", "mismatch", "unfinished"})
#: How many times verify starts again when a writer saved a new generation while it checked a failing one.
_TRIES = 5
_UNREPAIRABLE = "the records store is the source of truth and cannot be rebuilt: restore a backup or re-ingest"


class FileCheck(BaseModel):
    file: str
    status: Status
    detail: str = ""
    repairable: bool | None = None

    @property
    def problem(self) -> bool:
        return self.status in PROBLEMS


class VerifyReport(BaseModel):
    index: str
    full: bool = True
    checks: list[FileCheck] = Field(default_factory=list)
    generation: int | None = Field(default=None, description="the generation checked (None: no manifest read)")

    @property
    def ok(self) -> bool:
        return not any(c.problem for c in self.checks)

    @property
    def problems(self) -> list[FileCheck]:
        return [c for c in self.checks if c.problem]

    def add(self, file: str, status: Status, detail: str = "", repairable: bool | None = None) -> FileCheck:
        check = FileCheck(file=file, status=status, detail=detail, repairable=repairable)
        self.checks.append(check)
        return check

    def to_dict(self) -> dict:
        return {"index": self.index, "ok": self.ok, "full": self.full,
                "checks": [c.model_dump() for c in self.checks]}


@dataclass
class _Store:
    """What the store check learnt: the open connection (None when unreadable), its generation and chunks."""

    db: sqlite3.Connection | None = None
    generation: int | None = None
    chunks: int | None = None


def verify_index(path: str | Path, full: bool = True) -> VerifyReport:
    """Check every file of the index at ``path``; changes nothing.

    ``full``: hash every byte of the derived files and run ``PRAGMA integrity_check``;
    otherwise the sample hashes of :meth:`Index.open` and ``PRAGMA quick_check``.
    The checks run in this order, each reported as it goes: the folder and its writer,
    the manifest read, the store, the manifest against the store, the derived files, leftovers.

    Beside a running writer it checks one generation, the one ``manifest.json`` names when it
    starts (leased, so its files stay), against one read transaction of the store; what the writer
    has committed since, its temporary files and the next generation's files are its work in
    progress, not damage. Why it may run again: a failing check of a generation the writer has
    since replaced by a save says nothing of the index now, so the newer one is checked instead.
    """
    if is_dsn(path):
        return _verify_database(path, full)
    folder = Path(path)
    report = _verify_once(folder, full)
    for _ in range(_TRIES):
        if report.ok or not _saved_since(folder, report):
            break
        report = _verify_once(folder, full)
    return report


def _verify_database(location: str | Path, full: bool) -> VerifyReport:
    """An index in PostgreSQL: its tables checked in one read transaction (:mod:`._pg_verify`)."""
    checks, generation = database_checks(location, full)
    report = VerifyReport(index=location_name(location), full=full, generation=generation)
    for what, status, detail, repairable in checks:
        report.add(what, cast(Status, status), detail, repairable)
    return report


def _saved_since(folder: Path, report: VerifyReport) -> bool:
    """Whether ``manifest.json`` names another generation than the one ``report`` checked."""
    try:
        now_at = IndexManifest.model_validate_json(read_manifest_bytes(folder / "manifest.json")).generation
    except (OSError, ValueError, IndexFolderError):
        return False
    return report.generation is not None and now_at != report.generation


def _verify_once(folder: Path, full: bool) -> VerifyReport:
    report = VerifyReport(index=str(folder), full=full)
    if not folder.is_dir():
        report.add("(folder)", "missing", f"{folder} is not a folder")
        return report
    if not os.access(folder, os.W_OK):
        report.add("(folder)", "read-only", "cannot be written here (a read-only mount or another user's files): "
                   "search, assemble, info and verify work; ingest and repair need a writable copy")
    busy = writer_active(folder)
    if busy:
        report.add(".lock", "busy", "a writer holds the index: its work in progress is not checked")
    for name, why in irregular_files(folder):  # a FIFO, device or link where the index keeps a file: never read
        report.add(name, "corrupt", f"{why}; every open refuses it: remove it by hand", repairable=False)
    if _never_committed(folder, report, busy):
        return report
    lease = None
    try:
        if (folder / "manifest.json").is_file():  # leased: a writer does not remove the files being checked
            lease = lease_current(folder)
    except (OSError, IndexFolderError):
        lease = None
    manifest = _read_manifest(folder, report, lease.data if lease is not None else None)
    report.generation = manifest.generation if manifest is not None else None
    store = _check_store(folder, manifest, full, report)
    try:
        _check_manifest(manifest, store, report)
        _check_derived(folder, manifest, store, full, report)
    finally:
        if store.db is not None:
            store.db.close()
        if lease is not None:
            lease.release()
    if not writer_active(folder):  # a running writer's temporaries are its work in progress
        for name in LEFTOVERS:
            if (folder / name).exists():
                report.add(name, "leftover", "left by an interrupted save; harmless, removed by the next write")
    return report


def _never_committed(folder: Path, report: VerifyReport, busy: bool) -> bool:
    """A folder whose creation (the first ingest) never saved its first generation: no ``manifest.json``
    and a store with no chunks (none, an empty file, or a fresh schema). Why its own status: nothing was
    lost, so the advice is to run the ingest again, not to restore a backup (reported; True)."""
    if (folder / "manifest.json").exists():
        return False
    store = folder / "store.sqlite"
    if store.is_file() and store.stat().st_size > 0 and (sqlite_header_problem(store) or stored_chunks(store)):
        return False  # a store with chunks (or a damaged one) whose manifest went: the checks below say which
    if busy:
        report.add("(index)", "busy", "being created by a running ingest: no generation is committed yet")
    else:
        report.add("(index)", "unfinished",
                   "no index was committed here: its creation (the first `contextkit ingest` into this folder) "
                   "stopped before its first save, and nothing was stored; run the same ingest again, or delete "
                   "the folder", repairable=False)
    return True


def _read_manifest(folder: Path, report: VerifyReport, data: bytes | None) -> IndexManifest | None:
    path = folder / "manifest.json"
    if not path.is_file():
        report.add("manifest.json", "missing", "no manifest.json: not an index, or its manifest was lost",
                   repairable=None)
        return None
    try:
        manifest = IndexManifest.model_validate_json(data if data is not None else read_manifest_bytes(path))
    except IndexFolderError as exc:  # a link or FIFO in its place, or too large: never read
        report.add("manifest.json", "corrupt", str(exc).split(": ", 1)[-1], repairable=None)
        return None
    except ValueError as exc:
        report.add("manifest.json", "corrupt", f"unreadable ({describe_invalid(exc)})", repairable=None)
        return None
    return manifest


# ------------------------------------------------------------------ store
def _check_store(folder: Path, manifest: IndexManifest | None, full: bool, report: VerifyReport) -> _Store:
    """``store.sqlite``: header, integrity pragma, and a vector of the right size for every chunk."""
    path = folder / "store.sqlite"
    store = _Store()
    if not os.path.lexists(path):
        report.add("store.sqlite", "missing", f"no records store; {_UNREPAIRABLE}", repairable=False)
        return store
    if problem := sqlite_header_problem(path):
        report.add("store.sqlite", "corrupt", f"{problem}; {_UNREPAIRABLE}", repairable=False)
        return store
    try:
        store.db = connect_ro(path)
        store.db.execute("BEGIN")  # one read transaction: every check sees the same commit
        no_vector, bad_size = _read_store(store, manifest, full)
    except sqlite3.Error as exc:
        report.add("store.sqlite", "corrupt", f"{exc}; {_UNREPAIRABLE}", repairable=False)
        if store.db is not None:
            store.db.close()
        store.db = None
        return store
    damaged, named = text_hash_mismatches(store.db) if full else (0, [])
    if no_vector or bad_size:
        report.add("store.sqlite", "corrupt",
                   f"{no_vector} chunks without a vector, {bad_size} vectors of the wrong size; "
                   "re-ingest the affected files", repairable=False)
    elif damaged:
        report.add("store.sqlite", "corrupt",
                   f"{damaged} chunks whose header or text no longer matches its hash (damaged or changed outside "
                   f"contextkit), e.g. {', '.join(named)}; re-ingest those files", repairable=False)
    else:
        report.add("store.sqlite", "ok",
                   f"PRAGMA {'integrity_check' if full else 'quick_check'} ok; {store.chunks} chunks, "
                   f"generation {store.generation}")
    return store


def _read_store(store: _Store, manifest: IndexManifest | None, full: bool) -> tuple[int, int]:
    """Fill ``store``'s generation and chunk count; chunks without a vector, and vectors of the wrong size.

    Raises ``sqlite3.Error`` for a damaged store (what it learnt before stays in ``store``)."""
    db = store.db
    assert db is not None
    pragma = "integrity_check" if full else "quick_check"
    if planted := schema_problem(db):  # first: the pragma would evaluate a crafted expression index on every row
        raise sqlite3.DatabaseError(f"holds {planted}, which contextkit does not create: refused by every open "
                                    "(SQL planted in an index folder from elsewhere)")
    try:
        rows = [r[0] for r in db.execute(f"PRAGMA {pragma}(20)")]
    except sqlite3.DatabaseError as exc:
        rows = [str(exc)]
    if rows != ["ok"]:
        raise sqlite3.DatabaseError(f"PRAGMA {pragma}: " + "; ".join(rows[:5]))
    if crafted := value_problems(db):
        raise sqlite3.DatabaseError(crafted)
    store.generation = parse_generation((db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
                                         or [0])[0], Path("store.sqlite"))
    store.chunks = int(db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
    no_vector = int(db.execute("SELECT COUNT(*) FROM chunks c LEFT JOIN vectors v ON v.key = c.vector_key "
                               "WHERE v.key IS NULL").fetchone()[0])
    dim = manifest.dim if manifest is not None else (settings_copy(db) or {}).get("dim")
    bad_size = int(db.execute("SELECT COUNT(*) FROM vectors WHERE length(vector) != ?",
                              (4 * int(dim),)).fetchone()[0]) if dim else 0
    return no_vector, bad_size


# --------------------------------------------------------------- manifest
def _check_manifest(manifest: IndexManifest | None, store: _Store, report: VerifyReport) -> None:
    """The manifest against the store's copy of its settings and the store's generation."""
    copy = settings_copy(store.db) if store.db is not None else None
    if manifest is None:
        _note_settings_copy(report, copy)
        return
    differs = sorted(k for k in SETTINGS_FIELDS if copy is not None and k in copy
                     and copy[k] != manifest.model_dump(include={k})[k])
    if differs:
        report.add("manifest.json", "mismatch", "settings differ from the store's copy: " + ", ".join(differs),
                   repairable=True)
    elif store.generation is not None and manifest.generation > store.generation:
        report.add("store.sqlite", "mismatch",
                   f"older than manifest.json (generation {store.generation} < {manifest.generation}): replaced "
                   "or restored from an older copy; repair rebuilds the derived files from it", repairable=True)
    elif store.db is not None and manifest.generation == store.generation and \
            (wrong := counts_differ(manifest.counts, store.db)):
        report.add("manifest.json", "mismatch", f"{wrong}: the store is right, the manifest is not; repair "
                   "rewrites it", repairable=True)
    else:
        report.add("manifest.json", "ok", f"generation {manifest.generation}, model {manifest.model}, "
                   f"dim {manifest.dim}")


def _note_settings_copy(report: VerifyReport, copy: dict | None) -> None:
    """A lost or unreadable manifest is repairable exactly when the store holds a copy of its settings."""
    for check in report.checks:
        if check.file == "manifest.json":
            check.repairable = copy is not None
            check.detail += ("; the store holds a copy of the settings: repair restores it" if copy is not None
                             else "; the store holds no copy of the settings (made by an older contextkit): "
                                  "cannot be repaired, restore it from a backup")


# ---------------------------------------------------------- derived files
def _check_derived(folder: Path, manifest: IndexManifest | None, store: _Store, full: bool,
                   report: VerifyReport) -> None:
    """FAISS and BM25 when manifest and store can be read and agree; else say they were not checked."""
    if manifest is not None and store.db is not None and store.generation is not None \
            and manifest.generation <= store.generation:
        _verify_derived(folder, manifest, store.db, store.generation, store.chunks or 0, full, report)
    elif manifest is None or store.db is None:
        why = "the records store is unreadable" if store.db is None else "manifest.json is unreadable"
        for name in ("vectors.faiss", "bm25/"):
            if (folder / name.rstrip("/")).exists():
                report.add(name, "unchecked", f"not checked: {why}")


def _verify_derived(folder: Path, manifest: IndexManifest, db: sqlite3.Connection, store_gen: int, chunks: int,
                    full: bool, report: VerifyReport) -> None:
    if manifest.generation < store_gen and writer_active(folder):
        _verify_pinned(folder, manifest, db, store_gen, full, report)
        return
    if manifest.generation < store_gen:
        why = (f"behind the store (generation {manifest.generation} < {store_gen}): a write was interrupted; "
               f"readers serve generation {manifest.generation} until the next save, or repair")
        report.add("vectors.faiss", "stale", why, repairable=True)
        report.add("bm25/", "stale", why, repairable=True)
        return
    rowids = np.fromiter((r[0] for r in db.execute("SELECT rowid FROM chunks ORDER BY rowid")), dtype=np.int64)
    _verify_faiss(folder, manifest, rowids, chunks, full, report, db)
    _verify_bm25(folder, manifest, rowids, chunks, store_gen, full, report, db)


def _verify_pinned(folder: Path, manifest: IndexManifest, db: sqlite3.Connection, store_gen: int, full: bool,
                   report: VerifyReport) -> None:
    """The leased generation G while a running writer has committed past it (the store is at ``store_gen``).

    Its files are checked whole (checksums, FAISS and BM25 readable, of the manifest's dimension),
    and bound to the rows G had: the rows the store keeps for G's readers (live, or retired since G),
    of which G's are the first ``counts["chunks"]`` by rowid, since rowids only grow. What needs the
    store at G itself (each vector and BM25 count against its row) waits for a verify with no writer."""
    g = manifest.generation
    retired = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'retired_chunks'").fetchone()
    sql = "SELECT rowid FROM chunks" + (" UNION SELECT rowid FROM retired_chunks WHERE last_gen >= ?" if retired else "")
    kept = np.fromiter((r[0] for r in db.execute(sql + " ORDER BY 1", (g,) if retired else ())), dtype=np.int64)
    n = manifest.counts.get("chunks")
    if n is None or n > len(kept):
        for name in ("vectors.faiss", "bm25/"):
            report.add(name, "unchecked", f"generation {g}: a writer has committed past it (generation {store_gen}) "
                       "and the manifest records no chunk count to bind it by; run verify when no writer runs")
        return
    rowids = kept[:n]
    _verify_faiss(folder, manifest, rowids, n, full, report, db, rows=False)
    _verify_bm25(folder, manifest, rowids, n, g, full, report, db, rows=False)
    note = f" (generation {g}; a writer has committed up to {store_gen} since: rows bound by rowid, not by value)"
    for check in report.checks:
        if check.status == "ok" and check.file.startswith(("vectors.", "bm25")):
            check.detail += note


def _verify_faiss(folder: Path, manifest: IndexManifest, rowids: np.ndarray, chunks: int, full: bool,
                  report: VerifyReport, db: sqlite3.Connection, rows: bool = True) -> None:
    """``vectors.faiss`` (and the files beside it): checksums, then the vectors and ids against the store's chunks."""
    faiss_path = folder / manifest.file("vectors.faiss")
    rec = manifest.checksums.get("vectors.faiss")
    problem = check_file(faiss_path, rec, full) if rec is not None else (None if faiss_path.is_file() else "missing")
    if problem:
        report.add("vectors.faiss", "missing" if problem == "missing" else "corrupt", problem, repairable=True)
        return
    try:
        dim, ntotal, ids = _read_faiss(folder, manifest, full, report)
    except RuntimeError as exc:
        report.add("vectors.faiss", "corrupt", f"unreadable by FAISS: {str(exc).splitlines()[0]}",
                   repairable=True)
        return
    if ntotal != chunks or dim != manifest.dim or (ids is not None and not np.array_equal(ids, rowids)):
        report.add("vectors.faiss", "mismatch",
                   f"{ntotal} vectors of dimension {dim}, the store has {chunks} chunks of "
                   f"dimension {manifest.dim} (or other ids)", repairable=True)
    elif full and rows and (moved := _faiss_rows(faiss_path, db, manifest.dim, ids)):
        report.add("vectors.faiss", "mismatch", moved, repairable=True)
    else:
        how = "sha256 ok" if rec is not None else "no checksum recorded (saved by an older contextkit)"
        report.add("vectors.faiss", "ok" if rec is not None else "unchecked",
                   f"{how}; {ntotal} vectors, ids = the store's chunks")


def _faiss_rows(path: Path, db: sqlite3.Connection, dim: int, searched: np.ndarray | None) -> str | None:
    """Each FAISS id a search can return against its own row's vector in the store (flat and HNSW; None
    when all match)."""

    try:
        return faiss_rows_differ(read_faiss(path), db, dim, searched)
    except (RuntimeError, MemoryError) as exc:
        return f"unreadable by FAISS: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def _read_faiss(folder: Path, manifest: IndexManifest, full: bool, report: VerifyReport
                ) -> tuple[int, int, np.ndarray | None]:
    """Dimension, vectors searched and their rowids (sorted; None when unknown or damaged) of the FAISS files.

    Raises ``RuntimeError`` when FAISS cannot read ``vectors.faiss``."""
    import faiss

    index = read_faiss(folder / manifest.file("vectors.faiss"))  # regular files only, arrays within the file
    ids = np.sort(faiss.vector_to_array(index.id_map)) if hasattr(index, "id_map") else None
    if problem := structure_problem(index):  # IVF list ids, HNSW links: what a search would follow
        raise RuntimeError(problem)
    ntotal = index.ntotal
    if ids is not None and DELTA_FILES[2] in manifest.checksums:  # hnsw: rowids skipped since its build
        ids = _verify_skipped(folder, manifest, ids, full, report)
        ntotal = len(ids) if ids is not None else ntotal
    if ids is None and "vectors.ids.npy" in manifest.checksums:  # ivfpq: ids beside the IVF file
        ids = _verify_ivfpq_files(folder, manifest, index.ntotal, full, report)
        if ids is not None and (problem := ivf_lists_differ(index, ids)):
            raise RuntimeError(problem)
        if ids is not None and all(name in manifest.checksums for name in DELTA_FILES):
            ids = _verify_delta_files(folder, manifest, ids, full, report)
            ntotal = len(ids) if ids is not None else ntotal
    return index.d, ntotal, ids


def _verify_bm25(folder: Path, manifest: IndexManifest, rowids: np.ndarray, chunks: int, store_gen: int,
                 full: bool, report: VerifyReport, db: sqlite3.Connection, rows: bool = True) -> None:
    """``bm25/``: checksums, its generation, then its chunks against the store's."""
    recorded = {k: v for k, v in manifest.checksums.items() if k.startswith("bm25/")}
    damaged = False
    for name, rec in sorted(recorded.items()):
        problem = check_file(folder / manifest.file(name), rec, full)
        if problem:
            damaged = True
            report.add(name, "missing" if problem == "missing" else "corrupt", problem, repairable=True)
    if damaged:
        return
    try:
        meta_gen = read_meta(folder / manifest.file("bm25"))["generation"]
    except (OSError, ValueError, KeyError, IndexFolderError) as exc:
        report.add("bm25/meta.json", "corrupt", f"unreadable ({exc})", repairable=True)
        return
    if meta_gen != store_gen:
        report.add("bm25/", "stale", f"generation {meta_gen}, the store's is {store_gen}; rebuilt when used",
                   repairable=True)
        return
    loaded = BM25Index.load(folder / manifest.file("bm25"))
    if loaded is None:
        report.add("bm25/", "corrupt", "unreadable (an array out of range or of another shape than meta.json "
                   "says)", repairable=True)
    elif not np.array_equal(np.sort(loaded.rowids), rowids):
        report.add("bm25/", "mismatch", f"{len(loaded.rowids)} chunks, the store has {chunks}", repairable=True)
    elif full and rows and (wrong := bm25_differs(loaded, db)):
        report.add("bm25/", "mismatch", f"{wrong}; rebuilt from the store by repair", repairable=True)
    else:
        how = f"sha256 ok ({len(recorded)} files)" if recorded else "no checksums recorded (older contextkit)"
        report.add("bm25/", "ok" if recorded else "unchecked", f"{how}; {len(loaded.rowids)} chunks")


def _load_checked(folder: Path, name: str, manifest, full: bool, report: VerifyReport, mmap: bool = False):
    """A recorded ``.npy`` file whose checksum holds, loaded; None (reported missing or corrupt) otherwise."""

    problem = check_file(folder / manifest.file(name), manifest.checksums[name], full)
    if not problem:
        try:
            return npy_load(folder / manifest.file(name), mmap_mode="r" if mmap else None)
        except (OSError, ValueError) as exc:
            problem = f"unreadable by numpy: {exc}"
    report.add(name, "missing" if problem == "missing" else "corrupt", problem, repairable=True)
    return None

def _verify_ivfpq_files(folder: Path, manifest, ntotal: int, full: bool, report: VerifyReport):
    """Checksums and shapes of an ``ivfpq`` index's ``.npy`` files; its rowids (None when unreadable)."""

    ids = None
    for name in ("vectors.f16.npy", "vectors.ids.npy"):
        arr = _load_checked(folder, name, manifest, full, report, mmap=True)
        if arr is None:
            continue
        want = (ntotal, manifest.dim) if name == "vectors.f16.npy" else (ntotal,)
        if arr.shape != want:
            report.add(name, "mismatch", f"shape {arr.shape}, vectors.faiss needs {want}", repairable=True)
        else:
            report.add(name, "ok", f"sha256 ok; shape {arr.shape}")
            if name == "vectors.ids.npy":
                ids = np.sort(np.asarray(arr))
    return ids

def _verify_skipped(folder: Path, manifest, graph_ids, full: bool, report: VerifyReport):
    """An ``hnsw`` graph's skipped rowids (``vectors.deleted.npy``); the rowids searched (None: damaged)."""

    name = DELTA_FILES[2]
    deleted = _load_checked(folder, name, manifest, full, report)
    if deleted is None:
        return None
    if deleted.ndim != 1 or not np.isin(deleted, graph_ids).all():
        report.add(name, "mismatch", "rowids the graph does not hold", repairable=True)
        return None
    report.add(name, "ok", f"sha256 ok; {len(deleted)} rowids of the graph skipped since its build")
    return np.setdiff1d(graph_ids, deleted)

def _verify_delta_files(folder: Path, manifest, built_ids, full: bool, report: VerifyReport):
    """Checksums and shapes of the changes kept beside an ``ivfpq`` build; the rowids searched (None: damaged)."""

    arrays = []
    for name in DELTA_FILES:
        arrays.append(_load_checked(folder, name, manifest, full, report))
        if arrays[-1] is None:
            return None
    vectors, added, deleted = arrays
    if vectors.shape != (len(added), manifest.dim) or not np.isin(deleted, built_ids).all():
        report.add(DELTA_FILES[0], "mismatch", f"{vectors.shape} vectors for {len(added)} rowids, or removed rowids "
                   "the build does not hold", repairable=True)
        return None
    for name, what in zip(DELTA_FILES, (f"{len(added)} vectors added since the build", "their rowids",
                                         f"{len(deleted)} rowids of the build removed since")):
        report.add(name, "ok", f"sha256 ok; {what}")
    return np.union1d(np.setdiff1d(built_ids, deleted), added)
