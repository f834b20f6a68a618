"""The index folder: FAISS vectors, a SQLite records store and a JSON manifest."""

from contextkit.index._index import (
    FORMAT_VERSION,
    Index,
    IndexCorruptError,
    IndexFolderError,
    IndexLockedError,
    IndexManifest,
    IndexMismatchError,
    IndexWriteError,
)
from contextkit.index._repair import RepairReport, repair_index
from contextkit.index._verify import VerifyReport, verify_index

__all__ = ["FORMAT_VERSION", "Index", "IndexCorruptError", "IndexFolderError", "IndexLockedError", "IndexManifest",
           "IndexMismatchError", "IndexWriteError", "RepairReport", "VerifyReport", "repair_index", "verify_index"]
