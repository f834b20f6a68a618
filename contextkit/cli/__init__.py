"""The ``contextkit`` command line: thin commands over the public API.

Progress bars and tables live here only, on stderr and stdout respectively;
``--json`` prints machine-readable output. Exit codes: 0 success, 1 nothing
could be done (or any failure with ``--strict``), 2 a usage error.

One module per command group, each registering its commands on the one Typer
app of :mod:`contextkit.cli._app` (a leaf): ``ingest`` (ingest, chunk), ``search``
(search, info), ``assemble`` (assemble, models), ``compress`` (summarize, redact),
``index`` (verify, repair), ``serve``, ``eval``, ``demo``, ``usage``, ``session`` (session replay).
"""

from __future__ import annotations

import logging

import typer

from contextkit.cli import _redaction
from contextkit.cli._app import REDACTION, app, err

# isort: off
# Registers the commands, in the order of --help: the pipeline's.
from contextkit.cli import ingest, search, assemble, compress, index, serve, eval, demo, usage, session  # noqa: F401
# isort: on

REDACTION["for_run"] = _redaction.for_run  # each run decides whether what it prints is masked

__all__ = ["app", "main"]


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from contextkit.cli._settings import default_map
    from contextkit.core.config import ConfigError, load_config
    from contextkit.core.errors import ContextkitError

    group = typer.main.get_command(app)
    params = {name: {p.name for p in cmd.params if p.name} for name, cmd in group.commands.items()}  # type: ignore[attr-defined]
    try:
        config = load_config()
        unknown = sorted(name for name, table in config.items() if isinstance(table, dict) and name not in params)
        if unknown:
            raise ConfigError(f"unknown table(s) [{'], ['.join(unknown)}]; tables are command names")
        defaults = default_map(config, params)
    except (ContextkitError, ValueError) as exc:
        from rich.markup import escape

        err.print(f"[bold red]error:[/] contextkit config: {escape(str(exc))}", highlight=False)
        raise SystemExit(2) from None
    app(default_map=defaults)
