"""Dense search over an index folder: embed the query with the index's own model."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from contextkit.embedders import Embedder
from contextkit.index import Index, IndexFolderError
from contextkit.records import ScoredChunk

__all__ = ["SearchError", "search_index"]


class SearchError(RuntimeError):
    """The search could not run (no index, or an unusable one); the message says why."""


def search_index(index_dir: str | Path, query: str, k: int = 10, device: str = "auto") -> list[ScoredChunk]:
    """The ``k`` chunks nearest to ``query``, best first, from the index at ``index_dir``."""
    if not query.strip():
        raise SearchError("the query is empty")
    try:
        with Index.open(index_dir, read_only=True) as index:
            embedder = _embedder(index.manifest.model, device, index.manifest.embedder.get("long_text", "window"))
            if embedder.dim != index.manifest.dim:
                raise SearchError(f"{index_dir}: model gives {embedder.dim}-d vectors, the index holds "
                                  f"{index.manifest.dim}-d")
            return index.search(embedder.embed([query]), k)[0]
    except IndexFolderError as exc:
        raise SearchError(str(exc)) from exc


@lru_cache(maxsize=2)
def _embedder(model: str, device: str, long_text: str) -> Embedder:
    """One loaded model per process: a notebook or the demo asks many questions."""
    return Embedder(model, device=device, long_text=long_text)  # type: ignore[arg-type]
