"""The loader role and the registry that picks one by suffix.

A loader reads one format: it names the suffixes it handles and has one obvious
method, :meth:`Loader.load`. :func:`~contextkit.loaders.load_file` looks the file's
suffix up here; :func:`~contextkit.loaders.discover_files` walks every registered
suffix. Adding a format is therefore: subclass :class:`Loader`, then
:func:`register_loader` an instance. The built-in ones (text and code, HTML, PDF,
JSONL) are registered by the package itself.

A registration lives in the process that made it: Ray workers and the PDF worker
process know the built-in loaders only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from contextkit.core.errors import InvalidArgumentError
from contextkit.loaders._common import LoadLimits, LoadResult, SourceFile

__all__ = ["Loader", "loader_for", "register_loader", "registered_suffixes", "unregister_loader"]


class Loader(ABC):
    """Reads the files of one format into documents.

    Errors are values: :meth:`load` returns them in :attr:`LoadResult.errors`, or
    raises :class:`OSError` or :class:`~contextkit.loaders.LoadFailure`, which
    :func:`~contextkit.loaders.load_file` turns into a :class:`LoadIssue` for the
    report. Any other exception is a bug in the loader and is not hidden.

    Read the file with :func:`~contextkit.loaders.open_source` (or ``read_source``), never
    ``open(source.path)``: discovery and loading are two moments, and a plain open follows a link
    swapped in between (to ``/etc/shadow``) and blocks on a FIFO.
    """

    #: Lower-case suffixes, dot included (``".md"``), that this loader reads.
    suffixes: ClassVar[frozenset[str]] = frozenset()

    @abstractmethod
    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        """The documents of ``source`` (and the problems met), within ``limits``."""


_REGISTRY: dict[str, Loader] = {}


def register_loader(loader: Loader, *, replace: bool = False) -> None:
    """Make ``loader`` the one for each of its suffixes; a suffix already taken needs ``replace=True``."""
    if not loader.suffixes:
        raise InvalidArgumentError(f"{type(loader).__name__} names no suffixes")
    for suffix in loader.suffixes:
        if suffix != suffix.lower() or not suffix.startswith("."):
            raise InvalidArgumentError(f"suffix {suffix!r} must be lower-case and start with a dot")
    taken = sorted(s for s in loader.suffixes if s in _REGISTRY and _REGISTRY[s] is not loader)
    if taken and not replace:
        raise InvalidArgumentError(f"suffixes {', '.join(taken)} already have a loader; pass replace=True to take them")
    _REGISTRY.update(dict.fromkeys(loader.suffixes, loader))


def unregister_loader(loader: Loader) -> None:
    """Forget ``loader`` for the suffixes it holds (a built-in one may be registered again)."""
    for suffix in [s for s, held in _REGISTRY.items() if held is loader]:
        del _REGISTRY[suffix]


def loader_for(suffix: str) -> Loader | None:
    """The loader registered for ``suffix`` (any case), or None."""
    return _REGISTRY.get(suffix.lower())


def registered_suffixes() -> frozenset[str]:
    """Every suffix some loader reads: what a directory walk takes."""
    return frozenset(_REGISTRY)
