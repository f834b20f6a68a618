"""``repair``: rebuild what can be rebuilt from the records store (see :mod:`._verify` for what is checked).

Everything but ``store.sqlite`` is derived from it: FAISS files, BM25, and (from the copy of
the settings the store keeps) the manifest. A damaged store cannot be rebuilt from anything
else; repair then changes nothing and says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import BaseModel, Field

from contextkit.index._verify import (
    LEFTOVERS,
    VerifyReport,
    _connect_ro,
    _settings_copy,
    verify_index,
)

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
    from contextkit.index._index import Index, IndexManifest

    folder = Path(path)
    before = verify_index(folder, full=True)
    report = RepairReport(index=str(folder), before=before)
    hopeless = [c for c in before.problems if c.repairable is False or (c.repairable is None and c.file != "manifest.json")]
    if hopeless or not folder.is_dir():
        for c in hopeless:
            report.actions.append(RepairAction(file=c.file, action="cannot repair", detail=c.detail))
        return report
    if before.ok:
        leftovers = [c.file for c in before.checks if c.status == "leftover"]
        if leftovers:
            index = Index.open(folder)  # a writable open removes them, under the writer lock
            index.close()
            report.actions += [RepairAction(file=name, action="removed", detail="left by an interrupted save")
                               for name in leftovers]
        else:
            report.actions.append(RepairAction(file="(index)", action="nothing to do", detail="every check passed"))
        report.after = verify_index(folder, full=False) if leftovers else before
        return report

    manifest_path = folder / "manifest.json"
    manifest_problem = next((c for c in before.problems if c.file == "manifest.json"), None)
    if manifest_problem is not None and manifest_problem.status in ("missing", "corrupt", "mismatch"):
        db = _connect_ro(folder / "store.sqlite")
        try:
            copy = _settings_copy(db)
        finally:
            db.close()
        if copy is None:
            report.actions.append(RepairAction(file="manifest.json", action="cannot repair",
                                               detail="the store holds no copy of the settings; restore manifest.json"
                                                      " from a backup"))
            return report
        old = None
        if manifest_problem.status == "mismatch":
            old = IndexManifest.model_validate_json(manifest_path.read_bytes())
        manifest = IndexManifest(**{**(old.model_dump() if old else {}), **copy, "generation": -1, "checksums": {}})
        detail = "restored from the store's copy of the settings"
    else:
        manifest = IndexManifest.model_validate_json(manifest_path.read_bytes())
        detail = ""
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
        index._rebuild()
        index._bm25, index._bm25_dirty = None, True
        index.save(force=True)
        n = len(index)
    finally:
        index._release()
    if detail:
        report.actions.append(RepairAction(file="manifest.json", action="restored", detail=detail))
    report.actions.append(RepairAction(file="vectors.faiss", action="rebuilt",
                                       detail=f"from the {n} vectors in store.sqlite"))
    report.actions.append(RepairAction(file="bm25/", action="rebuilt", detail=f"from the {n} chunk texts in store.sqlite"))
    report.after = verify_index(folder, full=True)
    return report
