"""Retrievers (dense, BM25, hybrid): see the retrievers issue."""
