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
