"""Every notebook in notebooks/ runs top to bottom here; a failing cell fails the suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
class TestNotebook:
    def test_outputs_are_stripped_in_git(self, path):
        nbformat = pytest.importorskip("nbformat")
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(not c.outputs and c.execution_count is None for c in code)

    @pytest.mark.slow
    def test_runs(self, path, shared_data):
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        nb = nbformat.read(path, as_version=4)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(path.parent)}})
        client.execute()  # raises CellExecutionError naming the cell on any failure
