"""The index folder: FAISS vectors, a SQLite records store and a JSON manifest."""

from contextkit.core.errors import (
    IndexCorruptError,
    IndexExistsError,
    IndexFolderError,
    IndexLockedError,
    IndexMismatchError,
    IndexReadOnlyError,
    IndexWriteError,
)
from contextkit.index._index import Index
from contextkit.index._manifest import FORMAT_VERSION, IndexManifest
from contextkit.index.repair import RepairReport, repair_index
from contextkit.index.verify import VerifyReport, verify_index

__all__ = ["FORMAT_VERSION", "Index", "IndexCorruptError", "IndexExistsError", "IndexFolderError", "IndexLockedError",
           "IndexManifest", "IndexMismatchError", "IndexReadOnlyError", "IndexWriteError", "RepairReport",
           "VerifyReport", "repair_index", "verify_index"]
