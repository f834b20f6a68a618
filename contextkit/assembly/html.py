"""One self-contained HTML page per assembly: the token summary and budget chart, the prompt with
its sections coloured, then every item left out or cut with its reason.

No script, no external file, no font: the page opens anywhere, offline, and is safe
to share (all prompt and document text is HTML-escaped; it is untrusted). The page shows what
the report and the prompt hold, masked when the assembly redacted; the title, the caller's, is
masked too when the report records a redaction (it often quotes the question).

A real prompt leaves out hundreds of passages and holds text no one wrapped (URLs, paths, base64,
minified code), so the page is built to stay readable and bounded: the prompt comes before the list
of what was left out, which is collapsed (``<details>``, its counts by status and reason in the summary)
and lists the first 50 (``_LISTED``; the JSON report lists them all); a long section shows both ends
and a long table cell its start and end; untrusted text wraps anywhere and wide tables scroll inside
their own box, so nothing widens the page.
"""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from contextkit.assembly._states import ItemStatus
from contextkit.assembly.report import AssemblyReport, ItemReport

if TYPE_CHECKING:  # pragma: no cover - loaded only for a redacted report
    from contextkit.compressors.base import Redactor

__all__ = ["render_html", "write_html"]

_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
_PREVIEW = 20_000  # characters of a long section shown at each end; the middle is summarised
_LISTED = 50  # items left out or cut listed on the page; the JSON report has every one
_CELL = 300  # characters of a table cell (an id, a path) past which its middle is elided


# Untrusted text (the title, names, ids, paths, the prompt) wraps anywhere, so no unbroken token, URL or
# path widens the page; numbers do not wrap; a table wider than the page scrolls in its own box.
_CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:100%;overflow-wrap:anywhere}
h1{font-size:20px;overflow-wrap:anywhere} h2{font-size:16px;margin-top:28px}
p,li,summary{overflow-wrap:anywhere} summary{cursor:pointer;margin:8px 0}
svg{display:block;max-width:100%;height:auto}
.wide{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:8px 0;max-width:100%} table.items{width:100%;table-layout:fixed}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap;overflow-wrap:normal}
.sw{display:inline-block;width:10px;height:10px;margin-right:6px}
pre.prompt{white-space:pre-wrap;overflow-wrap:anywhere;word-break:break-word;max-width:100%;
font:12px/1.4 ui-monospace,monospace;border:1px solid #ddd;padding:8px}
.sec{display:block;border-left:6px solid;padding-left:8px;margin:2px 0} .gap{display:block;color:#888;font-style:italic}
.gap-inline,.more{color:#888;font-style:italic}
"""


def _colour(i: int) -> str:
    return _COLOURS[i % len(_COLOURS)]


def _cell(text: str | None) -> str:
    """``text`` escaped, its middle elided past ``_CELL`` characters: a 2,000-character id or path must
    not make one row of the table the size of a page (both ends stay, the distinguishing parts)."""
    text = text or ""
    if len(text) > _CELL:
        half = _CELL // 2
        return f"{html.escape(text[:half])}<span class=gap-inline>…</span>{html.escape(text[-half:])}"
    return html.escape(text)


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
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="token budget by section">{"".join(parts)}</svg>')


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
    return f"<div class=wide><table>{head}{''.join(rows)}</table></div>"


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
    """Collapsed, after the prompt: a count by status and reason, then the first ``_LISTED`` items."""
    rows = [i for i in report.items if i.status != ItemStatus.INCLUDED.value]
    if not rows:
        return "<p>Nothing was left out or cut.</p>"
    listed = "".join(
        f"<tr><td>{_cell(i.id)}</td><td>{_cell(i.section)}</td><td>{_cell(i.source)}</td>"
        f"<td class=n>{'' if i.score is None else f'{i.score:.4f}'}</td><td>{html.escape(i.status)}</td>"
        f"<td>{_cell(i.reason)}</td><td>{_cell(i.detail)}</td></tr>" for i in rows[:_LISTED])
    head = ('<colgroup><col style="width:16%"><col style="width:10%"><col style="width:30%"><col style="width:7%">'
            '<col style="width:9%"><col style="width:11%"><col style="width:17%"></colgroup>'
            "<tr><th>item</th><th>section</th><th>source</th><th>score</th><th>status</th><th>reason</th>"
            "<th>detail</th></tr>")
    more = len(rows) - _LISTED
    tail = (f'<p class=more>… and {more:,} more, not listed here: the JSON report (<code>--report</code>, '
            f"<code>AssemblyReport.items</code>) lists every item.</p>" if more > 0 else "")
    return (f"<details><summary>{_counts(rows)}</summary>"
            f"<div class=wide><table class=items>{head}{listed}</table></div>{tail}</details>")


def _counts(rows: list[ItemReport]) -> str:
    """``1,210 items: dropped (budget) 1,180 · merged 30``: what the collapsed list holds, at a glance."""
    by = Counter(f"{i.status} ({i.reason})" if i.reason else i.status for i in rows)
    parts = " · ".join(f"{html.escape(k)} {n:,}" for k, n in by.most_common())
    return f"{len(rows):,} item{'' if len(rows) == 1 else 's'}: {parts}"


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
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<style>{_CSS}</style></head><body>
<h1>{html.escape(title)}</h1>
<p><b>{report.tokens:,}</b> of {report.budget:,} tokens ({report.budget_used_percent:.2f}%){model}{cost} ·
tokenizer {html.escape(report.tokenizer)}{'' if report.exact_tokenizer else ' (an estimate for this model)'} ·
{report.format} · {report.seconds * 1000:.0f} ms · sha256 {report.prompt_sha256[:16]}…</p>
<h2>Token budget by section</h2>
{_budget_svg(report)}
{_legend(report)}
{f"<h2>Compressors</h2><ul>{compression}</ul>" if compression else ""}
<h2>The prompt</h2>
{_prompt_html(prompt, report)}
<h2>Left out or cut</h2>
{_left_out(report)}
</body></html>
"""


def write_html(path: str | Path, prompt: str, report: AssemblyReport, title: str = "contextkit assembly",
               redactor: Redactor | None = None) -> Path:
    """Write the page atomically (a temporary file, then a rename)."""
    from contextkit.core.atomic import write_text_atomic

    return write_text_atomic(path, render_html(prompt, report, title, redactor))
