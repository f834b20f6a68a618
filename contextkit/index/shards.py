"""``ShardedIndex``: several index folders (shards) searched as one index.

A corpus ingested in parallel (one worker, e.g. a Ray task, per slice of the files)
ends up as several ordinary contextkit index folders, one per worker. ``ShardedIndex``
opens them read-only and answers a search as a single index over the whole corpus
would.

Dense search is merged exactly. Each shard returns its own top ``k``; the global top
``k`` is always inside the union of those lists (a chunk outside its shard's top ``k``
has ``k`` better chunks in that shard alone), so merging the lists by score gives the
single index's ranking. The score of a chunk is its inner product with the query, which
does not depend on which other chunks share its index. With flat (exact) shards the
result equals a flat index over all the chunks, up to float rounding in the last bits
of a score (FAISS computes a dot product in a different order for a single query and a
batch); with HNSW or IVF shards it is the exact merge of each shard's approximate answer.

Ties: chunks with exactly the same score (the same text in two documents gives the
same vector) are ranked by shard order (the order the shards were given in, or their
folder names sorted), then by rowid within the shard, so a result never depends on
timing. A single FAISS index orders such ties by its own internal order instead, so
the two may list tied chunks differently; scores and the set of chunks above the tie
are the same.

BM25 is NOT exactly mergeable: each shard's BM25 weighs a term by its own inverse
document frequency (how many of *its* chunks hold the term) and normalises lengths by
*its* average chunk length, so the same chunk scores differently in a shard than in a
single index over everything, and shard scores are not comparable with each other.
:meth:`ShardedIndex.bm25_search` therefore offers two documented modes:

* ``exact=False`` (default): each shard's BM25 top ``k`` merged by score. An
  approximation: fine when the shards are large random slices of one corpus (their
  term statistics then agree closely), poor for small shards or shards split by topic,
  where a term rare in one shard and common in another is weighted unevenly.
* ``exact=True``: one BM25 over the chunk texts of every shard, built in memory on first
  use with the shards' common BM25 settings: it ranks as the single index's BM25 would
  (same texts, same statistics), at the cost of reading every chunk text once and
  holding the BM25 matrix in memory.

The shards must agree on the embedding model, dimension, metric and embedding settings
(window or truncate, tokens per window), or the vectors would not be comparable; a
mismatch raises :class:`IndexMismatchError` naming the shard. Shards must not hold the
same document twice (a single index holds each document once): that raises
:class:`IndexFolderError` at open (``check_overlap=False`` skips the check).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from contextkit.core.errors import IndexFolderError, IndexMismatchError, InvalidArgumentError
from contextkit.core.records import ScoredChunk
from contextkit.index._bm25 import BM25Config, BM25Index
from contextkit.index._faiss_kinds import search_faiss
from contextkit.index._index import Index
from contextkit.index._manifest import IndexManifest

__all__ = ["ShardHit", "ShardedIndex"]

log = logging.getLogger(__name__)

#: Manifest fields every shard must share (vectors from different settings are not comparable).
_MUST_MATCH = ("model", "dim", "metric")
#: Embedding settings that change the vectors of the same text.
_EMBEDDER_MUST_MATCH = ("model", "dim", "max_tokens", "long_text")
#: Bits for the rowid in the global ids of the exact BM25 (shard number above them).
_ROWID_BITS = 40


class ShardHit(NamedTuple):
    """One merged result: the score, the shard's position, and the chunk's rowid in that shard."""

    score: float
    shard: int
    rowid: int


def _shard_folders(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    if isinstance(paths, (str, Path)):
        folder = Path(paths)
        if (folder / "manifest.json").is_file():
            return [folder]
        found = sorted(p for p in folder.iterdir() if (p / "manifest.json").is_file()) if folder.is_dir() else []
        if not found:
            raise IndexFolderError(f"{folder}: no index here and no shard folders (with a manifest.json) inside it")
        return found
    folders = [Path(p) for p in paths]
    if not folders:
        raise InvalidArgumentError("a sharded index needs at least one shard")
    return folders


def check_compatible(manifests: Sequence[IndexManifest], names: Sequence[str]) -> None:
    """Raise :class:`IndexMismatchError` unless every shard's vectors are comparable with the first's."""
    first = manifests[0]
    for manifest, name in zip(manifests[1:], names[1:]):
        for field in _MUST_MATCH:
            a, b = getattr(first, field), getattr(manifest, field)
            if a != b:
                raise IndexMismatchError(
                    f"shard {name}: {field} is {b!r} but shard {names[0]} has {a!r}; shards searched as one "
                    "index must share the embedding model, dimension and metric")
        for key in _EMBEDDER_MUST_MATCH:
            a, b = first.embedder.get(key), manifest.embedder.get(key)
            if a != b:
                raise IndexMismatchError(
                    f"shard {name}: embedder setting {key}={b!r} but shard {names[0]} has {a!r}; "
                    "the same text would get different vectors")
        for field in ("tokenizer", "chunker", "redact"):
            if getattr(first, field) != getattr(manifest, field):
                log.warning("shard %s: %s differs from shard %s (%r vs %r); search still works, but the "
                            "chunks were not cut as one index would cut them", name, field, names[0],
                            getattr(manifest, field), getattr(first, field))


class ShardedIndex:
    """Several contextkit indexes searched as one. Use :meth:`open` (or :meth:`from_indexes`).

    Read-only: add documents to a shard through its own :class:`Index`.
    """

    def __init__(self, shards: Sequence[Index], names: Sequence[str] | None = None, *, owns: bool = False,
                 check_overlap: bool = True) -> None:
        if not shards:
            raise InvalidArgumentError("a sharded index needs at least one shard")
        self.shards = list(shards)
        self.names = list(names) if names is not None else [str(s.path) for s in self.shards]
        self._owns = owns
        check_compatible([s.manifest for s in self.shards], self.names)
        if check_overlap:
            self._check_overlap()
        self._global_bm25: BM25Index | None = None

    # ----------------------------------------------------------- lifecycle
    @classmethod
    def open(cls, paths: str | Path | Sequence[str | Path], *, expect_model: str | None = None,
             expect_dim: int | None = None, check_overlap: bool = True) -> ShardedIndex:
        """Open shard folders read-only, in the order given.

        ``paths`` is a list of index folders, or one folder whose sub-folders holding a
        ``manifest.json`` are the shards (taken in sorted name order, e.g. ``shard-00000``,
        ``shard-00001``, ...), or one index folder (a single shard).
        """
        folders = _shard_folders(paths)
        opened: list[Index] = []
        try:
            for folder in folders:
                opened.append(Index.open(folder, read_only=True, expect_model=expect_model, expect_dim=expect_dim))
            return cls(opened, [str(f) for f in folders], owns=True, check_overlap=check_overlap)
        except BaseException:
            for index in opened:
                index.close()
            raise

    @classmethod
    def from_indexes(cls, indexes: Sequence[Index], *, check_overlap: bool = True) -> ShardedIndex:
        """Shards already open (the caller keeps closing them)."""
        return cls(indexes, owns=False, check_overlap=check_overlap)

    def close(self) -> None:
        if self._owns:
            for shard in self.shards:
                shard.close()

    def __enter__(self) -> ShardedIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_overlap(self) -> None:
        seen: dict[str, int] = {}
        for i, shard in enumerate(self.shards):
            for doc_id in shard.documents():
                j = seen.setdefault(doc_id, i)
                if j != i:
                    raise IndexFolderError(
                        f"document {doc_id!r} is in shard {self.names[j]} and in shard {self.names[i]}; "
                        "a single index holds each document once (pass check_overlap=False to search anyway)")

    # ----------------------------------------------------------- properties
    @property
    def manifest(self) -> IndexManifest:
        """The first shard's manifest (model, dimension and embedding settings are common to all)."""
        return self.shards[0].manifest

    @property
    def dim(self) -> int:
        return self.manifest.dim

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def info(self) -> dict[str, Any]:
        return {"shards": [s.info() for s in self.shards], "model": self.manifest.model, "dim": self.dim,
                "vectors": len(self)}

    # -------------------------------------------------------------- dense
    def search_hits(self, query_vectors: np.ndarray, k: int = 10) -> list[list[ShardHit]]:
        """The ``k`` best ``(score, shard, rowid)`` of each query vector over all shards, best first.

        Ranked by score (higher first), then shard position, then rowid."""
        queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
        if queries.shape[1] != self.dim:
            raise InvalidArgumentError(f"query vectors have dimension {queries.shape[1]}, the shards hold {self.dim}")
        per_query: list[list[tuple[float, int, int]]] = [[] for _ in queries]
        if k <= 0:
            return [[] for _ in queries]
        for s, shard in enumerate(self.shards):
            faiss_index = shard._vectors.searchable()  # with every committed change in it
            if len(shard) == 0:
                continue
            scores, ids = search_faiss(faiss_index, queries, min(k, len(shard)))
            for q, (row_s, row_i) in enumerate(zip(scores, ids)):
                per_query[q].extend((-float(d), s, int(i)) for d, i in zip(row_s, row_i) if i >= 0)
        return [[ShardHit(-neg, s, r) for neg, s, r in heapq.nsmallest(k, cands)] for cands in per_query]

    def search(self, query_vectors: np.ndarray, k: int = 10) -> list[list[ScoredChunk]]:
        """The ``k`` nearest chunks of each query vector over all shards, best first (as :meth:`Index.search`)."""
        return self._to_chunks(self.search_hits(query_vectors, k))

    def _to_chunks(self, hits: list[list[ShardHit]]) -> list[list[ScoredChunk]]:
        wanted: dict[int, set[int]] = {}
        for row in hits:
            for h in row:
                wanted.setdefault(h.shard, set()).add(h.rowid)
        found = {s: self.shards[s].store.chunks_by_rowid(rowids) for s, rowids in wanted.items()}
        return [[ScoredChunk(found[h.shard][h.rowid], h.score) for h in row if h.rowid in found[h.shard]]
                for row in hits]

    # --------------------------------------------------------------- BM25
    def bm25_search(self, query: str, k: int = 10, *, exact: bool = False) -> list[ScoredChunk]:
        """BM25 over all shards; see the module docstring for why ``exact=False`` is an approximation.

        ``exact=False``: each shard's own BM25 top ``k``, merged by score (ties as in :meth:`search`).
        ``exact=True``: one BM25 over every shard's chunk texts, built on first use (needs the
        shards' BM25 settings to agree), which scores as a single index's BM25 would."""
        if k <= 0:
            return []
        if exact:
            bm25 = self.global_bm25()
            gids, scores = bm25.search(query, k)
            hits = sorted((ShardHit(float(sc), int(g) >> _ROWID_BITS, int(g) & ((1 << _ROWID_BITS) - 1))
                           for g, sc in zip(gids, scores)), key=lambda h: (-h.score, h.shard, h.rowid))
            return self._to_chunks([hits])[0]
        cands: list[tuple[float, int, int]] = []
        for s, shard in enumerate(self.shards):
            rowids, scores = shard.bm25.search(query, k)
            cands.extend((-float(sc), s, int(r)) for r, sc in zip(rowids, scores))
        return self._to_chunks([[ShardHit(-neg, s, r) for neg, s, r in heapq.nsmallest(k, cands)]])[0]

    def global_bm25(self) -> BM25Index:
        """One BM25 over the chunk texts of all shards (ids: shard << 40 | rowid), built once."""
        if self._global_bm25 is None:
            configs = [s.manifest.bm25 for s in self.shards]
            for config, name in zip(configs[1:], self.names[1:]):
                if config != configs[0]:
                    raise IndexMismatchError(f"shard {name}: BM25 settings {config} differ from shard "
                                             f"{self.names[0]}'s {configs[0]}; no single BM25 ranks both")
            ids, texts = [], []
            for s, shard in enumerate(self.shards):
                if len(shard) >= 1 << _ROWID_BITS:
                    raise InvalidArgumentError(f"shard {self.names[s]}: too many chunks for the global BM25 ids")
                for rowids, batch in shard.store.iter_chunk_texts(titled=BM25Config(**configs[0]).title_every_chunk):
                    ids.append((np.int64(s) << _ROWID_BITS) | np.asarray(rowids, dtype=np.int64))
                    texts += batch
            bm25 = BM25Index(BM25Config(**configs[0]))
            bm25.build(np.concatenate(ids) if ids else np.zeros(0, np.int64), texts, generation=-1)
            self._global_bm25 = bm25
        return self._global_bm25
