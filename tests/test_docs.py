"""The user documentation in docs/ stays true to the code.

1. docs/reference.md is exactly what docs/_build_reference.py generates now;
2. every `contextkit.…` dotted name in backticks in docs/*.md resolves;
3. every relative link between docs pages points to an existing file (and heading).

Fast: nothing here loads a model.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def _load_builder():
    spec = importlib.util.spec_from_file_location("_build_reference", DOCS / "_build_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_exist():
    names = {p.name for p in PAGES}
    assert {"README.md", "concepts.md", "guides.md", "reference.md"} <= names


def test_reference_is_in_sync():
    expected = _load_builder().build()
    actual = (DOCS / "reference.md").read_text(encoding="utf-8")
    if actual != expected:
        import difflib

        diff = "".join(list(difflib.unified_diff(actual.splitlines(True), expected.splitlines(True),
                                                 "docs/reference.md", "generated", n=1))[:60])
        pytest.fail("docs/reference.md is out of date with the docstrings and signatures; "
                    "run `python docs/_build_reference.py` and commit the result.\n" + diff)


# A dotted Python name; file names such as `contextkit.toml` are not names.
_DOTTED = re.compile(r"`(contextkit(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?<!\.toml)(?![\w.])")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _mentioned_names() -> list[tuple[str, str]]:
    found = set()
    for page in PAGES:
        for match in _DOTTED.finditer(page.read_text(encoding="utf-8")):
            found.add((page.name, match.group(1)))
    return sorted(found)


def test_names_are_found():
    assert len(_mentioned_names()) > 20


@pytest.mark.parametrize(("page", "name"), _mentioned_names())
def test_dotted_name_resolves(page, name):
    assert _resolves(name), f"docs/{page} mentions `{name}`, which is neither a module nor an attribute"


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub-style heading anchors of a page."""
    out = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            out.add(title.replace(" ", "-"))
    return out


def _links() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            found.append((page.name, target))
    return found


def test_links_are_found():
    assert len(_links()) >= 5


@pytest.mark.parametrize(("page", "target"), _links())
def test_relative_link_exists(page, target):
    path, _, anchor = target.partition("#")
    dest = (DOCS / path).resolve() if path else DOCS / page
    assert dest.exists(), f"docs/{page} links to {target!r}, but {dest} does not exist"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"docs/{page} links to {target!r}, but {dest.name} has no such heading"


def test_builder_does_not_import_models():
    # In a fresh interpreter: in this one another test has usually imported torch already,
    # which made an in-process check skip in every full run.
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('b', {str(DOCS / '_build_reference.py')!r}); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); m.build(); "
        "print(sorted({'torch', 'sentence_transformers', 'llama_index'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_notebook_runner_the_notebooks_readme_names_exists():
    """Issue 31: notebooks/README.md said `python -m nbclient`, which fails (nbclient has no __main__)."""
    import subprocess
    import sys

    text = (DOCS.parent / "notebooks" / "README.md").read_text(encoding="utf-8")
    assert "python -m nbclient" not in text and "jupyter execute" in text
    result = subprocess.run([sys.executable, "-m", "jupyter", "execute", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-500:]
