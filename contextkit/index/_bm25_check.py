"""``verify``'s check of a saved BM25 against one built afresh from the store's texts (full verify only).

Why: checksums prove the files are those the last save wrote, not that they are right. A BM25
whose rowids were permuted, or whose counts were changed, passes its checksums once they are
recomputed. This compares what a query reads: the live chunks in order, each one's length, and
every term's (chunk, count) postings, with those of a fresh build. Deltas and removed chunks kept
in segments are not differences (a fresh build has none): only what is live is compared.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from contextkit.index import _bm25_legacy as legacy
from contextkit.index._bm25 import BM25Index
from contextkit.index._bm25_postings import Postings
from contextkit.index._bm25_sync import title_above_sql

__all__ = ["bm25_differs"]


def bm25_differs(loaded: BM25Index, db: sqlite3.Connection) -> str | None:
    """What differs between ``loaded`` and a BM25 built afresh from ``db``'s texts; None when nothing does."""
    rowids, texts = [], []
    above = title_above_sql(loaded.config.title_every_chunk)  # what the build put above each text
    sql = f"SELECT rowid, CAST(({above}) AS BLOB), CAST(header AS BLOB), CAST(text AS BLOB) FROM chunks ORDER BY rowid"
    for rowid, *parts in db.execute(sql):  # bytes: a damaged text is the store check's to report
        rowids.append(rowid)
        texts.append("".join(bytes(part or b"").decode("utf-8", "replace") for part in parts))
    ids = np.asarray(rowids, dtype=np.int64)
    if not np.array_equal(loaded.rowids, ids):
        return "its rowids are not the store's chunks in order (permuted or changed)"
    if loaded.legacy:
        return _legacy_differs(loaded, texts)
    fresh = BM25Index(loaded.config)
    fresh.build(ids, texts, loaded.generation)
    assert loaded.postings is not None and fresh.postings is not None
    if not np.array_equal(loaded.postings.doclen, fresh.postings.doclen):
        return "its chunk lengths are not those of the store's texts"
    return _postings_differ(loaded.postings, fresh.postings)


def _postings_differ(have: Postings, want: Postings) -> str | None:
    """Every live posting of ``have`` against ``want`` (a fresh build: one segment, no removed chunks)."""
    vocab = have.vocabulary()
    fresh_id = want.segments[0].term_ids
    rename = np.array([fresh_id.get(t, -1) for t in vocab], dtype=np.int64)
    terms, where, counts = [], [], []
    for seg, pos in zip(have.segments, have.positions):
        term_of = np.repeat(np.arange(seg.n_terms, dtype=np.int64), np.diff(seg.indptr))
        g = pos[seg.indices]
        keep = g >= 0
        terms.append(rename[term_of[keep]])
        where.append(g[keep])
        counts.append(seg.tf[keep])
    t, g, c = np.concatenate(terms), np.concatenate(where), np.concatenate(counts)
    if len(t) and int(t.min()) < 0:
        return f"its vocabulary holds {vocab[int(np.flatnonzero(rename < 0)[0])]!r}, which no text of the store has"
    order = np.lexsort((g, t))
    t, g, c = t[order], g[order], c[order]
    seg = want.segments[0]
    w_terms = np.repeat(np.arange(seg.n_terms, dtype=np.int64), np.diff(seg.indptr))
    if len(t) != len(w_terms) or not (np.array_equal(t, w_terms) and np.array_equal(g, seg.indices)
                                      and np.array_equal(c, seg.tf)):
        bad = _first_difference(t, g, c, w_terms, seg.indices, seg.tf)
        return f"its postings of {seg.terms[bad]!r} are not those of the store's texts (chunks or counts changed)"
    return None


def _first_difference(t: np.ndarray, g: np.ndarray, c: np.ndarray, wt: np.ndarray, wg: np.ndarray,
                      wc: np.ndarray) -> int:
    """The fresh term id of the first posting that differs (for the message)."""
    n = min(len(t), len(wt))
    diff = np.flatnonzero((t[:n] != wt[:n]) | (g[:n] != wg[:n]) | (c[:n] != wc[:n]))
    at = int(diff[0]) if len(diff) else n - 1 if n else 0
    return int(wt[min(at, len(wt) - 1)]) if len(wt) else 0


def _legacy_differs(loaded: BM25Index, texts: list[str]) -> str | None:
    """A folder in bm25s's layout against a bm25s model built afresh (term ids follow the order of a set,
    which string hashing changes per process: compared term by term)."""
    cfg = loaded.config
    have = legacy.columns(loaded._legacy)
    want = legacy.columns(legacy.bm25s_model(loaded.terms(texts), cfg.k1, cfg.b, cfg.method)) if texts else {}
    if have.keys() != want.keys():
        return "its vocabulary is not the store's texts' terms"
    for term, (docs, scores) in want.items():
        got_docs, got_scores = have[term]
        if not np.array_equal(got_docs, docs) or not np.allclose(got_scores, scores, rtol=1e-6, atol=0):
            return f"its postings of {term!r} are not those of the store's texts (doc ids or scores changed)"
    return None
