import subprocess
import sys

import contextkit


class TestPublicApi:
    def test_all_is_sorted_and_complete(self):
        assert contextkit.__all__ == sorted(contextkit.__all__)
        for name in contextkit.__all__:
            assert getattr(contextkit, name) is not None, name

    def test_every_lazy_name_is_exported(self):
        assert set(contextkit._WHERE) | {"__version__"} == set(contextkit.__all__)

    def test_import_is_light(self):
        code = (
            "import sys, contextkit; heavy = [m for m in ('torch', 'faiss', 'tiktoken', 'llama_index', "
            "'sentence_transformers', 'ray') if m in sys.modules]; print(','.join(heavy))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == ""

    def test_unknown_attribute(self):
        try:
            contextkit.NoSuchThing  # noqa: B018
        except AttributeError as exc:
            assert "NoSuchThing" in str(exc)
        else:
            raise AssertionError("expected AttributeError")


def test_public_names_survive_importing_every_submodule():
    """A submodule named like a public function would replace it on import (``contextkit.ingest``
    once did): after importing every module, each public name is still what ``_WHERE`` points to."""
    import importlib
    import pkgutil

    import contextkit

    for info in pkgutil.walk_packages(contextkit.__path__, "contextkit."):
        if ".integrations." in info.name or info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
    for name, module in contextkit._WHERE.items():
        expected = getattr(importlib.import_module(f"contextkit.{module}"), name)
        assert getattr(contextkit, name) is expected, name


# ------------------------------------------------------------------ one list of public names

import ast  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

LAZY_PACKAGES = ["contextkit", "contextkit.compressors", "contextkit.llm"]


def _type_checking_names(module_name: str) -> set[str]:
    """The names a package imports under ``if TYPE_CHECKING:`` (what type checkers see)."""
    import importlib

    path = Path(importlib.import_module(module_name).__file__)
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in ast.walk(node):
                if isinstance(imp, ast.ImportFrom):
                    names |= {a.asname or a.name for a in imp.names}
    return names


class TestOneListOfNames:
    @pytest.mark.parametrize("package", LAZY_PACKAGES)
    def test_all_the_table_and_the_type_checking_imports_agree(self, package):
        import importlib

        module = importlib.import_module(package)
        exported = set(module.__all__) - {"__version__"}
        assert module.__all__ == sorted(module.__all__)
        assert exported == set(module._WHERE)
        assert exported == _type_checking_names(package)
        for name in module.__all__:  # each resolves, lazily, to the object its module defines
            assert getattr(module, name) is not None, name

    def test_names_that_say_error_are_exceptions(self):
        # contextkit.LoadError was a dataclass: `except contextkit.LoadError:` raised TypeError.
        import importlib

        for package in LAZY_PACKAGES + ["contextkit.loaders", "contextkit.errors", "contextkit.index",
                                        "contextkit.retrievers", "contextkit.assembly"]:
            module = importlib.import_module(package)
            for name in getattr(module, "__all__", []):
                value = getattr(module, name)
                if name.endswith(("Error", "Failure")):
                    assert isinstance(value, type) and issubclass(value, contextkit.ContextkitError), (package, name)

    def test_load_failure_is_a_contextkit_error(self):
        from contextkit.loaders import LoadFailure, LoadIssue

        assert issubclass(LoadFailure, contextkit.ContextkitError)
        assert not issubclass(LoadIssue, BaseException)

    @pytest.mark.parametrize("package", ["contextkit", "contextkit.loaders"])
    def test_the_old_record_name_still_works_with_a_warning(self, package):
        import importlib

        module = importlib.import_module(package)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = module.LoadError
        assert old is module.LoadIssue
        assert any(issubclass(w.category, DeprecationWarning) and "LoadIssue" in str(w.message) for w in caught)
