"""Options checked one way, components serialised one way, without pydantic (the chunker imports this).

See :mod:`contextkit.core.settings` for the whole spine; this half is what a component needs at
construction: :func:`check_options` (the one unknown-option check) and :class:`Component`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Self

from contextkit.core.errors import InvalidArgumentError, UnknownOptionError

__all__ = ["Component", "check_options", "default_to_dict", "unknown_option"]


def unknown_option(owner: str, name: str, known: Iterable[str]) -> str:
    """``owner got an unknown option 'chunk_sise'; did you mean 'chunk_size'?`` (one line)."""
    import difflib  # only when there is a mistake to name: every process that chunks imports this module

    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known) or 'none'}"
    return f"{owner} got an unknown option {name!r}{hint}"


def check_options(owner: str, given: Iterable[str], known: Collection[str]) -> None:
    """Raise :class:`UnknownOptionError` for the first name in ``given`` that is not in ``known``."""
    for name in given:
        if name not in known:
            raise UnknownOptionError(unknown_option(owner, name, known))


# ------------------------------------------------------------------ components

@functools.cache
def _keyword_names(method: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword names ``method`` takes, or ``None`` when it takes ``**kwargs`` (checked by its own config)."""
    import inspect  # on the first call with keywords, not at import (a worker process imports this module)

    parameters = list(inspect.signature(method).parameters.values())[1:]  # self
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY)


def _checked(method: Callable[..., Any], where: str) -> Callable[..., Any]:
    """``method`` refusing an unknown keyword with :class:`UnknownOptionError` (``where``: ``""`` for the
    constructor, else ``".compress()"``), at the cost of one set comparison when keywords are given."""

    @functools.wraps(method)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            names = _keyword_names(method)
            if names is not None and not kwargs.keys() <= names:
                check_options(type(self).__name__ + where, kwargs, names)
        return method(self, *args, **kwargs)

    checked.__ck_checked__ = True  # type: ignore[attr-defined]
    return checked


class Component:
    """Base of the components whose options are their ``__init__`` parameters.

    A subclass's ``__init__`` (and its ``_option_methods``) is wrapped once, when the class is made:
    an unknown keyword raises :class:`UnknownOptionError` naming the class and the closest parameter
    (a ``**options`` signature is left to check its options through its ``Settings`` record). Subclasses
    give :meth:`_settings` (the init parameters that rebuild them, JSON values only); ``to_dict`` and
    ``from_dict`` come from here.
    """

    #: Methods whose keywords override constructor values (``chunk``, ``compress``, ``retrieve``): an
    #: unknown keyword to them is refused as the constructor refuses it.
    _option_methods: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("__init__", *cls._option_methods):
            method = cls.__dict__.get(name)
            if callable(method) and not getattr(method, "__ck_checked__", False):
                setattr(cls, name, _checked(method, "" if name == "__init__" else f".{name}()"))

    def _settings(self) -> dict[str, Any]:
        """The init parameters that rebuild this component (JSON values only)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """``{"type": class name, **init parameters}``: what :meth:`from_dict` takes back."""
        return default_to_dict(self, **self._settings())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """The component ``data`` describes: this class or the subclass its ``"type"`` names
        (``Base.from_dict`` rebuilds any); ``objects`` are what a dict cannot hold (an LLM, an index).
        A missing ``"type"`` means this class (older records); an unknown key is an
        :class:`UnknownOptionError`."""
        settings = dict(data)
        found = cls.subclass_named(str(settings.pop("type", cls.__name__)))
        if found is not cls and found.from_dict.__func__ is not Component.from_dict.__func__:  # type: ignore[attr-defined]
            return found.from_dict(data, **objects)
        return found(**{**settings, **objects})

    @classmethod
    def _settings_of(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` without its ``"type"`` key, which must name this class when present."""
        kind = data.get("type", cls.__name__)
        if kind != cls.__name__:
            raise InvalidArgumentError(f"{cls.__name__}.from_dict got the settings of a {kind!r}")
        return {k: v for k, v in data.items() if k != "type"}

    @classmethod
    def subclass_named(cls, kind: str) -> type[Self]:
        """This class or the subclass of it called ``kind``."""
        classes: list[type[Self]] = [cls]
        for found in classes:
            if found.__name__ == kind:
                return found
            classes.extend(found.__subclasses__())
        raise InvalidArgumentError(f"{cls.__name__}.from_dict got the settings of a {kind!r}")


def default_to_dict(component: object, **init_parameters: Any) -> dict[str, Any]:
    """``{"type": the component's class name, **init_parameters}``: every ``to_dict`` of contextkit."""
    return {"type": type(component).__name__, **init_parameters}
