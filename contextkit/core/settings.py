"""The settings spine: a component's options are declared once and checked, stored and read one way.

Why one module: before it, each component refused a misspelt option its own way (pydantic's
``ValidationError``, a bare ``TypeError``, a hand-written check), wrote ``to_dict`` in one of three
styles, and read ``contextkit.toml`` through its own table of names. Here:

* :func:`check_options` is the one unknown-option check: ``chunk_sise=64`` raises
  :class:`~contextkit.errors.UnknownOptionError` (a ``ContextkitError``, a ``TypeError`` as an
  unexpected keyword is, and a ``ValueError``) naming the closest known option, at every entry point.
* :class:`Settings` is the base of every pydantic settings record (``IngestConfig``,
  ``ChunkerConfig``, ``AssemblerConfig``, the compressors' configs): unknown keys raise the same
  error, whether they come as keywords, a dict or a ``contextkit.toml`` table; ``section`` names
  its table in the file and :meth:`Settings.from_config` reads it, for the library and the CLI alike.
* :class:`Component` is the base of every component with options in its ``__init__``
  (chunkers, retrievers, compressors, rerankers): its constructor refuses unknown keywords with
  the same error, and :meth:`Component.from_dict` / :func:`default_to_dict` are the one
  serialisation: ``{"type": class name, **init parameters}`` (haystack's ``default_to_dict``
  with the parameters inline, as indexes have always recorded them).

A field may declare other names it is known by in ``contextkit.toml``
(``Field(..., json_schema_extra={"aliases": {"overlap": 1}})``: the CLI's option name, with the
factor that turns its unit into the field's, e.g. ``{"stream_above": 1 << 20}`` for MiB to bytes).
The declaration sits on the field, so the file is read the same way wherever it is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from contextkit.core.config import COMMAND_LINE_KEYS
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.options import (
    Component,
    check_options,
    default_to_dict,
    unknown_option,
)

__all__ = [
    "Component",
    "Settings",
    "check_options",
    "default_to_dict",
    "one_line",
    "unknown_option",
]


# ------------------------------------------------------------------ settings records


def one_line(exc: ValidationError) -> str:
    """A pydantic ``ValidationError`` as one line: ``Settings: field: why; ...`` (no URL, no input dump)."""
    parts = []
    for error in exc.errors():
        why = str(error.get("msg", "")).removeprefix("Value error, ")
        where = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{where}: {why}" if where else why)
    return f"{exc.title}: " + "; ".join(parts)


class Settings(BaseModel):
    """Base of the settings records: unknown keys refused one way, a ``contextkit.toml`` table read one way."""

    model_config = ConfigDict(extra="forbid")

    #: The table of ``contextkit.toml`` this record is read from (``None``: not read from the file).
    section: ClassVar[str | None] = None

    def __init__(self, /, **data: Any) -> None:
        # Checked before pydantic: a ValueError raised in a validator would come out as its ValidationError.
        check_options(type(self).__name__, data, type(self).model_fields)
        try:
            super().__init__(**data)
        except ValidationError as exc:  # one error base: a bad value is an InvalidArgumentError, in one line
            raise InvalidArgumentError(one_line(exc)) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        if isinstance(obj, Mapping):
            check_options(cls.__name__, obj, cls.model_fields)
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise InvalidArgumentError(one_line(exc)) from None

    @classmethod
    def aliases(cls) -> dict[str, tuple[str, float]]:
        """``{file name: (field, factor)}``: the other names a field is known by in ``contextkit.toml``."""
        found: dict[str, tuple[str, float]] = {}
        for name, field in cls.model_fields.items():
            extra = field.json_schema_extra
            if isinstance(extra, dict) and isinstance(extra.get("aliases"), dict):
                for alias, factor in extra["aliases"].items():  # type: ignore[union-attr]
                    found[str(alias)] = (name, float(factor))  # type: ignore[arg-type]
        return found

    @classmethod
    def file_keys(cls) -> set[str]:
        """Every key this record's table may hold: its fields, their aliases and the keys only the command line reads."""
        return set(cls.model_fields) | set(cls.aliases()) | COMMAND_LINE_KEYS | {"index"}

    @classmethod
    def options_from_table(cls, table: Mapping[str, Any]) -> dict[str, Any]:
        """A ``contextkit.toml`` table as this record's options: aliases renamed (and scaled),
        keys only the command line reads and ``index`` set aside, anything else refused by name."""
        check_options(f"contextkit.toml [{cls.section or cls.__name__}]", table, cls.file_keys())
        aliases = cls.aliases()
        options: dict[str, Any] = {}
        for key, value in table.items():
            if key in COMMAND_LINE_KEYS or key == "index":
                continue
            if key in aliases and key not in cls.model_fields:
                name, factor = aliases[key]
                options[name] = value if factor == 1 or value is None else type(value)(value * factor)
            else:
                options[key] = value
        return options

    @classmethod
    def from_config(cls, path: str | Path | None = None, **overrides: Any) -> Self:
        """This record from its table of ``contextkit.toml`` (see :mod:`contextkit.config`), then ``overrides``."""
        from contextkit.core.config import load_config

        if cls.section is None:
            raise InvalidArgumentError(f"{cls.__name__} is not read from contextkit.toml")
        table = load_config(path).get(cls.section, {})
        return cls(**{**cls.options_from_table(table), **overrides})

    def with_options(self, owner: str | None = None, **overrides: Any) -> Self:
        """This record with ``overrides`` applied and validated (``model_copy(update=...)`` would take
        ``chunk_sise=512`` without a word); an unknown name names ``owner``."""
        check_options(owner or type(self).__name__, overrides, type(self).model_fields)
        if not overrides:
            return self
        return type(self).model_validate({**self.model_dump(exclude_unset=True), **overrides})
