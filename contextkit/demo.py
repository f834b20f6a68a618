"""The demo corpus: the installed Python's own standard-library docstrings.

Every machine with Python has this text, so the demo needs no download and the
repository holds no copy of anyone's data. Docstrings are read with :mod:`ast`
from the source files (no module is imported, so nothing runs).
"""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

__all__ = ["DEMO_MODULES", "DEMO_QUERIES", "write_demo_corpus"]

#: A small, varied slice of the standard library: the demo ingests in well under
#: a minute on a 2-core CPU.
DEMO_MODULES = (
    "json/__init__.py", "pathlib.py", "functools.py", "contextlib.py", "dataclasses.py",
    "heapq.py", "bisect.py", "shutil.py", "tempfile.py", "textwrap.py", "fractions.py", "statistics.py",
)
DEMO_QUERIES = (
    "how do I copy a whole directory tree?",
    "cache the results of an expensive function",
    "median of a list of numbers",
)


def _docs(source: str, module: str) -> str:
    tree = ast.parse(source)
    parts = [f"# {module}\n", ast.get_docstring(tree) or ""]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc:
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                parts.append(f"\n## {kind} {module}.{node.name}\n\n{doc}\n")
    return "\n".join(parts)


def write_demo_corpus(folder: str | Path) -> int:
    """Write one Markdown file of docstrings per demo module; returns how many."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for rel in DEMO_MODULES:
        path = stdlib / rel
        if not path.is_file():
            continue
        module = rel.removesuffix("/__init__.py").removesuffix(".py").replace("/", ".")
        text = _docs(path.read_text(encoding="utf-8"), module)
        target = out / f"{module}.md"
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        written += 1
    return written
