"""The FAISS structures behind ``Index``: flat, HNSW, IVF-Flat and IVF-PQ with exact re-scoring.

``ivfpq`` (for millions of chunks; see ``bench/bench_10m.py``): an ``IndexIVFPQ``
(inner product, flat coarse quantizer, PQ on the residuals) whose ids are the chunk
rowids, plus two ``.npy`` files beside ``vectors.faiss``:

* ``vectors.f16.npy``: every vector as float16, in rowid order (2 bytes a coordinate);
* ``vectors.ids.npy``: the rowids, ascending (row ``i`` of the float16 file is chunk ``ids[i]``).

A query asks IVF-PQ for ``refine`` candidates (``nprobe`` lists), reads their float16
rows and re-scores them exactly: PQ alone orders near neighbours of clustered
embeddings poorly, the re-scoring recovers what the probed lists hold (Recall@10 and
latency per nprobe and refine: ``python bench/bench_10m.py``). On open, the IVF file is
read with ``IO_FLAG_MMAP | IO_FLAG_READ_ONLY`` and both ``.npy`` files are memory-mapped,
so opening costs milliseconds whatever the size.

Training (k-means for the lists, then the PQ codebooks) runs on a strided sample of the
store's vectors, once there are :data:`IVFPQ_TRAIN_FROM`; until then the index is exact
(flat). A rebuild re-uses the trained centroids and codebooks while the number of lists
the size calls for (:func:`default_nlist`) is unchanged (the size within a factor of ~4),
so adding files costs encoding, not training. Vectors are streamed from the store in
batches: a rebuild holds the sample and one batch in memory, not every vector.

Changes after the build do not rebuild it while they are small (up to a tenth of its
vectors, :data:`DELTA_SHARE`, and :data:`DELTA_MAX` added vectors): chunks added since are
searched exactly in a flat index beside it, and the rowids removed since are skipped by an
``IDSelector``; both lists are merged by exact score. They are saved as three small files
(:data:`DELTA_FILES`); the large files are not rewritten. Rowids are never reused (the
store's ``AUTOINCREMENT``), so what changed is read off the store: rowids above the
build's largest are added, the build's rowids the store no longer has are removed.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import numpy as np

from contextkit.core.errors import IndexCorruptError
from contextkit.index._checksums import npy_load
from contextkit.index._safe_files import opened, require_regular

__all__ = ["DELTA_FILES", "DELTA_MAX", "DELTA_SHARE", "EXACT_FILTER_MAX", "EXACT_FILTER_SHARE", "IVFPQ_FILES",
           "IVFPQ_TRAIN_FROM", "RefinedIVFPQ", "SkippingIndex", "build_ivfpq", "default_nlist", "default_pq_m",
           "filtered_params", "ids_problem", "structure_problem", "ivf_nprobe", "list_ids", "load_delta",
           "mapped_read_flags", "open_ivfpq", "read_faiss", "search_faiss"]

#: ``ivfpq`` stays exact (flat) below this many vectors: k-means wants ~39 points per list
#: and each 8-bit PQ codebook 256 x 39 = 9,984 (FAISS warns below that).
IVFPQ_TRAIN_FROM = 10_000
#: Files of a trained ``ivfpq`` index besides ``vectors.faiss``.
IVFPQ_FILES = ("vectors.f16.npy", "vectors.ids.npy")
#: Files of the changes since the IVF-PQ build (present only while there are some): the added
#: vectors (float32) and their rowids, and the build's rowids removed since (all ascending).
DELTA_FILES = ("vectors.delta.npy", "vectors.delta_ids.npy", "vectors.deleted.npy")
#: Changes kept beside a build before the next save rebuilds it: this share of its vectors, and at most
#: this many added vectors (searched exactly: 100,000 x 384 float32 is 154 MB, all scanned by every query).
DELTA_SHARE, DELTA_MAX = 0.10, 100_000


def ivf_nprobe(nlist: int) -> int:
    """Lists an IVF index visits per query by default."""
    return int(min(nlist, max(16, 2 * np.sqrt(nlist))))


def default_nlist(n: int) -> int:
    """About sqrt(n) lists, a power of two, from 64 to 2048 (20k: 128, 1M: 1024, 10M: 2048).

    Why the cap: adding a vector compares it with every list's centroid; at 10M vectors and
    4096 lists that step alone takes a large share of the build (bench/bench_10m.py)."""
    return int(min(2048, max(64, 2 ** round(np.log2(np.sqrt(max(n, 1)))))))


def default_pq_m(dim: int, n: int) -> int:
    """PQ sub-vectors for ``n`` vectors: 4-d sub-vectors (96 for 384-d) from 500,000 vectors, 8-d below.

    Why: on embedding-like vectors PQ96 needed far fewer candidates re-scored than PQ48
    for the same recall (bench/bench_10m.py --quick); but FAISS 1.15 trains 4-d codebooks
    pathologically slowly on small samples (timed by hand, PQ96 against PQ48 on 20,000
    vectors), and at that size re-scoring 100 candidates recovers the recall anyway.
    Falls back to the largest divisor of ``dim`` below the target."""
    target = max(1, dim // 4 if n >= 500_000 else dim // 8)
    return next(m for m in range(target, 0, -1) if dim % m == 0)


#: A filter that allows at most this many chunks is searched exactly over their vectors (see
#: :func:`filtered_params` for wider ones). Why: an approximate index finds a selective filter's
#: chunks poorly, since most of what it visits is filtered out (Recall@10 of
#: both paths per index type and share allowed: ``python bench/bench_filtered.py``). Exact search
#: reads every allowed vector from the store (less from ivfpq's rows): its cost grows with this size.
EXACT_FILTER_MAX = 4096
#: ... and at most this share of the index: above it, the widened approximate search finds them all
#: faster than reading their vectors, with the same recall (``python bench/bench_filtered.py``).
EXACT_FILTER_SHARE = 0.05
#: How much wider an approximate search looks for a filtered query, at most (see :func:`filtered_params`).
FILTER_WIDEN_MAX = 64

# Typing: FAISS's own stubs (faiss/__init__.pyi, 1.15) declare every ``SearchParameters*`` constructor
# without arguments, though its SWIG wrapper takes the fields as keyword arguments (the documented way,
# ``SearchParametersIVF(sel=..., nprobe=...)``), and omit ``SearchParametersHNSW`` and ``PyCallbackIOWriter``,
# which the module has: those calls carry ``# type: ignore[call-arg]`` / ``[attr-defined]``.


def filtered_params(index: Any, allowed: np.ndarray) -> Any:
    """FAISS search parameters of ``index``'s own kind that keep only the ``allowed`` rowids.

    FAISS's IVF indexes refuse plain ``SearchParameters`` (they need ``SearchParametersIVF``),
    and every approximate index visits about as many entries with a filter as without, so it
    finds fewer of the allowed ones the more selective the filter: the search is widened by
    the square root of the inverse of the share allowed (``nprobe`` for IVF, ``efSearch`` for
    HNSW; 2x at a quarter allowed, 4.5x at 5%), up to :data:`FILTER_WIDEN_MAX` times. Filters
    more selective than that are scored exactly instead (``Index.nearest_rowids``)."""
    import faiss

    sel = faiss.IDSelectorBatch(np.ascontiguousarray(allowed, dtype=np.int64))
    inner = faiss.downcast_index(index.index) if isinstance(index, (faiss.IndexIDMap, SkippingIndex)) else index
    total = max(1, int(index.ntotal))
    widen = float(min(FILTER_WIDEN_MAX, max(1.0, np.sqrt(total / max(1, len(allowed))))))
    params: Any  # a faiss SearchParameters*, which also carries the selector (below)
    if isinstance(index, RefinedIVFPQ):
        nprobe = min(index.nlist, int(np.ceil(index.nprobe * widen)))
        params = faiss.SearchParametersIVF(sel=sel, nprobe=nprobe)  # type: ignore[call-arg]
    elif isinstance(inner, faiss.IndexIVF):
        nprobe = min(inner.nlist, int(np.ceil(inner.nprobe * widen)))
        params = faiss.SearchParametersIVF(sel=sel, nprobe=nprobe)  # type: ignore[call-arg]
    elif isinstance(inner, faiss.IndexHNSW):
        ef = int(np.ceil(inner.hnsw.efSearch * widen))
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=ef)  # type: ignore[attr-defined]
    else:
        params = faiss.SearchParameters(sel=sel)  # type: ignore[call-arg]
    params._contextkit_sel = sel  # the selector must live as long as the parameters
    return params


def _skip_selector(deleted: np.ndarray) -> tuple[Any, Any]:
    """``(batch, not-batch)`` selectors that skip ``deleted``; built once per set (a hash set of its
    rowids, too costly to build per query), kept with the index, read-only while searched."""
    import faiss

    gone = faiss.IDSelectorBatch(np.ascontiguousarray(deleted, dtype=np.int64))
    return gone, faiss.IDSelectorNot(gone)


def _also_skipping(sel: Any, skip: tuple[Any, Any]) -> Any:
    """The caller's selector (or none) restricted further to rowids not in ``skip``."""
    import faiss

    return faiss.IDSelectorAnd(sel, skip[1]) if sel is not None else skip[1]


