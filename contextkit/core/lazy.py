"""The one lazy-export helper: a package's public names loaded from their modules on first use.

Why: ``import contextkit`` must stay cheap (torch, faiss, tiktoken and pydantic load only when a
name that needs them is used), and five packages each had their own ``__getattr__`` for it. One
table per package, ``{name: module}``, now drives its ``__getattr__``, its ``__dir__`` and the
deprecated names it still answers to. The literal ``__all__`` (which linters read) and the
``TYPE_CHECKING`` imports (which type checkers read) name the same; ``tests/test_public_api.py``
holds the three equal.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str], namespace: dict[str, Any],
                 deprecated: Mapping[str, tuple[str, str]] | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``where`` maps each public name to the module that
    defines it (relative to ``package``, e.g. ``"chunking"`` or ``"assembly.context_assembler"``);
    ``deprecated`` maps an old name to ``(new name, why)`` and answers it with a DeprecationWarning.
    A name is looked up once, then kept in ``namespace`` (the package's globals)."""
    old_names = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        if name in old_names:
            new, why = old_names[name]
            warnings.warn(f"{package}.{name} is deprecated: use {package}.{new} ({why})", DeprecationWarning,
                          stacklevel=2)
            return namespace[new] if new in namespace else __getattr__(new)
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*where, *namespace.get("__all__", ())})

    return __getattr__, __dir__
