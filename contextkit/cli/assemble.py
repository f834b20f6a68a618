"""``contextkit assemble`` and ``contextkit models``: prompts under a budget from the shell."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from contextkit.cli._app import IndexOpt, app, err, fail, json_text, out, reported, safe
from contextkit.cli._settings import file_settings
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS, MAX_HISTORY_MESSAGES

if TYPE_CHECKING:  # pragma: no cover - imported lazily at run time (CLI start-up)
    from contextkit.core.records import Message


@app.command()
def assemble(
    question: Annotated[str, typer.Argument(help="the user's question")],
    index: IndexOpt,
    budget: Annotated[int | None, typer.Option(help="prompt budget in tokens")] = None,
    model: Annotated[str | None, typer.Option(
        help="model profile (window, answer reserve, tokenizer, price); see `contextkit models`")] = None,
    instructions: Annotated[Path | None, typer.Option(
        help="text file of key instructions: first in the prompt, restated at the end")] = None,
    history: Annotated[Path | None, typer.Option(help="conversation so far: JSON lines of {role, content}")] = None,
    tool_output: Annotated[list[Path] | None, typer.Option(
        help="a tool's output or a log to include (repeatable): escaped, a long one keeps its head and tail")] = None,
    fmt: Annotated[str, typer.Option("--format", help="xml or markdown")] = "xml",
    text_escape: Annotated[str, typer.Option(
        help="xml: auto (code and other text with three or more < or & but nothing like a tag kept verbatim in "
             "CDATA; fewer as entities), "
             "entities (&lt; and &amp; always) or cdata (always verbatim)")] = "auto",
    mode: Annotated[str, typer.Option(help="retrieval: dense, bm25 or hybrid")] = "hybrid",
    k: Annotated[int | None, typer.Option("-k", help="chunks to retrieve [default: enough to fill the budget]")] = None,
    filter_: Annotated[list[str] | None, typer.Option(
        "--filter", metavar="KEY=VALUE", help="key=value: source=GLOB, doc_id=ID or a metadata field (repeatable)")] = None,
    order: Annotated[str, typer.Option(help="evidence order: lost_in_the_middle, score or document")] = "lost_in_the_middle",
    fill: Annotated[str, typer.Option(
        help="relevant: the budget is a cap, evidence stops where relevance falls away; budget: fill to the cap")
    ] = "relevant",
    min_score: Annotated[float | None, typer.Option(
        help="leave out evidence scoring below this (sets the relevance floor)")] = None,
    require_evidence: Annotated[bool, typer.Option(
        "--require-evidence", help="exit 1 (writing nothing) when no evidence goes in, instead of a warning")] = False,
    out_file: Annotated[Path | None, typer.Option("--out", help="write the prompt here instead of stdout")] = None,
    messages_file: Annotated[Path | None, typer.Option(
        "--messages", help="also write the prompt as chat messages (JSON), per-message overhead in the budget")] = None,
    messages_style: Annotated[str, typer.Option(
        help="--messages format: openai (a list of {role, content}) or anthropic ({system, messages}, "
             "with cache_control on the stable prefix)")] = "openai",
    report_file: Annotated[Path | None, typer.Option("--report", help="write the report here as JSON")] = None,
    report_html: Annotated[Path | None, typer.Option(
        help="write a self-contained HTML page: the prompt by section, the budget chart, what was left out")] = None,
    summarize_history: Annotated[bool, typer.Option(
        help="condense history turns that do not fit into a summary (else drop them)")] = True,
    summary_tokens: Annotated[int, typer.Option(help="hard cap on the history summary, in tokens")] = DEFAULT_SUMMARY_MAX_TOKENS,
    redact: Annotated[bool, typer.Option(help="mask PII in the evidence, history and question")] = False,
    compress_evidence: Annotated[float | None, typer.Option(
        help="prune retrieved passages to the sentences that bear on the question, to 1/N of their tokens")] = None,
    audit_log: Annotated[Path | None, typer.Option(help="append one JSON line per assembly (no document text)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the report as JSON on stderr instead of a table")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no report on stderr")] = False,
) -> None:
    """Build one prompt for QUESTION from an index, under a token budget.

    The prompt goes to stdout (or --out); the report (tokens per section, what was
    dropped and why) to stderr. Nothing is written when anything fails.

    Example: contextkit assemble "How are exceptions chained?" --index my.ck-index --model gpt-4o --out prompt.txt
    """
    _check_args(budget, model, fmt, mode, order, fill, messages_style, text_escape, k)
    result = _assemble(question, index, budget=budget, model=model, instructions=instructions, history=history,
                       k=k, filter_=filter_, audit_log=audit_log, tool_output=tool_output or [],
                       options=dict(**file_settings("assemble"), mode=mode, format=fmt, text_escape=text_escape, evidence_order=order, summarize_history=summarize_history,
                                    summary_max_tokens=summary_tokens, redact=redact,
                                    compress_evidence=compress_evidence, fill=fill, min_score=min_score,
                                    chat=messages_style if messages_file else None))
    if require_evidence and result.report.warnings:
        raise fail(f"{result.report.warnings[0]} (--require-evidence; filters: {filter_ or 'none'}); nothing written")
    _write_outputs(result, question, out_file, report_file, report_html, messages_file, messages_style)
    for warning in result.report.warnings:
        err.print(f"[yellow]warning:[/] {_plain(safe(warning))}", highlight=False)
    if quiet:
        return
    if as_json:
        err.print_json(result.report.model_dump_json())
    else:
        _print_report(result.report)


_CHOICES = {"--format": ("xml", "markdown"), "--mode": ("dense", "bm25", "hybrid"),
            "--order": ("lost_in_the_middle", "score", "document"), "--fill": ("relevant", "budget"),
            "--messages-style": ("openai", "anthropic"), "--text-escape": ("auto", "entities", "cdata")}


def _check_args(budget: int | None, model: str | None, fmt: str, mode: str, order: str = "lost_in_the_middle",
                fill: str = "relevant", messages_style: str = "openai", text_escape: str = "auto",
                k: int | None = None) -> None:
    """Usage errors (exit code 2, one line) before anything is opened (the limits: the library's, also exit 2)."""
    if budget is None and model is None:
        raise fail("give --budget N (tokens) or --model PROFILE (see `contextkit models`)", 2)
    if model is not None:
        from contextkit.core.errors import ProfileError
        from contextkit.core.profiles import get_profile

        try:  # a misspelt profile is a bad option value, like --mode bm52: exit 2, with the likely name
            get_profile(model)
        except ProfileError as exc:
            raise fail(f"--model: {exc}", 2) from None
    if budget is not None and budget <= 0:
        raise fail(f"--budget must be a positive number of tokens, not {budget}", 2)
    if k is not None and k <= 0:
        raise fail(f"-k must be a positive number of chunks, not {k}", 2)
    for option, value in zip(_CHOICES, (fmt, mode, order, fill, messages_style, text_escape)):
        if value not in _CHOICES[option]:
            raise fail(f"{option} is {' or '.join(_CHOICES[option])}, not {value!r}", 2)


def _plain(text: str) -> str:
    """Text for a rich console line with no markup read into it (a warning may quote a file name)."""
    from rich.markup import escape

    return escape(text)


def _assemble(question: str, index: Path, *, budget: int | None, model: str | None,
              instructions: Path | None, history: Path | None, k: int | None,
              filter_: list[str] | None, audit_log: Path | None, options: dict[str, Any],
              tool_output: list[Path] | None = None) -> Any:
    """The prompt from the index; every failure of reading the inputs or assembling is a clean error."""
    from contextkit.assembly import get_profile
    from contextkit.assembly.context_assembler import (
        ContextAssembler,
        load_history,
    )
    from contextkit.cli._redaction import session
    from contextkit.index import Index
    from contextkit.retrievers import Filters

    with reported(), _input_errors():
        profile = get_profile(model) if model else None
        key_text = _read_text(instructions).strip() if instructions else None
        most = options.get("max_history_messages", MAX_HISTORY_MESSAGES)
        messages: list[Message | dict[str, Any]] | None = list(load_history(history, most)) if history else None
        tools: list[str | tuple[str, str]] = [(path.name, _read_text(path)) for path in tool_output or []]
        filters = Filters.parse(filter_) if filter_ else None
        with Index.open(index, read_only=True) as opened:
            # with --redact, the prompt is masked in the session the run's output is (one placeholder per value)
            redactor = session() if options.get("redact") else None
            assembler = ContextAssembler(
                profile if budget is None else budget, index=opened, redactor=redactor,
                tokenizer=profile.tokenizer if (profile and budget is not None) else None,
                audit_log=str(audit_log) if audit_log else None, **options)
            return assembler.assemble(question, instructions=key_text, history=messages, k=k, filters=filters,
                                      tool_results=tools)


@contextlib.contextmanager
def _input_errors() -> Iterator[None]:
    """A file named on the command line (instructions, the audit log) that cannot be read or written."""
    try:
        yield
    except OSError as exc:
        raise fail(str(exc)) from None


def _write_outputs(result: Any, question: str, out_file: Path | None, report_file: Path | None,
                   report_html: Path | None, messages_file: Path | None = None,
                   messages_style: str = "openai") -> None:
    """The report files, the messages, then the prompt (to ``--out`` or stdout); each written whole or not at all."""
    try:
        if messages_file:
            _write_atomic(messages_file, json_text(result.messages(messages_style), indent=2) + "\n")
        if report_file:
            _write_atomic(report_file, result.report.model_dump_json(indent=2) + "\n")
        if report_html:
            from contextkit.assembly.html import render_html

            title = f"contextkit: {question}"  # masked when the run redacts, as the prompt's question is
            _write_atomic(report_html, render_html(result.prompt, result.report, title=safe(title)))
        if out_file:
            _write_atomic(out_file, result.prompt)
        else:
            sys.stdout.write(result.prompt)
            sys.stdout.flush()
    except OSError as exc:
        raise fail(f"cannot write: {exc}") from None  # fail() masks a path when the run redacts


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the model profiles `contextkit assemble --model` knows.

    Example: contextkit models --json | jq '.[] | select(.context_window >= 1000000) | .name'
    """
    from contextkit.assembly import list_profiles

    profiles = list_profiles()
    if as_json:
        out.print_json(json.dumps([p.model_dump() for p in profiles]))
        return
    table = Table(title="model profiles (add your own with contextkit.register_profile)")
    widest = max((len(p.name) for p in profiles), default=4)
    for col in ("name", "window", "answer", "prompt budget", "tokenizer", "USD / 1M input"):
        # a name is never cut (two cut names looked the same at 80 columns); the other columns wrap
        table.add_column(col, justify="right" if col not in ("name", "tokenizer") else "left",
                         no_wrap=col == "name", min_width=widest if col == "name" else None)
    for p in profiles:
        tok = p.tokenizer if p.exact_tokenizer else f"{p.tokenizer} (estimate)"
        price = "-" if p.input_price_per_million is None else f"{p.input_price_per_million:.2f}"
        table.add_row(p.name, f"{p.context_window:,}", f"{p.reserved_output:,}", f"{p.prompt_budget:,}", tok, price)
    out.print(table)


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise fail(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise fail(f"{path}: not valid UTF-8 (byte {exc.start})") from None


def _write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename: never half a prompt."""
    from contextkit.core.atomic import write_text_atomic

    write_text_atomic(path, text, newline="")


def _print_report(report) -> None:
    table = Table(title=f"prompt: {report.summary()}", title_justify="left")
    for col in ("section", "role", "tokens", "status", "in", "cut", "out"):
        table.add_column(col, justify="right" if col in ("tokens", "in", "cut", "out") else "left")
    for s in report.sections:
        items = s.items_included + s.items_truncated + s.items_dropped > 0
        table.add_row(s.name, s.role, f"{s.tokens:,}", s.status + (f" ({s.reason})" if s.reason else ""),
                      str(s.items_included) if items else "", str(s.items_truncated) if items else "",
                      str(s.items_dropped) if items else "")
    err.print(table)
    left_out = {k: v for k, v in report.counts().items() if not k.startswith("included")}
    if left_out:
        err.print("left out or cut: " + ", ".join(f"{v} {k.replace(':', ' for ')}" for k, v in sorted(left_out.items())),
                  highlight=False)
    for note in report.notes:
        err.print(f"note: {_plain(safe(note))}", highlight=False)




