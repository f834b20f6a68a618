"""Every error contextkit raises on purpose derives from :class:`ContextkitError`.

One base so that an application (and the CLI) can catch contextkit's own failures in one
``except`` without swallowing a bug's ``TypeError``. Each class also keeps the built-in base
it had (``ValueError``, ``LookupError``, ``ImportError``, ``sqlite3.OperationalError`` ...),
so code written against those keeps working. The classes are defined here, in a leaf module
that imports nothing of contextkit, and re-exported where they are raised
(``contextkit.index.IndexFolderError`` is this module's class; ``contextkit.errors`` is this module).
"""

from __future__ import annotations

import sqlite3
from typing import Any

__all__ = [
    "BudgetError",
    "ChunkTooSmallError",
    "ConfigError",
    "ContextkitError",
    "ConversionError",
    "DocumentNotFoundError",
    "EmbeddingMemoryError",
    "EvaluationError",
    "HeaderTooLargeError",
    "HistoryFileError",
    "IndexCorruptError",
    "IndexDatabaseError",
    "IndexFolderError",
    "IndexLockedError",
    "IndexMismatchError",
    "IndexWriteError",
    "InvalidArgumentError",
    "LLMCallError",
    "LLMTimeoutError",
    "LimitExceededError",
    "LlamaIndexVersionError",
    "ModelNotFoundError",
    "NothingToIngestError",
    "OutputValidationError",
    "ProfileError",
    "RayClusterError",
    "RayIngestError",
    "RayNotInstalledError",
    "RestoreUnavailableError",
    "RetrievalError",
    "SearchError",
    "SectionError",
    "ServeError",
    "StoreCorruptError",
    "StoreWriteError",
    "TokenizerNotFoundError",
    "UnknownOptionError",
    "UsageLogError",
]


class ContextkitError(Exception):
    """The base of every error contextkit raises on purpose; the message says what to do."""


class InvalidArgumentError(ContextkitError, ValueError):
    """An argument, setting or record that contextkit cannot use; the message names it and what would do.

    Still a ``ValueError``, as these were before there was a base.
    """


class LimitExceededError(InvalidArgumentError):
    """A request past one of contextkit's limits (a query's length, ``k``, a budget, a history's length).

    The limits keep one careless or hostile request from holding a CPU for minutes or memory by the
    gigabyte; the message names the limit and the option that raises it.
    """


# ------------------------------------------------------------ tokenizers


class TokenizerNotFoundError(ContextkitError, LookupError):
    """The named tokenizer cannot be loaded offline."""


# ------------------------------------------------------------ configuration


class ConfigError(ContextkitError, ValueError):
    """An unreadable or malformed config file; the message names it."""


# ------------------------------------------------------------ chunking


class HeaderTooLargeError(ContextkitError, ValueError):
    """The metadata header alone does not fit in ``chunk_size``."""


class ChunkTooSmallError(ContextkitError, ValueError):
    """One character needs more tokens than a chunk has room for (``chunk_size`` minus the header)."""


# ------------------------------------------------------------ embedding


class EmbeddingMemoryError(ContextkitError, MemoryError):
    """One text alone does not fit in memory on the embedding device (the message says which device)."""


# ------------------------------------------------------------ the index folder


class IndexFolderError(ContextkitError, RuntimeError):
    """The index folder is missing, corrupt or inconsistent (the message says which)."""


class IndexMismatchError(IndexFolderError):
    """The index was built with another model, dimension or format."""


class IndexLockedError(IndexFolderError):
    """Another process is writing to this index."""


class IndexWriteError(IndexFolderError):
    """Writing the index failed (full disk, permissions, I/O); its last committed state is intact."""


class IndexCorruptError(IndexFolderError):
    """A file of the index is damaged or inconsistent; ``file`` names it, relative to the folder."""

    def __init__(self, message: str, file: str | None = None) -> None:
        super().__init__(message)
        self.file = file


class StoreWriteError(IndexWriteError, sqlite3.OperationalError):
    """SQLite could not write the records store (still a ``sqlite3.OperationalError``)."""


class StoreCorruptError(IndexCorruptError, sqlite3.DatabaseError):
    """SQLite found the records store damaged (still a ``sqlite3.DatabaseError``)."""


class IndexDatabaseError(IndexFolderError):
    """An index in a database (PostgreSQL) that cannot be reached or used: the server refuses the
    connection or the login, the pgvector extension is missing, or the schema is of a newer contextkit.
    The message names the database by its DSN without the password."""


class IndexExistsError(IndexFolderError):
    """``Index.create`` on a folder that already holds an index (another process may just have made it)."""


