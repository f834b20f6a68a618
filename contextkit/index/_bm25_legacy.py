"""BM25 folders in bm25s's own layout (written before postings, see :mod:`._bm25_files`): read, never written.

Why kept: an index saved by an earlier contextkit must still open and answer; its BM25 is served
from the bm25s model as it was, and the next save writes the postings layout in its place (built
from the store's texts once, since bm25s keeps scores, not the counts a change needs). Also the
reference the postings are tested and benchmarked against: :func:`bm25s_model` is the build every
save used to make.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["bm25s", "bm25s_model", "check_ranges", "load_model"]


@functools.cache
def bm25s() -> Any:
    """Import bm25s, which sets its own logger to DEBUG on import; keep that out of users' logs.

    Cached: ``setLevel`` clears every logger's cache, a cost that a query need not pay."""
    import bm25s as module

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return module


def bm25s_model(terms: Sequence[Sequence[str]], k1: float, b: float, method: str) -> Any:
    """A bm25s model over tokenised texts: what a save built over every text before postings."""
    model = bm25s().BM25(k1=k1, b=b, method=method)
    model.index([list(t) for t in terms], show_progress=False)
    return model


def load_model(folder: Path, n_docs: int) -> Any:
    """The bm25s model saved in ``folder`` for ``n_docs`` chunks, its ranges checked (``ValueError``)."""
    model = bm25s().BM25.load(str(folder), allow_pickle=False)
    check_ranges(model, n_docs)
    return model


def scores(model: Any, terms: Sequence[str], n_docs: int, mask: np.ndarray | None) -> np.ndarray:
    known = [t for t in terms if t in model.vocab_dict]
    if not known:
        return np.zeros(n_docs, dtype=np.float32)
    return np.asarray(model.get_scores(known, weight_mask=mask), dtype=np.float32)


def check_ranges(model: Any, n_docs: int) -> None:
    """The score matrix's doc ids, term pointers and vocabulary are in range (out-of-range values make
    every query fail, or read memory they should not)."""
    matrix = model.scores
    data, indices, indptr = (np.asarray(matrix[k]) for k in ("data", "indices", "indptr"))
    if int(matrix.get("num_docs", n_docs)) != n_docs:
        raise ValueError(f"{matrix.get('num_docs')} documents in the score matrix, {n_docs} rowids")
    if indptr.ndim != 1 or len(indptr) < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) \
            or int(indptr[-1]) != len(indices) or len(data) != len(indices):
        raise ValueError("the score matrix's term pointers are out of order or out of range")
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= n_docs):
        raise ValueError("a document id in the score matrix is out of range")
    if not np.all(np.isfinite(data)):
        raise ValueError("a score in the matrix is not finite")
    ids = np.fromiter(model.vocab_dict.values(), dtype=np.int64, count=len(model.vocab_dict))
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= max(len(indptr), len(ids))):
        raise ValueError("a term id is out of range")
    real = [i for t, i in model.vocab_dict.items() if t != ""]
    if real and max(real) >= len(indptr) - 1:
        raise ValueError("a term id points past the score matrix")


def columns(model: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each term's documents and scores in a bm25s model (what ``verify`` compares term by term)."""
    indptr, indices, data = (np.asarray(model.scores[k]) for k in ("indptr", "indices", "data"))
    return {term: (indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]])
            for term, i in model.vocab_dict.items() if 0 <= i < len(indptr) - 1}
