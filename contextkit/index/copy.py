"""``copy_index``: the same index in another place: a folder into PostgreSQL, back, or between two of either.

``contextkit index copy SRC DST``. What moves: the settings (model, embedder, chunker, tokenizer, BM25,
redaction), every file record, document, chunk and its vector, under the same vector keys (so a later
``contextkit ingest`` into the copy finds its files unchanged and re-embeds nothing). What does not: the
folder's generations and FAISS files (a copy into a folder builds its own), the embedding cache of texts
no chunk uses any more.

Why not re-ingest: the copy holds exactly the source's chunks and vectors, so results on it are the
source's (``bench/bench_postgres.py`` compares them), it costs no embedding, and the source files
need not be at hand. The copy is one transaction in the destination: a copy that fails or is killed
leaves the destination empty (created, with no rows), and may be run again into it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from contextkit.core.errors import IndexExistsError, InvalidArgumentError
from contextkit.index._index import Index
from contextkit.index._manifest import IndexManifest, IndexType
from contextkit.index._pg_dsn import is_dsn, location_name

__all__ = ["CopyReport", "copy_index"]


class CopyReport(BaseModel):
    """What a copy moved (the destination named without a password)."""

    source: str
    destination: str
    files: int = 0
    documents: int = 0
    chunks: int = 0
    seconds: float = 0.0


def copy_index(source: str | Path, destination: str | Path, *, index_type: IndexType | None = None,
               progress: Callable[[int], None] | None = None) -> CopyReport:
    """Copy the index at ``source`` into ``destination`` (a new or empty index). ``index_type``: the
    destination's vector index (default: the source's, or ``flat`` when a database cannot take it);
    ``progress`` gets the number of chunks copied so far."""
    import time

    started = time.perf_counter()
    report = CopyReport(source=location_name(source), destination=location_name(destination))
    if location_name(source) == location_name(destination):
        raise InvalidArgumentError(f"{report.source}: source and destination are the same index")
    with Index.open(source, read_only=True) as src, src.snapshot():
        dst = _destination(destination, src.manifest, index_type)
        try:
            with dst.transaction():
                _copy_rows(src, dst, report, progress)
            dst.save()
        finally:
            dst.close()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _destination(destination: str | Path, manifest: IndexManifest, index_type: IndexType | None) -> Index:
    """The new index, with the source's settings; an existing one only when it holds nothing yet."""
    kind: IndexType = index_type or manifest.index_type
    if is_dsn(destination) and kind not in ("flat", "hnsw"):
        kind = "flat"  # the folder's FAISS kinds (ivf, ivfpq, auto): pgvector searches exactly, or by HNSW
    if Index.exists(destination):
        dst = Index.open(destination)
        if dst.store.counts()["chunks"] or dst.store.counts()["documents"]:
            dst.close()
            raise IndexExistsError(f"{location_name(destination)}: an index with rows is already there; "
                                   "copy into a new or empty one")
        if dst.manifest.model != manifest.model or dst.manifest.dim != manifest.dim:
            dst.close()
            raise IndexExistsError(f"{location_name(destination)}: an empty index of another model is there")
        return dst
    return Index.create(destination, model=manifest.model, dim=manifest.dim, embedder=manifest.embedder,
                        tokenizer=manifest.tokenizer, chunker=manifest.chunker, index_type=kind,
                        redact=manifest.redact, bm25=manifest.bm25)


def _copy_rows(src: Index, dst: Index, report: CopyReport, progress: Callable[[int], None] | None) -> None:
    for doc_id, file, source, sha, n_chars, metadata in src.store.document_records():
        dst.store.put_document(doc_id, file, source, sha, n_chars, metadata)
        report.documents += 1
    for path, sha, size, n_documents in src.store.file_records():
        dst.store.put_file(path, sha, size, n_documents)
        report.files += 1
    for chunks, keys, vectors in src.store.iter_chunk_records():
        dst.put_vectors(dict(zip(keys, vectors)))
        dst.add_chunks(chunks, vectors, keys, store_vectors=False)
        report.chunks += len(chunks)
        if progress is not None:
            progress(report.chunks)
