"""What runs on Ray workers: load + chunk (CPU tasks) and embed (an actor pool).

Both stages take and return batches of file rows (``batch_format="numpy"``), one row
per file, so a file never splits across blocks: whatever Ray retries, the driver gets
each file whole, once, and commits it in one transaction. Payloads travel as JSON
text: no pickle of our records, and a row is readable in Ray's own tooling.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np

from contextkit.chunking import TokenChunker
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Document
from contextkit.loaders import LoadLimits, SourceFile, file_sha256, load_file

#: Test hook, read on the driver and handed to the actors: a marker file path. The first
#: embedding call that finds it missing creates it and kills its own worker process, so a
#: test can show that a dead worker loses and duplicates nothing.
FAULT_ENV = "CONTEXTKIT_RAY_TEST_KILL_ONCE"
#: Test hook: how many embedding calls an actor serves before the kill above.
FAULT_AFTER_ENV = "CONTEXTKIT_RAY_TEST_KILL_AFTER"


def fault_hook() -> dict[str, Any]:
    """The test hook's settings from the driver's environment (empty in normal runs)."""
    marker = os.environ.get(FAULT_ENV)
    return {"kill_once": marker, "kill_after": int(os.environ.get(FAULT_AFTER_ENV, "0"))} if marker else {}


@functools.lru_cache(maxsize=4)
def _chunker(settings: str) -> TokenChunker:
    """One chunker per worker process and settings (tasks reuse worker processes)."""
    return TokenChunker.from_dict(json.loads(settings))


def load_and_chunk(batch: dict[str, np.ndarray], chunker: str, limits: str) -> dict[str, np.ndarray]:
    """Load and chunk the files of one block; every problem comes back as a failure in the payload."""
    tok = _chunker(chunker)
    bounds = LoadLimits.model_validate_json(limits)
    payloads = [json.dumps(_one_file(str(d), str(p), str(s), tok, bounds, str(docs)), ensure_ascii=False,
                           default=str)
                for d, p, s, docs in zip(batch["doc_id"], batch["path"], batch["sha256"], batch["documents"])]
    return {"doc_id": batch["doc_id"], "known": batch["known"], "payload": np.array(payloads, dtype=object)}


def _one_file(doc_id: str, path: str, sha256: str, chunker: TokenChunker, limits: LoadLimits,
              documents: str = "") -> dict[str, Any]:
    """Mirrors local ingestion's per-file steps (load_file, then chunk each document).

    ``documents``: the file's documents as JSON when the driver loaded them already (a
    redacting index: the driver masks PII in one session for the whole run)."""
    failures: list[dict[str, str]] = []
    if documents:
        return _chunked(doc_id, [Document.from_dict(d) for d in json.loads(documents)], chunker, failures)
    try:
        seen = file_sha256(Path(path))
    except OSError as exc:
        reason = f"unreadable on Ray worker {socket.gethostname()}: {exc.strerror or exc} (inputs must be at the " \
                 "same path on every node: a shared file system)"
        return {"keep": False, "failures": [{"path": doc_id, "reason": reason}]}
    if seen != sha256:
        return {"keep": False, "failures": [{"path": doc_id, "reason": (
            "changed while being ingested (the Ray worker read other bytes than the driver hashed); "
            "re-run to take the new version")}]}
    result = load_file(SourceFile(Path(path), doc_id), limits)
    failures += [{"path": e.path, "reason": e.reason} for e in result.errors]
    if not (result.documents or not result.errors):
        return {"keep": False, "failures": failures}
    return _chunked(doc_id, result.documents, chunker, failures)


def _chunked(doc_id: str, documents: list[Document], chunker: TokenChunker, failures: list[dict[str, str]]
             ) -> dict[str, Any]:
    """A loaded file's payload: its documents and their chunks (or why it failed)."""
    try:
        per_doc = [chunker.chunk(d) for d in documents]
    except ValueError as exc:  # a header too large for a document: the file fails, as locally
        return {"keep": False, "failures": [*failures, {"path": doc_id, "reason": str(exc)}]}
    return {
        "keep": True,
        "failures": failures,
        "documents": [d.to_dict() for d in documents],
        "chunks": [asdict(c) for chunks in per_doc for c in chunks],
        "empty_documents": sum(1 for chunks in per_doc if not chunks),
    }


class EmbedActor:
    """Holds one :class:`~contextkit.embedders.Embedder` for its life; embeds the chunks of file rows.

    Checks on start that its model gives the settings the index recorded (a worker with
    another model version must not mix vectors into the index).
    """

    def __init__(self, model: str, device: str, batch_size: int, long_text: Literal["window", "truncate"],
                 expect: dict[str, Any], kill_once: str | None = None, kill_after: int = 0) -> None:
        from contextkit.embedders import Embedder

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.embedder = Embedder(model, device=device, batch_size=batch_size, long_text=long_text)
        got = self.embedder.settings()
        wrong = {k: (v, got.get(k)) for k, v in expect.items() if k in ("dim", "max_tokens", "long_text")
                 and got.get(k) != v}
        if wrong:
            said = ", ".join(f"{k}: index {a!r}, worker {b!r}" for k, (a, b) in wrong.items())
            raise InvalidArgumentError(f"the model {model!r} on Ray worker {socket.gethostname()} does not match the index "
                             f"({said}); install the same model on every worker")
        self.calls = 0
        self.kill_once, self.kill_after = kill_once, kill_after

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        if self.kill_once and self.calls > self.kill_after:
            _die_once(self.kill_once)
        payloads = [json.loads(str(p)) for p in batch["payload"]]
        per_row = [[c["header"] + c["text"] for c in p.get("chunks", [])] for p in payloads]
        texts = [t for row in per_row for t in row]
        keys = [self.embedder.cache_key(t) for t in texts]
        known = {k for row in batch["known"] for k in json.loads(str(row))}  # all in the index's store
        self.embedder.cache = _Known(known, self.embedder.dim)
        vectors = self.embedder.embed(texts, keys=keys)
        report = self.embedder.last_report.model_dump_json()
        out_vectors, out_keys, out_cached, out_reports = [], [], [], []
        lo = 0
        for i, row in enumerate(per_row):
            hi = lo + len(row)
            out_vectors.append(np.ascontiguousarray(vectors[lo:hi], dtype=np.float32).tobytes())
            out_keys.append(json.dumps(keys[lo:hi]))
            out_cached.append(json.dumps([k for k in keys[lo:hi] if k in known]))
            out_reports.append(report if i == 0 else "")  # the batch's report travels once
            lo = hi
        return {
            "doc_id": batch["doc_id"],
            "payload": batch["payload"],
            "vectors": np.array(out_vectors, dtype=object),
            "keys": np.array(out_keys, dtype=object),
            "cached": np.array(out_cached, dtype=object),
            "report": np.array(out_reports, dtype=object),
        }


class _Known:
    """The embedder's cache on a worker: the vector keys the index already holds for the changed files.

    A hit skips the model and counts as a cache hit, as locally; its row comes back as
    zeros, its key in the ``cached`` column, and the driver takes the stored vector.
    """

    def __init__(self, keys: set[str], dim: int) -> None:
        self.keys = keys
        self.zero = np.zeros(dim, dtype=np.float32)

    def get_vectors(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        return {k: self.zero for k in keys if k in self.keys}

    def put_vectors(self, items: dict[str, np.ndarray]) -> None:
        pass


def _die_once(marker: str) -> None:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # already died once: this is the retry
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os._exit(1)
