"""``verify``'s checks that bind each value to its row (see :mod:`.verify` for when each runs).

Why: checksums prove a file is the one the last save wrote, not that it is right. A FAISS file
whose ids were permuted, or a BM25 folder whose rowids were, passes its checksums once they are
recomputed, and so would a changed chunk text in ``store.sqlite``, which has no checksum at all.
These checks compare the values themselves: each FAISS id's vector with that row's vector in the
store, BM25 with a BM25 built afresh from the store's texts, each chunk's header and text with the
hash stored beside them, and the manifest's counts with the store's.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

import numpy as np

__all__ = ["bm25_differs", "counts_differ", "faiss_rows_differ", "text_hash_mismatches"]


def faiss_rows_differ(index: Any, db: sqlite3.Connection, dim: int, searched: np.ndarray | None = None) -> str | None:
    """Whether any FAISS id holds a vector other than its row's in the store (None: every one matches,
    or the kind cannot give its vectors back, as IVF cannot). ``searched``: the ids a search can return
    (an HNSW graph keeps removed vectors, skipped at search), all of them when None."""
    import faiss

    if not hasattr(index, "id_map"):
        return None
    inner = faiss.downcast_index(index.index)
    if not isinstance(inner, (faiss.IndexFlat, faiss.IndexHNSWFlat)):
        return None
    ids = faiss.vector_to_array(index.id_map)
    if not len(ids):
        return None
    held = inner.reconstruct_n(0, inner.ntotal)
    order = np.argsort(ids, kind="stable")
    if searched is not None:
        order = order[np.isin(ids[order], searched)]
    stored = {}
    cur = db.execute("SELECT c.rowid, v.vector FROM chunks c JOIN vectors v ON v.key = c.vector_key ORDER BY c.rowid")
    for rowid, blob in cur:
        stored[int(rowid)] = blob
    bad = 0
    for pos in order:
        blob = stored.get(int(ids[pos]))
        if blob is None or len(blob) != 4 * dim or not np.allclose(
                np.frombuffer(blob, dtype=np.float32), held[pos], atol=1e-5):
            bad += 1
    return f"{bad} of {len(order)} FAISS ids hold another row's vector (ids permuted or vectors changed)" if bad else None


def bm25_differs(loaded: Any, db: sqlite3.Connection) -> str | None:
    """Whether the saved BM25 differs from one built afresh from the store's texts (its rowids in order,
    its vocabulary and every score); None when they are the same."""
    from contextkit.index._bm25 import BM25Index

    rowids, texts = [], []
    sql = "SELECT rowid, CAST(header AS BLOB), CAST(text AS BLOB) FROM chunks ORDER BY rowid"
    for rowid, header, text in db.execute(sql):  # bytes: a damaged text is the store check's to report
        rowids.append(rowid)
        texts.append(bytes(header or b"").decode("utf-8", "replace") + bytes(text or b"").decode("utf-8", "replace"))
    fresh = BM25Index(loaded.config)
    fresh.build(np.asarray(rowids, dtype=np.int64), texts, loaded.generation)
    if not np.array_equal(loaded.rowids, fresh.rowids):
        return "its rowids are not the store's chunks in order (permuted or changed)"
    if (loaded._bm25 is None) != (fresh._bm25 is None):
        return "an empty BM25 for a store with chunks, or the reverse"
    if fresh._bm25 is None:
        return None
    # Term ids follow the order of a set (string hashing differs per process): compare term by term.
    have, want = _columns(loaded._bm25), _columns(fresh._bm25)
    if have.keys() != want.keys():
        return "its vocabulary is not the store's texts' terms"
    for term, (docs, scores) in want.items():
        got_docs, got_scores = have[term]
        if not np.array_equal(got_docs, docs) or not np.allclose(got_scores, scores, rtol=1e-6, atol=0):
            return f"its postings of {term!r} are not those of the store's texts (doc ids or scores changed)"
    return None


def _columns(model: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each term's documents and scores in a bm25s model."""
    indptr, indices, data = (np.asarray(model.scores[k]) for k in ("indptr", "indices", "data"))
    return {term: (indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]])
            for term, i in model.vocab_dict.items() if 0 <= i < len(indptr) - 1}


def text_hash_mismatches(db: sqlite3.Connection) -> tuple[int, list[str]]:
    """Chunks whose header and text differ from the hash stored with them: how many, and the first few
    as ``chunk id (file)``. Read as bytes, so invalid UTF-8 is found rather than raised."""
    sql = ("SELECT c.id, d.file, CAST(c.header AS BLOB), CAST(c.text AS BLOB), c.text_sha FROM chunks c "
           "LEFT JOIN documents d ON d.id = c.doc_id WHERE c.text_sha IS NOT NULL")
    try:
        rows = db.execute(sql)
    except sqlite3.OperationalError:  # a store made before chunk hashes
        return 0, []
    bad, named = 0, []
    for cid, file, header, text, sha in rows:
        digest = hashlib.sha256(bytes(header or b"") + b"\0" + bytes(text or b"")).hexdigest()[:32]
        if digest != sha:
            bad += 1
            if len(named) < 3:
                named.append(f"{cid} ({file})")
    return bad, named


def counts_differ(manifest_counts: dict[str, int], db: sqlite3.Connection) -> str | None:
    """The manifest's counts against the store's own, when they describe the same generation."""
    q = lambda sql: int(db.execute(sql).fetchone()[0] or 0)
    actual = {"files": q("SELECT COUNT(*) FROM files"), "documents": q("SELECT COUNT(*) FROM documents"),
              "chunks": q("SELECT COUNT(*) FROM chunks"), "tokens": q("SELECT SUM(tokens) FROM chunks"),
              "vectors": q("SELECT COUNT(*) FROM vectors")}
    wrong = [f"{k} {manifest_counts[k]} (the store has {actual[k]})" for k in actual
             if k in manifest_counts and manifest_counts[k] != actual[k]]
    return "counts " + ", ".join(wrong) if wrong else None
