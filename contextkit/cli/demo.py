"""``contextkit demo`` and its corpus: the installed Python's own standard-library docstrings.

Every machine with Python has this text, so the demo needs no download and the
repository holds no copy of anyone's data. Docstrings are read with :mod:`ast`
from the source files (no module is imported, so nothing runs).
"""

from __future__ import annotations

import ast
import json
import sys
import sysconfig
from pathlib import Path
from typing import Annotated

import typer

from contextkit.cli._app import app, err, json_text
from contextkit.cli.ingest import ingest
from contextkit.cli.search import search

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


@app.command()
def demo(
    index: Annotated[Path, typer.Option("--index", "-i", help="where to build the demo index")] = Path("demo.ck-index"),
    query: Annotated[list[str] | None, typer.Option("--query", help="questions to ask (repeatable)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object: the ingest report and the hits")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Ingest the Python standard library's own documentation, offline, and search it.

    The corpus is written from the docstrings of the installed Python's standard
    library, so every machine has it and nothing is downloaded. A second run
    re-uses the index (nothing changed, nothing re-embedded).

    Example: contextkit demo --query "sort a list in place" --query "temporary folder"
    """

    corpus = index.with_name(index.name + "-corpus")
    n = write_demo_corpus(corpus)
    if not as_json:
        err.print(f"demo corpus: {n} modules' docstrings in {corpus}/")
    if not as_json:
        ingest(paths=[corpus], index=index, prune=True, quiet=quiet)
        for q in query or DEMO_QUERIES:
            search(q, index=index, k=3, as_json=False)
        err.print(f"\nnext: a prompt under a budget, with its report:\n"
                  f"  contextkit assemble \"{(query or DEMO_QUERIES)[0]}\" --index {index} --budget 2000 "
                  f"--report-html report.html > prompt.txt", highlight=False, markup=False)
        return
    from contextkit.ingestion import ingest as run_ingest
    from contextkit.search import search_index

    report = run_ingest([str(corpus)], index, prune=True)
    searches = [{"query": q, "hits": [h.to_dict() for h in search_index(index, q, 3)]}
                for q in query or DEMO_QUERIES]
    sys.stdout.write(json_text({"ingest": json.loads(report.model_dump_json()), "searches": searches}) + "\n")
    if report.nothing_ingested:
        raise typer.Exit(1)
