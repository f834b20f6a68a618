"""The ingestion pipeline: files -> documents -> chunks -> vectors -> index folder.

Incremental: a file whose SHA-256 is already recorded is skipped; a changed file
has all its old chunks replaced in the same transaction that adds the new ones.
Resumable: files are committed in batches, each batch one SQLite transaction,
so a run killed at any point (``kill -9`` included) leaves whole files only, and
the next run does what is left, with no duplicate and no missing chunk.
"""

from contextkit.ingestion._ingest import ingest
from contextkit.ingestion._preview import FormatPreview, IngestPreview, preview_ingest
from contextkit.ingestion._types import (
    FileFailure,
    IngestConfig,
    IngestEvent,
    IngestReport,
)

__all__ = ["FileFailure", "FormatPreview", "IngestConfig", "IngestEvent", "IngestPreview", "IngestReport", "ingest",
           "preview_ingest"]
