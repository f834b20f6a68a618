"""The one Typer app, the two consoles and the options every command group shares (a leaf).

Tables and results go to ``out`` (stdout), progress and errors to ``err`` (stderr).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