class SkippingIndex:
    """An ``IndexIDMap2`` over HNSW whose removed rowids are skipped at search, not removed.

    Why: FAISS's HNSW cannot remove a vector, and rebuilding the graph after every removal
    is slow (``python bench/bench_index_update.py --kind hnsw``); added vectors go into the graph in place.
    Removed rowids are kept (saved as ``vectors.deleted.npy``) and excluded by an
    ``IDSelector`` until they reach :data:`DELTA_SHARE` of the graph, when the next save
    rebuilds it. Rowids are never reused, so a skipped rowid never comes back.

    ``index`` is the structure inside, as for an ``IndexIDMap2`` (what callers inspect).
    """

    def __init__(self, idmap: Any, deleted: np.ndarray) -> None:
        self.idmap = idmap
        self.index = idmap.index
        self.deleted = np.unique(np.asarray(deleted, dtype=np.int64))
        self.d = int(idmap.d)
        self._skip: tuple[Any, Any] | None = None

    @property
    def ntotal(self) -> int:
        return int(self.idmap.ntotal) - len(self.deleted)

    def add_with_ids(self, x: np.ndarray, ids: np.ndarray) -> None:
        self.idmap.add_with_ids(x, ids)

    def remove_ids(self, ids: np.ndarray) -> None:
        self.deleted = np.union1d(self.deleted, np.asarray(ids, dtype=np.int64))
        self._skip = None

    def search(self, x: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        inner = cast("faiss.IndexHNSW", faiss.downcast_index(self.index))  # only HNSW is wrapped so
        skip = self._skip = self._skip or _skip_selector(self.deleted)  # a local keeps it alive meanwhile
        both = _also_skipping(getattr(params, "sel", None) if params is not None else None, skip)
        ef = getattr(params, "efSearch", 0) or inner.hnsw.efSearch
        # a wider search: about this many of the visited entries are skipped
        ef = int(np.ceil(ef * self.idmap.ntotal / max(1, self.ntotal)))
        wider = faiss.SearchParametersHNSW(sel=both, efSearch=ef)  # type: ignore[attr-defined]
        return self.idmap.search(x, k, params=wider)


def search_faiss(index: Any, queries: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """FAISS search; a handful of queries runs on this thread alone.

    Why: after a parallel region FAISS's OpenMP threads spin, and on a small CPU
    they steal the cores the next step needs (the query embedding of the next
    request ran slower, and so did the search itself). One query gains nothing from
    threads. ``omp_set_num_threads`` applies to the calling thread only.
    """
    import faiss

    if len(queries) > 4:
        return index.search(queries, k, params=params)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(queries, k, params=params)
    finally:
        faiss.omp_set_num_threads(before)


class RefinedIVFPQ:
    """IVF-PQ candidates re-scored exactly from float16 vectors; searched like a FAISS index.

    ``search(x, k, params)`` takes the ``params`` a caller gives FAISS (an ``IDSelector``
    in ``params.sel`` restricts the chunks; an ``nprobe`` in ``SearchParametersIVF`` wins
    over the default) and returns ``(scores, rowids)`` as FAISS does, -1 where fewer than
    ``k`` were found.
    """

    def __init__(self, ivf: Any, raw: np.ndarray, ids: np.ndarray, nprobe: int, refine: int,
                 raw_sha256: str | None = None, raw_path: Path | None = None) -> None:
        self.index = ivf  # what Index._faiss_is_flat looks at
        self.raw, self.ids = raw, ids
        self.nprobe, self.refine = nprobe, refine
        self.raw_sha256 = raw_sha256  # hashed while the build wrote it (None when opened from disk)
        self.raw_path = raw_path  # the build's temporary file (None when opened from disk)
        self.d = int(ivf.d)
        self._owner: Any = None
        self.delta: Any = None  # IndexIDMap2(IndexFlatIP): vectors added since the build, or None
        self.deleted = np.zeros(0, dtype=np.int64)  # the build's rowids removed since, ascending
        self._skip: tuple[Any, Any] | None = None
        self.source: Path | str = "vectors.faiss"  # the file it was read from (what an error names)

    @property
    def ntotal(self) -> int:
        """Vectors searched: the build's, less those removed since, plus those added since."""
        return self.built_total - len(self.deleted) + (int(self.delta.ntotal) if self.delta is not None else 0)

    @property
    def built_total(self) -> int:
        """Vectors in the IVF-PQ build itself (the rows of the float16 file)."""
        return int(self.index.ntotal)

    @property
    def has_changes(self) -> bool:
        return self.delta is not None or len(self.deleted) > 0

    def with_changes(self, vectors: np.ndarray, ids: np.ndarray, deleted: np.ndarray) -> RefinedIVFPQ:
        """This build with ``vectors`` (rowids ``ids``) added since and the build's rowids ``deleted`` removed."""
        import faiss

        new = RefinedIVFPQ(self.index, self.raw, self.ids, self.nprobe, self.refine, self.raw_sha256, self.raw_path)
        new._owner, new.source = self._owner, self.source
        new.deleted = np.ascontiguousarray(deleted, dtype=np.int64)
        if len(ids):
            new.delta = faiss.IndexIDMap2(faiss.IndexFlatIP(self.d))
            new.delta.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32),
                                   np.ascontiguousarray(ids, dtype=np.int64))
        return new

    def vectors(self, rowids: np.ndarray) -> np.ndarray:
        """The vectors of these rowids (all searched by this index): float16 rows of the build, the
        added vectors for the rest; the values its re-scoring uses."""
        rowids = np.asarray(rowids, dtype=np.int64)
        out = np.empty((len(rowids), self.d), dtype=np.float32)
        pos = np.searchsorted(self.ids, rowids)
        built = (pos < len(self.ids)) & (self.ids[np.minimum(pos, len(self.ids) - 1)] == rowids) if len(self.ids) \
            else np.zeros(len(rowids), dtype=bool)
        order = np.argsort(pos[built])  # read the memory map in file order
        rows = np.flatnonzero(built)[order]
        out[rows] = self.raw[pos[rows]]
        for i in np.flatnonzero(~built):
            out[i] = self.delta.reconstruct(int(rowids[i]))
        return out

    def delta_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors, rowids)`` added since the build, ascending by rowid (what :data:`DELTA_FILES` hold)."""
        import faiss

        if self.delta is None:
            return np.zeros((0, self.d), dtype=np.float32), np.zeros(0, dtype=np.int64)
        ids = faiss.vector_to_array(self.delta.id_map).astype(np.int64)
        vectors = self.delta.index.reconstruct_n(0, int(self.delta.ntotal))
        order = np.argsort(ids, kind="stable")
        return vectors[order], ids[order]

    @property
    def nlist(self) -> int:
        return int(self.index.nlist)

    def search(self, x: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        x = np.ascontiguousarray(x, dtype=np.float32)
        nprobe = getattr(params, "nprobe", 0) or self.nprobe
        sel = getattr(params, "sel", None) if params is not None else None
        main_sel = sel
        if len(self.deleted):
            skip = self._skip = self._skip or _skip_selector(self.deleted)  # a local keeps it alive meanwhile
            main_sel = _also_skipping(sel, skip)
        if main_sel is not None:
            ivf_params = faiss.SearchParametersIVF(nprobe=min(nprobe, self.nlist), sel=main_sel)  # type: ignore[call-arg]
        else:
            ivf_params = faiss.SearchParametersIVF(nprobe=min(nprobe, self.nlist))  # type: ignore[call-arg]
        scores, found = self._search_built(x, k, ivf_params)
        if self.delta is not None:  # exact over what was added since the build, then one ranking
            kd = min(k, int(self.delta.ntotal))
            exact = faiss.SearchParameters(sel=sel) if sel is not None else None  # type: ignore[call-arg]
            d_scores, d_ids = self.delta.search(x, kd, params=exact)
            scores, found = _merge(scores, found, d_scores, d_ids, k)
        return scores, found

    def _search_built(self, x: np.ndarray, k: int, ivf_params: Any) -> tuple[np.ndarray, np.ndarray]:
        """IVF-PQ's candidates from the build, re-scored exactly from the float16 rows."""
        _, cand = self.index.search(x, max(k, self.refine), params=ivf_params)
        scores = np.full((len(x), k), -np.inf, dtype=np.float32)
        found = np.full((len(x), k), -1, dtype=np.int64)
        for q, row in enumerate(cand):
            row = row[row >= 0]
            if not len(row):
                continue
            if unknown_candidates(self.ids, row):  # an IVF list id vectors.ids.npy lacks: a crafted file
                raise IndexCorruptError(f"{self.source}: an IVF-PQ list holds a rowid that vectors.ids.npy lacks "
                                        "(crafted or damaged); `contextkit repair` rebuilds both", file="vectors.faiss")
            pos = np.searchsorted(self.ids, row)
            order = np.argsort(pos)  # read the memory map in file order
            vecs = np.empty((len(pos), self.d), dtype=np.float32)
            vecs[order] = self.raw[pos[order]]
            s = vecs @ x[q]
            best = np.argsort(-s, kind="stable")[:k]  # ties keep IVF-PQ's order
            scores[q, : len(best)] = s[best]
            found[q, : len(best)] = row[best]
        return scores, found


