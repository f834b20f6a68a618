"""``contextkit summarize`` and ``contextkit redact``: history summaries and PII masking from the shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from contextkit.cli._app import app, err, fail, out, reported
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS


@app.command()
def summarize(
    history: Annotated[Path, typer.Argument(help="conversation: JSON lines of {role, content}")],
    question: Annotated[str | None, typer.Option(help="the current question: what bears on it is kept first")] = None,
    keep_last: Annotated[int, typer.Option(help="turns kept verbatim")] = 6,
    max_tokens: Annotated[int, typer.Option(help="hard cap on the summary, in tokens")] = DEFAULT_SUMMARY_MAX_TOKENS,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary, recent turns and report as JSON")] = False,
) -> None:
    """Summarise a conversation: the last turns verbatim, older ones condensed (offline, extractive).

    Example: contextkit summarize chat.jsonl --question "When is the wedding?" --max-tokens 200
    """
    from contextkit.assembly.context_assembler import load_history
    from contextkit.compressors.history import HistorySummarizer

    with reported():
        messages = load_history(history)
        result = HistorySummarizer(keep_last=keep_last, summary_max_tokens=max_tokens).compress(messages, question)
    if as_json:
        out.print_json(json.dumps({"summary": result.summary, "recent": [m.to_dict() for m in result.recent],
                                   "report": result.report.model_dump()}))
        return
    sys.stdout.write((result.summary or "(nothing to summarise)") + "\n")
    r = result.report
    err.print(f"{r.input_tokens:,} tokens in {r.items_in} turns -> {r.output_tokens:,} tokens "
              f"(summary + {len(result.recent)} recent turns), {r.seconds * 1000:.0f} ms", highlight=False)


@app.command()
def redact(
    path: Annotated[Path, typer.Argument(help="a text file, or - for standard input")],
    as_json: Annotated[bool, typer.Option("--json", help="print the text, counts and spans (no values) as JSON")] = False,
) -> None:
    """Mask personal data and secrets in a text: e-mails, phones, cards, IBANs, IPs, API keys, national ids, dates of birth.

    The masked text goes to stdout, the counts by kind to stderr. Values are never printed.

    Example: contextkit redact support-ticket.txt > ticket.redacted.txt
    """
    from contextkit.compressors.redact import PIIRedactor

    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise fail(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise fail(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    result = PIIRedactor().redact(text)
    if as_json:
        out.print_json(json.dumps(result.to_dict()))
        return
    sys.stdout.write(result.text)
    counts = ", ".join(f"{n} {k.lower()}" for k, n in sorted(result.counts.items())) or "nothing"
    err.print(f"masked: {counts}", highlight=False)
