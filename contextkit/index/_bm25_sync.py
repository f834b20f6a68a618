"""Bringing a BM25 up to date with the records store by tokenising only the chunks it lacks.

Why by comparing rowids rather than by recording each add and remove: the store is the source of
truth, and a transaction rolled back (or a crash between a commit and its save) leaves records of
changes that never happened; comparing the BM25's rowids with the store's is exact whatever
happened in between, and costs one scan of an index holding the rowids (see
:func:`live_rowids`), not a read of every text. Store rowids are never given twice (``AUTOINCREMENT``) except after a rollback;
the rowids added since the last update (``Index.add_chunks`` notes them) are tokenised again
whatever the comparison says, so a rowid given again to another text is never served stale.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from contextkit.index._bm25 import BM25Config, BM25Index

if TYPE_CHECKING:
    from contextkit.index._manifest import IndexManifest

__all__ = ["bm25_text_sql", "saved_bm25", "synced_bm25", "title_above_sql"]

#: What goes above a chunk's text in BM25 with ``BM25Config.title_every_chunk``: its document's title and
#: a blank line, for every chunk after the first (whose text starts with the title), when the title is set
#: and the chunk's text does not already hold it (a ``{title}`` header, say); else nothing.
_TITLE_ABOVE = ("CASE WHEN ordinal > 0 AND json_valid(metadata) AND json_type(metadata, '$.title') = 'text' "
                "AND json_extract(metadata, '$.title') != '' AND instr(header || text, json_extract(metadata, '$.title')) = 0 "
                "THEN json_extract(metadata, '$.title') || char(10, 10) ELSE '' END")


def title_above_sql(titled: bool) -> str:
    """The SQL expression (over the ``chunks`` table) of what BM25 puts above a chunk's ``header || text``."""
    return _TITLE_ABOVE if titled else "''"


def bm25_text_sql(titled: bool) -> str:
    """The SQL expression (over the ``chunks`` table) giving the text BM25 indexes of a chunk."""
    return f"({title_above_sql(titled)}) || header || text"


def saved_bm25(path: Path, manifest: IndexManifest) -> BM25Index | None:
    """The BM25 that ``manifest`` (of the index at ``path``) names, when it can be served for that
    generation: readable, stamped with its generation, with its BM25 settings. Its files' checksums
    are carried over from the manifest (a later save that links them records the same ones)."""
    sums = {name[5:]: rec for name, rec in manifest.checksums.items() if name.startswith("bm25/")}
    loaded = BM25Index.load(path / manifest.file("bm25"), sums)
    if loaded is None or loaded.generation != manifest.generation or loaded.config != BM25Config(**manifest.bm25):
        return None
    return loaded


def synced_bm25(bm25: BM25Index, db: sqlite3.Connection, added: Iterable[int], generation: int) -> BM25Index:
    """``bm25`` brought to the chunks of ``db`` now, stamped ``generation``: the same object when no chunk
    changed, else a new one with the chunks it lacks (and ``added``, rowids added since it was made)
    tokenised into a delta segment. ``bm25`` must hold postings (not bm25s's layout)."""
    live = live_rowids(db)
    have = np.sort(bm25.rowids)
    new = np.setdiff1d(live, have, assume_unique=True)
    again = np.fromiter(added, dtype=np.int64)
    if len(again):
        new = np.union1d(new, np.intersect1d(again, live))
    if not len(new) and np.array_equal(have, live) and np.array_equal(have, bm25.rowids):
        bm25.generation = generation  # the same chunks: only the stamp moves
        return bm25
    return bm25.updated(new, chunk_texts(db, new, bm25.config.title_every_chunk), live, generation)


def live_rowids(db: sqlite3.Connection) -> np.ndarray:
    """Every chunk's rowid, ascending. Joined into one string by SQLite, over the smallest index that
    holds them (the table itself holds the texts): several times faster than a
    Python row per chunk."""
    joined = db.execute("SELECT group_concat(rowid) FROM chunks").fetchone()[0]
    if not joined:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.fromstring(joined, dtype=np.int64, sep=","))


def chunk_texts(db: sqlite3.Connection, rowids: np.ndarray, titled: bool = False) -> list[str]:
    """``header || text`` of these chunks (``titled``: see :func:`bm25_text_sql`), in their order: what a BM25
    build reads of each (see ``RecordStore.iter_chunk_texts``)."""
    found: dict[int, str] = {}
    ids = [int(i) for i in rowids]
    for lo in range(0, len(ids), 500):
        part = ids[lo: lo + 500]
        marks = ",".join("?" * len(part))
        found.update(db.execute(f"SELECT rowid, {bm25_text_sql(titled)} FROM chunks WHERE rowid IN ({marks})", part))
    return [found[i] for i in ids]
