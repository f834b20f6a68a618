"""Ingestion on a Ray cluster: ``ingest(..., engine="ray")`` and ``contextkit ingest --engine ray``.

The only place in contextkit that imports Ray, and only inside functions: importing
this package costs nothing and works without Ray installed. The driver (the process
that calls :func:`contextkit.ingest`) plans the run exactly as local ingestion does
(same file hashes, same prune rules) and commits into the one index folder through
the normal :class:`~contextkit.index.Index` API; Ray Data only does the work in
between: load + chunk on CPU tasks, embed in an actor pool holding one model per
actor (on GPUs when asked). See ``docs/ray.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextkit.core.errors import RayClusterError, RayIngestError, RayNotInstalledError

__all__ = ["RayClusterError", "RayIngestError", "RayNotInstalledError", "ray_batches"]

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.ingestion._types import IngestConfig
    from contextkit.ingestion.ray._pipeline import RayBatches

INSTALL_HINT = "pip install 'contextkit[ray]'"


def ray_batches(config: IngestConfig) -> RayBatches:
    """Connect to Ray now (before any index is created) and return the batch runner for ``ingest``.

    Raises :class:`RayNotInstalledError` without Ray and :class:`RayClusterError` when the
    cluster at ``config.ray_address`` cannot be reached.
    """
    from contextkit.ingestion.ray._pipeline import RayBatches

    return RayBatches(config)
