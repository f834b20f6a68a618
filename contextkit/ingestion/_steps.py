"""The steps of ingestion, shared by every runner (local, streamed, Ray) and the LlamaIndex plug-in.

open the index (refusing settings that differ from its own), load a file (PII masked when the
index redacts), chunk a group of files, commit a batch (one transaction: a file's old records
out, its new ones in), prune files that are gone. A leaf of the package: it imports no runner.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from contextkit.chunking import TokenChunker
from contextkit.compressors.base import Redactor
from contextkit.core.errors import IndexExistsError
from contextkit.core.records import Chunk, Document
from contextkit.embedders import DEFAULT_MODEL, Embedder, EmbeddingReport, embedder_for
from contextkit.index import Index, IndexMismatchError
from contextkit.ingestion._run import IngestRun, PreEmbedded
from contextkit.ingestion._types import (
    Clock,
    FileFailure,
    IngestConfig,
    IngestEvent,
    IngestReport,
    Pending,
)
from contextkit.loaders import (
    LoadFailure,
    LoadIssue,
    LoadLimits,
    SourceFile,
    load_file,
    source_digest,
)

__all__ = ["PreEmbedded", "Records", "chunk_group", "commit_batch", "digest", "embed_batch", "input_missing", "load",
           "make_redactor", "open_index", "prune", "redact", "write_records"]

log = logging.getLogger(__name__)


def open_index(index_dir: Path, config: IngestConfig,
               given: Embedder | None = None) -> tuple[Index, Embedder, TokenChunker]:
    """The index at ``index_dir`` (created if missing), with the embedder and chunker of a run.

    Settings that differ from the index's own are refused (:class:`IndexMismatchError`) before
    anything is written. Vectors reach the index through :func:`embed_batch`, never by making the
    store the embedder's cache: a caller's embedder is left as it was.
    """
    if Index.exists(index_dir):
        opened = _reopen(index_dir, config, given)
    else:
        try:
            opened = _create(index_dir, config, given)
        except IndexExistsError:  # another run created it meanwhile (and finished): add to it
            opened = _reopen(index_dir, config, given)
    return opened


def _reopen(index_dir: Path, config: IngestConfig, given: Embedder | None) -> tuple[Index, Embedder, TokenChunker]:
    index = Index.open(index_dir)
    try:
        recorded_model = index.manifest.model
        asked = DEFAULT_MODEL if config.model == "default" else config.model
        if asked is not None and asked != recorded_model:
            raise IndexMismatchError(
                f"{index_dir}: built with model {recorded_model!r}, not {config.model!r}; use a new index"
            )
        if given is not None and given.model_name != recorded_model:
            raise IndexMismatchError(
                f"{index_dir}: built with model {recorded_model!r}, the embedder given is {given.model_name!r}"
            )
        if config.redact is not None and config.redact != index.manifest.redact:
            built = "with" if index.manifest.redact else "without"
            raise IndexMismatchError(f"{index_dir}: built {built} --redact; keep the setting or use a new index")
        chunker = TokenChunker.from_config(config.chunker_config(index.manifest.chunker))
        embedder = given or embedder_for(index, config.device, config.embed_batch_size)
    except BaseException:
        index.close()
        raise
    return index, embedder, chunker


def _create(index_dir: Path, config: IngestConfig, given: Embedder | None) -> tuple[Index, Embedder, TokenChunker]:
    chunk_cfg = config.chunker_config(None)
    chunker = TokenChunker.from_config(chunk_cfg)  # fails early on a bad tokenizer name
    embedder = given or config.new_embedder()
    index = Index.create(index_dir, model=embedder.model_name, dim=embedder.dim, embedder=embedder.settings(),
                         tokenizer=chunk_cfg.tokenizer, chunker=chunk_cfg.model_dump(), index_type=config.index_type,
                         redact=bool(config.redact))
    return index, embedder, chunker


def load(item: Pending, limits: LoadLimits, redactor: Redactor | None, report: IngestReport, clock: Clock) -> bool:
    """Load one file into ``item.documents`` (PII masked when ``redactor``); False when nothing of it is kept.

    Its load errors go to the report; a file that gave some documents keeps them, as does an empty one."""
    with clock("load"):
        result = load_file(item.source, limits)
    report.failures += [FileFailure(path=e.path, reason=e.reason) for e in result.errors]
    if not (result.documents or not result.errors):
        return False
    item.documents = result.documents
    if redactor is not None:
        with clock("redact"):
            item.documents = redact(item.documents, redactor, report)
    return True


def make_redactor() -> Any:
    from contextkit.compressors.redact import PIIRedactor

    return PIIRedactor()  # one session per run: a value keeps its placeholder across files


def redact(documents: list[Document], redactor: Redactor, report: IngestReport) -> list[Document]:
    """The documents with PII masked in their text and in everything else the store keeps and a prompt
    shows: the id (which holds the file name and a JSONL ``_id``), the source path and the metadata
    (a JSONL ``title`` and ``metadata``), all in the run's one session, so a value has one placeholder
    everywhere. The file a document came from stays in the store as it is (``files.path``,
    ``documents.file``): re-ingesting and pruning find the file by it, and it never reaches a prompt
    (see docs/redaction.md)."""
    from collections import Counter

    out = []
    for doc in documents:
        counts: Counter[str] = Counter()
        if not isinstance(redactor, Redactor):  # a caller's object with only redact(): the text alone
            result = redactor.redact(doc.text)
            counts.update(result.counts)
            text, doc_id, source, metadata = result.text, doc.id, doc.source, doc.metadata
        else:
            text = redactor.mask(doc.text, counts)
            doc_id = redactor.mask_id(doc.id, counts)
            source = redactor.mask(doc.source, counts)
            metadata = redactor.mask_data(doc.metadata, counts)
        for kind, n in counts.items():
            report.redactions[kind] = report.redactions.get(kind, 0) + n
        changed = counts and (text, doc_id, source, metadata) != (doc.text, doc.id, doc.source, doc.metadata)
        out.append(replace(doc, id=doc_id, text=text, source=source, metadata=metadata) if changed else doc)
    return out


def chunk_group(group: list[Pending], chunker: TokenChunker, workers: int, report: IngestReport) -> list[Pending]:
    docs = [d for item in group for d in item.documents]
    try:
        per_doc = chunker.chunk_many(docs, workers=workers)
    except ValueError:  # a header too large for some document: find it, keep the others
        if len(group) == 1:
            item = group[0]
            try:
                per_doc = [chunker.chunk(d) for d in item.documents]
            except ValueError as exc:
                report.failures.append(FileFailure(path=item.source.doc_id, reason=str(exc)))
                return []
        else:
            return [ok for item in group for ok in chunk_group([item], chunker, 1, report)]
    it = iter(per_doc)
    for item in group:
        chunks_per_doc = [next(it) for _ in item.documents]
        item.chunks = [c for chunks in chunks_per_doc for c in chunks]
        report.empty_documents += sum(1 for chunks in chunks_per_doc if not chunks)
    return group


@dataclass
class Records:
    """One file's (or one document's) share of a commit: the records it replaces and the ones it brings.

    ``documents`` are ``(document, sha256, n_chars)``; ``file`` the file they were loaded from (None:
    documents of their own, as the LlamaIndex plug-in writes). ``replace_file`` deletes that file's
    records first, ``replace_documents`` each document's by its id; ``file_record``
    ``(sha256, size, n_documents)`` records the file as complete (None: more parts follow, or no file).
    """

    chunks: list[Chunk]
    documents: list[tuple[Document, str, int]]
    file: str | None = None
    replace_file: bool = False
    replace_documents: bool = False
    file_record: tuple[str, int, int] | None = None


def write_records(index: Index, parts: Sequence[Records], vectors: np.ndarray, keys: Sequence[str]) -> int:
    """Write ``parts`` in one transaction: each one's old records out, its documents and chunks in, its
    file recorded; all of it or (on any error, re-raised) nothing. Returns the chunks removed.

    ``vectors`` and ``keys`` are the parts' chunks' in order; the vectors are in the store already
    under ``keys`` (:func:`embed_batch` put them there). Shared by file ingestion and the LlamaIndex
    plug-in, so both replace records the same way."""
    removed, offset = 0, 0
    with index.transaction():
        for part in parts:
            if part.replace_file and part.file is not None:
                removed += index.delete_file(part.file)
            for doc, sha256, n_chars in part.documents:
                if part.replace_documents:
                    removed += index.delete_document(doc.id)
                index.store.put_document(doc.id, part.file, doc.source, sha256, n_chars, doc.metadata)
            n = len(part.chunks)
            index.add_chunks(part.chunks, vectors[offset : offset + n], keys[offset : offset + n], store_vectors=False)
            offset += n
            if part.file_record is not None and part.file is not None:
                index.store.put_file(part.file, *part.file_record)
    return removed


def _records_of(item: Pending) -> Records:
    """A file (or one part of a streamed file) as what :func:`write_records` writes."""
    n_chars = [len(doc.text) if item.n_chars is None else item.n_chars for doc in item.documents]
    complete = (item.sha256, item.size, item.n_documents + len(item.documents)) if item.complete else None
    return Records(item.chunks, [(doc, item.sha256, n) for doc, n in zip(item.documents, n_chars)],
                   file=item.source.doc_id, replace_file=item.replace, file_record=complete)


def embed_batch(index: Index, embedder: Embedder | PreEmbedded, texts: Sequence[str],
                progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, list[str], EmbeddingReport]:
    """The vectors of ``texts`` (one row each), their keys (``embedder.cache_key``) and what embedding did;
    every vector is in the index's store under its key when this returns.

    Why: the store is the embedding cache, reached through the index's API, not by making it the
    embedder's cache: vectors the index holds are taken from it (:meth:`Index.stored_vectors`) and
    not embedded again; the rest are embedded a slice (the embedder's ``slice_size``) at a time, each
    slice kept at once (:meth:`Index.put_vectors`, committed outside the batch's transaction), so a
    crash or Ctrl-C mid-batch keeps the vectors made and the next run finds them. The caller's
    embedder keeps its own cache. ``progress`` gets the number of texts done, hits first."""
    if isinstance(embedder, PreEmbedded):
        return embedder.take(index, texts, progress)
    texts = list(texts)
    keys = [embedder.cache_key(t) for t in texts]
    out = np.zeros((len(texts), index.manifest.dim), dtype=np.float32)
    stored = index.stored_vectors(keys) if keys else {}
    todo = []
    for i, key in enumerate(keys):
        vector = stored.get(key)
        if vector is None:
            todo.append(i)
        else:
            out[i] = vector
    hits = len(texts) - len(todo)
    report = EmbeddingReport(texts=hits, cache_hits=hits)  # each slice embedded adds its own texts
    if report.cache_hits and progress:
        progress(report.cache_hits)
    size, batch = int(getattr(embedder, "slice_size", 0) or 0), int(getattr(embedder, "batch_size", 0) or 0)
    for part in _slices(todo, size, batch):
        vectors = np.asarray(embedder.embed([texts[i] for i in part], progress=progress,
                                            keys=[keys[i] for i in part]), dtype=np.float32)
        out[part] = vectors
        index.put_vectors({keys[i]: vectors[j] for j, i in enumerate(part)})
        report.add(embedder.last_report)  # of this slice
    return out, keys, report


def _slices(todo: list[int], size: int, batch_size: int) -> list[list[int]]:
    """``todo`` cut into the slices the embedder itself cuts a call into (``size`` texts; all of them
    when it has no ``slice_size``), a last slice shorter than one model batch joined to the one before.

    Why: one :meth:`Embedder.embed` call per slice makes the same model batches as one call over all
    of them (batches are formed within a slice), and a call of at least one model batch takes the same
    path (the PyTorch pipeline rather than ONNX under ``backend="auto"``), so the vectors are the same."""
    if size <= 0 or len(todo) <= size:
        return [todo] if todo else []
    parts = [todo[lo : lo + size] for lo in range(0, len(todo), size)]
    if len(parts[-1]) < batch_size:
        parts[-2:] = [parts[-2] + parts[-1]]
    return parts


def commit_batch(batch: list[Pending], run: IngestRun) -> None:
    """Embed ``batch`` (vectors the index holds are reused) and commit it in one transaction."""
    index, report, notify, clock = run.index, run.report, run.notify, run.clock
    chunks = [c for item in batch for c in item.chunks]
    texts = [c.embedding_text for c in chunks]
    notify(_chunked(batch, chunks))
    with clock("embed"):  # the index keeps each slice of vectors as it is made (see embed_batch)
        vectors, keys, embedding = embed_batch(index, run.embedder, texts,
                                               progress=lambda n: notify(IngestEvent("embedded", chunks=n)))
    report.embedding.add(embedding)
    with clock("store"):
        report.chunks_removed += write_records(index, [_records_of(item) for item in batch], vectors, keys)
    for item in batch:
        if item.complete:
            report.files_new += item.is_new
            report.files_changed += not item.is_new
            report.files_reprocessed += item.reprocess
        report.documents += len(item.documents)
        report.chunks_added += len(item.chunks)
        tokens = sum(c.token_count for c in item.chunks)
        report.tokens += tokens
        notify(IngestEvent("file", files=int(item.complete), chunks=len(item.chunks), tokens=tokens,
                           path=item.source.doc_id))


def _chunked(batch: list[Pending], chunks: list[Chunk]) -> IngestEvent:
    """The "chunked" event of a batch about to be embedded: the work a progress bar can count
    before the first vector (files and bytes count once, with a file's last part)."""
    done = [item for item in batch if item.complete]
    return IngestEvent("chunked", files=len(done), chunks=len(chunks), tokens=sum(c.token_count for c in chunks),
                       bytes=sum(item.size for item in done))


def input_missing(errors: Sequence[LoadIssue]) -> bool:
    """Whether a path named as input does not exist: its files are then not "gone" (it may be mistyped)."""
    return any(e.reason.startswith("no such file") for e in errors)


def digest(src: SourceFile, failures: list[FileFailure]) -> tuple[str, int] | None:
    """``(sha256, size)`` of ``src`` through the checked open (the file discovery found, no link); None,
    with the reason in ``failures``, when it cannot be read."""
    try:
        return source_digest(src)
    except OSError as exc:
        failures.append(FileFailure(path=src.doc_id, reason=f"unreadable: {exc.strerror or exc}"))
    except LoadFailure as exc:
        failures.append(FileFailure(path=src.doc_id, reason=exc.error.reason))
    return None


def prune(index: Index, sources: list[SourceFile], known: dict[str, str], errors: list[LoadIssue],
           report: IngestReport) -> None:
    """Remove files that are in the index but no longer among the inputs."""
    if input_missing(errors):
        report.failures.append(FileFailure(path="--prune", reason="skipped: an input path is missing"))
        return
    present = {s.doc_id for s in sources}
    gone = [path for path in known if path not in present]
    # Parts of a streamed file whose run was killed (no hash recorded) and that is no longer an input.
    unfinished = [file for file in index.store.unfinished_files() if file not in present]
    if not gone and not unfinished:
        return
    removed = 0
    with index.transaction():  # all of them or none: a failure leaves the index as it was
        for path in gone + unfinished:
            removed += index.delete_file(path)
        index.store.drop_unused_vectors()
    report.chunks_removed += removed
    report.files_removed = len(gone) + len(unfinished)


def same_ids(sources: list[SourceFile], known: dict[str, str], index: Any, notes: list[FileFailure],
             failures: list[FileFailure], replacing: bool) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """``sources`` as they are to be indexed, and ``(old id, new id)`` of those to retire once they are.

    A file already in the index under another id is recognised by the real path its documents
    recorded: named as ``.`` then ``docs`` it keeps the id it was first stored under (a note says
    so), one file and one document instead of one per spelling. One stored under an absolute path
    (what an older contextkit made of an absolute folder) takes its new id, relative to the folder
    named: its chunks are stored again under it (vectors reused from the index, nothing embedded) and
    the old id is retired after the run. A file whose id is indexed from another file that is still
    there (``/a/docs`` then ``/b/docs``: both ``docs/...``) is not read: a failure names both, and
    the indexed one is kept, unless ``replacing`` (``--prune``: what is not an input goes anyway).
    Shared by the ingest and its preview (``--dry-run``), which must count files alike."""
    if not known:
        return sources, []
    recorded = index.store.file_sources()  # {file id: the real path its documents recorded}
    taken = {s.doc_id for s in sources}
    by_path: dict[str, str] = {}
    for file, source in recorded.items():
        if file in known and file not in taken:
            by_path.setdefault(source, file)
    out: list[SourceFile] = []
    retired: list[tuple[str, str]] = []
    for src in sources:
        real, first = src.shown_path, by_path.get(src.shown_path)
        if first is not None and _absolute_id(first) and not _absolute_id(src.doc_id):
            retired.append((by_path.pop(real), src.doc_id))
            out.append(src)
        elif first is not None and src.doc_id not in known:
            notes.append(FileFailure(path=src.doc_id, reason=f"already indexed as {first}: kept as {first}"))
            out.append(replace(src, doc_id=by_path.pop(real)))
        elif src.doc_id in known and not replacing and _elsewhere(recorded.get(src.doc_id), real):
            failures.append(FileFailure(path=src.doc_id, reason=(
                f"this id is indexed from {recorded[src.doc_id]}, which is still there: not replaced by {real} "
                "(ingest folders whose names differ, or --prune to replace it)")))
        else:
            out.append(src)
    return out, retired


def _absolute_id(file: str) -> bool:
    """Whether ``file`` is an id an older contextkit made of a folder typed absolute or with ``..``."""
    return file.startswith(("/", "../")) or (len(file) > 2 and file[1] == ":" and file[2] in "/\\")


def _elsewhere(recorded: str | None, real: str) -> bool:
    """Whether ``recorded`` (the real path an indexed file came from) is another file that still exists."""
    if recorded is None or recorded == real or not os.path.isfile(recorded):
        return False
    try:
        return not os.path.samefile(recorded, real)
    except OSError:
        return True
