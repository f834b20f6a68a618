"""``ingest()``: plan a run (discover, hash, what changed), hand the work to a runner, prune, save."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from contextkit.core.errors import IndexFolderError, NothingToIngestError
from contextkit.core.telemetry import ingest_figures, traced
from contextkit.embedders import Embedder
from contextkit.index import is_dsn, location_name
from contextkit.ingestion._file_keys import file_keys
from contextkit.ingestion._local import run_batches
from contextkit.ingestion._run import IngestRun
from contextkit.ingestion._steps import digest, input_missing, make_redactor, open_index, prune, same_ids
from contextkit.ingestion._types import (
    Clock,
    FileFailure,
    IngestConfig,
    IngestEvent,
    IngestReport,
    Pending,
)
from contextkit.loaders import (
    GENERATED_ASSETS,
    SourceFile,
    discover,
    is_index_folder,
)

#: What an index folder may hold before its manifest is written (an interrupted creation, a lock).
_INDEX_NAMES = frozenset({".lock", "store.sqlite", "store.sqlite-wal", "store.sqlite-shm", "store.sqlite-journal",
                          "bm25", "bm25.tmp", "bm25.old", "vectors.faiss", "manifest.json.tmp"})


@traced("contextkit.ingest", ingest_figures)
def ingest(
    paths: Sequence[str | Path],
    index_dir: str | Path,
    config: IngestConfig | None = None,
    progress: Callable[[IngestEvent], None] | None = None,
    embedder: Embedder | None = None,
    **overrides: Any,
) -> IngestReport:
    """Ingest files and folders into the index at ``index_dir`` (created if missing).

    Bad inputs never stop the run: they are listed in ``report.failures``. Pass an
    ``embedder`` to reuse a loaded model across calls (a notebook, a service);
    it must be the index's model. ``engine="ray"`` loads, chunks and embeds on a Ray
    cluster (``contextkit.ingestion.ray``): the same index, written here; each worker loads its own model.

    Refused before anything is written: an unknown option (``chunk_sise=512``:
    :class:`~contextkit.errors.UnknownOptionError`), a run that finds no file at all (a missing
    path, an empty folder, a glob matching nothing: :class:`~contextkit.errors.NothingToIngestError`,
    so a typo never leaves an empty index with its settings locked), and an ``index_dir`` that is
    a folder of other files (:class:`~contextkit.errors.IndexFolderError`). Index folders among the
    inputs, the one written included, are never read (``report.notes`` names them). Ids are paths
    relative to the folder named (``/home/me/docs`` gives ``docs/a.md``: no absolute local path
    reaches a prompt); a file already in the index under another id (``.`` then ``docs``) keeps its
    first id: one file, one document.
    """
    config = _configured(config, overrides)
    notify = progress or (lambda event: None)
    index_dir = Path(index_dir)
    clock = Clock()
    report = IngestReport(index=location_name(index_dir))
    _check_index_folder(index_dir)
    with clock("discover"):
        found = discover(paths, config.glob, config.follow_symlinks, exclude=[index_dir], skip=config.exclude,
                         default_skip=GENERATED_ASSETS if config.default_excludes else ())
    report.failures += [FileFailure(path=e.path, reason=e.reason) for e in found.errors]
    report.notes += [FileFailure(path=e.path, reason=e.reason) for e in found.notes]
    if not found.files:
        raise NothingToIngestError(_nothing_found(paths, config, report), report.failures)
    # what runs the plan: the local batches, or the Ray engine's (same call, the redactor left to it)
    runner: Callable[[list[Pending], IngestRun], None] = run_batches
    if config.engine == "ray":  # connects first: an unreachable cluster leaves no index behind
        from contextkit.ingestion.ray import ray_batches

        runner = ray_batches(config)
    with clock("open"):  # the embedder keeps its own cache: vectors reach the index through its API
        index, embedder, chunker = open_index(index_dir, config, embedder)
    try:
        sources, key = _keyed(found.files, index, report)
        known = index.store.file_hashes()
        sources, retired = same_ids(sources, known, index, report.notes, report.failures,
                                    replacing=config.prune and not is_dsn(index_dir))
        report.files_seen = len(sources)
        todo: list[Pending] = []
        leaving = {old for old, _ in retired}  # their files come back under the new ids: no duplicates
        by_content = {sha: file for file, sha in known.items() if file not in leaving} if config.skip_duplicates else {}
        with clock("hash"):
            for src in sources:
                hashed = digest(src, report.failures)
                if hashed is None:
                    continue
                sha, size = hashed
                same = known.get(src.doc_id) == sha
                if same and not config.reprocess:
                    report.files_unchanged += 1
                elif _duplicate(src, sha, size, by_content, config, report):
                    continue
                else:
                    todo.append(Pending(src, sha, size, is_new=src.doc_id not in known, reprocess=same))
        notify(IngestEvent("plan", files=len(todo), bytes=sum(item.size for item in todo)))
        runner(todo, IngestRun(index, embedder, chunker, config, report, notify, clock))
        _retire(index, retired, known, report)
        if config.prune:
            prunable = _prunable(known, found.errors, key)
            if is_dsn(index_dir):  # several writers share a database: each prunes only under its own inputs
                prunable = _under_roots(prunable, index.store.file_sources(), paths, key)
            prune(index, sources, prunable, found.errors, report)
        else:
            _note_stale(report, _under_roots(_prunable(known, found.errors, key), index.store.file_sources(), paths,
                                             key), sources, found.errors)
        with clock("save"):
            index.save()
    finally:
        chunker.close()
        index.close()
    report.seconds = clock.totals
    return report


def _configured(config: IngestConfig | None, overrides: dict[str, Any]) -> IngestConfig:
    """``config`` with ``overrides`` applied and validated; an unknown name is refused, never ignored."""
    return (config or IngestConfig()).with_options("ingest()", **overrides)


def _nothing_found(paths: Sequence[str | Path], config: IngestConfig, report: IngestReport) -> str:
    """One line saying why a run found no file, and what to do."""
    shown = ", ".join(os.fspath(p) for p in paths) or "(no path given)"
    if report.failures:
        first = report.failures[0]
        more = f" (and {len(report.failures) - 1} more)" if len(report.failures) > 1 else ""
        return f"nothing to ingest: {first.path}: {first.reason}{more}; nothing was written"
    if config.glob:
        globs = [config.glob] if isinstance(config.glob, str) else config.glob
        shown_globs = " or ".join(repr(g) for g in globs)
        return f"nothing to ingest: no file under {shown} matches --glob {shown_globs}; nothing was written"
    skipped = [n.path for n in report.notes]
    why = f" (passed by: {', '.join(skipped)})" if skipped else ""
    return (f"nothing to ingest: {shown} holds no file of a supported format (.md, .txt, .rst, .html, .pdf, "
            f".jsonl, source code){why}; nothing was written")


def _check_index_folder(index_dir: Path) -> None:
    """Refuse to write an index among a user's files: ``index_dir`` is new, empty, or an index."""
    if not index_dir.exists() or is_index_folder(index_dir) or os.path.lexists(index_dir / "manifest.json"):
        return
    if not index_dir.is_dir():
        raise IndexFolderError(f"{index_dir}: not a folder; --index names a folder for the index (e.g. my.ck-index)")
    try:
        others = sorted(name for name in os.listdir(index_dir) if name not in _INDEX_NAMES)
    except OSError as exc:
        raise IndexFolderError(f"{index_dir}: cannot be read ({exc.strerror or exc})") from None
    if others:
        raise IndexFolderError(
            f"{index_dir}: a folder of other files ({len(others)}, e.g. {others[0]}), not an index; "
            f"name a new or empty folder for --index, e.g. {index_dir.name or 'my'}.ck-index")


