"""Compressors (history summaries, evidence pruning, PII redaction): see the compressors issue."""
