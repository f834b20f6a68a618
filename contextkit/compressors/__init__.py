"""Compressors: history summaries, evidence pruning and PII redaction.

Each works alone and plugs into the assembler (``ContextAssembler(..., redact=True,
compress_evidence=2.0)``; history is summarised by default). Modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "CompressionReport", "Compressor", "EvidenceCompressor", "EvidenceResult", "HistoryResult", "HistorySummarizer",
    "LLMHistorySummarizer", "PIIRedactor", "RedactionResult",
]

_WHERE = {"CompressionReport": "base", "Compressor": "base", "EvidenceCompressor": "evidence",
          "EvidenceResult": "evidence", "HistoryResult": "history",
          "HistorySummarizer": "history", "LLMHistorySummarizer": "llm_history", "PIIRedactor": "redact",
          "RedactionResult": "redact"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'contextkit.compressors' has no attribute {name!r}")
    return getattr(importlib.import_module(f"contextkit.compressors.{module}"), name)
