"""``contextkit search`` and ``contextkit info``: query an index, describe one."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.table import Table

from contextkit.cli._app import IndexOpt, JsonOpt, app, out, reported


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    index: IndexOpt,
    k: Annotated[int, typer.Option("-k", help="how many results")] = 10,
    mode: Annotated[str, typer.Option(help="dense, bm25 or hybrid")] = "hybrid",
    filter_: Annotated[Optional[list[str]], typer.Option(
        "--filter", help="key=value: source=GLOB, doc_id=ID or a metadata field (repeatable)")] = None,
    mmr: Annotated[Optional[float], typer.Option(help="diversify with MMR, 0..1 (1 = relevance only)")] = None,
    min_score: Annotated[Optional[float], typer.Option(help="drop results scoring below this")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search an index: dense (meaning), bm25 (words) or hybrid (both, fused).

    Example: contextkit search "how are exceptions chained?" --index my.ck-index -k 5 --filter source='*.md'
    """
    from contextkit.search import search_index

    with reported():
        hits = search_index(index, query, k, mode=mode, filters=filter_ or None, mmr=mmr, min_score=min_score)
    if as_json:
        for hit in hits:
            sys.stdout.write(json.dumps(hit.to_dict(), ensure_ascii=False) + "\n")
        return
    table = Table(title=f"{len(hits)} results for {query!r}")
    for col in ("#", "score", "chunk", "text"):
        table.add_column(col, overflow="fold")
    for rank, hit in enumerate(hits, 1):
        snippet = " ".join(hit.chunk.text.split())[:160]
        table.add_row(str(rank), f"{hit.score:.3f}", hit.chunk.id, snippet)
    out.print(table)


@app.command()
def info(index: IndexOpt, as_json: JsonOpt = False) -> None:
    """Describe an index: model, chunk settings, counts, size on disk.

    Example: contextkit info --index my.ck-index --json | jq .chunks
    """
    from contextkit.index import Index

    with reported(), Index.open(index, read_only=True) as idx:
        data = idx.info()
    if as_json:
        out.print_json(json.dumps(data))
        return
    table = Table(title=str(index), show_header=False)
    for key, value in data.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    out.print(table)