def _retire(index: Any, retired: list[tuple[str, str]], known: dict[str, str], report: IngestReport) -> None:
    """Remove the old ids of files now stored under their new ones (those whose new id was committed:
    a file that failed this run keeps its old records), and say so once."""
    if not retired:  # the usual run: no read of the files table
        return
    now = index.store.file_hashes()
    done = [old for old, new in retired if new in now]
    if not done:
        return
    with index.transaction():
        for old in done:
            report.chunks_removed += index.delete_file(old)
            known.pop(old, None)
    report.notes.append(FileFailure(
        path=f"({len(done):,} file{'s' * (len(done) != 1)})",
        reason=f"indexed before under absolute paths (e.g. {done[0]}): now under ids relative to the folder named, "
               "vectors reused; the old ids removed"))


def _keyed(sources: list[SourceFile], index: Any, report: IngestReport
           ) -> tuple[list[SourceFile], Callable[[str], str]]:
    """A redacting index names files by masked ids (:mod:`._file_keys`): the sources take them, and so
    do the paths the report names so far (nothing personal in a report). Also returns the naming."""
    if not index.manifest.redact:
        return sources, lambda path: path
    key = file_keys(index, make_redactor())
    for entry in (*report.failures, *report.notes):
        entry.path = key(entry.path)
    return [replace(s, doc_id=key(s.doc_id)) for s in sources], key