class IndexReadOnlyError(IndexWriteError, PermissionError):
    """A write to an index that is read-only (a read-only mount, files the user cannot write, or an
    index opened with ``read_only=True``); the message names the folder. Reads still work."""


# ------------------------------------------------------------ ingestion


class NothingToIngestError(ContextkitError, ValueError):
    """An ingestion run found no file to load (a missing path, an empty folder, a glob matching
    nothing); nothing was written. ``failures`` holds the inputs that failed, as values."""

    def __init__(self, message: str, failures: list | None = None) -> None:
        super().__init__(message)
        self.failures = list(failures or [])


class UnknownOptionError(ContextkitError, TypeError, ValueError):
    """An option name that the component does not have (a typo such as ``chunk_sise``); the message
    names it and the closest known name. Raised alike by every entry point (constructors, ``from_dict``,
    the calls that take overrides, ``contextkit.toml``). A ``TypeError``, as an unexpected keyword
    argument is, and a ``ValueError``, as the invalid setting pydantic reported it as before."""


class ModelNotFoundError(ContextkitError, LookupError):
    """The embedding model named cannot be loaded (not installed, not cached offline, not a
    sentence-transformers model); the message names it and what would do."""


# ------------------------------------------------------------ ingestion on Ray


class RayNotInstalledError(ContextkitError, ImportError):
    """``engine="ray"`` was asked for and Ray is not installed (the message says how to install it)."""


class RayClusterError(ContextkitError, ConnectionError):
    """The Ray cluster cannot be reached or cannot run the job (no GPUs where GPUs were asked for)."""


class RayIngestError(ContextkitError, RuntimeError):
    """The Ray job failed past its retries; the index holds only the whole files committed before.

    Re-running the same ingestion does what is missing (nothing committed is redone).
    """


# ------------------------------------------------------------ retrieval


class RetrievalError(ContextkitError, ValueError):
    """A retrieval request that cannot be served (the message says why)."""


class SearchError(ContextkitError, RuntimeError):
    """The search could not run (no index, bad input); the message says why."""


# ------------------------------------------------------------ compressors


class RestoreUnavailableError(ContextkitError, RuntimeError):
    """``restore()`` on a redactor built without ``keep_mapping=True``."""


# ------------------------------------------------------------ assembly


class SectionError(ContextkitError, ValueError):
    """A section or item that cannot be used, named in the message."""


class ProfileError(ContextkitError, LookupError):
    """An unknown model profile, or an impossible one."""


class BudgetError(ContextkitError, ValueError):
    """The budget cannot hold what must go in (the pinned sections)."""


class HistoryFileError(ContextkitError, ValueError):
    """A history file that is not valid JSON lines of messages; names the line."""


# ------------------------------------------------------------ evaluation


class EvaluationError(ContextkitError, ValueError):
    """The evaluation cannot run (a missing or malformed file, a bad option); the message says why."""


# ------------------------------------------------------------ the LlamaIndex plug-in


class LlamaIndexVersionError(ContextkitError, ImportError):
    """llama-index-core is missing or outside the supported range."""


class ConversionError(ContextkitError, ValueError):
    """A node or document cannot become a contextkit record exactly (the message says why)."""


# ------------------------------------------------------------ LLM calls (contextkit.llm)


class LLMCallError(ContextkitError, RuntimeError):
    """Every model (the LLM and its fallbacks) failed past its retries; ``attempts`` lists each try.

    ``usage`` (what the failed tries cost, a :class:`contextkit.llm.Usage`), ``seconds``, ``task`` and
    ``request_id`` are set by the caller that raises it, for the usage log."""

    usage: Any = None
    seconds: float | None = None
    task: str | None = None
    request_id: str | None = None

    def __init__(self, message: str, attempts: list[Any] | None = None) -> None:
        super().__init__(message)
        self.attempts = list(attempts or [])


class LLMTimeoutError(ContextkitError, TimeoutError):
    """One LLM call took longer than its ``timeout`` (still a ``TimeoutError``)."""


class OutputValidationError(ContextkitError, ValueError):
    """The model's answer is not JSON, or not valid for the requested output model (the message says why)."""


class UsageLogError(ContextkitError, ValueError):
    """A usage log that cannot be read, or a line of it that is not a usage record (names the line)."""


# ------------------------------------------------------------ serving (contextkit.serve)


class ServeError(ContextkitError, RuntimeError):
    """A server that cannot start as asked (the ``serve`` extra missing, a token file unreadable, a port taken)."""


class DocumentNotFoundError(ContextkitError, LookupError):
    """A document id the index does not hold (a server answers it with 404, or a tool error)."""
