"""Integrity of an index folder: checksums and ``verify`` (``repair`` is in :mod:`._repair`).

What is checked, and when
-------------------------
``store.sqlite`` is the source of truth (files, documents, chunks, vectors); every
other file is derived from it and stamped with the store's *generation*:

* ``vectors.faiss`` and every file of ``bm25/``: :meth:`Index.save` records each
  one's size, SHA-256 and a *sample* SHA-256 (its size, first MiB and last MiB) in
  ``manifest.json``. :meth:`Index.open` compares sizes and hashes before reading
  anything: the full SHA-256 for files up to :data:`FULL_CHECK_ON_OPEN` (8 MiB),
  the sample hash for larger ones, so opening a 15 GB FAISS file (10M vectors of
  384 floats) costs two 1 MiB reads (~2 ms), not a full hash (~27 s at the 560 MB/s
  SHA-256 of a 2-core machine) on top of FAISS's own read. A truncated or extended file
  is always caught on open (its size); a bit flip in the middle of a file over
  8 MiB is caught by ``contextkit verify``, which hashes every byte.
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

Derived files whose generation lags the store (a write was interrupted: crash,
kill, full disk) are not damaged: :meth:`Index.open` rebuilds them (in memory
when read-only). ``verify`` reports them as ``stale`` (so every read-only open
pays that rebuild until the next write or ``repair``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from contextkit.index._faiss_kinds import DELTA_FILES

__all__ = ["FULL_CHECK_ON_OPEN", "SAMPLE_BYTES", "FileCheck", "FileSum", "VerifyReport", "check_file", "file_sum",
           "verify_index"]


#: Bytes read from each end of a file for its sample hash.
SAMPLE_BYTES = 1 << 20
#: Files up to this size are fully hashed on every open; larger ones by their sample hash.
FULL_CHECK_ON_OPEN = 8 << 20
#: Temporary names a save writes then renames; left behind only by an interrupted save.
LEFTOVERS = ("vectors.faiss.tmp", "manifest.json.tmp", "bm25.tmp", "bm25.old", "vectors.ids.npy.tmp",
             "vectors.f16.npy.build", *(f"{name}.tmp" for name in DELTA_FILES))

Status = Literal["ok", "missing", "corrupt", "stale", "mismatch", "unchecked", "leftover", "busy"]
PROBLEMS = frozenset({"missing", "corrupt", "stale", "mismatch"})


class FileSum(BaseModel):
    """What ``manifest.json`` records of one derived file."""

    size: int
    sha256: str
    sample_sha256: str = Field(description="sha256 of the size (8 bytes LE), the first and the last MiB")


def _full_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _sample_sha256(path: Path, size: int) -> str:
    h = hashlib.sha256(size.to_bytes(8, "little"))
    with open(path, "rb") as fh:
        if size <= 2 * SAMPLE_BYTES:
            h.update(fh.read())
        else:
            h.update(fh.read(SAMPLE_BYTES))
            fh.seek(size - SAMPLE_BYTES)
            h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()


def file_sum(path: Path, sha256: str | None = None) -> FileSum:
    """Size and hashes of ``path`` (``sha256`` when the caller hashed it while writing)."""
    size = path.stat().st_size
    return FileSum(size=size, sha256=sha256 or _full_sha256(path), sample_sha256=_sample_sha256(path, size))


def check_file(path: Path, recorded: FileSum, full: bool) -> str | None:
    """What is wrong with ``path`` against its record, or None. ``full``: hash every byte."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != recorded.size:
        return f"{size} bytes, manifest.json records {recorded.size} (truncated or overwritten)"
    if full or size <= FULL_CHECK_ON_OPEN:
        if _full_sha256(path) != recorded.sha256:
            return "content differs from the SHA-256 in manifest.json (bit flip or overwritten)"
    elif _sample_sha256(path, size) != recorded.sample_sha256:
        return "first or last MiB differs from the hash in manifest.json (overwritten)"
    return None


