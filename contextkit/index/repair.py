"""``repair``: rebuild what can be rebuilt from the records store (see :mod:`.verify` for what is checked).

Everything but ``store.sqlite`` is derived from it: FAISS files, BM25, and (from the copy of
the settings the store keeps) the manifest. A damaged store cannot be rebuilt from anything
else; repair then changes nothing and says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import BaseModel, Field

from contextkit.index._disk import LEFTOVERS
from contextkit.index._generations import read_manifest_bytes
from contextkit.index._index import Index
from contextkit.index._manifest import IndexManifest, connect_ro, settings_copy
from contextkit.index._pg_dsn import is_dsn, location_name
from contextkit.index._pg_verify import repair_database
from contextkit.index.verify import VerifyReport, verify_index

__all__ = ["RepairAction", "RepairReport", "repair_index"]


class RepairAction(BaseModel):
    file: str
    action: str
    detail: str = ""


class RepairReport(BaseModel):
    index: str
    before: VerifyReport
    actions: list[RepairAction] = Field(default_factory=list)
    after: VerifyReport | None = None

    @property
    def ok(self) -> bool:
        return self.after is not None and self.after.ok

    def to_dict(self) -> dict:
        return {"index": self.index, "ok": self.ok, "before": self.before.to_dict(),
                "actions": [a.model_dump() for a in self.actions],
                "after": self.after.to_dict() if self.after is not None else None}


def repair_index(path: str | Path) -> RepairReport:
    """Rebuild what can be rebuilt from the records store: FAISS, BM25, the manifest.

    A damaged or missing ``store.sqlite`` cannot be repaired: nothing is changed and
    the report says so. Takes the writer lock (fails if another process writes).
    """
    if is_dsn(path):
        return _repair_database(path)
    folder = Path(path)
    before = verify_index(folder, full=True)
    report = RepairReport(index=str(folder), before=before)
    hopeless = [c for c in before.problems if c.repairable is False or (c.repairable is None and c.file != "manifest.json")]
    if hopeless or not folder.is_dir():
        report.actions += [RepairAction(file=c.file, action="cannot repair", detail=c.detail) for c in hopeless]
        return report
    if before.ok:
        return _tidy(folder, report)
    chosen = _manifest_to_use(folder, report)
    if chosen is None:
        return report
    manifest, restored = chosen
    n = _rebuild_from_store(folder, manifest, report)
    if restored:
        report.actions.append(RepairAction(file="manifest.json", action="restored", detail=restored))
    report.actions.append(RepairAction(file="vectors.faiss", action="rebuilt",
                                       detail=f"from the {n} vectors in store.sqlite"))
    report.actions.append(RepairAction(file="bm25/", action="rebuilt", detail=f"from the {n} chunk texts in store.sqlite"))
    report.after = verify_index(folder, full=True)
    return report


def _tidy(folder: Path, report: RepairReport) -> RepairReport:
    """A sound index: only the leftovers of an interrupted save to remove, if any."""
    leftovers = [c.file for c in report.before.checks if c.status == "leftover"]
    if not leftovers:
        report.actions.append(RepairAction(file="(index)", action="nothing to do", detail="every check passed"))
        report.after = report.before
        return report
    index = Index.open(folder)  # a writable open removes them, under the writer lock
    index.close()
    report.actions += [RepairAction(file=name, action="removed", detail="left by an interrupted save")
                       for name in leftovers]
    report.after = verify_index(folder, full=False)
    return report


def _manifest_to_use(folder: Path, report: RepairReport) -> tuple[IndexManifest, str] | None:
    """The manifest to rebuild under, and how it was restored ("" when the one on disk is sound).

    A lost, unreadable or mismatched manifest is made again from the store's copy of the settings;
    None (reported) when the store holds no such copy."""
    manifest_path = folder / "manifest.json"
    problem = next((c for c in report.before.problems if c.file == "manifest.json"), None)
    if problem is None or problem.status not in ("missing", "corrupt", "mismatch"):
        return IndexManifest.model_validate_json(read_manifest_bytes(manifest_path)), ""
    db = connect_ro(folder / "store.sqlite")
    try:
        copy = settings_copy(db)
    finally:
        db.close()
    if copy is None:
        report.actions.append(RepairAction(file="manifest.json", action="cannot repair",
                                           detail="the store holds no copy of the settings; restore manifest.json"
                                                  " from a backup"))
        return None
    old = IndexManifest.model_validate_json(read_manifest_bytes(manifest_path)) if problem.status == "mismatch" else None
    manifest = IndexManifest(**{**(old.model_dump() if old else {}), **copy, "generation": -1, "checksums": {}})
    return manifest, "restored from the store's copy of the settings"


def _rebuild_from_store(folder: Path, manifest: IndexManifest, report: RepairReport) -> int:
    """Under the writer lock: leftovers out, FAISS and BM25 rebuilt and saved with ``manifest``; the vectors held."""
    index = Index._open_for_repair(folder, manifest)
    try:
        for name in LEFTOVERS:
            target = folder / name
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists():
                target.unlink(missing_ok=True)
            else:
                continue
            report.actions.append(RepairAction(file=name, action="removed", detail="left by an interrupted save"))
        return index._rebuild_derived()
    finally:
        index._release()


def _repair_database(location: str | Path) -> RepairReport:
    """An index in PostgreSQL: the BM25 counts rebuilt from the texts, chunks of no document dropped, when
    verify finds them stale; a chunk whose text no longer matches its hash cannot be rebuilt (re-ingest)."""
    before = verify_index(location, full=True)
    report = RepairReport(index=location_name(location), before=before)
    hopeless = [c for c in before.problems if c.repairable is False]
    if hopeless:
        report.actions += [RepairAction(file=c.file, action="cannot repair", detail=c.detail) for c in hopeless]
        return report
    if any(c.repairable for c in before.problems):
        report.actions += [RepairAction(file=f, action=a, detail=d) for f, a, d in repair_database(location)]
    report.after = verify_index(location, full=True)
    return report
