"""BM25 kept as term counts (postings), scored at query time exactly as bm25s scores a fresh build.

Why: bm25s stores each (term, chunk) pair's final score, and that score depends on the whole
corpus (the term's document frequency, the number of chunks, their average length), so any
change to any chunk changes every stored score: an index kept that way must be rebuilt,
tokenising every text again, at each save. Kept here instead, as Lucene keeps them: for each
term, the chunks holding it and how often (``tf``), and each chunk's length in terms. Those
never change when other chunks do, so a save after a change of k chunks tokenises those k and
writes their postings as a small *segment*; a query computes idf, the average length and the
term scores for its own few terms, from the counts, with bm25s's own formulas, in bm25s's
order of float32 and float64 steps: the scores are bit for bit those of bm25s over the same
chunks (``tests/index/test_bm25_incremental.py``).

A :class:`Postings` is a base segment plus delta segments, and the rowids live now. A chunk
removed stays in its segment's arrays and is skipped (its rowid is no longer live); a rowid
held by several segments (a rowid given again after a rollback) is live in the newest only.
Merges (:func:`merged`) rewrite the deltas into one, or everything into a new base, from the
counts alone: no text is tokenised again.

Term ids are global and only ever appended: the base holds terms ``0..V0-1``, each delta the
terms new when it was made. A full merge drops the terms no live chunk holds and renumbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MAX_DELTAS", "MERGE_SHARE", "Postings", "Segment", "Stored", "segment_from_tokens"]

#: More delta segments than this and they are merged into one (a query visits every segment).
MAX_DELTAS = 8
#: When the delta segments' chunks and the removed chunks still in segments exceed this share of
#: the live chunks, everything is merged into a new base (so removed chunks do not pile up).
MERGE_SHARE = 0.1
#: Methods whose scores add a non-occurrence part for every chunk (bm25s's ``nonoccurrence_array``).
_NONOCCURRENCE = frozenset({"bm25l", "bm25+"})
#: Methods whose term-frequency part is bm25s's ``_score_tfc_robertson``.
_SATURATION = frozenset({"lucene", "robertson"})


@dataclass
class Stored:
    """Where a segment's files are and their checksums (``FileSum``s), once written or loaded."""

    folder: Path
    sums: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Segment:
    """The postings of one batch of chunks. Never changed once made (a merge makes a new one).

    ``indptr[t]:indptr[t+1]`` spans term ``t``'s postings in ``indices`` (the local doc, ascending)
    and ``tf`` (its count there, >= 1); ``rowids[d]`` is local doc ``d``'s chunk (ascending) and
    ``doclen[d]`` its number of terms. ``terms`` are the terms this segment added to the vocabulary,
    with ids ``first_term`` on; ``indptr`` covers every term id up to its last one."""

    prefix: str
    rowids: np.ndarray
    doclen: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    tf: np.ndarray
    terms: list[str]
    first_term: int
    stored: Stored | None = None
    _ids: dict[str, int] | None = field(default=None, repr=False)

    @property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    @property
    def term_ids(self) -> dict[str, int]:
        """This segment's own terms -> their global ids (built on first use)."""
        if self._ids is None:
            self._ids = {t: self.first_term + i for i, t in enumerate(self.terms)}
        return self._ids

    def arrays(self) -> dict[str, np.ndarray]:
        return {"docs": self.rowids, "doclen": self.doclen, "indptr": self.indptr, "indices": self.indices,
                "tf": self.tf}


def segment_from_tokens(prefix: str, rowids: np.ndarray, ids: Sequence[Sequence[int]], local_vocab: dict[str, int],
                        known: Any, first_term: int) -> Segment:
    """A segment from bm25s token ids (``bm25s.tokenize(..., return_ids=True)``) of chunks ``rowids``
    (ascending). ``known(term)``: a term's global id, or None when it is new here."""
    by_local = sorted(local_vocab.items(), key=lambda kv: kv[1])
    remap = np.empty(len(by_local), dtype=np.int64)
    new_terms: list[str] = []
    for term, local in by_local:
        gid = known(term)
        if gid is None:
            gid = first_term + len(new_terms)
            new_terms.append(term)
        remap[local] = gid
    n = len(ids)
    lens = np.fromiter((len(d) for d in ids), dtype=np.int64, count=n)
    flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lens.sum()))
    n_terms = first_term + len(new_terms)
    docs = np.repeat(np.arange(n, dtype=np.int64), lens)
    return _segment(prefix, np.asarray(rowids, dtype=np.int64), lens, remap[flat] if len(flat) else flat, docs,
                    None, new_terms, first_term, n_terms)


