"""contextkit: context engineering and retrieval-augmented generation.

``import contextkit`` is cheap: the public names below are loaded on first use,
so torch, faiss, tiktoken and llama_index are imported only when needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextkit._version import __version__
from contextkit.core.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.assembly import (
        AssemblyReport,
        AssemblyResult,
        BudgetError,
        CacheRule,
        EvidenceItem,
        ModelProfile,
        ProfileError,
        Section,
        SectionError,
        assemble,
        get_profile,
        list_profiles,
        load_profiles,
        register_profile,
    )
    from contextkit.assembly.context_assembler import (
        AssemblerConfig,
        ContextAssembler,
        HistoryFileError,
        load_history,
    )
    from contextkit.chunking import ChunkerConfig, HeaderTooLargeError, TokenChunker
    from contextkit.core.errors import ContextkitError
    from contextkit.core.records import Chunk, Document, Message, ScoredChunk
    from contextkit.core.tokenizers import Tokenizer, TokenizerNotFoundError, get_tokenizer
    from contextkit.embedders import Embedder, EmbeddingReport
    from contextkit.index import (
        Index,
        IndexFolderError,
        IndexLockedError,
        IndexManifest,
        IndexMismatchError,
    )
    from contextkit.ingestion import IngestConfig, IngestReport, ingest
    from contextkit.loaders import LoadIssue, discover_files, load_file
    from contextkit.search import SearchError, search_index
    from contextkit.session import Session

#: Every public name and the module that defines it; ``__all__`` and the TYPE_CHECKING imports name the same
#: (tests/test_public_api.py holds the three equal, as httpx tests its exported members).
_WHERE = {
    "ContextkitError": "errors",
    "Chunk": "records", "Document": "records", "Message": "records", "ScoredChunk": "records",
    "ChunkerConfig": "chunking", "HeaderTooLargeError": "chunking", "TokenChunker": "chunking",
    "Embedder": "embedders", "EmbeddingReport": "embedders",
    "Index": "index", "IndexFolderError": "index", "IndexLockedError": "index", "IndexManifest": "index",
    "IndexMismatchError": "index",
    "IngestConfig": "ingestion", "IngestReport": "ingestion", "ingest": "ingestion",
    "LoadIssue": "loaders", "discover_files": "loaders", "load_file": "loaders",
    "SearchError": "search", "search_index": "search",
    "Tokenizer": "tokenizers", "TokenizerNotFoundError": "tokenizers", "get_tokenizer": "tokenizers",
    "AssemblerConfig": "assembly.context_assembler", "ContextAssembler": "assembly.context_assembler",
    "HistoryFileError": "assembly.context_assembler", "load_history": "assembly.context_assembler",
    "AssemblyReport": "assembly", "AssemblyResult": "assembly", "BudgetError": "assembly", "EvidenceItem": "assembly",
    "ModelProfile": "assembly", "ProfileError": "assembly", "Section": "assembly", "SectionError": "assembly",
    "assemble": "assembly", "get_profile": "assembly", "list_profiles": "assembly", "register_profile": "assembly",
    "CacheRule": "assembly", "load_profiles": "assembly",
    "Session": "session",
}
__all__ = [
    "AssemblerConfig", "AssemblyReport", "AssemblyResult", "BudgetError", "CacheRule", "Chunk", "ChunkerConfig",
    "ContextAssembler", "ContextkitError", "Document", "Embedder", "EmbeddingReport", "EvidenceItem",
    "HeaderTooLargeError", "HistoryFileError", "Index", "IndexFolderError", "IndexLockedError", "IndexManifest",
    "IndexMismatchError", "IngestConfig", "IngestReport", "LoadIssue", "Message", "ModelProfile", "ProfileError",
    "ScoredChunk", "SearchError", "Section", "SectionError", "Session", "TokenChunker", "Tokenizer", "TokenizerNotFoundError",
    "__version__", "assemble", "discover_files", "get_profile", "get_tokenizer", "ingest", "list_profiles",
    "load_file", "load_history", "load_profiles", "register_profile", "search_index",
]

__getattr__, __dir__ = lazy_exports("contextkit", _WHERE, globals(), deprecated={
    "LoadError": ("LoadIssue", "a record of a file that failed, not an exception"),
})
