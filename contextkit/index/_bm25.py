"""The sparse side of an index: BM25 over the same chunks as FAISS, scored exactly as bm25s scores them.

Like the FAISS file, the ``bm25.<G>/`` folder is derived from the records store and stamped
with the store's generation: it is brought up to date before the index is saved, and a
folder whose generation lags (a crash between the two) is brought up to date on open. So
BM25 and FAISS can never disagree on which chunks exist.

Kept as term counts (postings, :mod:`._bm25_postings`) in a base segment and small delta
segments (:mod:`._bm25_files` has the layout), so bringing it up to date after a change of
k chunks tokenises those k only (:mod:`._bm25_sync` finds them in the store), and a save
writes their delta and hard-links the rest. Folders in bm25s's own layout, written before,
are read and served as they are (:mod:`._bm25_legacy`) and replaced by postings at the
next save.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, field_validator

from contextkit.core.errors import IndexCorruptError, InvalidArgumentError
from contextkit.index import _bm25_analyzer as analyzers
from contextkit.index import _bm25_legacy as legacy
from contextkit.index._bm25_files import (
    PostingsMeta,
    read_meta,
    read_postings,
    write_postings,
)
from contextkit.index._bm25_postings import (
    Postings,
    Stored,
    merged,
    segment_from_tokens,
)
from contextkit.index._checksums import FileSum, npy_load
from contextkit.index._disk import fsync_dir
from contextkit.index._safe_files import require_folder, require_regular

log = logging.getLogger(__name__)

_bm25s = legacy.bm25s  # (bench_crash imports it from here)
#: bm25s's delta of BM25L and BM25+ (its default; BM25Config does not change it).
BM25S_DELTA = 0.5

__all__ = ["BM25Config", "BM25Index", "with_analyzer"]


#: The stop-word lists bm25s ships (its names for them); a manifest naming another is refused, not looked up.
STOPWORD_LISTS = frozenset({"english", "en", "english_plus", "en_plus", "german", "de", "dutch", "nl", "french", "fr",
                            "spanish", "es", "portuguese", "pt", "italian", "it", "russian", "ru", "swedish", "sv",
                            "norwegian", "no", "chinese", "zh", "turkish", "tr", "korean", "ko", "danish", "da"})
METHODS = frozenset({"robertson", "atire", "bm25l", "bm25+", "lucene"})


def with_analyzer(value: dict[str, Any]) -> dict[str, Any]:
    """Saved BM25 settings with the analyzer named: :data:`~._bm25_analyzer.LEGACY` when they name none."""
    return value if "analyzer" in value else {**value, "analyzer": analyzers.LEGACY}


class BM25Config(BaseModel):
    """How text becomes terms and how terms are scored.

    Validated here because a manifest may come from elsewhere: an unknown stemmer or method would
    otherwise fail deep inside PyStemmer or bm25s with a bare ``KeyError``."""

    k1: float = Field(default=1.2, ge=0.0, le=100.0)
    b: float = Field(default=0.75, ge=0.0, le=1.0)
    method: str = "lucene"
    stemmer: str | None = "english"  # a Snowball language (PyStemmer), or None
    stopwords: str | None = "en"
    #: The document's title above every chunk's BM25 text, not only the first chunk's (whose text starts with it):
    #: a document ranks by its best chunk, and a later chunk without the title misses the query's title words
    #: (SciFact test at 128-token chunks: see bench/bench_heldout_retrieval.py). False in a manifest written
    #: before this setting existed (it is absent there), so an old index keeps its terms; new indexes get True
    #: (``IndexManifest``'s default). Only the BM25 text changes; chunks and vectors are as before.
    title_every_chunk: bool = False
    #: How text is cut into terms (:mod:`._bm25_analyzer`): CJK runs into bigrams for a new index; a
    #: setting saved without this field is read as :data:`~._bm25_analyzer.LEGACY` (see :meth:`stored`).
    analyzer: str = analyzers.DEFAULT

    @classmethod
    def stored(cls, value: dict[str, Any]) -> BM25Config:
        """Settings as a manifest or a BM25 folder records them: with no analyzer, the one such an index
        was cut with before analyzers were recorded (bm25s's), so it answers as it always did."""
        return cls(**with_analyzer(value))

    @field_validator("analyzer")
    @classmethod
    def _known_analyzer(cls, value: str) -> str:
        if value not in analyzers.ANALYZERS:
            raise ValueError(f"unknown BM25 analyzer {value!r} (one of {', '.join(sorted(analyzers.ANALYZERS))})")
        return value

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
    """BM25 over chunk texts, with chunk rowids as ids; ``rowids[i]`` is the chunk of ``scores(...)[i]``."""

    def __init__(self, config: BM25Config | None = None) -> None:
        self.config = config or BM25Config()
        self.rowids = np.zeros(0, dtype=np.int64)
        self.generation = -1
        self._postings: Postings | None = None
        self._legacy: Any = None  # a bm25s model read from a folder in its layout
        self.stored_as: Path | None = None  # the folder holding exactly this state (None: not saved yet)

    @property
    def legacy(self) -> bool:
        """Read from a folder in bm25s's layout: served as it is, never changed (a change builds postings)."""
        return self._legacy is not None

    @property
    def postings(self) -> Postings | None:
        return self._postings

    # ---------------------------------------------------------------- terms
    def _stemmer(self) -> Any:
        if not self.config.stemmer:
            return None
        import Stemmer

        return Stemmer.Stemmer(self.config.stemmer)

    def _tokenize(self) -> Any:
        """bm25s's ``tokenize`` with this index's stop words and stemmer (what the analyzer calls)."""
        return functools.partial(legacy.bm25s().tokenize, lower=True, stopwords=self.config.stopwords,
                                 stemmer=self._stemmer(), show_progress=False)

    def terms(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's terms, cut by this index's analyzer (a query is cut as the chunks were)."""
        return analyzers.tokens(texts, self.config.analyzer, self._tokenize())

    def _token_ids(self, texts: Sequence[str]) -> analyzers.Tokens:
        """The terms as ids and their vocabulary (the same terms :meth:`terms` gives, without the strings)."""
        return analyzers.token_ids(texts, self.config.analyzer, self._tokenize())

    # ---------------------------------------------------------------- build
    def build(self, rowids: np.ndarray, texts: Sequence[str], generation: int) -> None:
        """Postings of every text afresh (one base segment), in ascending rowid order."""
        rowids = np.asarray(rowids, dtype=np.int64)
        if len(rowids) != len(texts):
            raise InvalidArgumentError(f"{len(rowids)} rowids for {len(texts)} texts")
        order = np.argsort(rowids, kind="stable")
        if len(rowids) > 1 and np.any(np.diff(order) != 1):
            rowids, texts = rowids[order], [texts[i] for i in order]
        if len(rowids) > 1 and np.any(rowids[1:] == rowids[:-1]):
            raise InvalidArgumentError("a rowid is given twice")
        tokens = self._token_ids(texts)
        base = segment_from_tokens("", rowids, tokens.ids, tokens.vocab, lambda term: None, 0)
        self._set(Postings([base], rowids), generation)

    def _set(self, postings: Postings, generation: int) -> None:
        self._postings, self._legacy, self.stored_as = postings, None, None
        self.rowids, self.generation = postings.rowids, generation

    def updated(self, added: np.ndarray, texts: Sequence[str], live: np.ndarray, generation: int) -> BM25Index:
        """A new index: these chunks tokenised into a delta segment, ``live`` (ascending) the chunks now,
        merged when :meth:`Postings.needs_merge` says so. This one is left as it was (a query may hold it)."""
        if self._postings is None:
            raise InvalidArgumentError("a BM25 read in bm25s's layout cannot be changed; build it afresh")
        segments = list(self._postings.segments)
        number = 1 + max((int(s.prefix.split(".")[1]) for s in segments[1:]), default=0)
        if len(added):
            order = np.argsort(added, kind="stable")
            tokens = self._token_ids([texts[i] for i in order])
            segments.append(segment_from_tokens(f"delta.{number}.", np.asarray(added)[order], tokens.ids, tokens.vocab,
                                                self._postings.term_id, self._postings.n_terms))
        postings = Postings(segments, live)
        which = postings.needs_merge()
        if which:
            postings = Postings(merged(postings, which, f"delta.{number + 1}."), live)
        out = BM25Index(self.config)
        out._set(postings, generation)
        return out

    def __len__(self) -> int:
        return len(self.rowids)

    # --------------------------------------------------------------- search
    def scores(self, query: str, allowed: np.ndarray | None = None) -> np.ndarray:
        """BM25 score of every chunk (0 where a filter excludes it)."""
        if not len(self.rowids):
            return np.zeros(0, dtype=np.float32)
        terms = self.terms([query])[0]
        mask = None if allowed is None else np.isin(self.rowids, allowed).astype(np.float32)
        if self._legacy is not None:
            return legacy.scores(self._legacy, terms, len(self.rowids), mask)
        assert self._postings is not None
        ids = [i for i in map(self._postings.term_id, terms) if i is not None]
        if not ids:
            return np.zeros(len(self.rowids), dtype=np.float32)
        out = self._postings.scores(ids, self.config.k1, self.config.b, self.config.method, BM25S_DELTA)
        if mask is not None:
            out *= mask
        return out

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
    def save(self, folder: Path) -> dict[str, FileSum]:
        """Write to ``folder`` through a temporary folder and a rename; the checksum of each file.

        Segments already on disk are hard-linked from where they are (see :mod:`._bm25_files`)."""
        if self._postings is None:
            raise InvalidArgumentError("a BM25 read in bm25s's layout is not written again; build it afresh")
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        sums, placed = write_postings(tmp, self._postings, self.generation, self.config.model_dump())
        fsync_dir(tmp)
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
        for seg, seg_sums in zip(self._postings.segments, placed):  # only now: the files are there under these names
            seg.stored = Stored(folder, seg_sums)
        self.stored_as = folder
        return sums

    @classmethod
    def load(cls, folder: Path, sums: dict[str, FileSum] | None = None) -> BM25Index | None:
        """The saved index, or ``None`` when there is none (or it is unreadable). ``sums``: the checksums
        the manifest records for its files (carried over when a later save links them)."""
        if not os.path.lexists(folder / "meta.json"):
            return None
        try:
            require_folder(folder)
            meta = read_meta(folder)
            if "format" not in meta:
                return cls._load_legacy(folder, meta)
            parsed = PostingsMeta(**meta)
            index = cls(BM25Config.stored(parsed.config))
            index._set(read_postings(folder, parsed, sums), parsed.generation)
            index.stored_as = folder
        except (OSError, ValueError, KeyError, TypeError, MemoryError, IndexCorruptError) as exc:
            # IndexCorruptError: a link, FIFO or device in a file's place (never read); derived: rebuilt
            log.warning("%s: unreadable BM25 folder (%s); it will be rebuilt", folder, exc)
            return None
        return index

    @classmethod
    def _load_legacy(cls, folder: Path, meta: dict[str, Any]) -> BM25Index:
        """A folder in bm25s's layout (``ValueError`` and the like when it cannot be read)."""
        index = cls(BM25Config.stored(meta["config"]))
        index.generation = int(meta["generation"])
        _check_headers(folder)
        index.rowids = npy_load(folder / "rowids.npy")
        if index.rowids.ndim != 1 or index.rowids.dtype != np.int64:
            raise ValueError(f"rowids.npy: {index.rowids.dtype} of shape {index.rowids.shape}, not int64 rowids")
        if len(index.rowids):
            index._legacy = legacy.load_model(folder, len(index.rowids))
        else:  # an empty index: nothing to serve, and postings of nothing are the same
            index._set(Postings([segment_from_tokens("", index.rowids, [], {}, lambda t: None, 0)], index.rowids),
                       index.generation)
        index.stored_as = folder
        return index


def _check_headers(folder: Path) -> None:
    """Every file of the folder is a regular file (bm25s opens them by name: a FIFO would block it), and every
    ``.npy`` has a plain header whose shape its size holds (before any is loaded: a crafted header claiming
    10^11 rows would otherwise be allocated first)."""
    from contextkit.index._checksums import npy_header

    for entry in folder.iterdir():
        require_regular(entry)
    for file in folder.glob("*.npy"):
        if npy_header(file) is None:
            raise ValueError(f"{file.name}: not a plain .npy array, or its header claims more than the file holds")
