"""Measure contextkit's architecture: import cycles, layers, loose modules, error bases, sizes, complexity.

    python tools/archcheck.py            # the whole report
    python tools/archcheck.py --cycles   # only the cycles (of modules and of packages) and layer breaches

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


def package_of(module: str) -> str:
    """The node a module counts as in the package graph: ``contextkit.index._store`` -> ``contextkit.index``.

    A top-level module is its own node (``contextkit.config``), and so is the ``contextkit`` package
    itself; a package's subpackages are part of it (``contextkit.ingestion.ray`` -> ``contextkit.ingestion``).
    """
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """The module graph collapsed to packages: ``a -> b`` when a module of ``a`` imports one of ``b``."""
    graph = import_graph() if graph is None else graph
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = package_of(module)
        out.setdefault(source, set()).update(package_of(t) for t in targets)
    for source, targets in out.items():
        targets.discard(source)
    return out


#: The packages in pipeline order, lowest first (docs/architecture.md, "Packages"). A package may import
#: only packages of earlier layers; names in one layer may not import each other either.
LAYERS: list[tuple[str, ...]] = [
    ("contextkit.core",),  # the floor: imports nothing of contextkit outside itself
    ("contextkit._version",),
    # old homes of core modules, kept for users (contextkit's own code imports contextkit.core)
    ("contextkit.errors", "contextkit.records", "contextkit.tokenizers", "contextkit.text", "contextkit.config"),
    ("contextkit.loaders",),
    ("contextkit.chunking",),
    ("contextkit.embedders",),
    ("contextkit.compressors",),  # text in, text out: ingestion redacts with it, assembly takes its sections
    ("contextkit.index",),
    ("contextkit.ingestion",),
    ("contextkit.retrievers",),
    ("contextkit.search",),
    ("contextkit.assembly",),
    ("contextkit.session",),  # Session: a Conversation over a ContextAssembler, and the message validator
    ("contextkit.llm",),
    ("contextkit.evaluation",),
    ("contextkit.serve",),  # the servers (MCP, HTTP): over the library, under the CLI that starts them
    ("contextkit.cli", "contextkit.integrations"),  # the outer layers, beside each other
    ("contextkit", "contextkit.__main__"),
]
#: Imports of a later layer that are allowed, each with its reason: (module, module imported).
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}


def layer_of() -> dict[str, int]:
    return {package: i for i, layer in enumerate(LAYERS) for package in layer}


def layer_breaches(graph: dict[str, set[str]] | None = None) -> list[tuple[str, str]]:
    """``(module, imported module)`` for each import of a package in the same or a later layer.

    A package missing from :data:`LAYERS` is reported as ``(package, "not in LAYERS")``.
    """
    graph = import_graph() if graph is None else graph
    layers = layer_of()
    found = []
    for module, targets in sorted(graph.items()):
        source = package_of(module)
        if source not in layers:
            found.append((source, "not in LAYERS"))
            continue
        for target in sorted(targets):
            dest = package_of(target)
            if dest == source or (module, target) in LAYER_EXCEPTIONS:
                continue
            if dest not in layers or layers[dest] >= layers[source]:
                found.append((module, target))
    return sorted(set(found))


def loose_modules() -> list[str]:
    """Top-level ``contextkit/*.py`` files that count against the limit of ten."""
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in EXEMPT_LOOSE)


def _public_classes() -> dict[str, object]:
    """``module.Class`` -> the class, for every public class defined at module level (imports the modules;
    a module whose optional dependency is absent is passed by)."""
    import importlib

    sys.path.insert(0, str(ROOT))
    found: dict[str, object] = {}
    for name, path in all_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]
        if not names:
            continue
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional dependency (ray, onnxruntime) absent
            continue
        found.update({f"{name}.{cls}": getattr(module, cls) for cls in names if hasattr(module, cls)})
    return found


def public_exceptions() -> dict[str, str]:
    """``module.Class`` -> its bases, for every public class that is an exception, found by its bases
    (``issubclass(cls, BaseException)``), not by its name: ``LoadFailure`` counts, a record called
    ``LoadError`` does not."""
    return {qualified: ", ".join(b.__name__ for b in cls.__bases__)  # type: ignore[attr-defined]
            for qualified, cls in _public_classes().items()
            if isinstance(cls, type) and issubclass(cls, BaseException)}


def exceptions_without_base() -> list[str]:
    """Public exception classes that do not derive from ``contextkit.core.errors.ContextkitError``."""
    from contextkit.core.errors import ContextkitError

    missing = []
    for qualified in public_exceptions():
        module, _, name = qualified.rpartition(".")
        cls = getattr(sys.modules[module], name)
        if not issubclass(cls, ContextkitError):
            missing.append(qualified)
    return missing


def misnamed_records() -> list[str]:
    """Public classes named like an exception (``...Error``, ``...Exception``) that are not one: ``except``
    on them raises ``TypeError`` (``contextkit.LoadError`` was a dataclass)."""
    return sorted(q for q, cls in _public_classes().items()
                  if q.endswith(("Error", "Exception")) and not (isinstance(cls, type) and issubclass(cls, BaseException)))


def any_annotations() -> int:
    """Parameters and returns annotated exactly ``Any`` (where a base class or record could say more)."""
    count = 0
    for path in all_modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                annotations = [a.annotation for a in args] + [node.returns]
                count += sum(1 for a in annotations if a is not None and ast.unparse(a) == "Any")
    return count


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
    packages = package_graph(graph)
    package_cycles = cycles(packages)
    print(f"packages: {len(packages)}; package cycles: {len(package_cycles)}")
    for component in package_cycles:
        print("  cycle:", " <-> ".join(component))
    breaches = layer_breaches(graph)
    print(f"imports of a later layer: {len(breaches)}")
    for module, target in breaches:
        print(f"  {module} -> {target}")
    if args.cycles:
        return 1 if found or package_cycles or breaches else 0
    loose = loose_modules()
    print(f"loose top-level modules: {len(loose)}: {', '.join(loose)}")
    biggest = sizes()
    print(f"lines: {sum(n for n, _ in biggest)} in {len(biggest)} modules; largest:")
    for n, name in biggest[:8]:
        print(f"  {n:5d} {name}")
    print(f"functions above complexity {args.cc}:")
    for cc, name in complexity(args.cc):
        print(f"  {cc:3d} {name}")
    print(f"parameters and returns annotated Any: {any_annotations()}")
    exceptions = public_exceptions()
    print(f"public exception classes: {len(exceptions)}")
    missing = exceptions_without_base()
    print(f"not derived from ContextkitError: {len(missing)}", *missing, sep="\n  ")
    misnamed = misnamed_records()
    print(f"named like an exception but not one: {len(misnamed)}", *misnamed, sep="\n  ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
