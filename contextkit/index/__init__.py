"""The index: a folder (FAISS vectors, a SQLite records store, a JSON manifest) or a PostgreSQL schema."""

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
from contextkit.index._pg_dsn import is_dsn, location_name
from contextkit.index._pg_index import PgIndex  # registers the postgresql:// backend with Index
from contextkit.index.repair import RepairReport, repair_index
from contextkit.index.verify import VerifyReport, verify_index

__all__ = ["FORMAT_VERSION", "Index", "IndexCorruptError", "IndexExistsError", "IndexFolderError", "IndexLockedError",
           "IndexManifest", "IndexMismatchError", "IndexReadOnlyError", "IndexWriteError", "PgIndex", "RepairReport",
           "VerifyReport", "is_dsn", "location_name", "repair_index", "verify_index"]