def _under_roots(known: dict[str, str], sources: dict[str, str], paths: Sequence[str | Path],
                 key: Callable[[str], str]) -> dict[str, str]:
    """The files of ``known`` that lie under one of the input ``paths``: by the real path their documents
    recorded (``sources``), or by their id (as typed, or masked by ``key`` for a redacting index).

    Why: writers of one database each own their folders; ``--prune`` in one writer's run must not
    remove the files another writer ingested from folders this run never named."""
    roots = [os.path.realpath(os.fspath(p)) for p in paths]
    typed = [key(os.fspath(p)).rstrip("/") for p in paths]

    def under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    return {file: sha for file, sha in known.items()
            if any(under(file, t) for t in typed) or any(under(sources.get(file, ""), r) for r in roots)}


def _duplicate(src: SourceFile, sha: str, size: int, by_content: dict[str, str], config: IngestConfig,
               report: IngestReport) -> bool:
    """Whether ``src`` has the content of a file already indexed or taken earlier in this run: then it is
    not indexed again (a second copy's chunks would take the place of other evidence in every prompt)
    and a note names the first. ``--keep-duplicates`` indexes every copy. Empty files are never duplicates."""
    if not config.skip_duplicates or size == 0:
        return False
    first = by_content.setdefault(sha, src.doc_id)
    if first == src.doc_id:
        return False
    report.files_duplicate += 1
    report.notes.append(FileFailure(path=src.doc_id, reason=f"same content as {first}: not indexed again "
                                    "(--keep-duplicates indexes it)"))
    return True


def _note_stale(report: IngestReport, under_inputs: dict[str, str], sources: list[SourceFile],
                errors: list[Any]) -> None:
    """A note when files indexed from the folders of this run are no longer there: without ``--prune``
    they stay searchable, and a user who deleted a file would not otherwise know why it is still found."""
    if input_missing(errors):
        return
    present = {s.doc_id for s in sources}
    gone = sorted(file for file in under_inputs if file not in present)
    if not gone:
        return
    shown = ", ".join(gone[:3]) + (f" and {len(gone) - 3:,} more" if len(gone) > 3 else "")
    report.notes.append(FileFailure(
        path=f"({len(gone):,} file{'s' * (len(gone) != 1)})",
        reason=f"indexed but no longer among the inputs ({shown}): still searchable; --prune removes them"))


def _prunable(known: dict[str, str], errors: list[Any], key: Callable[[str], str] = lambda p: p) -> dict[str, str]:
    """The indexed files ``--prune`` may remove: not those under a path that failed (a broken
    symlink to a folder, an unreadable folder), which are kept, since their files may be back."""
    failed = [key(e.path).rstrip("/") for e in errors if e.path not in (".", "")]
    if not failed:
        return known
    return {path: sha for path, sha in known.items()
            if not any(path == f or path.startswith(f + "/") for f in failed)}
