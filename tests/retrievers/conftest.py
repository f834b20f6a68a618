"""The small corpus every retriever test searches, ingested once for the package (opened read-only)."""

from __future__ import annotations

import pytest

from contextkit.index import Index
from contextkit.ingestion import ingest

DOCS = {
    "guide/faiss.md": "FAISS searches dense vectors by inner product. An IndexIDMap2 keeps caller ids.",
    "guide/bm25.md": "BM25 ranks documents by term frequency and inverse document frequency.",
    "bread.txt": "Knead the dough for ten minutes and let the bread rise until doubled.",
    "cake.txt": "Whisk eggs and sugar, fold in flour, and bake the cake for thirty minutes.",
    "pasta.txt": "Boil salted water, cook the pasta until al dente, and drain it.",
}


@pytest.fixture(scope="package")
def corpus_index(tmp_path_factory, embedder):
    """``(index, folder)``: the five documents of ``DOCS`` in a real index (real model, FAISS, BM25)."""
    root = tmp_path_factory.mktemp("corpus")
    folder = root / "docs"
    (folder / "guide").mkdir(parents=True)
    for name, text in DOCS.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    ingest([folder], root / "ix", embedder=embedder)
    index = Index.open(root / "ix", read_only=True)
    yield index, folder
    index.close()


@pytest.fixture()
def index(corpus_index):
    return corpus_index[0]
