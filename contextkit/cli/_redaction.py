"""Which runs of the command line redact what they print, and the one redactor session of such a run.

A run redacts when it says so (``--redact``, ``redact = true`` in its ``contextkit.toml`` table, or
the ``redact`` command) or works on an index built with ``--redact`` (its ``manifest.json`` says ``"redact": true``), unless
``--no-redact`` comes last. Then every value the run prints (an error quoting a path, a query or an
option value, a file name in the report, a warning, the HTML report's title) passes one
:class:`~contextkit.compressors.redact.PIIRedactor` session, the same one ``assemble`` masks the
prompt with, so a value has one placeholder wherever it shows; and log records, formatted, and what
OpenTelemetry spans record of an error pass it too. :func:`for_run` is the hook ``cli/_app.py`` calls before each run (the leaf imports no redactor).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.cli import _app
from contextkit.core.errors import ContextkitError

if TYPE_CHECKING:  # pragma: no cover - imported on first use: a run that redacts nothing never loads it
    from contextkit.compressors.redact import PIIRedactor

__all__ = ["for_run", "session"]

_SESSION: dict[str, PIIRedactor | None] = {"redactor": None}


def session() -> PIIRedactor | None:
    """The redactor of this run when it redacts (made on first use), else None."""
    if _app.REDACTION["mask"] is None:
        return None
    if _SESSION["redactor"] is None:
        from contextkit.compressors.redact import PIIRedactor

        _SESSION["redactor"] = PIIRedactor()
    return _SESSION["redactor"]


def _mask(text: str) -> str:
    redactor = session()
    return text if redactor is None or not text else redactor.mask(text)


def for_run(argv: Sequence[str], default_map: Mapping[str, Any]) -> Callable[[str], str] | None:
    """The mask of a run with these arguments, or None when it redacts nothing (a new session each run)."""
    from contextkit.core import telemetry

    _SESSION["redactor"] = None
    if not _redacts(list(argv), default_map):
        telemetry.set_masker(None)
        return None
    _mask_logs()
    telemetry.set_masker(_mask)  # an error through a span: its message and traceback masked
    return _mask


def _redacts(argv: list[str], default_map: Mapping[str, Any]) -> bool:
    flags = [a for a in argv if a in ("--redact", "--no-redact")]
    if flags:
        return flags[-1] == "--redact"
    command = next((a for a in argv if not a.startswith("-")), "")
    if command == "redact":  # `contextkit redact FILE`: "values are never printed", its errors' included
        return True
    table = default_map.get(command) or {}
    if table.get("redact") is True:
        return True
    index = _option_value(argv, ("--index", "-i")) or table.get("index")
    if index is not None and str(index).startswith(("postgresql:/", "postgres:/")):  # (index.is_dsn, not imported yet)
        return _database_redacts(str(index))
    return index is not None and _index_redacts(Path(str(index)))


def _option_value(argv: list[str], names: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


def _index_redacts(folder: Path) -> bool:
    """Whether the index at ``folder`` was built with ``--redact`` (False when there is none, or it is unreadable)."""
    from contextkit.index._generations import read_manifest_bytes  # a FIFO or /dev/zero in its place: refused

    try:
        manifest = json.loads(read_manifest_bytes(folder / "manifest.json"))
    except (OSError, ValueError, ContextkitError):
        return False
    return isinstance(manifest, dict) and manifest.get("redact") is True


def _database_redacts(dsn: str) -> bool:
    """Whether the index in the database ``dsn`` names was built with ``--redact`` (False when unreachable:
    the command then fails on its own, naming the database without its password)."""
    from contextkit.index import Index

    try:
        with Index.open(dsn, read_only=True) as index:
            return index.manifest.redact
    except ContextkitError:
        return False


class _MaskRecords(logging.Filter):
    """A handler's filter that masks a record's formatted message (and drops its arguments)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _app.REDACTION["mask"] is not None:
            record.msg, record.args = _mask(record.getMessage()), None
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_text = _mask(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


_FILTER = _MaskRecords()


def _mask_logs() -> None:
    """Every handler of the root logger masks what it writes (a handler added later is not seen)."""
    for handler in logging.getLogger().handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
