"""``contextkit verify`` and ``contextkit repair``: check an index folder, rebuild its derived files."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from contextkit.cli._app import IndexOpt, app, err, fail, json_text, out, reported

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
    from contextkit.index import verify_index

    if not index.is_dir():
        raise fail(f"{index}: no such folder")
    report = verify_index(index, full=not quick)
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
    from contextkit.index import repair_index

    if not index.is_dir():
        raise fail(f"{index}: no such folder")
    with reported():
        report = repair_index(index)
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
