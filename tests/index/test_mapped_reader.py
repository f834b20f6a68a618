"""A read-only open maps a flat or HNSW file's vectors instead of copying them (``mapped_read_flags``).

Why it matters to users: ``search_index`` and ``contextkit search`` open the index on every call, and the
copy was most of an open (11 ms on python3-doc's 20,000 vectors, seconds on millions); the workers of one
host share the mapped pages. A writer's structure stays in memory (it changes it). A reader keeps its
generation while a writer saves the next one, and lets its mapping go when it moves on or closes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from contextkit.index import Index
from contextkit.records import Chunk

from .conftest import derived_path

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")

DIM = 32


def _vectors(n: int, seed: int) -> np.ndarray:
    vecs = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def _add(index: Index, doc: str, n: int, seed: int) -> np.ndarray:
    vecs = _vectors(n, seed)
    texts = [f"{doc} text {i}" for i in range(n)]
    chunks = [Chunk(id=f"{doc}::{i}", doc_id=doc, ordinal=i, text=t, start=100 * i, end=100 * i + len(t),
                    token_count=3) for i, t in enumerate(texts)]
    index.begin()
    index.store.put_document(doc, doc, doc, f"sha-{doc}", 10, {})
    index.add_chunks(chunks, vecs, [f"{doc}-{i}" for i in range(n)])
    index.commit()
    return vecs


def _mapped(path: Path) -> bool:
    return str(path.resolve()) in Path("/proc/self/maps").read_text()


@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
def test_a_reader_maps_the_vectors_and_a_writer_does_not(tmp_path, index_type):
    folder = tmp_path / "ix"
    with Index.create(folder, model="m", dim=DIM, index_type=index_type) as index:
        vecs = _add(index, "a", 300, 1)
    faiss_file = derived_path(folder, "vectors.faiss")
    with Index.open(folder, read_only=True) as reader:
        assert _mapped(faiss_file)
        assert reader.search(vecs[7], 3)[0][0].chunk.id == "a::7"
    assert not _mapped(faiss_file)  # closed: unmapped
    with Index.open(folder) as writer:
        assert writer._faiss.ntotal == 300
        assert not _mapped(faiss_file)


def test_a_mapped_reader_keeps_its_generation_while_a_writer_replaces_the_files(tmp_path):
    folder = tmp_path / "ix"
    with Index.create(folder, model="m", dim=DIM) as index:
        vecs = _add(index, "a", 200, 1)
    old_file = derived_path(folder, "vectors.faiss")
    with Index.open(folder, read_only=True) as reader:
        with reader.snapshot():
            before = [(h.chunk.id, h.score) for h in reader.search(vecs[11], 5)[0]]
            with Index.open(folder) as writer:
                _add(writer, "b", 200, 2)
                _add(writer, "c", 200, 3)
            assert derived_path(folder, "vectors.faiss") != old_file  # (kept on disk: the reader leases it)
            assert [(h.chunk.id, h.score) for h in reader.search(vecs[11], 5)[0]] == before  # the mapped pages
        with reader.snapshot():  # the next query moves to the writer's last generation
            assert len(reader) == 600
        assert not _mapped(old_file)  # and the old one is let go
