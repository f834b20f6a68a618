"""contextkit: context engineering and retrieval-augmented generation.

``import contextkit`` is cheap: the public names below are loaded on first use,
so torch, faiss, tiktoken and llama_index are imported only when needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from contextkit._version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.assembly import (
        AssemblyReport,
        AssemblyResult,
        BudgetError,
        EvidenceItem,
        ModelProfile,
        ProfileError,
        Section,
        SectionError,
        assemble,
        get_profile,
        list_profiles,
        register_profile,
    )
    from contextkit.assembly.context_assembler import (
        AssemblerConfig,
        ContextAssembler,
        HistoryFileError,
        load_history,
    )
    from contextkit.chunking import ChunkerConfig, HeaderTooLargeError, TokenChunker
    from contextkit.embedders import Embedder, EmbeddingReport
    from contextkit.errors import ContextkitError
    from contextkit.index import (
        Index,
        IndexFolderError,
        IndexLockedError,
        IndexManifest,
        IndexMismatchError,
    )
    from contextkit.ingestion import IngestConfig, IngestReport, ingest
    from contextkit.loaders import LoadError, discover_files, load_file
    from contextkit.records import Chunk, Document, Message, ScoredChunk
    from contextkit.search import SearchError, search_index
    from contextkit.tokenizers import Tokenizer, TokenizerNotFoundError, get_tokenizer

__all__ = [
    "AssemblerConfig",
    "AssemblyReport",
    "AssemblyResult",
    "BudgetError",
    "Chunk",
    "ChunkerConfig",
    "ContextAssembler",
    "ContextkitError",
    "Document",
    "Embedder",
    "EmbeddingReport",
    "EvidenceItem",
    "HeaderTooLargeError",
    "HistoryFileError",
    "Index",
    "IndexFolderError",
    "IndexLockedError",
    "IndexManifest",
    "IndexMismatchError",
    "IngestConfig",
    "IngestReport",
    "LoadError",
    "Message",
    "ModelProfile",
    "ProfileError",
    "ScoredChunk",
    "SearchError",
    "Section",
    "SectionError",
    "TokenChunker",
    "Tokenizer",
    "TokenizerNotFoundError",
    "__version__",
    "assemble",
    "discover_files",
    "get_profile",
    "get_tokenizer",
    "ingest",
    "list_profiles",
    "load_file",
    "load_history",
    "register_profile",
    "search_index",
]

_WHERE = {
    "ContextkitError": "errors",
    "Chunk": "records", "Document": "records", "ScoredChunk": "records",
    "ChunkerConfig": "chunking", "HeaderTooLargeError": "chunking", "TokenChunker": "chunking",
    "Embedder": "embedders", "EmbeddingReport": "embedders",
    "Index": "index", "IndexFolderError": "index", "IndexLockedError": "index", "IndexManifest": "index",
    "IndexMismatchError": "index",
    "IngestConfig": "ingestion", "IngestReport": "ingestion", "ingest": "ingestion",
    "LoadError": "loaders", "discover_files": "loaders", "load_file": "loaders",
    "SearchError": "search", "search_index": "search",
    "Tokenizer": "tokenizers", "TokenizerNotFoundError": "tokenizers", "get_tokenizer": "tokenizers",
    "Message": "records",
    "AssemblerConfig": "assembly.context_assembler",
    "AssemblyReport": "assembly",
    "AssemblyResult": "assembly",
    "BudgetError": "assembly",
    "ContextAssembler": "assembly.context_assembler",
    "EvidenceItem": "assembly",
    "HistoryFileError": "assembly.context_assembler",
    "ModelProfile": "assembly",
    "ProfileError": "assembly",
    "Section": "assembly",
    "SectionError": "assembly",
    "assemble": "assembly",
    "get_profile": "assembly",
    "list_profiles": "assembly",
    "load_history": "assembly.context_assembler",
    "register_profile": "assembly",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'contextkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"contextkit.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
