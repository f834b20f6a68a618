"""``verify``'s checks that bind each value to its row (see :mod:`.verify` for when each runs).

Why: checksums prove a file is the one the last save wrote, not that it is right. A FAISS file
whose ids were permuted, or a BM25 folder whose rowids were, passes its checksums once they are
recomputed, and so would a changed chunk text in ``store.sqlite``, which has no checksum at all.
These checks compare the values themselves: each FAISS id's vector with that row's vector in the
store (BM25 against a fresh build is :mod:`._bm25_check`), each chunk's header and text with the
hash stored beside them, and the manifest's counts with the store's.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

import numpy as np

__all__ = ["counts_differ", "faiss_rows_differ", "ivf_lists_differ", "text_hash_mismatches"]


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


def ivf_lists_differ(index: Any, ids: np.ndarray) -> str | None:
    """Whether an IVF-PQ build's lists hold other rowids than ``vectors.ids.npy`` (``ids``, sorted) says; None
    when they are the same. Why: each candidate a list gives is looked up in ``ids``; a list id missing there
    was served as another chunk's row (or read past the float16 file)."""
    import faiss

    from contextkit.index._faiss_kinds import list_ids

    listed = np.sort(list_ids(faiss.extract_index_ivf(index)))
    if np.array_equal(listed, ids):
        return None
    return f"its IVF lists hold {len(listed)} rowids, not the {len(ids)} of vectors.ids.npy"


def text_hash_mismatches(db: sqlite3.Connection) -> tuple[int, list[str]]:
    """Chunks whose header and text differ from the hash stored with them: how many, and the first few
    as ``chunk id (file)``. Read as bytes, so invalid UTF-8 is found rather than raised."""
    sql = ("SELECT c.id, d.file, CAST(c.header AS BLOB), CAST(c.text AS BLOB), c.text_sha FROM chunks c "
           "LEFT JOIN documents d ON d.id = c.doc_id WHERE c.text_sha IS NOT NULL")
    try:
        rows = db.execute(sql)
    except sqlite3.OperationalError:  # a store made before chunk hashes
        return 0, []
    bad = 0
    named: list[str] = []
    for cid, file, header, text, sha in rows:
        digest = hashlib.sha256(bytes(header or b"") + b"\0" + bytes(text or b"")).hexdigest()[:32]
        if digest != sha:
            bad += 1
            if len(named) < 3:
                named.append(f"{cid} ({file})")
    return bad, named


def counts_differ(manifest_counts: dict[str, int], db: sqlite3.Connection) -> str | None:
    """The manifest's counts against the store's own, when they describe the same generation."""
    def q(sql: str) -> int:
        return int(db.execute(sql).fetchone()[0] or 0)

    actual = {"files": q("SELECT COUNT(*) FROM files"), "documents": q("SELECT COUNT(*) FROM documents"),
              "chunks": q("SELECT COUNT(*) FROM chunks"), "tokens": q("SELECT SUM(tokens) FROM chunks"),
              "vectors": q("SELECT COUNT(*) FROM vectors")}
    wrong = [f"{k} {manifest_counts[k]} (the store has {actual[k]})" for k in actual
             if k in manifest_counts and manifest_counts[k] != actual[k] and not _cached(k, manifest_counts, actual)]
    return "counts " + ", ".join(wrong) if wrong else None


def _cached(key: str, manifest_counts: dict[str, int], actual: dict[str, int]) -> bool:
    """More vectors than the manifest counts, at its generation: the embedding cache of a run that has not
    committed them yet (one interrupted with Ctrl-C, or one under way), kept so that the next run does
    not embed them again. Not damage: ``verify`` after a Ctrl-C said it was until the next ingest."""
    return key == "vectors" and actual[key] > manifest_counts[key]
