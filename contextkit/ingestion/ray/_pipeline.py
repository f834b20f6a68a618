"""The driver side: a Ray Data pipeline whose results are committed like local ingestion's.

``ingestion.ingest`` plans the run (discovery, file hashes, what changed) and calls the
runner here in place of its local ``run_batches``. The runner builds

    from_items(files) -> map_batches(load_and_chunk)      CPU tasks, retried
                      -> map_batches(EmbedActor)          actor pool, one model per actor
                      -> iter_rows() on the driver        in input order

and hands each file, whole, to ``ingestion._steps.commit_batch``: the same transactions, report
counts and progress events as a local run, so the folder, its manifest, checksums, lock
and resume behaviour are the local ones. Why the driver commits rather than workers
writing shards: the index is one SQLite store plus derived files; a single writer needs
no merge step, and a crash can only ever leave whole, committed files.

Files above ``stream_above_bytes`` (64 MiB) never travel: a worker would hold the whole
text. The driver streams and embeds them with the local path, in bounded memory (the
same chunks and vectors; the cluster does not speed those files up).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from contextkit.core.errors import RayIngestError
from contextkit.core.records import Chunk, Document
from contextkit.embedders import EmbeddingReport
from contextkit.index import Index
from contextkit.ingestion._local import run_batches
from contextkit.ingestion._run import IngestRun, PreEmbedded
from contextkit.ingestion._steps import commit_batch, load, make_redactor
from contextkit.ingestion._types import (
    FileFailure,
    IngestConfig,
    IngestReport,
    Pending,
)
from contextkit.ingestion.ray._cluster import check_gpus, connect, plan_actors
from contextkit.ingestion.ray._workers import EmbedActor, fault_hook, load_and_chunk
from contextkit.loaders import LoadLimits

log = logging.getLogger(__name__)

#: Bounded retries: Ray Data's defaults retry forever, which turns a file that always
#: kills its worker (out of memory, say) into a job that never ends.
TASK_RETRIES = 3
ACTOR_RESTARTS = 3


_warned_unbounded = False


def retry_limits(map_batches: Callable[..., Any], **limits: int) -> dict[str, int]:
    """``limits`` as keywords for ``map_batches`` where this Ray still takes them, else ``{}``.

    Why: Ray Data retries failed tasks and restarts dead actors without end by default, and
    its only way to bound that is passing remote arguments (``max_retries=``...) through
    ``map_batches(**ray_remote_args)``, which Ray 2.60 deprecated for removal in 2.64 with no
    named replacement for retries. On a Ray whose ``map_batches`` no longer takes them, the
    job still runs (a ``TypeError`` would stop every ingestion); the limits are then Ray's
    own, said once in a warning."""
    global _warned_unbounded
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(map_batches).parameters.values()):
        return dict(limits)
    if not _warned_unbounded:
        _warned_unbounded = True
        log.warning("ray: this Ray's map_batches takes no retry limits (%s); a file that always kills its worker "
                    "is retried by Ray's own rules, which may not end: stop such a job and skip that file",
                    ", ".join(f"{k}={v}" for k, v in limits.items()))
    return {}


class RayBatches:
    """Runs one ingestion's files through Ray; built (and connected) before the index is opened."""

    def __init__(self, config: IngestConfig) -> None:
        self.ray = connect(config.ray_address)
        self.num_gpus = config.num_gpus
        check_gpus(self.ray, self.num_gpus)

    def __call__(self, todo: list[Pending], run: IngestRun) -> None:
        config, report, clock = run.config, run.report, run.clock
        redactor = make_redactor() if run.index.manifest.redact else None  # one PII session for the whole run
        run = replace(run, redactor=redactor)
        big = [p for p in todo if p.size > config.stream_above_bytes]
        if big:  # streamed here, in bounded memory; a worker would hold the whole text (and may die of it)
            log.info("ray: %d file(s) above %d bytes streamed and embedded on this machine (e.g. %s)",
                     len(big), config.stream_above_bytes, big[0].source.doc_id)
            run_batches(big, run)
            todo = [p for p in todo if p.size <= config.stream_above_bytes]
        if redactor is None:
            self._run(todo, [""] * len(todo), run)
            return
        # Redacting: the driver loads and masks each file (placeholders are numbered across files, in
        # the local order), a part of at most stream_above_bytes at a time; workers chunk and embed.
        for part in _parts(todo, max(1, config.stream_above_bytes)):
            kept, documents = _load_redacted(part, redactor, config, report, clock)
            self._run(kept, documents, run)

    def _run(self, todo: list[Pending], documents: list[str], run: IngestRun) -> None:
        """One Ray job over ``todo`` (``documents``: each file's pre-loaded documents as JSON, or "")."""
        index, chunker, config = run.index, run.chunker, run.config
        if not todo:
            return
        ray = self.ray
        cpus = int(ray.cluster_resources().get("CPU", 1))
        per_block = max(1, min(32, math.ceil(len(todo) / (4 * cpus))))
        blocks = math.ceil(len(todo) / per_block)
        actors, gpus = plan_actors(ray, self.num_gpus, blocks)
        settings = index.manifest.embedder
        device = "cuda" if gpus > 0 else ("cpu" if config.device == "auto" else config.device)
        context = ray.data.DataContext.get_current()
        saved = (context.execution_options.preserve_order, context.enable_progress_bars)
        context.execution_options.preserve_order = True  # commits in the local order: the same rowids
        context.enable_progress_bars = False  # the library logs; the CLI draws the one bar
        try:
            items = [{"doc_id": p.source.doc_id, "path": str(p.source.path), "sha256": p.sha256, "documents": docs,
                      "known": json.dumps([] if p.is_new else _vector_keys(index, p.source.doc_id))}
                     for p, docs in zip(todo, documents, strict=True)]
            ds = ray.data.from_items(items, override_num_blocks=blocks)
            with warnings.catch_warnings():  # retry limits have no named parameter yet (Ray 2.60)
                warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
                limits = LoadLimits(max_parse_bytes=config.max_parse_bytes, pdf_timeout=config.pdf_timeout)
                ds = ds.map_batches(load_and_chunk, batch_size=per_block, batch_format="numpy",
                                    fn_kwargs={"chunker": json.dumps(chunker.to_dict()),
                                               "limits": limits.model_dump_json()},
                                    **retry_limits(ds.map_batches, max_retries=TASK_RETRIES))
                ds = ds.map_batches(
                    EmbedActor, batch_size=per_block, batch_format="numpy",
                    compute=ray.data.ActorPoolStrategy(size=actors), num_gpus=gpus or None,
                    **retry_limits(ds.map_batches, max_restarts=ACTOR_RESTARTS, max_task_retries=TASK_RETRIES),
                    fn_constructor_kwargs={"model": index.manifest.model, "device": device,
                                           "batch_size": config.embed_batch_size,
                                           "long_text": settings.get("long_text", "window"), "expect": settings,
                                           **fault_hook()})
            log.info("ray: %d files in %d blocks, %d embedding actor(s), %g GPU each", len(todo), blocks, actors, gpus)
            self._commit_rows(ds, todo, run)
        finally:
            context.execution_options.preserve_order, context.enable_progress_bars = saved

    def _commit_rows(self, ds: Any, todo: list[Pending], run: IngestRun) -> None:
        """Commit files as they come back, in batches of about ``config.batch_chunks`` chunks."""
        index, config, report, clock = run.index, run.config, run.report, run.clock
        waiting = {p.source.doc_id: p for p in todo}
        arrived = _Arrived(index)
        committing = run.with_embedder(arrived)
        batch: list[Pending] = []
        committed = 0
        try:
            for row in _rows(ds, clock):
                item = waiting.pop(str(row["doc_id"]), None)
                if item is None:  # seen already (a block delivered twice): that file is committed once
                    log.warning("ray: %s came back twice; kept once", row["doc_id"])
                    continue
                payload = json.loads(str(row["payload"]))
                report.failures += [FileFailure(**f) for f in payload["failures"]]
                arrived.add_report(str(row["report"]))
                if not payload["keep"]:
                    continue
                item.documents = [Document.from_dict(d) for d in payload["documents"]]
                item.chunks = [Chunk.from_dict(c) for c in payload["chunks"]]
                report.empty_documents += payload["empty_documents"]
                arrived.add(item.chunks, json.loads(str(row["keys"])), row["vectors"], json.loads(str(row["cached"])))
                batch.append(item)
                if sum(len(i.chunks) for i in batch) >= config.batch_chunks:
                    commit_batch(batch, committing)
                    committed += len(batch)
                    batch = []
            if batch:
                commit_batch(batch, committing)
                committed += len(batch)
        except _JobFailed as failed:
            raise RayIngestError(
                f"the Ray job failed after {committed} of {len(todo)} changed files were committed: {failed}. "
                f"The index holds those whole files only; run the same ingestion again to finish "
                f"(committed files are not redone)") from failed.__cause__
        if waiting:
            raise RayIngestError(f"{len(waiting)} file(s) never came back from the Ray job (e.g. "
                                 f"{next(iter(waiting))}); {committed} were committed; run the ingestion again")


