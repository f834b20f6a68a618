"""The one Typer app, the two consoles and the options every command group shares (a leaf).

Tables and results go to ``out`` (stdout), progress and errors to ``err`` (stderr).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from contextkit.errors import ContextkitError

app = typer.Typer(
    name="contextkit",
    help="Context engineering for RAG: token-exact chunking, a persistent FAISS index, search.\n\n"
    "Example: contextkit ingest docs/ --index my.ck-index && contextkit search 'how do I…' --index my.ck-index",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True, soft_wrap=True)

IndexOpt = Annotated[Path, typer.Option("--index", "-i", help="index folder")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as plain text (paths and hints such as ``contextkit[ray]`` hold brackets)."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


@contextlib.contextmanager
def reported(code: int = 1) -> Iterator[None]:
    """Turn a failure the user can act on into one line on stderr and exit ``code``, never a traceback.

    What counts: every error contextkit raises on purpose (one base, :class:`ContextkitError`),
    and invalid settings (pydantic's ``ValidationError``, raised where options become a config).
    Anything else is a bug and keeps its traceback.
    """
    from pydantic import ValidationError

    try:
        yield
    except ContextkitError as exc:
        raise fail(str(exc), code) from None
    except ValidationError as exc:
        raise fail(settings_message(exc), code) from None


def settings_message(exc: Any) -> str:
    """A pydantic ``ValidationError`` as one line: ``Settings: field: why; ...`` (no URL, no input dump)."""
    parts = []
    for error in exc.errors():
        why = str(error.get("msg", "")).removeprefix("Value error, ")
        where = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{where}: {why}" if where else why)
    return f"{exc.title}: " + "; ".join(parts)


def progress_bar(*fields: str, disabled: bool = False) -> Any:
    """A rich progress bar on stderr: description, bar, done/total, then ``fields`` columns, elapsed time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    columns += [TextColumn(f) for f in fields]
    return Progress(*columns, TimeElapsedColumn(), console=err, disable=disabled)