def sqlite_header_problem(path: Path) -> str | None:
    """A cheap look at a SQLite file's header: not SQLite, or shorter than its page count says."""
    size = path.stat().st_size
    wal = path.with_name(path.name + "-wal")
    wal_size = wal.stat().st_size if wal.is_file() else 0
    if size == 0:
        return "empty file (0 bytes)"
    with open(path, "rb") as fh:
        head = fh.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        return f"not a SQLite database ({size} bytes, no SQLite header)"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The page count is valid when the change counter matches "version-valid-for"; with a WAL
    # pending, the file may legitimately be shorter (a checkpoint was interrupted), so skip then.
    if wal_size == 0 and pages and head[24:28] == head[92:96] and size < pages * page_size:
        return f"truncated: {size} bytes, its header says {pages} pages of {page_size} bytes"
    return None


def faiss_header_count(path: Path) -> int | None:
    """The vector count in a FAISS ``IndexIDMap``/``IndexIDMap2`` file's header, read without FAISS."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return None
    if len(head) < 16 or head[:4] not in (b"IxM2", b"IxMp"):
        return None
    return int.from_bytes(head[8:16], "little", signed=True)


# --------------------------------------------------------------------------- verify
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


def _writer_active(folder: Path) -> bool:
    lock = folder / ".lock"
    if not lock.is_file():
        return False
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the lock if we took it
    return False


def _connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)


def _read_manifest(folder: Path, report: VerifyReport):  # -> IndexManifest | None
    from contextkit.index._index import IndexManifest

    path = folder / "manifest.json"
    if not path.is_file():
        report.add("manifest.json", "missing", "no manifest.json: not an index, or its manifest was lost",
                   repairable=None)
        return None
    try:
        manifest = IndexManifest.model_validate_json(path.read_bytes())
    except ValueError as exc:
        report.add("manifest.json", "corrupt", f"unreadable ({describe_invalid(exc)})", repairable=None)
        return None
    return manifest


def describe_invalid(exc: ValueError) -> str:
    """One line for a manifest that does not parse or validate."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            return f"{first['msg']}{f' at {where}' if where else ''}"
        except (IndexError, KeyError, TypeError):
            pass
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0] if text else ''}"


def _settings_copy(db: sqlite3.Connection) -> dict | None:
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'manifest_settings'").fetchone()
    except sqlite3.Error:
        return None
    return json.loads(row[0]) if row else None


