"""The one Typer app, the two consoles and the options every command group shares (a leaf).

Tables and results go to ``out`` (stdout), progress and errors to ``err`` (stderr).

Conventions every command follows, set here once:

* ``--help`` is click's plain text (``rich_markup_mode=None``): help strings are never read as
  rich markup, so ``'contextkit[ray]'`` and ``[default: 128]`` show as written, defaults are
  shown, and the option names keep their column at 80 characters.
* A usage error (a bad value, an unknown option, a missing argument) is one line on stderr and
  exit code 2 (:class:`_Group`), never click's three-line usage block.
* Text from elsewhere (file names, document text, index paths) goes through :func:`safe` before
  it is printed: control characters (ANSI escapes, newlines, bells) are shown as ``\\x1b``, so a
  file name cannot rewrite the terminal or forge a line of the report.
* With redaction on (``--redact``, or an index built with it), :func:`safe`, :func:`fail` and the
  usage errors also mask personal data: a path, a query or an option value the user typed is
  printed with placeholders, as the prompt holds it. Which runs redact is decided once per run by
  the hook ``cli/_redaction.py`` installs (:data:`REDACTION`); this leaf imports no redactor.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperGroup, TyperOption

from contextkit.core.errors import ContextkitError, LimitExceededError

if TYPE_CHECKING:  # pragma: no cover - the installed Typer vendors click; the runtime lookup below works either way
    from typer._click.exceptions import ClickException

#: The redaction of this run's output: ``"for_run"`` (set by ``cli/_redaction.py``) takes the command
#: line and click's default map and returns a function that masks a text, or None; ``"mask"`` is the
#: one chosen for the run in progress.
REDACTION: dict[str, Callable[..., Any] | None] = {"for_run": None, "mask": None}

#: click's base of usage errors, wherever this Typer keeps click (recent ones vendor it).
_ClickException: type[ClickException] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


#: The exit status of a run stopped with Ctrl-C (128 + SIGINT), as shells report it.
_INTERRUPTED = 130


#: A hyphen inside a word (``my.ck-index``, ``--no-strict``) while help is wrapped: U+2011, at which
#: the wrapper never breaks, put back to ``-`` once the lines are written (see :class:`_HelpFormatter`).
_HYPHEN_IN_WORD = re.compile(r"(?<=\w)-(?=\w)")
_KEPT_HYPHEN = "\u2011"


class _HelpFormatter(TyperGroup.context_class.formatter_class):  # type: ignore[name-defined]
    """click's help formatter, except that a line never breaks at a hyphen: ``my.ck-`` / ``index``
    or ``[default: no-`` / ``strict]`` cannot be copied back as typed."""

    def write_text(self, text: str) -> None:
        self._unbroken(lambda: super(_HelpFormatter, self).write_text(_HYPHEN_IN_WORD.sub(_KEPT_HYPHEN, text)))

    def write_dl(self, rows: Sequence[tuple[str, str]], *args: Any, **kwargs: Any) -> None:
        kept = [(first, _HYPHEN_IN_WORD.sub(_KEPT_HYPHEN, second)) for first, second in rows]
        self._unbroken(lambda: super(_HelpFormatter, self).write_dl(kept, *args, **kwargs))

    def _unbroken(self, write: Callable[[], None]) -> None:
        start = len(self.buffer)
        write()
        self.buffer[start:] = [piece.replace(_KEPT_HYPHEN, "-") for piece in self.buffer[start:]]


class _Context(TyperGroup.context_class):  # type: ignore[misc,valid-type]
    formatter_class = _HelpFormatter


class _Argument(TyperArgument):
    """An argument shown as click shows one: ``QUERY`` (``[QUERY]`` when optional, ``PATHS...`` when
    repeatable) in the usage line and the help, not Typer's ``{query}`` and ``<list[Path]>``."""

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.metavar or (self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return [name + ("..." if self.nargs != 1 else "")]

    def get_help_record(self, ctx: Any) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        return (self.metavar or "") + ("..." if self.nargs != 1 else ""), record[1]


def _metavar(param: Any) -> str:
    """click's name for what an option takes: ``PATH``, ``INTEGER``, ``FLOAT``, ``TEXT`` or ``[a|b|c]``."""
    described = param.type_descriptor
    if described.choices:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in described.choices) + "]"
    kind = get_args(described.annotation)[0] if described.is_list else described.annotation
    if described.is_path or (isinstance(kind, type) and issubclass(kind, PurePath)):
        return "PATH"
    return {int: "INTEGER", float: "FLOAT"}.get(kind, "TEXT")


def _plain_help(command: Any) -> None:
    """Give ``command`` (and a group's subcommands) click's plain metavars and the hyphen-keeping
    formatter: the help a user copies from is what they type."""
    command.context_class = _Context
    for param in command.params:
        if isinstance(param, TyperArgument):
            param.metavar = param.metavar or (param.name or "").upper()
            param.__class__ = _Argument
        elif isinstance(param, TyperOption) and param.metavar is None and not param.is_flag:
            param.metavar = _metavar(param)
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


