"""``ingest()``: plan a run (discover, hash, what changed), hand the work to a runner, prune, save."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contextkit.embedders import Embedder
from contextkit.ingestion._local import run_batches
from contextkit.ingestion._steps import open_index, prune
from contextkit.ingestion._types import (
    Clock,
    FileFailure,
    IngestConfig,
    IngestEvent,
    IngestReport,
    Pending,
)
from contextkit.loaders import (
    discover_files,
    file_sha256,
)


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
    """
    config = (config or IngestConfig()).model_copy(update=overrides)
    runner = run_batches
    if config.engine == "ray":  # connects first: an unreachable cluster leaves no index behind
        from contextkit.ingestion.ray import ray_batches

        runner = ray_batches(config)
    notify = progress or (lambda event: None)
    index_dir = Path(index_dir)
    clock = Clock()
    report = IngestReport(index=str(index_dir))
    with clock("discover"):
        sources, errors = discover_files(paths, config.glob, config.follow_symlinks)
    report.failures += [FileFailure(path=e.path, reason=e.reason) for e in errors]
    report.files_seen = len(sources)
    given_cache = embedder.cache if embedder is not None else None
    with clock("open"):
        index, embedder, chunker = open_index(index_dir, config, embedder)
    try:
        known = index.store.file_hashes()
        todo: list[Pending] = []
        with clock("hash"):
            for src in sources:
                try:
                    sha, size = file_sha256(src.path), src.path.stat().st_size
                except OSError as exc:
                    report.failures.append(FileFailure(path=src.doc_id, reason=f"unreadable: {exc.strerror or exc}"))
                    continue
                if known.get(src.doc_id) == sha:
                    report.files_unchanged += 1
                else:
                    todo.append(Pending(src, sha, size, is_new=src.doc_id not in known))
        notify(IngestEvent("plan", files=len(todo)))
        runner(todo, index, embedder, chunker, config, report, notify, clock)
        if config.prune:
            prune(index, sources, known, errors, report)
        with clock("save"):
            index.save()
    finally:
        chunker.close()
        index.close()
        embedder.cache = given_cache  # the store is closed; a caller's embedder gets its own cache back
    report.seconds = clock.totals
    return report