def verify_index(path: str | Path, full: bool = True) -> VerifyReport:
    """Check every file of the index at ``path``; changes nothing.

    ``full``: hash every byte of the derived files and run ``PRAGMA integrity_check``;
    otherwise the sample hashes of :meth:`Index.open` and ``PRAGMA quick_check``.
    """
    from contextkit.index._index import SETTINGS_FIELDS

    folder = Path(path)
    report = VerifyReport(index=str(folder), full=full)
    if not folder.is_dir():
        report.add("(folder)", "missing", f"{folder} is not a folder")
        return report
    if _writer_active(folder):
        report.add(".lock", "busy", "a writer holds the index: what follows may change while it runs")
    manifest = _read_manifest(folder, report)

    # ------------------------------------------------------------------ store
    store = folder / "store.sqlite"
    db: sqlite3.Connection | None = None
    store_gen = chunks = None
    unrepairable = "the records store is the source of truth and cannot be rebuilt: restore a backup or re-ingest"
    if not store.is_file():
        report.add("store.sqlite", "missing", f"no records store; {unrepairable}", repairable=False)
    elif problem := sqlite_header_problem(store):
        report.add("store.sqlite", "corrupt", f"{problem}; {unrepairable}", repairable=False)
    else:
        try:
            db = _connect_ro(store)
            pragma = "integrity_check" if full else "quick_check"
            try:
                rows = [r[0] for r in db.execute(f"PRAGMA {pragma}(20)")]
            except sqlite3.DatabaseError as exc:
                rows = [str(exc)]
            if rows != ["ok"]:
                raise sqlite3.DatabaseError(f"PRAGMA {pragma}: " + "; ".join(rows[:5]))
            store_gen = int((db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone() or [0])[0])
            chunks = int(db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
            no_vector = int(db.execute("SELECT COUNT(*) FROM chunks c LEFT JOIN vectors v ON v.key = c.vector_key "
                                       "WHERE v.key IS NULL").fetchone()[0])
            dim = manifest.dim if manifest is not None else (_settings_copy(db) or {}).get("dim")
            bad_size = int(db.execute("SELECT COUNT(*) FROM vectors WHERE length(vector) != ?",
                                      (4 * int(dim),)).fetchone()[0]) if dim else 0
        except sqlite3.Error as exc:
            report.add("store.sqlite", "corrupt", f"{exc}; {unrepairable}", repairable=False)
            if db is not None:
                db.close()
            db = None
        else:
            if no_vector or bad_size:
                report.add("store.sqlite", "corrupt",
                           f"{no_vector} chunks without a vector, {bad_size} vectors of the wrong size; "
                           "re-ingest the affected files", repairable=False)
            else:
                report.add("store.sqlite", "ok",
                           f"PRAGMA {'integrity_check' if full else 'quick_check'} ok; {chunks} chunks, "
                           f"generation {store_gen}")

    # --------------------------------------------------------------- manifest
    copy = _settings_copy(db) if db is not None else None
    if manifest is not None:
        differs = sorted(k for k in SETTINGS_FIELDS if copy is not None and k in copy
                         and copy[k] != manifest.model_dump(include={k})[k])
        if differs:
            report.add("manifest.json", "mismatch", "settings differ from the store's copy: " + ", ".join(differs),
                       repairable=True)
        elif store_gen is not None and manifest.generation > store_gen:
            report.add("store.sqlite", "mismatch",
                       f"older than manifest.json (generation {store_gen} < {manifest.generation}): replaced or "
                       "restored from an older copy; repair rebuilds the derived files from it", repairable=True)
        else:
            report.add("manifest.json", "ok", f"generation {manifest.generation}, model {manifest.model}, "
                       f"dim {manifest.dim}")
    else:
        for check in report.checks:
            if check.file == "manifest.json":
                check.repairable = copy is not None
                check.detail += ("; the store holds a copy of the settings: repair restores it" if copy is not None
                                 else "; the store holds no copy of the settings (made by an older contextkit): "
                                      "cannot be repaired, restore it from a backup")

    # ---------------------------------------------------------- derived files
    if manifest is not None and db is not None and store_gen is not None and manifest.generation <= store_gen:
        _verify_derived(folder, manifest, db, store_gen, chunks or 0, full, report)
    elif manifest is None or db is None:
        why = "the records store is unreadable" if db is None else "manifest.json is unreadable"
        for name in ("vectors.faiss", "bm25/"):
            if (folder / name.rstrip("/")).exists():
                report.add(name, "unchecked", f"not checked: {why}")
    if db is not None:
        db.close()

    for name in LEFTOVERS:
        if (folder / name).exists():
            report.add(name, "leftover", "left by an interrupted save; harmless, removed by the next write")
    return report


def _verify_derived(folder: Path, manifest, db: sqlite3.Connection, store_gen: int, chunks: int, full: bool,
                    report: VerifyReport) -> None:
    import numpy as np

    if manifest.generation < store_gen:
        why = (f"behind the store (generation {manifest.generation} < {store_gen}): a write was interrupted; "
               "rebuilt from the store by repair or the next write (until then each read-only open rebuilds it)")
        report.add("vectors.faiss", "stale", why, repairable=True)
        report.add("bm25/", "stale", why, repairable=True)
        return
    rowids = np.fromiter((r[0] for r in db.execute("SELECT rowid FROM chunks ORDER BY rowid")), dtype=np.int64)
    # vectors.faiss
    faiss_path = folder / "vectors.faiss"
    rec = manifest.checksums.get("vectors.faiss")
    problem = check_file(faiss_path, rec, full) if rec is not None else (None if faiss_path.is_file() else "missing")
    if problem:
        report.add("vectors.faiss", "missing" if problem == "missing" else "corrupt", problem, repairable=True)
    else:
        import faiss

        try:
            index = faiss.read_index(str(faiss_path))
            ids = np.sort(faiss.vector_to_array(index.id_map)) if hasattr(index, "id_map") else None
            ntotal = index.ntotal
            if ids is not None and DELTA_FILES[2] in manifest.checksums:  # hnsw: rowids skipped since its build
                ids = _verify_skipped(folder, manifest, ids, full, report)
                ntotal = len(ids) if ids is not None else ntotal
            if ids is None and "vectors.ids.npy" in manifest.checksums:  # ivfpq: ids beside the IVF file
                ids = _verify_ivfpq_files(folder, manifest, index.ntotal, full, report)
                if ids is not None and all(name in manifest.checksums for name in DELTA_FILES):
                    ids = _verify_delta_files(folder, manifest, ids, full, report)
                    ntotal = len(ids) if ids is not None else ntotal
        except RuntimeError as exc:
            report.add("vectors.faiss", "corrupt", f"unreadable by FAISS: {str(exc).splitlines()[0]}",
                       repairable=True)
        else:
            if ntotal != chunks or index.d != manifest.dim or (ids is not None and not np.array_equal(ids, rowids)):
                report.add("vectors.faiss", "mismatch",
                           f"{ntotal} vectors of dimension {index.d}, the store has {chunks} chunks of "
                           f"dimension {manifest.dim} (or other ids)", repairable=True)
            else:
                how = "sha256 ok" if rec is not None else "no checksum recorded (saved by an older contextkit)"
                report.add("vectors.faiss", "ok" if rec is not None else "unchecked",
                           f"{how}; {ntotal} vectors, ids = the store's chunks")
    # bm25/
    recorded = {k: v for k, v in manifest.checksums.items() if k.startswith("bm25/")}
    bm25_ok = True
    for name, rec in sorted(recorded.items()):
        problem = check_file(folder / name, rec, full)
        if problem:
            bm25_ok = False
            report.add(name, "missing" if problem == "missing" else "corrupt", problem, repairable=True)
    if bm25_ok:
        from contextkit.index._bm25 import BM25Index

        meta_path = folder / "bm25" / "meta.json"
        try:
            meta_gen = json.loads(meta_path.read_text())["generation"]
        except (OSError, ValueError, KeyError) as exc:
            report.add("bm25/meta.json", "corrupt", f"unreadable ({exc})", repairable=True)
            return
        if meta_gen != store_gen:
            report.add("bm25/", "stale", f"generation {meta_gen}, the store's is {store_gen}; rebuilt when used",
                       repairable=True)
            return
        loaded = BM25Index.load(folder / "bm25")
        if loaded is None:
            report.add("bm25/", "corrupt", "unreadable by bm25s", repairable=True)
        elif not np.array_equal(np.sort(loaded.rowids), rowids):
            report.add("bm25/", "mismatch", f"{len(loaded.rowids)} chunks, the store has {chunks}", repairable=True)
        else:
            how = f"sha256 ok ({len(recorded)} files)" if recorded else "no checksums recorded (older contextkit)"
            report.add("bm25/", "ok" if recorded else "unchecked", f"{how}; {len(loaded.rowids)} chunks")


def _load_checked(folder: Path, name: str, manifest, full: bool, report: VerifyReport, mmap: bool = False):
    """A recorded ``.npy`` file whose checksum holds, loaded; None (reported missing or corrupt) otherwise."""
    import numpy as np

    problem = check_file(folder / name, manifest.checksums[name], full)
    if not problem:
        try:
            return np.load(folder / name, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError) as exc:
            problem = f"unreadable by numpy: {exc}"
    report.add(name, "missing" if problem == "missing" else "corrupt", problem, repairable=True)
    return None


def _verify_ivfpq_files(folder: Path, manifest, ntotal: int, full: bool, report: VerifyReport):
    """Checksums and shapes of an ``ivfpq`` index's ``.npy`` files; its rowids (None when unreadable)."""
    import numpy as np

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
    import numpy as np

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
    import numpy as np

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
