"""``contextkit search`` and ``contextkit info``: query an index, describe one."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from contextkit.cli._app import REDACTION, IndexOpt, JsonOpt, app, json_text, out, reported, safe

#: Manifest fields that apply to one index type only (``info`` shows them for that type).
_TYPE_FIELDS = {"hnsw_": ("hnsw", "auto"), "ivfpq_": ("ivfpq",)}
#: Fields of ``Index.info()`` not worth a row: repeated elsewhere, or internal.
_HIDDEN = frozenset({"format_version", "metric", "tokenizer"})


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    index: IndexOpt,
    k: Annotated[int, typer.Option("-k", min=1, help="how many results")] = 10,
    mode: Annotated[Literal["dense", "bm25", "hybrid"], typer.Option(
        help="dense (meaning), bm25 (words) or hybrid (both, fused)")] = "hybrid",
    filter_: Annotated[list[str] | None, typer.Option(
        "--filter", metavar="KEY=VALUE", help="key=value: source=GLOB, doc_id=ID or a metadata field (repeatable)")] = None,
    mmr: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="diversify with MMR, 0..1 (1 = relevance only) [default: off]")] = None,
    min_score: Annotated[float | None, typer.Option(help="drop results scoring below this [default: none]")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="print one JSON object (query, mode, k, hits) instead of a table")] = False,
) -> None:
    """Search an index: dense (meaning), bm25 (words) or hybrid (both, fused).

    Each call loads the index's embedding model for dense and hybrid (about a second on a CPU;
    bm25 needs none); for many queries, hold the index open in Python (README, "In Python").

    Example: contextkit search "how are exceptions chained?" --index my.ck-index -k 5 --filter source='*.md'
    """
    from contextkit.search import search_index

    for item in filter_ or []:
        if "=" not in item:
            from contextkit.cli._app import fail

            raise fail(f"--filter {item!r}: expected key=value, e.g. source='*.md' or doc_id=ID", 2)
    with reported():
        hits = search_index(index, query, k, mode=mode, filters=filter_ or None, mmr=mmr, min_score=min_score)
    if as_json:  # one object, as every other command's --json prints
        mask = REDACTION["mask"]  # with redaction on, the query is echoed as the prompt would hold it
        shown = mask(query) if mask is not None else query
        sys.stdout.write(json_text({"query": shown, "mode": mode, "k": k, "hits": [hit.to_dict() for hit in hits]},
                                   indent=2) + "\n")
        return
    table = Table(title=f"{len(hits)} results for {safe(repr(query))}", title_justify="left")
    for col in ("#", "score", "chunk", "text"):
        table.add_column(col, overflow="fold")
    for rank, hit in enumerate(hits, 1):
        snippet = safe(" ".join(hit.chunk.text.split())[:160])
        table.add_row(str(rank), f"{hit.score:.3f}", _plain(safe(hit.chunk.id)), _plain(snippet))
    out.print(table)


def _plain(text: str) -> Any:
    from rich.text import Text

    return Text(text)


@app.command()
def info(index: IndexOpt, as_json: JsonOpt = False) -> None:
    """Describe an index: model, chunk settings, counts, size on disk.

    The table shows what applies to the index's type (HNSW settings for hnsw, IVF-PQ ones for
    ivfpq) as plain values; --json gives every field, times as ISO 8601 UTC.

    Example: contextkit info --index my.ck-index --json | jq .counts
    """
    from contextkit.index import Index

    with reported(), Index.open(index, read_only=True) as idx:
        data = idx.info()
    data = _iso_times(data)
    if as_json:
        out.print_json(json.dumps(data, default=str))
        return
    table = Table(title=safe(str(data.get("path", index))), show_header=False, title_justify="left")
    for key, value in info_rows(data):
        table.add_row(key, _plain(safe(value)))
    out.print(table)


def _iso_times(data: dict[str, Any]) -> dict[str, Any]:
    """``checked_at`` (and any other epoch float of a ``*_at`` key) as ISO 8601 UTC, as the manifest's times are."""
    from datetime import UTC, datetime

    fixed = dict(data)
    for key, value in data.items():
        if key.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
            fixed[key] = datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds")
    return fixed


def info_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """``Index.info()`` as (name, plain value) rows: the settings of other index types left out,
    nested settings as ``key value, ...``, sizes readable, the model's window beside the chunk size."""
    kind = data.get("index_type", "flat")
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        prefix = next((p for p in _TYPE_FIELDS if key.startswith(p)), None)
        if key in _HIDDEN or (prefix is not None and kind not in _TYPE_FIELDS[prefix]):
            continue
        if key == "bytes_on_disk" and isinstance(value, int):
            rows.append(("size on disk", _size(value)))
        elif key == "chunker" and isinstance(value, dict):
            rows.append(("chunks", _chunker(value, data.get("embedder") or {})))
        elif isinstance(value, dict):
            rows.append((key, ", ".join(f"{k} {_value(v)}" for k, v in value.items()) or "-"))
        else:
            rows.append((key, _value(value)))
    return rows


def _chunker(chunker: dict[str, Any], embedder: dict[str, Any]) -> str:
    """``128 tokens (cl100k_base), overlap 16, no header; the model reads 254 word pieces``."""
    text = (f"{chunker.get('chunk_size')} tokens ({chunker.get('tokenizer')}), overlap {chunker.get('chunk_overlap')}, "
            + (f"header {chunker['header']!r}" if chunker.get("header") else "no header"))
    window = embedder.get("max_tokens")
    if window:
        text += f"; the model reads {window} word pieces (longer chunks: averaged windows)"
    return text


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items()) or "-"
    return str(value)


def _size(n: float) -> str:  # a byte count: an int, then a float once divided
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
