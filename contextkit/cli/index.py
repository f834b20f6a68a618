"""``contextkit verify``, ``contextkit repair`` and ``contextkit index copy``: check an index, rebuild what is
derived, copy it into another place (a folder, a PostgreSQL database)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from contextkit.cli._app import IndexOpt, app, err, fail, json_text, out, progress_bar, reported

_JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
_STYLE = {"ok": "green", "unchecked": "yellow", "leftover": "yellow", "busy": "yellow", "read-only": "yellow",
          "stale": "red", "unfinished": "red",
          "missing": "red", "corrupt": "red", "mismatch": "red"}


def _checks_table(title: str, checks) -> Table:
    table = Table(title=title)
    for col in ("file", "status", "detail"):
        table.add_column(col, overflow="fold", no_wrap=col != "detail")
    for c in checks:
        style = _STYLE.get(c.status, "")
        table.add_row(escape(c.file), f"[{style}]{c.status}[/]" if style else c.status, escape(c.detail))
    return table


@app.command()
def verify(
    index: IndexOpt,
    quick: Annotated[bool, typer.Option(
        "--quick", help="hash only the size, first and last MiB of large files, and PRAGMA quick_check "
        "(what opening checks), instead of every byte and PRAGMA integrity_check")] = False,
    as_json: _JsonOpt = False,
) -> None:
    """Check every file of an index: checksums, SQLite integrity, generations. Changes nothing.

    Exit 0 when every check passes, 1 when something is damaged, missing or stale.

    Example: contextkit verify --index my.ck-index
    """
    from contextkit.index import is_dsn, location_name, verify_index

    if not is_dsn(index) and not index.is_dir():
        raise fail(f"{index}: no such folder")
    with reported():
        report = verify_index(index, full=not quick)
    index = location_name(index)  # type: ignore[assignment]  # (a DSN shown without its password)
    if as_json:
        sys.stdout.write(json_text(report.to_dict()) + "\n")
    else:
        out.print(_checks_table(f"verify {index}", report.checks))
        if report.ok:
            out.print("[green]ok[/]: every check passed", highlight=False)
        else:
            fixable = all(c.repairable for c in report.problems)
            hint = (f"`contextkit repair --index {index}` can fix this" if fixable
                    else "run the ingest again (see above)" if report.problems[0].status == "unfinished"
                    else "some of it cannot be repaired (see above)")
            out.print(f"[bold red]{len(report.problems)} problem(s)[/]: {escape(hint)}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def repair(index: IndexOpt, as_json: _JsonOpt = False) -> None:
    """Rebuild what can be rebuilt from the records store: vectors.faiss, bm25/ and manifest.json.

    store.sqlite holds the chunks, texts and vectors; everything else is derived from it.
    A damaged store.sqlite cannot be repaired: the command says so and changes nothing.
    Exit 0 when the index is sound afterwards, 1 otherwise.

    Example: contextkit verify --index my.ck-index || contextkit repair --index my.ck-index
    """
    from contextkit.index import is_dsn, location_name, repair_index

    if not is_dsn(index) and not index.is_dir():
        raise fail(f"{index}: no such folder")
    with reported():
        report = repair_index(index)
    index = location_name(index)  # type: ignore[assignment]  # (a DSN shown without its password)
    if as_json:
        sys.stdout.write(json_text(report.to_dict()) + "\n")
    else:
        if report.before.problems:
            out.print(_checks_table(f"found in {index}", report.before.problems))
        table = Table(title="repair")
        for col in ("file", "action", "detail"):
            table.add_column(col, overflow="fold", no_wrap=col != "detail")
        for a in report.actions:
            style = "red" if a.action == "cannot repair" else "green"
            table.add_row(escape(a.file), f"[{style}]{a.action}[/]", escape(a.detail))
        out.print(table)
        if report.ok:
            out.print("[green]ok[/]: the index passes every check", highlight=False)
    if not report.ok:
        left = report.after.problems if report.after is not None else [
            c for c in report.before.problems if not c.repairable]
        names = ", ".join(sorted({c.file for c in left})) or "the index"
        err.print(f"[bold red]error:[/] could not repair {escape(names)}: "
                  f"{escape(left[0].detail) if left else 'see above'}", highlight=False)
        raise typer.Exit(1)


index_app = typer.Typer(help="Whole indexes: copy one into another place (a folder or a PostgreSQL database).",
                        no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.command("copy")
def copy(
    source: Annotated[str, typer.Argument(help="the index to copy: a folder or postgresql://user@host/db?schema=name")],
    destination: Annotated[str, typer.Argument(help="where to: a new folder, or a database schema with no index yet")],
    index_type: Annotated[str | None, typer.Option(
        "--index-type", help="the copy's vector index: flat (exact) or hnsw in a database; any kind in a folder "
        "(default: the source's, flat when a database cannot take it)")] = None,
    as_json: _JsonOpt = False,
) -> None:
    """Copy an index, with its settings, chunks and vectors: nothing is embedded again.

    Moves a folder into PostgreSQL (docs/postgres.md), or back. The copy is one transaction: if it
    fails, the destination holds no rows and the copy can be run again. Exit 1 on failure, 2 on a
    usage error (an unknown --index-type, a destination that already holds an index with rows).

    Example: contextkit index copy my.ck-index 'postgresql://me@db.example.com/rag?schema=docs'
    """
    from contextkit.index.copy import copy_index

    kinds = ("flat", "hnsw", "ivf", "ivfpq", "auto")
    if index_type is not None and index_type not in kinds:
        raise fail(f"--index-type {index_type!r}: one of {', '.join(kinds)}", 2)
    with reported(), progress_bar("chunks", disabled=as_json) as bar:
        task = bar.add_task("copying", total=None)
        report = copy_index(source, destination, index_type=index_type,  # type: ignore[arg-type]
                            progress=lambda n: bar.update(task, completed=n))
    if as_json:
        sys.stdout.write(json_text(report.model_dump()) + "\n")
        return
    out.print(f"copied {report.files:,} files, {report.documents:,} documents and {report.chunks:,} chunks "
              f"from {escape(report.source)} to {escape(report.destination)} in {report.seconds:.1f} s", highlight=False)
