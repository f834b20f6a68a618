"""``contextkit verify`` and ``contextkit repair`` on damaged and crafted folders: a table or JSON, a
one-line reason, exit 1, never a traceback (issue 16)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from typer.testing import CliRunner

import contextkit.cli.index  # noqa: F401  (registers verify / repair on the app)
from contextkit.cli import app
from contextkit.index import Index
from contextkit.records import Chunk, Document

runner = CliRunner()


@pytest.fixture()
def ix(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "ix"
    with Index.create(path, model="m", dim=8) as index:
        text = "a chunk about glaciers"
        vectors = rng.standard_normal((1, 8)).astype(np.float32)
        index.upsert(Document(id="d", text=text, source="d.txt"),
                     [Chunk(id="d::0", doc_id="d", ordinal=0, text=text, start=0, end=len(text), token_count=4)],
                     vectors / np.linalg.norm(vectors))
    return path


class TestVerifyAndRepair:
    def test_a_planted_trigger_is_reported_and_not_repaired(self, ix):
        db = sqlite3.connect(ix / "store.sqlite")
        db.execute("CREATE TRIGGER planted AFTER INSERT ON chunks BEGIN SELECT 1; END")
        db.commit()
        db.close()
        verify = runner.invoke(app, ["verify", "--index", str(ix), "--json"])
        store = {c["file"]: c for c in json.loads(verify.stdout)["checks"]}["store.sqlite"]
        assert verify.exit_code == 1 and store["status"] == "corrupt" and "planted" in store["detail"]
        repair = runner.invoke(app, ["repair", "--index", str(ix)])
        assert repair.exit_code == 1 and "cannot repair" in repair.output and "Traceback" not in repair.output

    def test_a_wrong_count_in_the_manifest_is_blamed_on_the_manifest(self, ix):
        manifest = json.loads((ix / "manifest.json").read_text())
        manifest["counts"]["chunks"] = 7
        (ix / "manifest.json").write_text(json.dumps(manifest))
        verify = runner.invoke(app, ["verify", "--index", str(ix)])
        assert verify.exit_code == 1 and "manifest.json" in verify.output and "the store has 1" in verify.output
        assert runner.invoke(app, ["repair", "--index", str(ix)]).exit_code == 0
        assert runner.invoke(app, ["verify", "--index", str(ix)]).exit_code == 0
