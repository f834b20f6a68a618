"""The ``contextkit`` command line: thin commands over the public API.

Progress bars and tables live here only, on stderr and stdout respectively;
``--json`` prints machine-readable output. Exit codes: 0 success, 1 nothing
could be done (or any failure with ``--strict``), 2 a usage error.

One module per command group, each registering its commands on the one Typer
app of :mod:`contextkit.cli._app` (a leaf): ``ingest`` (ingest, chunk), ``search``
(search, info), ``assemble`` (assemble, models), ``compress`` (summarize, redact),
``index`` (verify, repair), ``eval``, ``demo``.
"""

from __future__ import annotations

import logging

import typer

from contextkit.cli._app import app, err

# isort: off
# Registers the commands, in the order of --help: the pipeline's.
from contextkit.cli import ingest, search, assemble, compress, index, eval, demo, usage  # noqa: F401
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from contextkit.config import ConfigError, cli_defaults, load_config

    try:
        config = load_config()
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise SystemExit(2) from None
    group = typer.main.get_command(app)
    known = {name: {p.name for p in cmd.params} for name, cmd in group.commands.items()}
    for name, table in config.items():
        if isinstance(table, dict):
            unknown = sorted(set(table) - known.get(name, set()) - {"index"}) if name in known else [name]
            if unknown:
                where = f"[{name}]" if name in known else "the file"
                from rich.markup import escape

                err.print(f"[bold red]error:[/] contextkit config: unknown setting(s) in {escape(where)}: "
                          f"{escape(', '.join(unknown))}", highlight=False)
                raise SystemExit(2)
    app(default_map=cli_defaults(config, list(known)))
