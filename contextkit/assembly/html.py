"""One self-contained HTML page per assembly: the prompt with its sections coloured,
the token budget as a chart, and every item left out with its reason.

No script, no external file, no font: the page opens anywhere, offline, and is safe
to share (all prompt and document text is HTML-escaped; it is untrusted). The page shows what
the report and the prompt hold, masked when the assembly redacted; the title, the caller's, is
masked too when the report records a redaction (it often quotes the question).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from contextkit.assembly._states import ItemStatus
from contextkit.assembly.report import AssemblyReport

if TYPE_CHECKING:  # pragma: no cover - loaded only for a redacted report
    from contextkit.compressors.base import Redactor

__all__ = ["render_html", "write_html"]

_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
_PREVIEW = 20_000  # characters of a long section shown at each end; the middle is summarised


def _colour(i: int) -> str:
    return _COLOURS[i % len(_COLOURS)]


def _budget_svg(report: AssemblyReport, width: int = 900, height: int = 46) -> str:
    """A stacked bar: each section's tokens, then the budget left unused."""
    parts, x = [], 0.0
    for i, s in enumerate(report.sections):
        w = width * s.tokens / report.budget
        title = html.escape(f"{s.name}: {s.tokens:,} tokens")
        parts.append(f'<rect x="{x:.2f}" y="0" width="{max(w, 0):.2f}" height="{height}" '
                     f'fill="{_colour(i)}"><title>{title}</title></rect>')
        x += w
    free = report.budget - report.tokens
    parts.append(f'<rect x="{x:.2f}" y="0" width="{max(width - x, 0):.2f}" height="{height}" fill="#e6e6e6">'
                 f'<title>unused: {free:,} tokens</title></rect>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="token budget by section">{"".join(parts)}</svg>')


def _legend(report: AssemblyReport) -> str:
    rows = []
    for i, s in enumerate(report.sections):
        share = 100.0 * s.tokens / report.budget
        rows.append(f'<tr><td><span class="sw" style="background:{_colour(i)}"></span>{html.escape(s.name)}</td>'
                    f"<td>{html.escape(s.role)}</td><td class=n>{s.tokens:,}</td><td class=n>{share:.2f}%</td>"
                    f"<td>{html.escape(s.status)}{' (' + html.escape(s.reason) + ')' if s.reason else ''}</td>"
                    f"<td class=n>{s.items_included}</td><td class=n>{s.items_truncated}</td>"
                    f"<td class=n>{s.items_dropped}</td></tr>")
    head = ("<tr><th>section</th><th>role</th><th>tokens</th><th>of budget</th><th>status</th>"
            "<th>in</th><th>cut</th><th>out</th></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _prompt_html(prompt: str, report: AssemblyReport) -> str:
    pieces = []
    for i, s in enumerate(report.sections):
        text = prompt[s.start:s.end]
        if len(text) > 2 * _PREVIEW:
            hidden = len(text) - 2 * _PREVIEW
            body = (html.escape(text[:_PREVIEW]) + f'<span class="gap">[… {hidden:,} characters of '
                    f'{html.escape(s.name)} not shown here …]</span>' + html.escape(text[-_PREVIEW:]))
        else:
            body = html.escape(text)
        pieces.append(f'<span class="sec" style="border-left-color:{_colour(i)};background:{_colour(i)}14" '
                      f'title="{html.escape(s.name)}: {s.tokens:,} tokens">{body}</span>')
    return f'<pre class="prompt">{"".join(pieces)}</pre>'


def _left_out(report: AssemblyReport) -> str:
    rows = [i for i in report.items if i.status != ItemStatus.INCLUDED.value]
    if not rows:
        return "<p>Nothing was left out or cut.</p>"
    body = "".join(
        f"<tr><td>{html.escape(i.id)}</td><td>{html.escape(i.section)}</td><td>{html.escape(i.source)}</td>"
        f"<td class=n>{'' if i.score is None else f'{i.score:.4f}'}</td><td>{html.escape(i.status)}</td>"
        f"<td>{html.escape(i.reason or '')}</td><td>{html.escape(i.detail or '')}</td></tr>" for i in rows)
    head = ("<tr><th>item</th><th>section</th><th>source</th><th>score</th><th>status</th><th>reason</th>"
            "<th>detail</th></tr>")
    return f"<table>{head}{body}</table>"


def _shown_title(title: str, report: AssemblyReport, redactor: Redactor | None) -> str:
    """``title``, masked by ``redactor`` (the assembly's session, for the same placeholders) or, when the
    report records a redaction and no session is given, by a new one: a redacted page shows no value."""
    if redactor is None:
        from contextkit.compressors.redact import PIIRedactor

        if not any(c.compressor == PIIRedactor.name for c in report.compression):
            return title
        redactor = PIIRedactor()
    return redactor.mask(title)


def render_html(prompt: str, report: AssemblyReport, title: str = "contextkit assembly",
                redactor: Redactor | None = None) -> str:
    """The page for ``prompt`` and its ``report``; ``redactor``: the assembly's session, to mask ``title``."""
    title = _shown_title(title, report, redactor)
    cost = "" if report.estimated_cost_usd is None else f" · ~${report.estimated_cost_usd:.4f} input"
    model = f" · {html.escape(report.model)}" if report.model else ""
    compression = "".join(
        f"<li>{html.escape(c.compressor)}: {c.input_tokens:,} → {c.output_tokens:,} tokens"
        f"{' · removed ' + html.escape(str(c.removed)) if c.removed else ''}"
        f"{' · fallback: ' + html.escape(c.fallback) if c.fallback else ''}</li>" for c in report.compression)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<style>
body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222}} h1{{font-size:20px}} h2{{font-size:16px;margin-top:28px}}
table{{border-collapse:collapse;margin:8px 0}} td,th{{border:1px solid #ddd;padding:3px 8px;text-align:left}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}} .sw{{display:inline-block;width:10px;height:10px;margin-right:6px}}
pre.prompt{{white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,monospace;border:1px solid #ddd;padding:8px}}
.sec{{display:block;border-left:6px solid;padding-left:8px;margin:2px 0}} .gap{{display:block;color:#888;font-style:italic}}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p><b>{report.tokens:,}</b> of {report.budget:,} tokens ({report.budget_used_percent:.2f}%){model}{cost} ·
tokenizer {html.escape(report.tokenizer)}{'' if report.exact_tokenizer else ' (an estimate for this model)'} ·
{report.format} · {report.seconds * 1000:.0f} ms · sha256 {report.prompt_sha256[:16]}…</p>
<h2>Token budget by section</h2>
{_budget_svg(report)}
{_legend(report)}
{f"<h2>Compressors</h2><ul>{compression}</ul>" if compression else ""}
<h2>Left out or cut</h2>
{_left_out(report)}
<h2>The prompt</h2>
{_prompt_html(prompt, report)}
</body></html>
"""


def write_html(path: str | Path, prompt: str, report: AssemblyReport, title: str = "contextkit assembly",
               redactor: Redactor | None = None) -> Path:
    """Write the page atomically (a temporary file, then a rename)."""
    from contextkit.core.atomic import write_text_atomic

    return write_text_atomic(path, render_html(prompt, report, title, redactor))
