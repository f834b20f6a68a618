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
from pydantic import BaseModel

log = logging.getLogger(__name__)


@functools.cache
def _bm25s():
    """Import bm25s, which sets its own logger to DEBUG on import; keep that out of users' logs.

    Cached: ``setLevel`` clears every logger's cache, 0.6 ms that a query need not pay."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s

__all__ = ["BM25Config", "BM25Index"]


class BM25Config(BaseModel):
    """How text becomes terms and how terms are scored."""

    k1: float = 1.2
    b: float = 0.75
    method: str = "lucene"
    stemmer: str | None = "english"  # a Snowball language (PyStemmer), or None
    stopwords: str | None = "en"


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
            index.rowids = np.load(folder / "rowids.npy", allow_pickle=False)
            if len(index.rowids):
                bm25s = _bm25s()
                index._bm25 = bm25s.BM25.load(str(folder), allow_pickle=False)
        except (OSError, ValueError, KeyError) as exc:
            log.warning("%s: unreadable BM25 folder (%s); it will be rebuilt", folder, exc)
            return None
        return index
