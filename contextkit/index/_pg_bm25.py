"""BM25 of a database index: term counts in the ``postings`` table, scored in SQL as the folder scores them.

The terms are cut by the index's own analyzer (:class:`~._bm25.BM25Index.terms`: bm25s's tokenizer,
stop words, stemmer, CJK bigrams), so a query's terms are the ones the chunks were indexed under. A
query's score is the folder's (:meth:`._bm25_postings.Postings.scores`, bm25s's formulas): idf from
each term's document frequency over every chunk of the state read, the term-frequency part from each
chunk's length against the average, a term repeated in the query counted again. The folder adds in
float32, the database in float64: the same ranking but for near-ties (``tests/index/postgres`` holds
them to the folder's lists). Never PostgreSQL's ``ts_rank``, which scores another way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from contextkit.core.errors import InvalidArgumentError
from contextkit.index._bm25 import BM25Config, BM25Index

__all__ = ["MARGIN", "PgBM25", "SQL_TFC"]

#: The term-frequency part of each method, as bm25s computes it, in SQL (to pick candidates only).
SQL_TFC = {
    "lucene": "p.tf / (p.tf + %(k1)s * ((1 - %(b)s) + %(b)s * p.dl / %(avgdl)s))",
    "robertson": "p.tf / (p.tf + %(k1)s * ((1 - %(b)s) + %(b)s * p.dl / %(avgdl)s))",
    "atire": "p.tf * (%(k1)s + 1) / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.dl / %(avgdl)s))",
}
#: Candidates past ``k`` picked by the float64 sums and scored again as the folder scores them: enough to
#: hold every chunk whose float32 score could tie with or pass the ``k``-th (they differ in the last bits).
MARGIN = 32

# Each query term's postings through the (term, rowid) key (LATERAL: a look-up per term, never a scan of
# the whole table, whatever the planner's statistics say right after a bulk load); the candidates are
# picked on their sums alone, then only their postings of the query's terms are returned for the
# re-scoring (aggregating every matching chunk's terms into arrays cost SciFact claims 1.5 ms a query).
_TOP = """
WITH top AS (
    SELECT p.rowid FROM unnest(%(terms)s::text[], %(wi)s::float8[]) AS i(term, wi)
    CROSS JOIN LATERAL (SELECT rowid, tf, dl FROM postings WHERE term = i.term) AS p
    {where}
    GROUP BY p.rowid ORDER BY sum(i.wi * {tfc}) DESC, p.rowid
    LIMIT %(n)s)
SELECT q.rowid, q.term, q.tf, q.dl FROM unnest(%(terms)s::text[]) AS u(term)
CROSS JOIN LATERAL (SELECT rowid, term, tf, dl FROM postings WHERE term = u.term AND rowid IN (SELECT rowid FROM top)) AS q
"""
# Each term's document frequency, with N and the total length (one round trip).
_DF = ("SELECT t, (SELECT count(*) FROM postings WHERE term = t), tot.n, tot.total FROM unnest(%s::text[]) AS t, "
       "(SELECT coalesce(sum(chunks), 0) AS n, coalesce(sum(terms), 0) AS total FROM totals) AS tot")


class PgBM25(BM25Index):
    """``search`` as :class:`BM25Index`'s, over the database the store reads (one state per query)."""

    def __init__(self, config: BM25Config, store: Any) -> None:
        super().__init__(config)
        if config.method not in SQL_TFC:
            raise InvalidArgumentError(f"BM25 method {config.method!r} is not served from PostgreSQL "
                                       f"(one of {', '.join(sorted(SQL_TFC))})")
        self._store = store
        self.pin: Callable[[], AbstractContextManager[Any]] = nullcontext
        tfc = SQL_TFC[config.method]
        self._sql = {allowed: _TOP.format(tfc=tfc, where="WHERE p.rowid = ANY(%(allowed)s)" if allowed else "")
                     for allowed in (False, True)}

    def __len__(self) -> int:
        return int(self._store.n_chunks())

    def search(self, query: str, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of the best ``k`` chunks with a positive score, best first (ties by rowid).

        The database picks the candidates (float64 sums), then they are scored as the folder scores them
        (:meth:`._bm25_postings.Postings.scores`: float32 idf, the same steps, terms added in query order),
        so the scores and the order of ties are the folder's."""
        terms = self.terms([query])[0]
        empty = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if not terms or k <= 0 or (allowed is not None and not len(allowed)):
            return empty
        with self.pin():
            db = self._store.db
            counts = db.execute(_DF, (sorted(set(terms)),)).fetchall()
            n, total = (int(counts[0][2]), int(counts[0][3])) if counts else (0, 0)
            df = {t: int(d) for t, d, _, _ in counts if d}
            if not n or not df:
                return empty
            idf = self._idf(df, int(n))
            avgdl = np.float64(int(total)) / np.float64(int(n))
            weights = Counter(t for t in terms if t in df)
            params: dict[str, Any] = {"terms": list(weights), "wi": [weights[t] * float(idf[t]) for t in weights],
                                      "n": int(k) + MARGIN, "k1": self.config.k1, "b": self.config.b,
                                      "avgdl": float(avgdl)}
            if allowed is not None:
                params["allowed"] = [int(r) for r in allowed]
            found = db.execute(self._sql[allowed is not None], params).fetchall()
        top = sorted({int(r[0]) for r in found})  # every candidate holds at least one of the terms
        return self._rescored(terms, top, found, idf, avgdl, k)

    def _idf(self, df: dict[str, int], n: int) -> dict[str, np.float32]:
        from bm25s.scoring import _select_idf_scorer

        idf_fn = _select_idf_scorer(self.config.method)
        return {t: np.float32(idf_fn(int(d), N=n)) for t, d in df.items()}

    def _rescored(self, terms: list[str], top: list[int], rows: list[Any], idf: dict[str, np.float32],
                  avgdl: np.float64, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The folder's float32 scores of the candidates ``top``; the best ``k`` positive ones, ties by rowid."""
        from bm25s.scoring import _select_tfc_scorer

        rowids = np.asarray(sorted(top), dtype=np.int64)
        place = {int(r): i for i, r in enumerate(rowids)}
        doclen = np.zeros(len(rowids), dtype=np.float64)
        by_term: dict[str, tuple[list[int], list[int]]] = {}
        for rowid, term, tf, length in rows:
            doclen[place[int(rowid)]] = int(length)
            positions, tfs = by_term.setdefault(term, ([], []))
            positions.append(place[int(rowid)])
            tfs.append(int(tf))
        k1, b, method = self.config.k1, self.config.b, self.config.method
        out = np.zeros(len(rowids), dtype=np.float32)
        for term in terms:  # in query order, a repeated term again (as bm25s)
            if term not in by_term:
                continue
            where_list, tf_list = by_term[term]
            where = np.asarray(where_list, dtype=np.int64)
            tf32 = np.asarray(tf_list, dtype=np.float32)
            if method in ("lucene", "robertson"):
                tfc = tf32 / (k1 * ((1 - b) + b * doclen[where] / avgdl) + tf32)
            else:
                tfc = _select_tfc_scorer(method)(tf_array=tf32, l_d=doclen[where], l_avg=avgdl, k1=k1, b=b)
            out[where] += (idf[term] * tfc).astype(np.float32)
        order = np.argsort(-out, kind="stable")[:k]
        order = order[out[order] > 0]
        return rowids[order], out[order]

    def scores(self, query: str, allowed: np.ndarray | None = None) -> np.ndarray:
        raise InvalidArgumentError("a database index scores BM25 in the database: use search(query, k)")
