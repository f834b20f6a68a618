"""The index folder: FAISS vectors, a SQLite records store and a JSON manifest."""

from contextkit.index._index import (
    FORMAT_VERSION,
    Index,
    IndexFolderError,
    IndexLockedError,
    IndexManifest,
    IndexMismatchError,
)

__all__ = ["FORMAT_VERSION", "Index", "IndexFolderError", "IndexLockedError", "IndexManifest", "IndexMismatchError"]
