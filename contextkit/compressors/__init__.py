"""Compressors: history summaries, evidence pruning and PII redaction.

Each works alone and plugs into the assembler (``ContextAssembler(..., redact=True,
compress_evidence=2.0)``; history is summarised by default). Modules load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextkit.core.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.compressors.base import CompressionReport, Compressor, Redactor
    from contextkit.compressors.evidence import EvidenceCompressor, EvidenceResult
    from contextkit.compressors.history import HistoryResult, HistorySummarizer
    from contextkit.compressors.llm_history import LLMHistorySummarizer
    from contextkit.compressors.redact import PIIRedactor, RedactionResult

_WHERE = {"CompressionReport": "base", "Compressor": "base", "Redactor": "base", "EvidenceCompressor": "evidence",
          "EvidenceResult": "evidence", "HistoryResult": "history",
          "HistorySummarizer": "history", "LLMHistorySummarizer": "llm_history", "PIIRedactor": "redact",
          "RedactionResult": "redact"}
__all__ = [
    "CompressionReport", "Compressor", "EvidenceCompressor", "EvidenceResult", "HistoryResult",
    "HistorySummarizer", "LLMHistorySummarizer", "PIIRedactor", "RedactionResult", "Redactor",
]

__getattr__, __dir__ = lazy_exports("contextkit.compressors", _WHERE, globals())
