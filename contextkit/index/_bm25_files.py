"""The postings BM25 on disk: one folder per generation, whose unchanged segments are hard links.

Layout of ``bm25.<G>/`` (every file plain JSON or ``.npy``, loaded with ``allow_pickle=False``)::

    meta.json                  format, generation, BM25 settings, chunks, and the segments in order
    rowids.npy                 int64: the live chunks' rowids, ascending (what a query's scores are aligned to)
    <p>vocab.index.json        the terms the segment added to the vocabulary, in id order
    <p>docs.index.npy          int64: the segment's chunks (rowids, ascending)
    <p>doclen.index.npy        int32: their lengths in terms
    <p>indptr.csc.index.npy    int64: term id -> span of the postings below
    <p>indices.csc.index.npy   int32: the local chunk of each posting
    <p>tf.csc.index.npy        int32: the term's count in that chunk

where ``<p>`` is ``""`` for the base segment and ``delta.<j>.`` for each delta. Why hard links: a
save after a small change writes only its new delta, ``rowids.npy`` and ``meta.json``; the files
of the segments it keeps are linked from the folder they were in (an older generation's, which
never changes: readers may hold it), so each generation's folder is whole on its own (verify,
repair and the collection of old generations see one folder per generation, as before) at the
cost of a directory entry per file. Where links are refused (some file systems), the file is
written again from memory. Checksums of kept files are carried over, not recomputed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, field_validator

from contextkit.index._bm25_postings import Postings, Segment, Stored
from contextkit.index._checksums import FileSum, file_sum, npy_header, npy_load
from contextkit.index._safe_files import opened, read_capped

__all__ = ["FORMAT", "META_LIMIT", "PostingsMeta", "read_meta", "read_postings", "segment_names", "write_postings"]

FORMAT = "contextkit-bm25-postings"
#: The largest meta.json read (a real one is under a KiB per segment).
META_LIMIT = 1 << 20
#: A vocabulary file's bound when the manifest records no size for it: bytes per term (terms are words,
#: stemmed; JSON adds quotes and a comma) and a floor. A recorded size is the bound when there is one.
VOCAB_BYTES_PER_TERM, VOCAB_FLOOR = 256, 1 << 20
#: Each segment file: its role, the suffix after the segment's prefix, and the dtype its header must give.
_ARRAYS = {"docs": ("docs.index.npy", "<i8"), "doclen": ("doclen.index.npy", "<i4"),
           "indptr": ("indptr.csc.index.npy", "<i8"), "indices": ("indices.csc.index.npy", "<i4"),
           "tf": ("tf.csc.index.npy", "<i4")}
_VOCAB = "vocab.index.json"


class SegmentMeta(BaseModel):
    """One segment as ``meta.json`` lists it (checked against its files' headers before they are read)."""

    prefix: str
    docs: int = Field(ge=0, le=1 << 40)
    terms: int = Field(ge=0, le=1 << 31)
    first_term: int = Field(ge=0, le=1 << 31)
    postings: int = Field(ge=0, le=1 << 48)

    @field_validator("prefix")
    @classmethod
    def _plain_prefix(cls, value: str) -> str:
        if not re.fullmatch(r"(delta\.\d{1,9}\.)?", value):
            raise ValueError(f"segment prefix {value!r} is not '' or 'delta.<n>.'")
        return value


class PostingsMeta(BaseModel):
    """``meta.json`` of a postings BM25 folder."""

    format: str
    version: int = 1
    generation: int
    config: dict[str, Any]
    chunks: int = Field(ge=0, le=1 << 40)
    segments: list[SegmentMeta] = Field(min_length=1, max_length=64)

    @field_validator("format")
    @classmethod
    def _ours(cls, value: str) -> str:
        if value != FORMAT:
            raise ValueError(f"format {value!r}, not {FORMAT!r}")
        return value


def segment_names(prefix: str) -> list[str]:
    """The files of the segment with this prefix."""
    return [f"{prefix}{_VOCAB}", *(f"{prefix}{name}" for name, _ in _ARRAYS.values())]


# ------------------------------------------------------------------- write
def write_postings(tmp: Path, postings: Postings, generation: int, config: dict[str, Any]
                   ) -> tuple[dict[str, FileSum], list[dict[str, FileSum]]]:
    """Every file of ``postings`` into the new folder ``tmp`` (linked when kept, else written and fsynced):
    the checksums by file name, and each segment's own (for its ``stored`` once ``tmp`` is renamed)."""
    sums: dict[str, FileSum] = {}
    placed: list[dict[str, FileSum]] = []
    for seg in postings.segments:
        seg_sums = _link_segment(seg, tmp) if seg.stored is not None else None
        if seg_sums is None:
            seg_sums = _write_segment(seg, tmp)
        sums.update(seg_sums)
        placed.append(seg_sums)
    sums["rowids.npy"] = _write_npy(tmp / "rowids.npy", postings.rowids)
    meta = PostingsMeta(format=FORMAT, generation=generation, config=config, chunks=len(postings.rowids),
                        segments=[SegmentMeta(prefix=s.prefix, docs=len(s.rowids), terms=s.n_terms,
                                              first_term=s.first_term, postings=len(s.indices))
                                  for s in postings.segments])
    sums["meta.json"] = _write_bytes(tmp / "meta.json", meta.model_dump_json(indent=2).encode())
    return sums, placed


def _link_segment(seg: Segment, tmp: Path) -> dict[str, FileSum] | None:
    """Hard-link a kept segment's files from where they are, with their recorded checksums; None (nothing
    left linked) when a link fails or a file's bytes are not those its record names."""
    assert seg.stored is not None
    names = segment_names(seg.prefix)
    sums: dict[str, FileSum] = {}
    try:
        for name in names:
            os.link(seg.stored.folder / name, tmp / name)
            sums[name] = _carried_sum(tmp / name, seg.stored.sums.get(name))
    except (OSError, ValueError):
        for name in names:
            (tmp / name).unlink(missing_ok=True)
        return None
    return sums


def _carried_sum(path: Path, recorded: FileSum | None) -> FileSum:
    """The record of a linked file: the one it had, when complete; else hashed again, and then it must
    agree with what was recorded (``ValueError``: the file changed since, so it is written afresh)."""
    if recorded is not None and all(v is not None for v in recorded.model_dump().values()):
        return recorded
    fresh = file_sum(path)  # no record, or one from before a field was added: every field filled in
    if recorded is not None and (fresh.size, fresh.sha256) != (recorded.size, recorded.sha256):
        raise ValueError(f"{path.name}: its bytes differ from its record")
    return fresh


def _write_segment(seg: Segment, tmp: Path) -> dict[str, FileSum]:
    sums = {f"{seg.prefix}{_VOCAB}": _write_bytes(tmp / f"{seg.prefix}{_VOCAB}",
                                                  json.dumps(seg.terms, ensure_ascii=False).encode("utf-8"))}
    for role, array in seg.arrays().items():
        name = f"{seg.prefix}{_ARRAYS[role][0]}"
        sums[name] = _write_npy(tmp / name, array)
    return sums


def _write_npy(path: Path, array: np.ndarray) -> FileSum:
    with open(path, "wb") as fh:
        np.save(fh, array, allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())
    return file_sum(path)


def _write_bytes(path: Path, data: bytes) -> FileSum:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return file_sum(path)


# -------------------------------------------------------------------- read
def read_meta(folder: Path) -> dict[str, Any]:
    """``meta.json`` as JSON (either layout), refusing one too large to be a meta file, or not a regular file
    (``IndexCorruptError``: a FIFO there would make every open wait)."""
    meta = json.loads(read_capped(folder / "meta.json", META_LIMIT, "a BM25 meta.json"))
    if not isinstance(meta, dict):
        raise ValueError("meta.json: not an object")
    return meta


def read_postings(folder: Path, meta: PostingsMeta, sums: dict[str, FileSum] | None = None) -> Postings:
    """The postings of a folder whose ``meta.json`` is ``meta``, every value checked before use.

    Raises ``ValueError`` for any file that is missing, of another dtype or shape than ``meta`` says
    (headers are read first: nothing is allocated from a header the file cannot hold), or whose values
    are out of range (a doc or term id past its array, counts below 1, rowids out of order)."""
    segments: list[Segment] = []
    next_term = 0
    for sm in meta.segments:
        if sm.first_term != next_term or sm.terms < next_term or (not segments) != (sm.prefix == ""):
            raise ValueError(f"segment {sm.prefix or 'base'}: its term ids do not follow the segments before it")
        segments.append(_read_segment(folder, sm, sums or {}))
        next_term = sm.terms
    if len({s.prefix for s in segments}) != len(segments):
        raise ValueError("a segment is listed twice")
    rowids = _load(folder / "rowids.npy", "<i8", (meta.chunks,))
    seen: set[str] = set()
    for seg in segments:
        seen.update(seg.terms)
    if len(seen) != next_term:
        raise ValueError("a term is listed twice in the vocabulary")
    return Postings(segments, rowids)


def _read_segment(folder: Path, sm: SegmentMeta, sums: dict[str, FileSum]) -> Segment:
    want = {"docs": (sm.docs,), "doclen": (sm.docs,), "indptr": (sm.terms + 1,), "indices": (sm.postings,),
            "tf": (sm.postings,)}
    arrays = {role: _load(folder / f"{sm.prefix}{name}", dtype, want[role]) for role, (name, dtype) in _ARRAYS.items()}
    terms = _read_vocab(folder / f"{sm.prefix}{_VOCAB}", sm.terms - sm.first_term, sums)
    if not isinstance(terms, list) or len(terms) != sm.terms - sm.first_term or \
            not set(map(type, terms)) <= {str}:  # (JSON gives exact types: no str subclass to allow)
        raise ValueError(f"{sm.prefix}{_VOCAB}: not the {sm.terms - sm.first_term} terms meta.json lists")
    _check_values(sm, arrays)
    names = segment_names(sm.prefix)
    kept = {name: sums[name] for name in names if name in sums}
    return Segment(sm.prefix, arrays["docs"], arrays["doclen"], arrays["indptr"], arrays["indices"], arrays["tf"],
                   terms, sm.first_term, Stored(folder, kept))


def _read_vocab(path: Path, count: int, sums: dict[str, FileSum]) -> Any:
    """A segment's vocabulary as JSON, read only up to the size the manifest records for it (or a bound by
    its term count): a link to ``/dev/zero`` there once grew memory without end."""
    recorded = sums.get(path.name)
    limit = recorded.size if recorded is not None else VOCAB_FLOOR + VOCAB_BYTES_PER_TERM * count
    return json.loads(read_capped(path, limit, "this vocabulary").decode("utf-8"))


def _check_values(sm: SegmentMeta, a: dict[str, np.ndarray]) -> None:
    """Ranges a query relies on: out-of-range ids would fail every query or read the wrong memory."""
    indptr, indices = a["indptr"], a["indices"]
    if indptr[0] != 0 or indptr[-1] != len(indices) or (len(indptr) > 1 and np.any(np.diff(indptr) < 0)):
        raise ValueError(f"{sm.prefix}indptr: term pointers out of order or out of range")
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= sm.docs):
        raise ValueError(f"{sm.prefix}indices: a chunk id out of range")
    if len(a["tf"]) and int(a["tf"].min()) < 1:
        raise ValueError(f"{sm.prefix}tf: a count below 1")
    if len(a["doclen"]) and int(a["doclen"].min()) < 0:
        raise ValueError(f"{sm.prefix}doclen: a negative length")
    if len(a["docs"]) > 1 and np.any(np.diff(a["docs"]) <= 0):
        raise ValueError(f"{sm.prefix}docs: rowids not in ascending order")


def _load(path: Path, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A ``.npy`` whose header gives ``dtype`` and ``shape`` and fits the file, loaded; else ``ValueError``."""
    found = npy_header(path) if os.path.lexists(path) else None  # not a regular file: IndexCorruptError
    if found is None or found != (dtype, shape):
        raise ValueError(f"{path.name}: not a plain .npy of {dtype} {shape} (found {found})")
    with opened(path) as fh:
        return npy_load(fh)
