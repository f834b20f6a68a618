"""Measure contextkit's architecture: import cycles, loose modules, error bases, sizes, complexity.

    python tools/archcheck.py            # the whole report
    python tools/archcheck.py --cycles   # only the cycles

Every import counts: module level, inside functions and under ``if TYPE_CHECKING`` (a cycle hidden in
a function is still a cycle a reader must keep in mind). The one edge left out is a package's
``__init__`` importing its own children: that is how a package presents its API. The graph is read
with ``ast`` from the source, so nothing is imported and no heavy library is needed.
``tests/test_architecture.py`` asserts the walls on the same functions.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "contextkit"
# Loose top-level modules that do not count against the limit (the issue's own exemption).
EXEMPT_LOOSE = {"__init__", "__main__", "_version"}


def module_name(path: Path) -> str:
    """``contextkit/index/_store.py`` -> ``contextkit.index._store``; a package's ``__init__`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _resolve(current: str, node: ast.ImportFrom, modules: dict[str, Path]) -> str | None:
    if node.level == 0:
        return node.module
    base = current.split(".")
    if not _is_package(current, modules):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, modules: dict[str, Path]) -> set[str]:
    """The contextkit modules ``name`` imports, anywhere in its source."""
    tree = ast.parse(modules[name].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, node, modules)
            if target is None:
                continue
            # `from pkg import child` imports the child module; `from pkg import name` the package.
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import contextkit.index._store` etc.
                target = target.rpartition(".")[0]
            if target and target.startswith("contextkit"):
                found.add(target)
    found.discard(name)
    if _is_package(name, modules):  # a package's __init__ importing its own children is allowed
        found = {t for t in found if not t.startswith(name + ".")}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, modules) for name in modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def loose_modules() -> list[str]:
    """Top-level ``contextkit/*.py`` files that count against the limit of ten."""
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in EXEMPT_LOOSE)


def public_exceptions() -> dict[str, str]:
    """``module.Class`` -> its first base, for every public class whose name ends in Error/Exception/Warning."""
    found = {}
    for name, path in all_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                if node.name.endswith(("Error", "Exception")):
                    found[f"{name}.{node.name}"] = ", ".join(ast.unparse(b) for b in node.bases)
    return found


def exceptions_without_base() -> list[str]:
    """Public exception classes that do not derive from ``contextkit.errors.ContextkitError`` (imports them)."""
    import importlib

    sys.path.insert(0, str(ROOT))
    from contextkit.errors import ContextkitError

    missing = []
    for qualified in public_exceptions():
        module, _, cls = qualified.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), cls)
        except ImportError:  # an optional dependency (ray, onnxruntime) absent
            continue
        if isinstance(obj, type) and issubclass(obj, BaseException) and not issubclass(obj, ContextkitError):
            missing.append(qualified)
    return missing


def sizes() -> list[tuple[int, str]]:
    return sorted(
        ((len(p.read_text(encoding="utf-8").splitlines()), name) for name, p in all_modules().items()),
        reverse=True,
    )


def complexity(limit: int) -> list[tuple[int, str]]:
    """Functions above ``limit`` by radon's cyclomatic complexity (``pip install radon``), or [] without it."""
    try:
        from radon.complexity import cc_visit
    except ImportError:
        print("(radon not installed: no complexity figures)")
        return []
    out = []
    for name, path in all_modules().items():
        for block in cc_visit(path.read_text(encoding="utf-8")):
            if block.complexity > limit:
                label = f"{block.classname}.{block.name}" if getattr(block, "classname", None) else block.name
                out.append((block.complexity, f"{name}:{label}"))
    return sorted(out, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", action="store_true", help="only list the import cycles")
    parser.add_argument("--cc", type=int, default=20, help="list functions above this complexity")
    args = parser.parse_args()
    graph = import_graph()
    found = cycles(graph)
    print(f"modules: {len(graph)}; import cycles: {len(found)}")
    for component in found:
        print("  cycle:", " <-> ".join(component))
    if args.cycles:
        return 1 if found else 0
    loose = loose_modules()
    print(f"loose top-level modules: {len(loose)}: {', '.join(loose)}")
    biggest = sizes()
    print(f"lines: {sum(n for n, _ in biggest)} in {len(biggest)} modules; largest:")
    for n, name in biggest[:8]:
        print(f"  {n:5d} {name}")
    print(f"functions above complexity {args.cc}:")
    for cc, name in complexity(args.cc):
        print(f"  {cc:3d} {name}")
    exceptions = public_exceptions()
    print(f"public exception classes: {len(exceptions)}")
    try:
        missing = exceptions_without_base()
        print(f"not derived from ContextkitError: {len(missing)}", *missing, sep="\n  ")
    except ImportError:
        print("contextkit.errors does not exist: no common base")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