def _merge(scores: np.ndarray, ids: np.ndarray, more_scores: np.ndarray, more_ids: np.ndarray, k: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of two result lists per query (exact scores both); -1 / -inf where fewer exist."""
    all_ids = np.concatenate([ids, more_ids], axis=1)
    all_scores = np.where(all_ids >= 0, np.concatenate([scores, more_scores], axis=1), -np.inf).astype(np.float32)
    order = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(all_scores, order, 1), np.take_along_axis(all_ids, order, 1)


def load_delta(built: RefinedIVFPQ, folder: Path, paths: dict[str, Path] | None = None) -> RefinedIVFPQ:
    """The saved build with its saved changes (:data:`DELTA_FILES`); ``ValueError`` when they do not fit it.

    ``paths``: where each of those files is (a generation names its own); by default in ``folder``."""
    for name in DELTA_FILES:
        require_regular((paths or {}).get(name, folder / name))
    vectors, ids, deleted = (npy_load((paths or {}).get(name, folder / name))
                             for name in DELTA_FILES)
    if vectors.ndim != 2 or vectors.shape != (len(ids), built.d) or ids.ndim != 1 or deleted.ndim != 1:
        raise ValueError(f"{DELTA_FILES[0]} {vectors.shape}, {DELTA_FILES[1]} {ids.shape}, {DELTA_FILES[2]} "
                         f"{deleted.shape} do not describe changes to a {built.d}-dimensional build")
    if len(deleted) > built.built_total:
        raise ValueError(f"{DELTA_FILES[2]}: {len(deleted)} rowids removed from a build of {built.built_total}")
    return built.with_changes(vectors, ids, deleted)


_READ_LOCK = threading.Lock()


def mapped_read_flags() -> int:
    """``read_faiss`` flags for a reader: a flat or HNSW file's vectors mapped, not copied (FAISS's
    ``IO_FLAG_MMAP_IFC``; a FAISS without it reads them as before).

    Why: a reader never changes its generation's structure, and its files never change once saved (a
    writer saves the next generation under new names). Copying them cost an open 11 ms on python3-doc's
    20,000 vectors (1 ms mapped) and a second or more on a million, on every ``search_index`` call and
    ``contextkit search``; mapped, the processes of one host (a server's workers, a batch of CLI calls)
    share one copy in the page cache instead of one each. A writer's structure is read into memory: it
    adds and removes vectors. IVF-PQ lists are mapped already (:func:`open_ivfpq`)."""
    import faiss

    return int(getattr(faiss, "IO_FLAG_MMAP_IFC", 0))


def read_faiss(path: Path, flags: int = 0) -> Any:
    """``faiss.read_index`` of a regular file (a link, FIFO or device: ``IndexCorruptError``), no array in it
    larger than the file itself. Why: FAISS allocates each array by the size its file claims (up to 1 TiB by
    default) before reading it, so a crafted count of a few bytes made it zero-fill gigabytes. An IVF-PQ
    file also gets the table FAISS computes on reading it (at most ``precomputed_table_max_bytes``, 2 GiB).
    The limit is process-wide in FAISS, so reads take turns while it is lowered (an open, a refresh)."""
    import faiss

    with opened(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        table_max = getattr(faiss.cvar, "precomputed_table_max_bytes", 1 << 31)  # (not in faiss's stubs)
        computed = int(table_max) if fh.read(4) in (b"IwPQ", b"IvPQ") else 0
    with _READ_LOCK:
        before = faiss.get_deserialization_vector_byte_limit()
        faiss.set_deserialization_vector_byte_limit(2 * size + (1 << 20) + computed)
        try:
            return faiss.read_index(str(path), flags)
        finally:
            faiss.set_deserialization_vector_byte_limit(before)


def open_ivfpq(folder: Path, nprobe: int, refine: int, paths: dict[str, Path] | None = None) -> RefinedIVFPQ:
    """The saved index: IVF lists memory-mapped from ``vectors.faiss``, both ``.npy`` files mapped."""
    import faiss

    where = paths or {}
    for name in IVFPQ_FILES:  # numpy maps them by name: links and FIFOs refused first
        require_regular(where.get(name, folder / name))
    ivf = read_faiss(where.get("vectors.faiss", folder / "vectors.faiss"), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    raw = npy_load(where.get(IVFPQ_FILES[0], folder / IVFPQ_FILES[0]), mmap_mode="r")
    ids = npy_load(where.get(IVFPQ_FILES[1], folder / IVFPQ_FILES[1]), mmap_mode="r")
    found = RefinedIVFPQ(faiss.downcast_index(ivf), raw, ids, nprobe, refine)
    found._owner = ivf  # the downcast view does not own the C++ index: keep its owner alive
    found.source = where.get("vectors.faiss", folder / "vectors.faiss")
    return found


def _trained_like(old: Any, dim: int) -> Any:
    """A new empty ``IndexIVFPQ`` with ``old``'s trained centroids and PQ codebooks (no k-means, no PQ training)."""
    import faiss

    centroids = old.quantizer.reconstruct_n(0, old.nlist)
    quantizer = faiss.IndexFlatIP(dim)
    quantizer.add(centroids)
    new = faiss.IndexIVFPQ(quantizer, dim, old.nlist, old.pq.M, old.pq.nbits, faiss.METRIC_INNER_PRODUCT)
    faiss.copy_array_to_vector(faiss.vector_to_array(old.pq.centroids), new.pq.centroids)
    new.is_trained = True
    new.precompute_table()
    return new


def build_ivfpq(batches: Iterable[tuple[np.ndarray, np.ndarray]], n: int, dim: int, m: int, nbits: int,
                nprobe: int, refine: int, work_dir: Path | None, previous: RefinedIVFPQ | None = None,
                sample_batches: Iterable[tuple[np.ndarray, np.ndarray]] | None = None) -> RefinedIVFPQ:
    """Train (or re-use ``previous``'s training) and fill an IVF-PQ index from ``(rowids, vectors)`` batches.

    ``sample_batches``: a first pass over the same vectors to draw the training sample from
    (needed only when training). The float16 rows go to a temporary file in ``work_dir``
    (the index folder when writable; the system's temporary folder otherwise), hashed as
    they are written; :meth:`Index.save` moves it into place.
    """

    nlist = default_nlist(n)
    if previous is not None and previous.nlist == nlist and previous.index.pq.M == m and previous.d == dim:
        ivf = _trained_like(previous.index, dim)
    else:
        ivf = _train(sample_batches or batches, n, dim, nlist, m, nbits)
    fd, tmp = tempfile.mkstemp(prefix="vectors.f16.npy.", suffix=".build", dir=work_dir)
    digest = hashlib.sha256()
    ids_parts = []
    try:
        with os.fdopen(fd, "wb") as fh:
            def write(data: bytes) -> None:
                fh.write(data)
                digest.update(data)

            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": np.dtype(np.float16).str,
                                                          "fortran_order": False, "shape": (n, dim)})
            write(header.getvalue())
            done = 0
            for ids, vecs in batches:
                vecs = np.ascontiguousarray(vecs, dtype=np.float32)
                ivf.add_with_ids(vecs, np.ascontiguousarray(ids, dtype=np.int64))
                write(vecs.astype(np.float16).tobytes())
                ids_parts.append(np.asarray(ids, dtype=np.int64))
                done += len(ids)
            if done != n:
                raise RuntimeError(f"the store yielded {done} vectors, {n} expected (changed during the rebuild)")
            fh.flush()
            os.fsync(fh.fileno())
        ids_all = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int64)
        if len(ids_all) > 1 and not np.all(ids_all[1:] > ids_all[:-1]):
            raise RuntimeError("rowids must come in ascending order")
        raw = npy_load(tmp, mmap_mode="r")
    except BaseException:
        os.unlink(tmp)
        raise
    return RefinedIVFPQ(ivf, raw, ids_all, nprobe, refine, raw_sha256=digest.hexdigest(), raw_path=Path(tmp))