def _parts(todo: list[Pending], max_bytes: int) -> Iterator[list[Pending]]:
    """Consecutive runs of files of at most ``max_bytes`` together (one file alone may exceed it)."""
    part: list[Pending] = []
    size = 0
    for item in todo:
        if part and size + item.size > max_bytes:
            yield part
            part, size = [], 0
        part.append(item)
        size += item.size
    if part:
        yield part


def _load_redacted(part: list[Pending], redactor: Any, config: IngestConfig, report: IngestReport, clock: Any
                   ) -> tuple[list[Pending], list[str]]:
    """Load and mask the files of one part here, as local ingestion does; the kept files and their documents."""
    limits = LoadLimits(max_parse_bytes=config.max_parse_bytes, pdf_timeout=config.pdf_timeout)
    kept, documents = [], []
    for item in part:
        if load(item, limits, redactor, report, clock):
            kept.append(item)
            documents.append(json.dumps([d.to_dict() for d in item.documents], ensure_ascii=False))
            item.documents = []  # travels as JSON; the commit takes the workers' copy
    return kept, documents


def _vector_keys(index: Index, file: str) -> list[str]:
    """The vector keys of a changed file's current chunks: text that did not change is not re-embedded."""
    return index.store.file_vector_keys(file)


class _JobFailed(Exception):
    """Internal: the Ray Data iteration raised (past its retries)."""


