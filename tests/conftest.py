"""Shared fixtures: the real model, tokenizer and data, built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared datasets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def peps(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "python_peps" / "peps").glob("*.rst"))


@pytest.fixture(scope="session")
def embedder():
    from contextkit.embedders import Embedder

    emb = Embedder()
    _ = emb.dim  # load the model once
    return emb


@pytest.fixture(scope="session")
def cl100k():
    from contextkit.tokenizers import TiktokenTokenizer

    return TiktokenTokenizer("cl100k_base")


@pytest.fixture()
def small_corpus(tmp_path: Path) -> Path:
    """A few short real-looking files (our own words), quick to embed."""
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "faiss.md").write_text(
        "# FAISS\n\nFAISS searches dense vectors by inner product or L2 distance.\n\n"
        "An IndexIDMap2 keeps the caller's ids so vectors can be removed later.\n", encoding="utf-8")
    (folder / "bm25.txt").write_text(
        "BM25 ranks documents by term frequency and inverse document frequency, with length normalisation.\n",
        encoding="utf-8")
    (folder / "sub" / "cooking.rst").write_text(
        "Bread\n=====\n\nKnead the dough for ten minutes, then let it rise until doubled in size.\n", encoding="utf-8")
    return folder


from tests._postgres import pg_dsn, pg_server  # noqa: E402, F401  (a real PostgreSQL, started on first use)