def _train(batches: Iterable[tuple[np.ndarray, np.ndarray]], n: int, dim: int, nlist: int, m: int, nbits: int) -> Any:
    """k-means for the lists and the PQ codebooks, on a strided sample of max(65,536, 50 x nlist) vectors.

    Why at least 65,536: FAISS's PQ trained much slower on 25,600 vectors than on 65,536
    (bench/bench_10m.py); strided rather than the first ones: the store is in ingestion
    order, so the first vectors are the first files."""
    import faiss

    ntrain = min(n, max(65_536, 50 * nlist))
    step = max(1, n // ntrain)
    parts, seen = [], 0
    for _, vecs in batches:
        pick = np.arange((-seen) % step, len(vecs), step)
        parts.append(np.asarray(vecs[pick], dtype=np.float32))
        seen += len(vecs)
    sample = np.ascontiguousarray(np.concatenate(parts)[:ntrain])
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFPQ(quantizer, dim, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = ivf.pq.cp.seed = 1234  # the same vectors train the same index
    ivf.train(sample)
    return ivf


# ---------------------------------------------------------------- ids of a file read from elsewhere
def ids_problem(index: Any, max_rowid: int) -> str | None:
    """What is wrong with the ids and links a FAISS structure read from disk holds, for every kind, or None.

    Why: FAISS trusts its files. An ``IndexIDMap`` over IVF looks up ``id_map[label]`` for each label its
    lists hold, an HNSW search follows every neighbour id of its graph, and an IVF-PQ list's ids are
    rowids looked up in ``vectors.ids.npy``: an id out of range there reads memory past an array
    (a crash, or another chunk served). So each id is checked against what it must index: rowids
    unique and between 1 and the store's largest (``max_rowid``), IVF list ids and graph links within
    the structure. Cost: one pass over the ids and links (the file was just read whole), except for
    IVF-PQ, whose lists stay mapped: only ``vectors.ids.npy``'s ends here, each candidate at query time."""
    if isinstance(index, RefinedIVFPQ):
        return _refined_problem(index, max_rowid)
    if isinstance(index, SkippingIndex):
        return _idmap_problem(index.idmap, max_rowid) or _rowids_problem(index.deleted, max_rowid, "skipped rowids")
    if hasattr(index, "id_map"):
        return _idmap_problem(index, max_rowid)
    return None


def structure_problem(index: Any) -> str | None:
    """What is wrong inside an id map read from disk (its IVF lists' ids, its HNSW graph's links), or None;
    the rowids themselves are the caller's to compare (``verify`` with every row of the store)."""
    import faiss

    if not hasattr(index, "id_map"):
        return None
    return _inner_problem(faiss.downcast_index(index.index), len(faiss.vector_to_array(index.id_map)))


def _rowids_problem(ids: np.ndarray, max_rowid: int, what: str) -> str | None:
    """Rowids out of the store's range, or listed twice. Ascending ids (what a build or an ingest adds) are
    checked in one pass; only ids out of order are sorted."""
    if not len(ids):
        return None
    ascending = len(ids) == 1 or bool(np.all(ids[1:] > ids[:-1]))
    low, high = (int(ids[0]), int(ids[-1])) if ascending else (int(ids.min()), int(ids.max()))
    if low < 1 or high > max_rowid:
        return f"{what} run from {low} to {high}, the store's rowids from 1 to {max_rowid}"
    if not ascending and len(np.unique(ids)) != len(ids):
        return f"a rowid is listed twice in the {what}"
    return None


def _idmap_problem(idmap: Any, max_rowid: int) -> str | None:
    import faiss

    ids = faiss.vector_to_array(idmap.id_map)
    if len(ids) != int(idmap.ntotal):
        return f"{len(ids)} ids for {int(idmap.ntotal)} vectors"
    inner = faiss.downcast_index(idmap.index)
    return _rowids_problem(ids, max_rowid, "FAISS ids") or _inner_problem(inner, len(ids))


def _inner_problem(inner: Any, n: int) -> str | None:
    """The structure inside an id map: its vector count, an IVF's list ids, an HNSW graph's links."""
    import faiss

    if int(inner.ntotal) != n:
        return f"{int(inner.ntotal)} vectors inside, {n} ids outside"
    if isinstance(inner, faiss.IndexIVF):
        listed = list_ids(inner)
        if len(listed) != n or (n and (int(listed.min()) < 0 or int(listed.max()) >= n)):
            return f"its IVF lists hold {len(listed)} ids, not each of the positions 0 to {n - 1} once"
        seen = np.zeros(n, dtype=bool)
        seen[listed] = True  # n ids within 0..n-1: each once exactly when every position is seen
        if not seen.all():
            return "its IVF lists hold a position twice"
    if isinstance(inner, faiss.IndexHNSW):
        return _graph_problem(inner.hnsw, n)
    return None


def list_ids(ivf: Any) -> np.ndarray:
    """Every id an IVF's inverted lists hold (one pass over the lists, nothing copied but the ids)."""
    import faiss

    lists = ivf.invlists
    parts = []
    for lst in range(int(ivf.nlist)):
        size = int(lists.list_size(lst))
        if size:
            parts.append(faiss.rev_swig_ptr(lists.get_ids(lst), size).copy())
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _graph_problem(hnsw: Any, n: int) -> str | None:
    """An HNSW graph whose links, levels or offsets point outside it (a search would follow them)."""
    import faiss

    def view(vec: Any) -> np.ndarray:
        return faiss.rev_swig_ptr(vec.data(), vec.size()) if vec.size() else np.zeros(0, dtype=np.int64)

    neighbors, offsets, levels = view(hnsw.neighbors), view(hnsw.offsets), view(hnsw.levels)
    cum = faiss.vector_to_array(hnsw.cum_nneighbor_per_level)
    if len(levels) != n or len(offsets) != n + 1 or (n and (int(levels.min()) < 1 or int(levels.max()) >= len(cum))):
        return "its HNSW levels do not fit the graph"
    if offsets[0] != 0 or int(offsets[-1]) != len(neighbors) or \
            (n and not np.array_equal(np.diff(offsets.astype(np.int64)), cum[levels])):
        return "its HNSW link offsets do not fit the graph"
    if len(neighbors) and (int(neighbors.min()) < -1 or int(neighbors.max()) >= n):
        return "an HNSW link points outside the graph"
    entry, top = int(hnsw.entry_point), int(hnsw.max_level)
    if n and (not 0 <= entry < n or top != int(levels[entry]) - 1):
        return "its HNSW entry point is outside the graph"
    return None


def _refined_problem(f: RefinedIVFPQ, max_rowid: int) -> str | None:
    """IVF-PQ: ``vectors.ids.npy`` ascending within the store's rowids (its ends; the lists at query time)."""
    if len(f.ids) and (int(f.ids[0]) < 1 or int(f.ids[-1]) > max_rowid or
                       (len(f.ids) > 1 and int(f.ids[0]) >= int(f.ids[-1]))):
        return f"vectors.ids.npy runs from {int(f.ids[0])} to {int(f.ids[-1])}, the store's rowids from 1 to {max_rowid}"
    if f.delta is not None:
        return _idmap_problem(f.delta, max_rowid)
    return _rowids_problem(f.deleted, max_rowid, "removed rowids")


def unknown_candidates(ids: np.ndarray, rows: np.ndarray) -> bool:
    """Whether IVF-PQ candidates ``rows`` hold a rowid that ``ids`` (``vectors.ids.npy``, ascending) lacks."""
    pos = np.searchsorted(ids, rows)
    return bool(np.any(pos >= len(ids)) or np.any(ids[np.minimum(pos, len(ids) - 1)] != rows))
