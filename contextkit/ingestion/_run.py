"""``IngestRun``: one ingestion run in flight, the one value every step of a runner takes.

Why a record: the local runner, the streaming path, the commit step and the Ray runner each took
the same eight things (index, embedder, chunker, settings, report, progress callback, clock,
PII session) as loose positional arguments, in an order every caller had to repeat. Now they
take the run, and a step that needs something new reads it from the run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from contextkit.embedders import EmbeddingReport
from contextkit.ingestion._types import Clock, IngestConfig, IngestEvent, IngestReport

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.chunking import TokenChunker
    from contextkit.compressors.base import Redactor
    from contextkit.embedders import Embedder
    from contextkit.index import Index

__all__ = ["IngestRun", "PreEmbedded"]


class PreEmbedded(ABC):
    """Vectors computed before the commit (by the Ray runner's workers): :func:`embed_batch` takes
    them from here instead of asking an embedder."""

    @abstractmethod
    def take(self, index: Index, texts: Sequence[str], progress: Callable[[int], None] | None = None
             ) -> tuple[np.ndarray, list[str], EmbeddingReport]:
        """The vectors of ``texts``, their keys and the embedding's report, the vectors kept by
        ``index`` (:meth:`Index.put_vectors`) before this returns."""


@dataclass(slots=True)
class IngestRun:
    """What a run's steps share: where it writes, how it cuts and embeds, what it reports."""

    index: Index
    embedder: Embedder | PreEmbedded  # PreEmbedded: vectors computed elsewhere (Ray's workers)
    chunker: TokenChunker
    config: IngestConfig
    report: IngestReport
    notify: Callable[[IngestEvent], None]
    clock: Clock
    redactor: Redactor | None = None  # the run's PII session, when the index redacts

    def with_embedder(self, embedder: Embedder | PreEmbedded) -> IngestRun:
        """This run with vectors from ``embedder`` (the Ray runner commits what its workers embedded)."""
        return replace(self, embedder=embedder)
