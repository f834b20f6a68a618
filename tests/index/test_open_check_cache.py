"""An open hashes each derived file once per process while the file stays as it was (``check_file_on_open``).

``search_index`` opens the index on every call, and each open hashed every file up to 8 MiB again:
about 15 ms of a 40 ms call on python3-doc's 19,859 chunks. A file this process already found clean
is not hashed again while its device, inode, size, mtime and ctime are unchanged; anything that
writes to it, renames over it or sets its times back changes its ctime, and it is hashed (and
caught) again. ``verify`` never uses the cache.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from contextkit.index import Index, IndexCorruptError, _checksums, verify_index
from contextkit.records import Chunk

from .conftest import derived_path

DIM, N = 16, 40


@pytest.fixture()
def folder(tmp_path):
    folder = tmp_path / "ix"
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((N, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts = [f"alpha beta {i}" for i in range(N)]
    chunks = [Chunk(id=f"d::{i}", doc_id="d", ordinal=i, text=t, start=20 * i, end=20 * i + len(t), token_count=3)
              for i, t in enumerate(texts)]
    with Index.create(folder, model="m", dim=DIM) as index:
        index.begin()
        index.store.put_document("d", "d", "d", "sha", 10, {})
        index.add_chunks(chunks, vecs, [f"d-{i}" for i in range(N)])
        index.commit()
    return folder


@pytest.fixture()
def hashed(monkeypatch):
    """The files fully hashed, by name; the cache emptied."""
    monkeypatch.setattr(_checksums, "_CLEAN", type(getattr(_checksums, "_CLEAN", {}))(), raising=False)
    names: list[str] = []
    real = _checksums._full_sha256

    def spy(path):
        names.append(path.name)
        return real(path)

    monkeypatch.setattr(_checksums, "_full_sha256", spy)
    return names


def _open_and_search(folder) -> None:
    with Index.open(folder, read_only=True) as index:
        assert index.bm25.search("alpha", 3)


def _flip_a_byte(path) -> None:
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))


class TestOpenCheckCache:
    def test_a_second_open_hashes_nothing_when_the_files_are_old_enough(self, folder, hashed, monkeypatch):
        monkeypatch.setattr(_checksums, "RACY_SECONDS", 0.0, raising=False)
        _open_and_search(folder)
        first = len(hashed)
        assert first >= 2  # vectors.faiss and the BM25 files
        _open_and_search(folder)
        assert len(hashed) == first

    def test_files_changed_within_the_racy_window_are_hashed_every_time(self, folder, hashed):
        _open_and_search(folder)  # just written: younger than RACY_SECONDS
        first = len(hashed)
        _open_and_search(folder)
        assert len(hashed) == 2 * first

    @pytest.mark.parametrize("role", ["vectors.faiss", "bm25/vocab.index.json"])
    def test_a_file_damaged_after_a_clean_open_is_caught_by_the_next(self, folder, hashed, monkeypatch, role):
        monkeypatch.setattr(_checksums, "RACY_SECONDS", 0.0, raising=False)
        _open_and_search(folder)
        path = derived_path(folder, role)
        st = path.stat()
        _flip_a_byte(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # its mtime set back: the ctime still moves
        with pytest.raises(IndexCorruptError, match="SHA-256"):
            Index.open(folder, read_only=True)

    def test_a_file_replaced_by_another_of_the_same_size_is_caught(self, folder, hashed, monkeypatch):
        monkeypatch.setattr(_checksums, "RACY_SECONDS", 0.0, raising=False)
        _open_and_search(folder)
        path = derived_path(folder, "vectors.faiss")
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        other = path.with_name("other")
        other.write_bytes(bytes(data))
        os.replace(other, path)
        with pytest.raises(IndexCorruptError, match="SHA-256"):
            Index.open(folder, read_only=True)

    def test_verify_hashes_every_file_whatever_open_saw(self, folder, hashed, monkeypatch):
        monkeypatch.setattr(_checksums, "RACY_SECONDS", 0.0, raising=False)
        _open_and_search(folder)
        opened = set(hashed)
        _open_and_search(folder)
        hashed.clear()
        assert verify_index(folder).ok
        assert opened <= set(hashed)
