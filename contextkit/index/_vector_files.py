"""The FAISS half of an index: the structure searched in memory, and ``vectors.faiss`` (with ``ivfpq``'s ``.npy`` files).

:class:`VectorFiles` is a component each :class:`~contextkit.index.Index` owns (``index._vectors``):
it chooses the structure for the index's size (:meth:`VectorFiles.kind`), keeps it in step with
the chunks the store adds and removes (in place where FAISS can, by a rebuild from the store's
vectors where it cannot), and reads, checks and writes its files. It shares the index's folder,
manifest and store, but not its transactions or its BM25: the index tells it what changed. The
structures themselves are in :mod:`._faiss_kinds`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from contextkit.core.atomic import atomic_file
from contextkit.core.errors import IndexCorruptError, IndexMismatchError
from contextkit.index._bm25_files import read_meta
from contextkit.index._checksums import (
    FileSum,
    check_file_on_open,
    faiss_header_count,
    file_sum,
    npy_load,
)
from contextkit.index._disk import fsync_dir, write_reason
from contextkit.index._faiss_kinds import (
    DELTA_FILES,
    DELTA_MAX,
    DELTA_SHARE,
    EXACT_FILTER_MAX,
    EXACT_FILTER_SHARE,
    IVFPQ_FILES,
    IVFPQ_TRAIN_FROM,
    RefinedIVFPQ,
    SkippingIndex,
    build_ivfpq,
    default_nlist,
    default_pq_m,
    filtered_params,
    ids_problem,
    ivf_nprobe,
    load_delta,
    mapped_read_flags,
    open_ivfpq,
    read_faiss,
    search_faiss,
)
from contextkit.index._manifest import IndexManifest
from contextkit.index._store import RecordStore

__all__ = ["AUTO_HNSW_FROM", "VectorFiles", "bm25_rowid_count", "generation_name"]


def generation_name(role: str, gen: int) -> str:
    """The file generation ``gen`` writes for ``role``: ``vectors.faiss`` -> ``vectors.12.faiss``, ``bm25`` -> ``bm25.12``."""
    stem, _, rest = role.partition(".")
    return f"{stem}.{gen}.{rest}" if rest else f"{stem}.{gen}"


def bm25_rowid_count(path: Path) -> int | None:
    """The length of a ``rowids.npy`` read from its header alone (None when it is not a 1-d int64 array)."""
    from contextkit.index._checksums import npy_shape

    shape = npy_shape(path, "<i8")
    return shape[0] if shape is not None and len(shape) == 1 else None

log = logging.getLogger(__name__)

#: ``index_type="auto"`` switches from exact search to HNSW here. Why 50,000: an exact search's cost grows
#: with the vectors, and around this size it takes a large share of a hybrid query's 15 ms budget
#: beside the query embedding (``python bench/bench_retrieval.py latency``); HNSW (M=32,
#: efSearch=128) then answers far faster with almost exact Recall@10 on embedding-like vectors,
#: at the cost of a slower build (``python bench/bench_retrieval.py ann``).
AUTO_HNSW_FROM = 50_000


class VectorFiles:
    """The FAISS structure of one index and its files (see the module docstring)."""

    def __init__(self, path: Path, manifest: IndexManifest, store: RecordStore, read_only: bool) -> None:
        self.path = path
        self.manifest = manifest
        self.store = store
        self.read_only = read_only
        self.faiss: Any = None
        self.dirty = False  # the structure in memory differs from the files on disk
        self.written: dict[str, str] = {}  # role -> file name, of the last write()
        self.rebuild_needed = False  # it misses changes it could not take in place: rebuilt before use

    # ------------------------------------------------------------ structure
    def kind(self, n: int | None = None) -> Literal["flat", "hnsw", "ivf", "ivfpq"]:
        """The FAISS structure to use now: ``auto`` and ``ivfpq`` resolve by the number of chunks."""
        kind = self.manifest.index_type
        if kind == "flat" or kind == "hnsw" or kind == "ivf":  # each compared: mypy narrows the Literal
            return kind
        if n is None:
            n = self.store.counts()["chunks"] if self.faiss is None else int(self.faiss.ntotal)
        if kind == "ivfpq":  # exact until there are enough vectors to train on
            return "flat" if n < IVFPQ_TRAIN_FROM else "ivfpq"
        return "flat" if n < AUTO_HNSW_FROM else "hnsw"

    def start_empty(self) -> None:
        """A new, empty structure (a new index), to be written by the next save."""
        self.faiss = self._new_faiss()
        self.dirty = True

    def _new_faiss(self, n: int | None = None) -> Any:
        import faiss

        dim = self.manifest.dim
        if self.kind(n) == "hnsw":
            hnsw = faiss.IndexHNSWFlat(dim, self.manifest.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = self.manifest.hnsw_ef_construction
            hnsw.hnsw.efSearch = self.manifest.hnsw_ef_search
            return faiss.IndexIDMap2(hnsw)
        return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))  # "ivf" is built at save time from all vectors

    def is_flat(self) -> bool:
        import faiss

        inner = faiss.downcast_index(self.faiss.index) if self.faiss is not None else None
        return isinstance(inner, faiss.IndexFlat)

    def is_hnsw(self) -> bool:
        import faiss

        inner = faiss.downcast_index(self.faiss.index) if self.faiss is not None else None
        return isinstance(inner, faiss.IndexHNSW)

    def __len__(self) -> int:
        return int(self.faiss.ntotal)

    # -------------------------------------------------------------- changes
    def add(self, vectors: np.ndarray, rowids: Sequence[int]) -> None:
        """Chunks the store just added (inside the index's transaction)."""
        if self._changes_in_place():
            self.faiss.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(rowids, np.int64))
        else:
            self.rebuild_needed = True
        self.dirty = True

    def remove(self, rowids: Sequence[int]) -> None:
        """Chunks the store just removed: flat removes them, HNSW skips them at search until its next rebuild."""
        if self._changes_in_place():
            if self.is_flat():
                self.faiss.remove_ids(np.asarray(rowids, dtype=np.int64))
            else:  # HNSW cannot remove
                if not isinstance(self.faiss, SkippingIndex):
                    self.faiss = SkippingIndex(self.faiss, np.zeros(0, dtype=np.int64))
                self.faiss.remove_ids(np.asarray(rowids, dtype=np.int64))
        else:
            self.rebuild_needed = True
        self.dirty = True

    def _changes_in_place(self) -> bool:
        """Flat indexes add and remove in place; HNSW adds in place and skips what was removed."""
        if self.rebuild_needed:
            return False
        kind = self.kind()
        return (kind == "flat" and self.is_flat()) or (kind == "hnsw" and self.is_hnsw())

    def after_rollback(self) -> None:
        """The store rolled back: the structure in memory may hold the changes it undid."""
        if isinstance(self.faiss, RefinedIVFPQ):  # changes never reach it in place: re-done at the next save
            self.rebuild_needed = True
            return
        self.rebuild()

    # -------------------------------------------------------------- reading
    def searchable(self) -> Any:
        """The structure, with every committed change in it (rebuilt first when it misses some)."""
        if self.rebuild_needed:
            self.rebuild()
        return self.faiss

    def nearest_rowids(self, vector: np.ndarray, n: int, allowed: np.ndarray | None = None
                       ) -> list[tuple[int, float]]:
        """``(rowid, score)`` of the ``n`` chunks nearest to one query vector, best first; only ``allowed``
        rowids (ascending) when given.

        A filter allowing at most :data:`EXACT_FILTER_MAX` chunks and :data:`EXACT_FILTER_SHARE`
        of them is scored exactly over their vectors on any index type (approximate indexes miss
        most of a selective filter's chunks); a wider one searches the index with its own kind of
        parameters, widened by the filter's selectivity (:func:`filtered_params`)."""
        index = self.searchable()
        total = int(index.ntotal)
        if total == 0 or n <= 0 or (allowed is not None and len(allowed) == 0):
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        params = None
        if allowed is not None:
            n = min(n, len(allowed))
            if len(allowed) <= min(EXACT_FILTER_MAX, EXACT_FILTER_SHARE * total) and not self.is_flat():
                return self._exact_rowids(query[0], n, np.asarray(allowed, dtype=np.int64))
            params = filtered_params(index, allowed)
        distances, ids = search_faiss(index, query, min(n, total), params)
        return [(int(i), float(d)) for d, i in zip(distances[0], ids[0]) if i >= 0]

    def _exact_rowids(self, query: np.ndarray, n: int, allowed: np.ndarray) -> list[tuple[int, float]]:
        """Exact scores over the allowed chunks' vectors (ivfpq: its float16 rows, as its re-scoring uses)."""
        vectors = self.faiss.vectors(allowed) if isinstance(self.faiss, RefinedIVFPQ) else \
            self.store.vectors_by_rowid(allowed.tolist())
        scores = vectors @ query
        best = np.argsort(-scores, kind="stable")[:n]  # ties: the lower rowid first
        return [(int(allowed[i]), float(scores[i])) for i in best]

    # -------------------------------------------------------------- loading
    def load(self, saved_generation: int | None) -> bool:
        """Read the files when the manifest vouches for the store's generation; else rebuild from the store.

        Returns True when it rebuilt (the files lag the store: the index then saves, unless read-only).
        ``saved_generation`` is the generation the manifest on disk vouches for."""
        store_gen = self.store.generation()
        if store_gen < self.manifest.generation:
            raise IndexCorruptError(
                f"{self.path / 'store.sqlite'}: older than manifest.json (generation {store_gen} < "
                f"{self.manifest.generation}): the records store was replaced or restored from an older copy; "
                f"`contextkit repair --index {self.path}` rebuilds the other files from it", file="store.sqlite")
        on_disk = "vectors.faiss" in self.manifest.checksums or (self.path / "vectors.faiss").is_file()
        # A reader serves the generation its manifest names, whatever the writer has committed since
        # (rows it removed are kept for it); only the older single-set layout is rebuilt when it lags.
        snapshot = self.read_only and bool(self.manifest.files)
        if on_disk and (snapshot or self.manifest.generation == store_gen):
            self._check_files(saved_generation)
            self.faiss = self._read()
            return False
        log.warning("%s: FAISS file is behind the records store (generation %s vs %s); rebuilding",
                    self.path, self.manifest.generation, store_gen)
        self.rebuild()
        return True

    def _read(self) -> Any:
        """The structure the files describe (ivfpq: mapped, with its changes since the build)."""
        file = self.file("vectors.faiss")
        sums = self.manifest.checksums
        paths = {name: self.file(name) for name in ("vectors.faiss", *IVFPQ_FILES, *DELTA_FILES)}
        try:
            if all(name in sums for name in IVFPQ_FILES):
                built = open_ivfpq(self.path, self.manifest.ivfpq_nprobe, self.manifest.ivfpq_refine, paths)
                self._check_ivfpq_files(built)
                return load_delta(built, self.path, paths) if all(name in sums for name in DELTA_FILES) else built
            # a regular file only, no array larger than the file; a reader's vectors mapped
            index = read_faiss(file, mapped_read_flags() if self.read_only else 0)
            if DELTA_FILES[2] in sums:  # hnsw: rowids skipped since its build
                return SkippingIndex(index, npy_load(paths[DELTA_FILES[2]]))
            return index
        except (RuntimeError, ValueError, OSError) as exc:
            raise IndexCorruptError(f"{file}: unreadable by FAISS ({write_reason(exc)}); "
                                    f"`contextkit repair --index {self.path}` rebuilds it from the store",
                                    file="vectors.faiss") from exc

    def file(self, role: str) -> Path:
        """Where the file playing ``role`` is for the generation this manifest describes."""
        return self.path / self.manifest.file(role)

    def check_loaded(self, saved_generation: int | None) -> None:
        """The structure holds one vector per stored chunk, of the manifest's dimension."""
        chunks = self._stored_chunk_count(saved_generation)
        if self.faiss.ntotal != chunks:
            raise IndexCorruptError(
                f"{self.path}: FAISS holds {self.faiss.ntotal} vectors but the store has {chunks} chunks; "
                f"`contextkit repair --index {self.path}` rebuilds vectors.faiss from the store", file="vectors.faiss"
            )
        if self.faiss.d != self.manifest.dim:
            raise IndexMismatchError(f"{self.path}: FAISS dimension {self.faiss.d} != manifest {self.manifest.dim}")
        if problem := ids_problem(self.faiss, self.store.max_rowid()):
            raise IndexCorruptError(f"{self.file('vectors.faiss')}: {problem} (crafted or damaged); `contextkit repair "
                                    f"--index {self.path}` rebuilds it from the store", file="vectors.faiss")

    def check_found(self, ids: np.ndarray, found: Collection[int]) -> None:
        """Every id a search returned has its chunk row (live, or retired for this generation's readers); an
        id without one means the FAISS file is not the store's (crafted or damaged): refused, not dropped."""
        lost = sorted({int(i) for i in np.asarray(ids).ravel() if i >= 0} - set(found))
        if lost:
            raise IndexCorruptError(
                f"{self.file('vectors.faiss')}: returned rowid {lost[0]}, which the records store does not hold "
                f"(crafted or damaged); `contextkit repair --index {self.path}` rebuilds it", file="vectors.faiss")

    def _stored_chunk_count(self, saved_generation: int | None) -> int:
        """Chunks of this generation: the store's count when it is at this generation, else (a reader of a
        generation the writer has moved past) the rowids BM25 saved with it. The manifest's own count is
        never trusted over them (one changed digit there would lock every open out)."""
        if self.manifest.generation != self.store.generation() and self.read_only:
            counted = bm25_rowid_count(self.path / self.manifest.file("bm25/rowids.npy"))
            if counted is not None:
                return counted
        return int(self.store.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    def _check_files(self, saved_generation: int | None) -> None:
        """Sizes and hashes of the derived files against the manifest (see :mod:`.verify` for the cost)."""
        for name in ("vectors.faiss", *IVFPQ_FILES, *DELTA_FILES):
            rec = self.manifest.checksums.get(name)
            problem = check_file_on_open(self.file(name), rec) if rec is not None else None
            if problem:
                found = faiss_header_count(self.file(name)) if name == "vectors.faiss" else None
                chunks = self._stored_chunk_count(saved_generation)
                extra = f"; FAISS holds {found} vectors but the store has {chunks} chunks" if (
                    found is not None and found != chunks) else ""
                raise IndexCorruptError(
                    f"{self.file(name)}: damaged: {problem}{extra}; it is derived from the records store: "
                    f"`contextkit repair --index {self.path}` rebuilds it", file=name)
        self._check_bm25_files()

    def _check_bm25_files(self) -> None:
        """The BM25 files too (a folder stamped with an older generation lags, is not damaged: rebuilt when used)."""
        bm25_sums = {k: v for k, v in self.manifest.checksums.items() if k.startswith("bm25/")}
        if not bm25_sums:
            return
        try:
            meta_gen = read_meta(self.file("bm25"))["generation"]  # a FIFO or link: IndexCorruptError
        except (OSError, ValueError, KeyError, TypeError):
            meta_gen = self.manifest.generation
        if meta_gen != self.manifest.generation:
            return
        for name, rec in sorted(bm25_sums.items()):
            problem = check_file_on_open(self.file(name), rec)
            if problem:
                raise IndexCorruptError(
                    f"{self.file(name)}: damaged: {problem}; it is derived from the records store: "
                    f"`contextkit repair --index {self.path}` rebuilds {self.manifest.file('bm25')}/",
                    file=name)

    def _check_ivfpq_files(self, f: RefinedIVFPQ) -> None:
        """The mapped float16 rows and rowids agree with the IVF-PQ index (their shapes, not every byte)."""
        if f.raw.shape != (f.built_total, self.manifest.dim) or f.ids.shape != (f.built_total,):
            raise IndexCorruptError(
                f"{self.path}: vectors.f16.npy {f.raw.shape} / vectors.ids.npy {f.ids.shape} do not match the "
                f"{f.built_total} vectors of dimension {self.manifest.dim} in vectors.faiss; `contextkit repair --index "
                f"{self.path}` rebuilds them", file="vectors.f16.npy")

    # ------------------------------------------------------------- rebuilds
    def rebuild(self) -> None:
        """Rebuild the FAISS index from the vectors in the store."""
        import faiss

        if self.manifest.index_type == "ivfpq" and self.kind(self.store.counts()["chunks"]) == "ivfpq":
            self.rebuild_ivfpq()
            return
        ids_parts, vec_parts = [], []
        for ids, vecs in self.store.iter_chunk_vectors():
            ids_parts.append(ids)
            vec_parts.append(vecs)
        ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int64)
        vecs = np.concatenate(vec_parts) if vec_parts else np.zeros((0, self.manifest.dim), dtype=np.float32)
        if self.kind(len(ids)) == "ivf" and len(ids) >= 1024:
            nlist = int(min(4 * np.sqrt(len(ids)), len(ids) // 39))
            quantizer = faiss.IndexFlatIP(self.manifest.dim)
            ivf = faiss.IndexIVFFlat(quantizer, self.manifest.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            ivf.train(vecs)
            # 2*sqrt(nlist) lists (126 of 4,000 at 1M vectors): full recall@10 on embedding-like
            # vectors in bench_retrieval.py ann, where 16 already came close (nlist/4 was much slower).
            ivf.nprobe = ivf_nprobe(nlist)
            index = faiss.IndexIDMap2(ivf)
        else:
            index = self._new_faiss(len(ids))
        if len(ids):
            index.add_with_ids(np.ascontiguousarray(vecs), ids)
        self.faiss = index
        self.rebuild_needed = False
        self.dirty = True

    def rebuild_ivfpq(self, fold: bool = True) -> None:
        """Stream the store's vectors into IVF-PQ + float16 rows (training only when the size calls for it).

        ``fold``: when the current build still suits the size and the changes since it are
        small, keep it and describe the changes instead (:meth:`_fold_changes`)."""
        m = self.manifest
        n = self.store.counts()["chunks"]
        previous = self.faiss if isinstance(self.faiss, RefinedIVFPQ) else None
        if fold and previous is not None and self._fold_changes(previous, n):
            return
        if self.read_only:
            work = Path(tempfile.mkdtemp(prefix="contextkit-ivfpq-"))
        else:
            work = self.path
            (work / "vectors.f16.npy.build").unlink(missing_ok=True)  # a mapped old build keeps its inode
        built = build_ivfpq(self.store.iter_chunk_vectors(), n, m.dim, m.ivfpq_m or default_pq_m(m.dim, n),
                            m.ivfpq_nbits, m.ivfpq_nprobe, m.ivfpq_refine, work, previous,
                            sample_batches=self.store.iter_chunk_vectors())
        assert built.raw_path is not None  # a build always writes its float16 rows to a file
        if self.read_only:  # mapped already: the file goes when the map does
            built.raw_path.unlink()
            shutil.rmtree(work, ignore_errors=True)
            built.raw_path = None
        else:
            final = work / "vectors.f16.npy.build"
            os.replace(built.raw_path, final)
            built.raw_path = final
        self.faiss = built
        self.rebuild_needed = False
        self.dirty = True

    def _fold_changes(self, built: RefinedIVFPQ, n: int) -> bool:
        """Keep ``built`` and search the changes since beside it, if they are small; False: rebuild instead.

        Rowids are never reused (``AUTOINCREMENT``): the store's rowids above the build's largest are
        the chunks added since; the build's rowids the store no longer has were removed."""
        m = self.manifest
        if built.nlist != default_nlist(n) or built.index.pq.M != (m.ivfpq_m or default_pq_m(m.dim, n)):
            return False
        top = int(built.ids[-1]) if len(built.ids) else -1
        db = self.store.db
        kept = int(db.execute("SELECT COUNT(*) FROM chunks WHERE rowid <= ?", (top,)).fetchone()[0])
        added = n - kept
        removed = built.built_total - kept
        if added > DELTA_MAX or added + removed > DELTA_SHARE * built.built_total:
            return False
        deleted = np.zeros(0, dtype=np.int64)
        if removed:
            have = np.fromiter((r[0] for r in db.execute("SELECT rowid FROM chunks WHERE rowid <= ? ORDER BY rowid",
                                                         (top,))), dtype=np.int64, count=kept)
            deleted = np.setdiff1d(np.asarray(built.ids), have, assume_unique=True)
        parts = list(self.store.iter_chunk_vectors(after=top))
        ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
        vectors = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, m.dim), dtype=np.float32)
        self.faiss = built.with_changes(vectors, ids, deleted)
        self.rebuild_needed = False
        self.dirty = True
        return True

    # -------------------------------------------------------------- writing
    def prepare_save(self) -> None:
        """Rebuild now when a save should: pending changes, a size where the structure changes, too many skipped."""
        if self.manifest.index_type in ("auto", "ivfpq") and (self.kind() == "flat") != self.is_flat():
            self.rebuild_needed = True  # crossed the size where auto / ivfpq changes structure
        if isinstance(self.faiss, SkippingIndex) and len(self.faiss.deleted) > DELTA_SHARE * self.faiss.idmap.ntotal:
            self.rebuild_needed = True  # a tenth of the graph is removed vectors: rebuilt without them
        if self.rebuild_needed:
            self.rebuild()

    def write(self, gen: int) -> dict[str, FileSum]:
        """``vectors.<gen>.faiss`` (and for a trained ``ivfpq``, its two ``.npy`` files); their checksums.

        Every file is new, named by ``gen`` (:mod:`._generations`): what ``written`` then maps each role
        to is what the manifest of ``gen`` names. A reused ``ivfpq`` build keeps the names it has."""
        f = self.faiss
        self.written = {}
        if isinstance(f, SkippingIndex):
            return {"vectors.faiss": self._write_faiss(f.idmap, gen),
                    **self._write_arrays({DELTA_FILES[2]: f.deleted}, gen)}
        if not isinstance(f, RefinedIVFPQ):
            return {"vectors.faiss": self._write_faiss(f, gen)}
        names = ("vectors.faiss", *IVFPQ_FILES)
        if f.raw_path is None:  # the build was opened from these very files: only its changes to write
            if all(name in self.manifest.checksums for name in names):
                self.written = {name: self.manifest.file(name) for name in names}
                return {**{name: self.manifest.checksums[name] for name in names}, **self._write_delta(f, gen)}
            self.rebuild_ivfpq(fold=False)
            f = self.faiss
        sums = {"vectors.faiss": self._write_faiss(f.index, gen), **self._write_delta(f, gen),
                **self._write_arrays({IVFPQ_FILES[1]: np.asarray(f.ids, dtype=np.int64)}, gen)}
        raw_final = self.path / generation_name(IVFPQ_FILES[0], gen)
        os.replace(f.raw_path, raw_final)  # fsynced by the build; the map follows the inode
        fsync_dir(self.path)
        f.raw_path = None
        self.written[IVFPQ_FILES[0]] = raw_final.name
        sums[IVFPQ_FILES[0]] = file_sum(raw_final, sha256=f.raw_sha256)
        return sums

    def _write_delta(self, f: RefinedIVFPQ, gen: int) -> dict[str, FileSum]:
        """:data:`DELTA_FILES` for the changes since the build (none without changes)."""
        if not f.has_changes:
            return {}
        vectors, ids = f.delta_arrays()
        return self._write_arrays(dict(zip(DELTA_FILES, (vectors, ids, f.deleted))), gen)

    def _write_arrays(self, arrays: dict[str, np.ndarray], gen: int) -> dict[str, FileSum]:
        """``.npy`` files through temporary files, each fsynced and renamed into place; their checksums."""
        sums = {}
        for name, array in arrays.items():
            final = self.path / generation_name(name, gen)
            self.written[name] = final.name
            with atomic_file(final, temporary=final.name + ".tmp", sync_folder=False) as fh:
                np.save(fh, array, allow_pickle=False)
            sums[name] = file_sum(final)
        fsync_dir(self.path)
        return sums

    def _write_faiss(self, index: Any, gen: int) -> FileSum:
        """``vectors.<gen>.faiss`` through a temporary file, hashed while written (no second read)."""
        import faiss

        final = self.path / generation_name("vectors.faiss", gen)
        self.written["vectors.faiss"] = final.name
        digest = hashlib.sha256()
        with atomic_file(final, temporary=final.name + ".tmp") as fh:
            def write(data: bytes) -> int:
                fh.write(data)
                digest.update(data)
                return len(data)

            writer = faiss.PyCallbackIOWriter(write)  # type: ignore[attr-defined]  # missing from faiss's stubs
            faiss.write_index(index, writer)  # an OSError in ``write`` comes back as itself
            del writer
        return file_sum(final, sha256=digest.hexdigest())