def _segment(prefix: str, rowids: np.ndarray, doclen: np.ndarray, terms: np.ndarray, docs: np.ndarray,
             counts: np.ndarray | None, new_terms: list[str], first_term: int, n_terms: int) -> Segment:
    """A segment from (term, local doc) pairs in any order: one per token (``counts`` None: repeats are
    counted), or one per posting with its count (each pair once, as a merge gives them)."""
    n = max(len(rowids), 1)
    key = terms * n + docs
    if counts is None:
        uniq, tf = np.unique(key, return_counts=True)
        term_of, local = uniq // n, uniq % n
    else:
        order = np.argsort(key, kind="stable")  # near-linear on the sorted runs a merge gives
        term_of, local, tf = terms, docs[order], counts[order]
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(term_of, minlength=n_terms), out=indptr[1:])
    return Segment(prefix, rowids, doclen.astype(np.int32), indptr, local.astype(np.int32), tf.astype(np.int32),
                   new_terms, first_term)


class Postings:
    """The live chunks (``rowids``, in score order) over a base and delta segments, ready to score."""

    def __init__(self, segments: Sequence[Segment], rowids: np.ndarray) -> None:
        self.segments = tuple(segments)
        self.rowids = np.asarray(rowids, dtype=np.int64)
        self.positions, self.doclen = _place(self.segments, self.rowids)
        self.live = [int((p >= 0).sum()) for p in self.positions]
        self.avgdl = self.doclen.mean() if len(self.doclen) else np.float64(0.0)
        self._norms: tuple[tuple[float, float], np.ndarray] | None = None

    # ------------------------------------------------------------ vocabulary
    @property
    def n_terms(self) -> int:
        return self.segments[-1].first_term + len(self.segments[-1].terms) if self.segments else 0

    def term_id(self, term: str) -> int | None:
        for seg in self.segments:
            gid = seg.term_ids.get(term)
            if gid is not None:
                return gid
        return None

    def vocabulary(self) -> list[str]:
        return [t for seg in self.segments for t in seg.terms]

    # --------------------------------------------------------------- scoring
    def postings(self, term_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions (in ``rowids``) of the live chunks holding the term, and its count in each."""
        where, counts = [], []
        for seg, pos, live in zip(self.segments, self.positions, self.live):
            if term_id >= seg.n_terms or not live:
                continue
            lo, hi = int(seg.indptr[term_id]), int(seg.indptr[term_id + 1])
            if lo == hi:
                continue
            g, tf = pos[seg.indices[lo:hi]], seg.tf[lo:hi]
            if live < len(seg.rowids):
                keep = g >= 0
                g, tf = g[keep], tf[keep]
            where.append(g)
            counts.append(tf)
        if not where:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        return (where[0], counts[0]) if len(where) == 1 else (np.concatenate(where), np.concatenate(counts))

    def scores(self, term_ids: Sequence[int], k1: float, b: float, method: str, delta: float = 0.5) -> np.ndarray:
        """BM25 of every live chunk for these query term ids (repeats count again, as in bm25s).

        The steps are bm25s's: idf from its function, stored as float32; the term-frequency part from
        its function (float64 here, as there); their product rounded to float32; the terms' float32
        scores added in query order; bm25l / bm25+ add the non-occurrence part as bm25s does."""
        from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

        idf_fn, tfc_fn = _select_idf_scorer(method), _select_tfc_scorer(method)
        n = len(self.rowids)
        out = np.zeros(n, dtype=np.float32)
        absent: list[np.float32] = []
        for t in term_ids:
            where, tf = self.postings(t)
            if not len(where):
                continue  # bm25s does not know a term no chunk holds
            idf = idf_fn(len(where), N=n)
            if method in _SATURATION:  # bm25s's tf / (k1 * ((1 - b) + b * l_d / l_avg) + tf), its norm kept per chunk
                tf32 = tf.astype(np.float32)
                tfc = tf32 / (self._norm(k1, b)[where] + tf32)
            else:
                tfc = tfc_fn(tf_array=tf.astype(np.float32), l_d=self.doclen[where], l_avg=self.avgdl, k1=k1, b=b,
                             delta=delta)
            score = np.float32(idf) * tfc
            if method in _NONOCCURRENCE:
                zero = np.float32(idf * tfc_fn(tf_array=0, l_d=self.avgdl, l_avg=self.avgdl, k1=k1, b=b, delta=delta))
                score = score - zero
                absent.append(zero)
            out[where] += score.astype(np.float32)
        if absent:
            out += np.asarray(absent, dtype=np.float32).sum()
        return out

    def _norm(self, k1: float, b: float) -> np.ndarray:
        """``k1 * ((1 - b) + b * l_d / l_avg)`` of every live chunk, in float64 as bm25s computes it per
        chunk: computed once per state and settings, it halves the work of each query term."""
        if self._norms is None or self._norms[0] != (k1, b):
            self._norms = ((k1, b), k1 * ((1 - b) + b * self.doclen / self.avgdl))
        return self._norms[1]

    # ---------------------------------------------------------------- merges
    def dead(self) -> int:
        return sum(len(seg.rowids) - live for seg, live in zip(self.segments, self.live))

    def needs_merge(self) -> str | None:
        """``"all"``, ``"deltas"`` or None, by the policy of :data:`MERGE_SHARE` and :data:`MAX_DELTAS`."""
        churn = self.dead() + sum(len(seg.rowids) for seg in self.segments[1:])
        if churn and churn > MERGE_SHARE * len(self.rowids):
            return "all"
        return "deltas" if len(self.segments) - 1 > MAX_DELTAS else None


def _place(segments: Sequence[Segment], rowids: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """For each segment, each local doc's position in ``rowids`` (-1: not live there), and the live
    chunks' lengths by position. Raises ``ValueError`` for a repeated rowid or one no segment holds."""
    order = np.argsort(rowids, kind="stable")
    ranked = rowids[order]
    if len(ranked) > 1 and np.any(ranked[1:] == ranked[:-1]):
        raise ValueError("a chunk rowid is listed twice")
    claimed = np.zeros(len(rowids), dtype=bool)
    doclen = np.zeros(len(rowids), dtype=np.int64)
    positions: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(segments)
    for i in range(len(segments) - 1, -1, -1):  # the newest segment holding a rowid holds it live
        seg = segments[i]
        if not len(ranked):  # no live chunk (every one deleted): nothing of this segment is live
            positions[i] = np.full(len(seg.rowids), -1, dtype=np.int64)
            continue
        at = np.minimum(np.searchsorted(ranked, seg.rowids), len(ranked) - 1)
        hit = ranked[at] == seg.rowids
        pos = order[at]
        hit &= ~claimed[pos]
        claimed[pos[hit]] = True
        doclen[pos[hit]] = seg.doclen[hit]
        positions[i] = np.where(hit, pos, -1)
    if not claimed.all():
        raise ValueError(f"{int((~claimed).sum())} live chunk rowids have no postings")
    return positions, doclen


def merged(postings: Postings, which: str, prefix: str) -> list[Segment]:
    """The segments after a merge: ``"all"`` into one new base (terms no live chunk holds dropped,
    the rest renumbered in order), ``"deltas"`` into one delta named ``prefix`` (term ids kept).

    Only counts are moved: each live chunk gets its rank among the merged chunks' rowids, each
    segment's postings (already in term, then chunk order) are renumbered and concatenated, and a
    stable sort, which runs in near-linear time on such sorted runs, interleaves them."""
    segs = postings.segments
    parts = list(range(len(segs))) if which == "all" else list(range(1, len(segs)))
    live = [postings.positions[i] >= 0 for i in parts]
    rows = np.concatenate([segs[i].rowids[m] for i, m in zip(parts, live)])
    lens = np.concatenate([segs[i].doclen[m] for i, m in zip(parts, live)])
    order = np.argsort(rows, kind="stable")
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(len(rows), dtype=np.int64)
    triples, start = [], 0
    for i, m in zip(parts, live):
        local = np.full(len(segs[i].rowids), -1, dtype=np.int64)
        local[m] = rank[start: start + int(m.sum())]
        start += int(m.sum())
        triples.append(_live_triples(segs[i], local))
    terms, docs, counts = (np.concatenate([t[j] for t in triples]) for j in range(3))
    if which == "all":
        held = np.zeros(postings.n_terms, dtype=bool)
        held[terms] = True
        new_terms = [t for t, h in zip(postings.vocabulary(), held) if h]
        renumber = np.cumsum(held) - 1
        return [_segment("", rows[order], lens[order], renumber[terms], docs, counts, new_terms, 0, len(new_terms))]
    if not len(rows):  # every chunk of the deltas was removed: their terms go with them
        return [segs[0]]
    new_terms = [t for seg in segs[1:] for t in seg.terms]
    return [segs[0], _segment(prefix, rows[order], lens[order], terms, docs, counts, new_terms, segs[1].first_term,
                              postings.n_terms)]


def _live_triples(seg: Segment, local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(term id, new chunk number, count) of a segment's postings of live chunks (``local``: each local
    chunk's new number, -1 when it is not live)."""
    term_of = np.repeat(np.arange(seg.n_terms, dtype=np.int64), np.diff(seg.indptr))
    docs = local[seg.indices]
    keep = docs >= 0
    return term_of[keep], docs[keep], seg.tf[keep].astype(np.int64)
