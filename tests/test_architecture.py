"""The walls of docs/architecture.md, checked on the source (``tools/archcheck.py`` prints the figures).

Imports are read with ``ast``, so an import inside a function or under ``TYPE_CHECKING`` counts:
a cycle hidden in a function is still one that a reader has to keep in mind.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _archcheck():
    spec = importlib.util.spec_from_file_location("archcheck", ROOT / "tools" / "archcheck.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["archcheck"] = module
    spec.loader.exec_module(module)
    return module


arch = _archcheck()
GRAPH = arch.import_graph()

#: What the core may not import (docs/architecture.md, "Walls"): the CLI, the plug-ins, the Ray runner.
OUTER = ("contextkit.cli", "contextkit.integrations", "contextkit.ingestion.ray")


class TestImportGraph:
    def test_reads_imports_inside_functions(self):
        # The graph must see lazy imports, or the cycle test below could not fail.
        assert "contextkit.ingestion.ray" in GRAPH["contextkit.ingestion._ingest"]

    def test_finds_a_cycle_when_there_is_one(self):
        assert arch.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]

    def test_no_import_cycles(self):
        assert arch.cycles(GRAPH) == []

    def test_core_does_not_import_the_outer_layers(self):
        leaks = {
            (module, target)
            for module, targets in GRAPH.items()
            if not module.startswith(OUTER) and module != "contextkit.__main__"
            for target in targets
            if target.startswith(OUTER)
        }
        # ingest(engine="ray") is the one door to the Ray runner, imported when asked for.
        assert leaks == {("contextkit.ingestion._ingest", "contextkit.ingestion.ray")}

    def test_errors_module_is_a_leaf(self):
        assert GRAPH["contextkit.errors"] == set()

    @pytest.mark.parametrize("module, may_import", [
        ("contextkit.records", {"contextkit.errors"}),
        ("contextkit.text", set()),
        ("contextkit.chunking._cuts", {"contextkit.errors", "contextkit.tokenizers"}),
        ("contextkit.embedders.base", {"contextkit.errors"}),
        ("contextkit.index._checksums", set()),
        ("contextkit.cli._app", {"contextkit.errors"}),
        ("contextkit.llm.telemetry", set()),
    ])
    def test_leaves_stay_leaves(self, module, may_import):
        # docs/architecture.md names these as leaves: what imports them cannot be imported back.
        assert GRAPH[module] <= may_import, GRAPH[module] - may_import


class TestLayout:
    def test_at_most_ten_loose_modules(self):
        loose = arch.loose_modules()
        assert len(loose) <= 10, loose


class TestErrors:
    def test_every_public_error_derives_from_the_base(self):
        assert arch.exceptions_without_base() == []

    def test_the_check_sees_the_classes(self):
        found = arch.public_exceptions()
        assert "contextkit.errors.IndexFolderError" in found and len(found) >= 25

    @pytest.mark.parametrize("name, builtin", [
        ("IndexFolderError", RuntimeError), ("RetrievalError", ValueError), ("TokenizerNotFoundError", LookupError),
        ("RayNotInstalledError", ImportError), ("RayClusterError", ConnectionError),
    ])
    def test_builtin_bases_kept(self, name, builtin):
        import contextkit.errors as errors

        cls = getattr(errors, name)
        assert issubclass(cls, errors.ContextkitError) and issubclass(cls, builtin)

    def test_store_errors_are_still_sqlite_errors(self):
        import sqlite3

        from contextkit.errors import ContextkitError, StoreCorruptError, StoreWriteError

        assert issubclass(StoreWriteError, sqlite3.OperationalError) and issubclass(StoreWriteError, ContextkitError)
        assert issubclass(StoreCorruptError, sqlite3.DatabaseError)
