"""``verify`` and ``repair`` of an index in PostgreSQL: what can drift in the tables, and what can be rebuilt.

The database keeps its own pages whole (checksums, WAL, ``amcheck`` are the server's business, and its
operators'); what contextkit checks is what only it knows: every chunk still matches the hash of its
text, every chunk belongs to a document, files with documents were ingested to their end, and the
BM25 term counts are those of the chunk texts (a fresh cut by the index's analyzer). The texts, offsets
and vectors are the source of truth: postings are derived and rebuilt from them (``repair``); a chunk
whose text no longer matches its hash cannot be, and its file must be ingested again.

Returns plain tuples; :mod:`.verify` and :mod:`.repair` turn them into their reports (so neither
imports this module's callers back).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from contextkit.core.errors import ContextkitError
from contextkit.index._pg_index import PgIndex
from contextkit.index._pg_store import bm25_text
from contextkit.index._store import text_sha

__all__ = ["database_checks", "repair_database"]

#: ``(what, status, detail, repairable)``, as :class:`.verify.FileCheck` takes them.
Check = tuple[str, str, str, bool | None]
#: Chunks whose text and BM25 counts a quick check reads (a full one reads every chunk).
QUICK_SAMPLE = 2000


def database_checks(location: object, full: bool = True) -> tuple[list[Check], int | None]:
    """The checks of the index at ``location`` (a DSN) and the generation they read."""
    try:
        index = PgIndex.open(str(location) if not isinstance(location, str) else location, read_only=True)
    except ContextkitError as exc:
        return [("database", "missing", str(exc), False)], None
    try:
        with index.snapshot():
            checks: list[Check] = [("database", "ok", f"schema {index.dsn.schema}, model {index.manifest.model}", None)]
            checks += _chunk_checks(index, full)
            checks += _file_checks(index)
            return checks, index.generation
    finally:
        index.close()


def _rows(index: PgIndex, full: bool) -> list[Any]:
    sample = "" if full else f"ORDER BY random() LIMIT {QUICK_SAMPLE}"
    return list(index.store.db.execute(
        f"SELECT rowid, id, ordinal, header, text, metadata, text_sha, bm25_len FROM chunks {sample}").fetchall())


def _chunk_checks(index: PgIndex, full: bool) -> list[Check]:
    import json

    from contextkit.core.records import Chunk

    rows = _rows(index, full)
    db = index.store.db
    damaged = [cid for _, cid, _, header, text, _, sha, _ in rows if sha is not None and sha != text_sha(header, text)]
    orphans = db.execute("SELECT count(*) FROM chunks c WHERE NOT EXISTS "
                         "(SELECT 1 FROM documents d WHERE d.id = c.doc_id)").fetchone()[0]
    stale = 0
    by_rowid = {int(r[0]): r for r in rows}
    postings: dict[int, Counter[str]] = {r: Counter() for r in by_rowid}
    lengths: dict[int, set[int]] = {r: set() for r in by_rowid}
    for rowid, term, tf, dl in db.execute("SELECT rowid, term, tf, dl FROM postings WHERE rowid = ANY(%s)",
                                          (list(by_rowid),)).fetchall():
        postings[int(rowid)][term] = int(tf)
        lengths[int(rowid)].add(int(dl))
    titled = index.store._titled
    for rowid, (_, cid, ordinal, header, text, meta, _, length) in by_rowid.items():
        chunk = Chunk(id=cid, doc_id="", ordinal=ordinal, text=text, start=0, end=len(text), token_count=0,
                      header=header, metadata=json.loads(meta))
        terms = index.bm25.terms([bm25_text(chunk, titled)])[0]
        stale += Counter(terms) != postings[rowid] or len(terms) != length or not lengths[rowid] <= {length}
    read = f"{len(rows):,} chunks read" + ("" if full else " (a sample)")
    checks: list[Check] = []
    checks.append(("chunks", "corrupt", f"{len(damaged)} chunk(s) no longer match their hash, e.g. {damaged[0]!r}: "
                   "re-ingest their files", False) if damaged else ("chunks", "ok", read, None))
    if orphans:
        checks.append(("chunks", "stale", f"{orphans} chunk(s) of no document", True))
    checks.append(("postings", "stale", f"{stale} chunk(s) whose BM25 counts are not their text's", True)
                  if stale else ("postings", "ok", f"BM25 counts of {len(rows):,} chunks", None))
    kept = db.execute("SELECT coalesce(sum(chunks), 0), coalesce(sum(terms), 0) FROM totals").fetchone()
    real = db.execute("SELECT count(*), coalesce(sum(bm25_len), 0) FROM chunks").fetchone()
    checks.append(("totals", "ok", f"{int(real[0]):,} chunks, {int(real[1]):,} BM25 terms", None)
                  if tuple(map(int, kept)) == tuple(map(int, real)) else
                  ("totals", "stale", f"kept {int(kept[0])} chunks and {int(kept[1])} terms, the chunks hold "
                   f"{int(real[0])} and {int(real[1])}", True))
    missing = db.execute("SELECT count(*) FROM chunks c WHERE NOT EXISTS "
                         "(SELECT 1 FROM embeddings e WHERE e.rowid = c.rowid)").fetchone()[0]
    if missing:
        checks.append(("embeddings", "missing", f"{missing} chunk(s) without a vector: re-ingest their files", False))
    return checks


def _file_checks(index: PgIndex) -> list[Check]:
    unfinished = index.store.unfinished_files()
    if unfinished:
        return [("files", "unfinished", f"{len(unfinished)} file(s) not ingested to their end, e.g. "
                 f"{unfinished[0]!r}: run the ingest again", None)]
    return [("files", "ok", f"{len(index.store.file_records()):,} files", None)]


def repair_database(location: object) -> list[tuple[str, str, str]]:
    """Rebuild the BM25 counts of every chunk from its text and drop chunks of no document, in one
    transaction; ``(what, action, detail)`` of what was done."""
    index = PgIndex.open(str(location) if not isinstance(location, str) else location)
    try:
        with index.transaction():
            db = index.store.db
            orphans = db.execute("DELETE FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM documents d "
                                 "WHERE d.id = c.doc_id) RETURNING rowid").fetchall()
            db.execute("DELETE FROM postings")
            n = 0
            for rowids, texts in index.store.iter_chunk_texts(titled=index.store._titled):
                terms = index.bm25.terms(texts)
                rows = [(t, int(r), tf, len(ts)) for r, ts in zip(rowids, terms) for t, tf in Counter(ts).items()]
                with db.cursor() as cur, cur.copy("COPY postings (term, rowid, tf, dl) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
                with db.cursor() as cur:
                    cur.executemany("UPDATE chunks SET bm25_len = %s WHERE rowid = %s",
                                    [(len(ts), int(r)) for r, ts in zip(rowids, terms)])
                n += len(rowids)
            db.execute("DELETE FROM totals")
            db.execute("INSERT INTO totals (chunks, terms) SELECT count(*), coalesce(sum(bm25_len), 0) FROM chunks")
    finally:
        index.close()
    actions = [("postings", "rebuilt", f"BM25 counts of {n:,} chunks from their texts, and their totals")]
    if orphans:
        actions.append(("chunks", "removed", f"{len(orphans)} chunk(s) of no document"))
    return actions
