"""Where a database index lives: a ``postgresql://`` DSN, read once, shown without its password.

A leaf (imports only :mod:`contextkit.core`): ``Index.open`` asks :func:`is_dsn` before it treats its
argument as a folder, and the PostgreSQL backend takes the parsed :class:`Dsn` from here.

Why a module of its own: the DSN arrives wherever a folder did, often through ``pathlib.Path``
(the CLI's ``--index``, ``ingest(index_dir)``), which folds ``//`` into ``/``; :func:`parse_dsn`
reads both spellings. The password is untrusted data and a secret: it stays in the connection
string handed to the driver and nowhere else; every message and ``str(index.path)`` carry
:attr:`Dsn.display`, the DSN without it (libpq then takes it from ``PGPASSWORD`` or the password
file when the index is opened again by that name).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from contextkit.core.errors import InvalidArgumentError

__all__ = ["DEFAULT_SCHEMA", "Dsn", "DsnPath", "is_dsn", "location_name", "parse_dsn"]

_SCHEMES = ("postgresql", "postgres")
#: The schema an index lives in when the DSN names none (``?schema=name`` picks another: one index per schema).
DEFAULT_SCHEMA = "contextkit"
#: A schema name contextkit creates and quotes: lower-case letters, digits and ``_`` (PostgreSQL's 63 bytes).
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _text(location: object) -> str:
    """``location`` as text: a str, or a path (``os.fspath``); anything else names no DSN."""
    return str(location) if isinstance(location, str | os.PathLike) else ""


def is_dsn(location: object) -> bool:
    """Whether ``location`` (a str or a path) names a database rather than a folder."""
    text = _text(location)
    return any(text.startswith(f"{s}:/") for s in _SCHEMES)


@dataclass(frozen=True)
class Dsn:
    """A parsed DSN: ``conninfo`` for the driver (password included), ``schema``, and ``display``."""

    conninfo: str
    schema: str
    display: str

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"Dsn({self.display!r})"


def parse_dsn(location: object) -> Dsn:
    """The DSN ``location`` names (``postgresql://user@host:port/db?schema=name``, or the same folded by
    ``pathlib``); a malformed one or a schema name contextkit does not create is ``InvalidArgumentError``."""
    text = _text(location)
    scheme, sep, rest = text.partition(":")
    if scheme not in _SCHEMES or not sep or not rest.startswith("/"):
        raise InvalidArgumentError(f"{_mask(text)!r} is not a PostgreSQL DSN (postgresql://user@host/db)")
    if not rest.startswith("//"):
        rest = "/" + rest  # pathlib folded postgresql:// into postgresql:/
    try:
        parts = urlsplit(f"postgresql:{rest}")
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidArgumentError(f"{_mask(text)!r}: not a DSN ({exc})") from None
    schema = DEFAULT_SCHEMA
    kept: list[tuple[str, str]] = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    if not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidArgumentError(f"schema {schema[:70]!r}: use lower-case letters, digits and '_' "
                                   "(at most 63, not starting with a digit)")
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
    return Dsn(conninfo=conninfo, schema=schema, display=_display(parts, kept, schema))


def _display(parts: Any, kept: list[tuple[str, str]], schema: str) -> str:
    """The DSN without its password (nor a ``password=`` parameter), with its schema."""
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{quote(unquote(user.partition(':')[0]), safe='')}@{host}"
    query = [(k, v) for k, v in kept if k != "password"] + ([("schema", schema)] if schema != DEFAULT_SCHEMA else [])
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="/"), ""))


def _mask(text: str) -> str:
    """``text`` with anything between ``:`` and ``@`` after the scheme hidden (for an error about it)."""
    return re.sub(r"(//[^/:@]*):[^@/]*@", r"\1:***@", text)[:200]


class DsnPath(PurePosixPath):
    """``Index.path`` of a database index: ``str()`` and ``os.fspath()`` give the DSN without its password,
    so code that records an index by its path (a retriever's ``to_dict``, a re-open in another thread)
    records the database, and never the password."""

    _dsn_display: str

    @classmethod
    def of(cls, dsn: Dsn) -> DsnPath:
        path = cls(dsn.display)
        path._dsn_display = dsn.display
        return path

    def __str__(self) -> str:
        return getattr(self, "_dsn_display", super().__str__())

    def __fspath__(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"DsnPath({str(self)!r})"


def location_name(location: object) -> str:
    """How to name an index in a report or a message: a folder as given, a DSN without its password."""
    return parse_dsn(location).display if is_dsn(location) else str(location)
