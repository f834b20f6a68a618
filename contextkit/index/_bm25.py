"""The sparse side of an index: BM25 (bm25s) over the same chunks as FAISS.

Like the FAISS file, the ``bm25/`` folder is derived from the records store and
stamped with the store's generation: whenever the chunks change, it is rebuilt
before the index is saved, and a folder whose generation lags (a crash between
the two) is rebuilt on open. So BM25 and FAISS can never disagree on which chunks
exist. Files are bm25s's own JSON and ``.npy`` (loaded with ``allow_pickle=False``)
plus ``rowids.npy`` (bm25s position -> chunk rowid) and ``meta.json``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, field_validator

log = logging.getLogger(__name__)


@functools.cache
def _bm25s():
    """Import bm25s, which sets its own logger to DEBUG on import; keep that out of users' logs.

    Cached: ``setLevel`` clears every logger's cache, 0.6 ms that a query need not pay."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s

__all__ = ["BM25Config", "BM25Index"]


#: The stop-word lists bm25s ships (its names for them); a manifest naming another is refused, not looked up.
STOPWORD_LISTS = frozenset({"english", "en", "english_plus", "en_plus", "german", "de", "dutch", "nl", "french", "fr",
                            "spanish", "es", "portuguese", "pt", "italian", "it", "russian", "ru", "swedish", "sv",
                            "norwegian", "no", "chinese", "zh", "turkish", "tr", "korean", "ko", "danish", "da"})
METHODS = frozenset({"robertson", "atire", "bm25l", "bm25+", "lucene"})


class BM25Config(BaseModel):
    """How text becomes terms and how terms are scored.

    Validated here because a manifest may come from elsewhere: an unknown stemmer or method would
    otherwise fail deep inside PyStemmer or bm25s with a bare ``KeyError``."""

    k1: float = Field(default=1.2, ge=0.0, le=100.0)
    b: float = Field(default=0.75, ge=0.0, le=1.0)
    method: str = "lucene"
    stemmer: str | None = "english"  # a Snowball language (PyStemmer), or None
    stopwords: str | None = "en"

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        if value not in METHODS:
            raise ValueError(f"unknown BM25 method {value!r} (one of {', '.join(sorted(METHODS))})")
        return value

    @field_validator("stemmer")
    @classmethod
    def _known_stemmer(cls, value: str | None) -> str | None:
        if value is None:
            return value
        import Stemmer

        if value not in Stemmer.algorithms():
            raise ValueError(f"unknown stemmer {value!r} (a Snowball language such as 'english', or none)")
        return value

    @field_validator("stopwords")
    @classmethod
    def _known_stopwords(cls, value: str | None) -> str | None:
        if value is not None and value not in STOPWORD_LISTS:
            raise ValueError(f"unknown stop-word list {value!r} (one of bm25s's, such as 'en', or none)")
        return value


class BM25Index:
    """BM25 over chunk texts, with chunk rowids as ids."""

    def __init__(self, config: BM25Config | None = None) -> None:
        self.config = config or BM25Config()
        self._bm25: Any = None
        self.rowids = np.zeros(0, dtype=np.int64)
        self.generation = -1

    # ---------------------------------------------------------------- terms
    def _stemmer(self) -> Any:
        if not self.config.stemmer:
            return None
        import Stemmer

        return Stemmer.Stemmer(self.config.stemmer)

    def terms(self, texts: Sequence[str]) -> list[list[str]]:
        bm25s = _bm25s()
        out = bm25s.tokenize(list(texts), lower=True, stopwords=self.config.stopwords, stemmer=self._stemmer(),
                             return_ids=False, show_progress=False)
        return [list(t) for t in out]

    # ---------------------------------------------------------------- build
    def build(self, rowids: np.ndarray, texts: Sequence[str], generation: int) -> None:
        bm25s = _bm25s()
        self.rowids = np.asarray(rowids, dtype=np.int64)
        self.generation = generation
        if len(texts) == 0:
            self._bm25 = None
            return
        model = bm25s.BM25(k1=self.config.k1, b=self.config.b, method=self.config.method)
        model.index(self.terms(texts), show_progress=False)
        self._bm25 = model

    def __len__(self) -> int:
        return len(self.rowids)

    # --------------------------------------------------------------- search
    def scores(self, query: str, allowed: np.ndarray | None = None) -> np.ndarray:
        """BM25 score of every chunk (0 where a filter excludes it)."""
        if self._bm25 is None:
            return np.zeros(0, dtype=np.float32)
        terms = self.terms([query])[0]
        known = [t for t in terms if t in self._bm25.vocab_dict]
        if not known:
            return np.zeros(len(self.rowids), dtype=np.float32)
        mask = None if allowed is None else np.isin(self.rowids, allowed).astype(np.float32)
        return np.asarray(self._bm25.get_scores(known, weight_mask=mask), dtype=np.float32)

    def search(self, query: str, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of the best ``k`` chunks with a positive score, best first."""
        scores = self.scores(query, allowed)
        if not len(scores):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        top = top[scores[top] > 0]
        return self.rowids[top], scores[top]

    # ------------------------------------------------------------- on disk
    def save(self, folder: Path) -> None:
        """Write to ``folder`` through a temporary folder and a rename."""
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self._bm25 is not None:
            self._bm25.save(str(tmp), allow_pickle=False)
        np.save(tmp / "rowids.npy", self.rowids, allow_pickle=False)
        meta = {"generation": self.generation, "config": self.config.model_dump(), "chunks": len(self.rowids)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)

    @classmethod
    def load(cls, folder: Path) -> BM25Index | None:
        """The saved index, or ``None`` when there is none (or it is unreadable)."""
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            index = cls(BM25Config(**meta["config"]))
            index.generation = int(meta["generation"])
            _check_headers(folder)
            index.rowids = np.load(folder / "rowids.npy", allow_pickle=False)
            if index.rowids.ndim != 1 or index.rowids.dtype != np.int64:
                raise ValueError(f"rowids.npy: {index.rowids.dtype} of shape {index.rowids.shape}, not int64 rowids")
            if len(index.rowids):
                bm25s = _bm25s()
                index._bm25 = bm25s.BM25.load(str(folder), allow_pickle=False)
                _check_ranges(index._bm25, len(index.rowids))
        except (OSError, ValueError, KeyError, TypeError, MemoryError) as exc:
            log.warning("%s: unreadable BM25 folder (%s); it will be rebuilt", folder, exc)
            return None
        return index


def _check_headers(folder: Path) -> None:
    """Every ``.npy`` of the folder has a plain header whose shape its size holds (before any is loaded:
    a crafted header claiming 10^11 rows would otherwise be allocated first)."""
    from contextkit.index._checksums import npy_header

    for file in folder.glob("*.npy"):
        if npy_header(file) is None:
            raise ValueError(f"{file.name}: not a plain .npy array, or its header claims more than the file holds")


def _check_ranges(model: Any, n_docs: int) -> None:
    """The score matrix's doc ids, term pointers and vocabulary are in range (out-of-range values make
    every query fail, or read memory they should not)."""
    scores = model.scores
    data, indices, indptr = (np.asarray(scores[k]) for k in ("data", "indices", "indptr"))
    if int(scores.get("num_docs", n_docs)) != n_docs:
        raise ValueError(f"{scores.get('num_docs')} documents in the score matrix, {n_docs} rowids")
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