def _rows(ds: Any, clock: Any) -> Iterator[dict[str, Any]]:
    """The dataset's rows; Ray's failures become :class:`_JobFailed`, time waited goes to ``seconds['ray']``."""
    rows = iter(ds.iter_rows())
    while True:
        t0 = time.perf_counter()
        try:
            row = next(rows)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises many types (task, actor, object lost, user code)
            first = str(exc).strip().splitlines()
            raise _JobFailed(f"{type(exc).__name__}: {first[-1] if first else ''}") from exc
        finally:
            clock.totals["ray"] = clock.totals.get("ray", 0.0) + time.perf_counter() - t0
        yield row


class _Arrived(PreEmbedded):
    """Stands in for the Embedder in ``ingestion._steps.commit_batch``: the vectors were computed on workers.

    :meth:`take` hands them to the index (:meth:`Index.put_vectors`) first, as
    ``embed_batch`` does with an embedder's (``commit_batch`` then adds chunks that point at them).
    """

    def __init__(self, index: Index) -> None:
        self.index = index
        self.dim = index.manifest.dim
        self.keys: dict[str, str] = {}
        self.vectors: dict[str, np.ndarray] = {}
        self.pending_report = EmbeddingReport()

    def add(self, chunks: list[Chunk], keys: list[str], blob: bytes, cached: list[str]) -> None:
        vectors = np.frombuffer(blob, dtype=np.float32).reshape(len(chunks), self.dim)
        stored = self.index.stored_vectors(cached)  # the workers' cache hits: vectors the index holds
        if len(stored) != len(set(cached)):  # pragma: no cover - we hold the index's lock
            raise RuntimeError(f"{chunks[0].doc_id}: a vector the workers took from the index is gone")
        for chunk, key, vector in zip(chunks, keys, vectors, strict=True):
            vector = stored.get(key, vector)
            self.keys[chunk.embedding_text] = key
            self.vectors[key] = vector

    def add_report(self, text: str) -> None:
        if text:
            self.pending_report.add(EmbeddingReport.model_validate_json(text))

    def take(self, index: Index, texts: Sequence[str], progress: Callable[[int], None] | None = None
             ) -> tuple[np.ndarray, list[str], EmbeddingReport]:
        """The arrived vectors of ``texts``, kept by the index, their keys and the workers' report;
        then forgets them (the next batch brings its own)."""
        keys = [self.keys[t] for t in texts]
        out = np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, self.dim), dtype=np.float32)
        index.put_vectors({k: self.vectors[k] for k in keys})
        if progress:
            progress(len(keys))
        report, self.pending_report = self.pending_report, EmbeddingReport()
        self.keys.clear()
        self.vectors.clear()
        return out, keys, report