class _Group(TyperGroup):
    """The app's command group: usage errors as one line (``error: ... (see contextkit ingest --help)``), exit 2;
    help with click's plain metavars, never broken at a hyphen (:func:`_plain_help`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain_help(self)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        chooser = REDACTION["for_run"]
        REDACTION["mask"] = chooser(argv, extra.get("default_map") or {}) if chooser is not None else None
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except _ClickException as exc:
            if not standalone_mode:
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":  # `contextkit` alone: the help, as click shows it
                typer.echo(exc.format_message())
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            err.print(f"[bold red]error:[/] {_markup_safe(exc.format_message())}{_markup_safe(where)}", highlight=False)
            sys.exit(exc.exit_code)
        except typer.Abort:
            if not standalone_mode:
                raise
            rv = _INTERRUPTED
        if rv == _INTERRUPTED and standalone_mode:  # Typer's click returns 130 for a Ctrl-C it caught
            err.print("[bold red]interrupted[/]: what was committed before is kept; run again to finish",
                      highlight=False)
            sys.exit(_INTERRUPTED)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    name="contextkit",
    cls=_Group,
    help="Context engineering for RAG: token-exact chunking, a persistent FAISS index, search.\n\n"
    "Example: contextkit ingest docs/ --index my.ck-index && contextkit search 'how do I...' --index my.ck-index",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"max_content_width": 100},
)
out = Console()
err = Console(stderr=True, soft_wrap=True)


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:  # the installed distribution's version (this module is a leaf: it imports no contextkit module)
            number = version("contextkit")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
            number = "unknown (not installed)"
        out.print(f"contextkit {number}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_show_version, help="print the version and exit")] = False) -> None:
    """Context engineering for RAG: token-exact chunking, a persistent FAISS index, search."""


def safe(text: object, keep_lines: bool = False) -> str:
    """``text`` with every control or invisible formatting character shown as an escape (``\\x1b``,
    ``\\n``, ``\\u202e``): what is printed of a file name or a document is what it is, on one line
    (``keep_lines``: newlines and tabs kept, for a document's text). With redaction on, personal
    data in it is masked first (see :data:`REDACTION`)."""
    value = str(text)
    mask = REDACTION["mask"]
    if mask is not None:
        value = mask(value)
    if value.isprintable():
        return value
    if keep_lines and all(line.replace("\t", "").isprintable() for line in value.split("\n")):
        return value  # a document's usual text, checked at C speed (the loop below is slow on megabytes)
    out_chars = []
    for ch in value:
        if ch.isprintable() or (keep_lines and ch in "\n\t"):
            out_chars.append(ch)
        elif ch in "\n\t\r":
            out_chars.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        else:
            code = ord(ch)
            out_chars.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "".join(out_chars)


#: What ``json.dumps(..., ensure_ascii=False)`` leaves raw but a terminal may act on (DEL and the C1
#: controls, U+009B is a CSI) or a JSON-lines reader may split at (U+0085, U+2028, U+2029 end a line
#: for ``str.splitlines``): written as ``\\uXXXX`` escapes, which every JSON reader decodes alike.
_JSON_RAW_UNSAFE = {code: f"\\u{code:04x}" for code in [*range(0x7F, 0xA0), 0x2028, 0x2029]}


def json_text(value: Any, **options: Any) -> str:
    """``value`` as JSON for stdout or a file: UTF-8 text kept readable, every character a terminal or
    a line splitter could misread escaped (a document's own ``ESC [ 2 J`` stays data)."""
    return json.dumps(value, ensure_ascii=False, **options).translate(_JSON_RAW_UNSAFE)


def plain_rule(title: str, width: int) -> str:
    """``──── title ────`` across ``width`` columns (wider for a long title): what rich's ``Console.rule`` draws where
    stdout is not a terminal, written directly (rich's own rule costs too much once per chunk of a
    large file: ``python bench/bench_chunking.py``)."""
    fill = max(4, width - len(title) - 2)  # a title too long for the width still has its dashes
    return "─" * (fill // 2) + f" {title} " + "─" * (fill - fill // 2)


def _markup_safe(text: object) -> str:
    from rich.markup import escape

    return escape(safe(text))

IndexOpt = Annotated[Path, typer.Option("--index", "-i", help="index folder")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as one plain line (paths and hints such as ``contextkit[ray]`` hold brackets;
    control characters in a path are escaped by :func:`safe`)."""
    err.print(f"[bold red]error:[/] {_markup_safe(message)}", highlight=False)
    return typer.Exit(code)


@contextlib.contextmanager
def reported(code: int = 1) -> Iterator[None]:
    """Turn a failure the user can act on into one line on stderr and exit ``code``, never a traceback.

    What counts: every error contextkit raises on purpose, one base, :class:`ContextkitError` (an
    invalid setting included: the settings records raise ``InvalidArgumentError``, not pydantic's
    ``ValidationError``). A request past a limit is a usage error (exit 2) whatever ``code`` says.
    Anything else is a bug and keeps its traceback.
    """
    try:
        yield
    except LimitExceededError as exc:
        raise fail(str(exc), 2) from None
    except ContextkitError as exc:
        raise fail(str(exc), code) from None


def progress_bar(*fields: str, disabled: bool = False) -> Any:
    """A rich progress bar on stderr: description, bar, done/total, then ``fields`` columns, elapsed time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    columns += [TextColumn(f) for f in fields]
    return Progress(*columns, TimeElapsedColumn(), console=err, disable=disabled)
