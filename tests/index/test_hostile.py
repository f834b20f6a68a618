"""Damaged and crafted index folders (issue 16): each case is refused with a clear error, found by
``verify`` or fixed by ``repair``; none aborts the process, leaks a traceback or is served silently."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contextkit.errors import IndexLockedError, StoreCorruptError
from contextkit.index import Index, repair_index, verify_index
from contextkit.index._checksums import file_sum
from contextkit.records import Chunk, Document

from .conftest import derived_path

DIM = 8


def _chunks(doc: str, n: int) -> list[Chunk]:
    out = []
    for i in range(n):
        text = f"{doc} chapter {i} about topic{i} and more words"
        out.append(Chunk(id=f"{doc}::{i}", doc_id=doc, ordinal=i, text=text, start=0, end=len(text), token_count=8))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    rng = np.random.default_rng(16)
    path = tmp_path_factory.mktemp("hostile") / "ix"
    with Index.create(path, model="m", dim=DIM) as index:
        for doc in ("alpha", "beta", "gamma"):
            vectors = rng.standard_normal((4, DIM)).astype(np.float32)
            index.upsert(Document(id=doc, text=doc, source=f"{doc}.txt"), _chunks(doc, 4),
                         vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return path


@pytest.fixture()
def ix(built, tmp_path) -> Path:
    path = tmp_path / "ix"
    shutil.copytree(built, path, ignore=shutil.ignore_patterns(".lock"))
    return path


def edit_manifest(ix: Path, **changes) -> None:
    """Change manifest.json and its generation's copy alike (as a crafted folder would)."""
    manifest = json.loads((ix / "manifest.json").read_text())
    manifest.update(changes)
    for name in ("manifest.json", f"manifest.{manifest['generation']}.json"):
        (ix / name).write_text(json.dumps(manifest, indent=2))


def recompute_sum(ix: Path, role: str) -> None:
    """Record ``role``'s file's new checksum, so only the checks that look inside can see the change."""
    manifest = json.loads((ix / "manifest.json").read_text())
    manifest["checksums"][role] = file_sum(derived_path(ix, role)).model_dump()
    edit_manifest(ix, checksums=manifest["checksums"])


def statuses(ix: Path) -> dict[str, str]:
    return {c.file: c.status for c in verify_index(ix).checks}


def query(ix: Path) -> list[str]:
    with Index.open(ix, read_only=True) as index:
        vector = index.store.vectors_by_rowid([1])[0]
        return [h.chunk.id for h in index.search(vector, 3)[0]] + \
            [str(r) for r in index.bm25.search("chapter topic1", 3)[0]]


class TestManifestCounts:
    def test_a_wrong_chunk_count_does_not_lock_opens_out_and_is_repaired(self, ix):
        edit_manifest(ix, counts={**json.loads((ix / "manifest.json").read_text())["counts"], "chunks": 21})
        assert query(ix)  # opens and answers: the store's count is trusted, not the manifest's
        problems = [c for c in verify_index(ix).problems]
        assert [(c.file, c.status) for c in problems] == [("manifest.json", "mismatch")]
        assert "chunks 21 (the store has 12)" in problems[0].detail and problems[0].repairable
        assert repair_index(ix).ok and verify_index(ix).ok


class TestStoreRows:
    def test_a_changed_chunk_text_is_found_on_read_and_by_verify(self, ix):
        db = sqlite3.connect(ix / "store.sqlite")
        db.execute("UPDATE chunks SET text = 'alpha chapter 0 about topicX and more words' WHERE id = 'alpha::0'")
        db.commit()
        db.close()
        with Index.open(ix, read_only=True) as index:
            with pytest.raises(StoreCorruptError, match="alpha::0"):
                index.store.chunks_by_rowid([1])
        check = {c.file: c for c in verify_index(ix).checks}["store.sqlite"]
        assert check.status == "corrupt" and "alpha::0" in check.detail and check.repairable is False

    def test_invalid_utf8_in_a_text_is_a_clear_error(self, ix):
        db = sqlite3.connect(ix / "store.sqlite")
        db.execute("UPDATE chunks SET text = CAST(X'616263ff' AS TEXT) WHERE id = 'beta::1'")
        db.commit()
        db.close()
        with Index.open(ix, read_only=True) as index:
            rowid = int(index.store.db.execute("SELECT rowid FROM chunks WHERE id = 'beta::1'").fetchone()[0])
            with pytest.raises(StoreCorruptError, match="not UTF-8"):
                index.store.chunks_by_rowid([rowid])
        assert statuses(ix)["store.sqlite"] == "corrupt"

    def test_a_planted_trigger_is_refused_and_never_runs(self, ix):
        db = sqlite3.connect(ix / "store.sqlite")
        db.execute("CREATE TABLE pwned (x TEXT)")
        db.execute("CREATE TRIGGER planted AFTER INSERT ON chunks BEGIN INSERT INTO pwned VALUES ('ran'); END")
        db.commit()
        db.close()
        for read_only in (True, False):
            with pytest.raises(StoreCorruptError, match="trigger 'planted'"):
                Index.open(ix, read_only=read_only)
        check = {c.file: c for c in verify_index(ix).checks}["store.sqlite"]
        assert check.status == "corrupt" and "planted" in check.detail
        db = sqlite3.connect(ix / "store.sqlite")
        assert db.execute("SELECT COUNT(*) FROM pwned").fetchone()[0] == 0


class TestDerivedRows:
    def test_permuted_faiss_ids_are_found_and_repaired(self, ix):
        import faiss

        path = derived_path(ix, "vectors.faiss")
        index = faiss.read_index(str(path))
        ids = faiss.vector_to_array(index.id_map)
        faiss.copy_array_to_vector(np.roll(ids, 1), index.id_map)
        faiss.write_index(index, str(path))
        recompute_sum(ix, "vectors.faiss")
        assert statuses(ix)["vectors.faiss"] == "mismatch"
        assert repair_index(ix).ok and verify_index(ix).ok

    def test_permuted_bm25_rowids_are_found_and_repaired(self, ix):
        path = derived_path(ix, "bm25/rowids.npy")
        np.save(path, np.roll(np.load(path), 1), allow_pickle=False)
        recompute_sum(ix, "bm25/rowids.npy")
        assert statuses(ix)["bm25/"] == "mismatch"
        assert repair_index(ix).ok and verify_index(ix).ok

    def test_out_of_range_bm25_doc_ids_never_break_queries(self, ix):
        path = derived_path(ix, "bm25/indices.csc.index.npy")
        arr = np.load(path)
        arr[0] = 10**6
        np.save(path, arr, allow_pickle=False)
        recompute_sum(ix, "bm25/indices.csc.index.npy")
        assert query(ix)  # the unreadable BM25 is rebuilt from the store (this generation is the store's)
        assert statuses(ix)["bm25/"] == "corrupt"
        assert repair_index(ix).ok and verify_index(ix).ok

    def test_a_npy_header_claiming_1e11_rows_is_not_allocated(self, ix):
        path = derived_path(ix, "bm25/rowids.npy")
        data = path.read_bytes()
        header_end = data.index(b"\n") + 1
        fake = data[:header_end].replace(b"(12,)", b"(100000000000,)")
        path.write_bytes(fake.ljust(header_end, b" ")[:header_end - 1] + b"\n" + data[header_end:]
                         if len(fake) <= header_end else fake + data[header_end:])
        recompute_sum(ix, "bm25/rowids.npy")
        assert query(ix)
        assert statuses(ix)["bm25/"] == "corrupt"
        assert repair_index(ix).ok and verify_index(ix).ok


class TestCraftedManifest:
    @pytest.mark.parametrize("field, value, named", [
        ("dim", -5, "dim"), ("hnsw_m", 1_000_000, "hnsw_m"), ("ivfpq_nbits", 64, "ivfpq_nbits"),
        ("bm25", {"stemmer": "klingon"}, "stemmer"), ("bm25", {"analyzer": "klingon"}, "analyzer"),
        ("files", {"bm25": "../../etc"}, "files"),
    ])
    def test_values_out_of_bounds_are_refused_before_any_allocation(self, ix, field, value, named):
        edit_manifest(ix, **{field: value, "index_type": "hnsw"})
        # in a child process: on the code before this check, hnsw_m 1,000,000 aborted the interpreter
        code = ("import sys\nfrom contextkit.index import Index\nfrom contextkit.errors import ContextkitError\n"
                f"try:\n    Index.open({str(ix)!r}, read_only=True)\nexcept ContextkitError as e:\n"
                "    print('ERROR', e); sys.exit(3)\n")
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert child.returncode == 3 and "manifest.json" in child.stdout and named in child.stdout, \
            child.stdout + child.stderr[-2000:]
        assert "Traceback" not in child.stderr
        report = verify_index(ix)
        assert {c.file: c.status for c in report.checks}.get("store.sqlite") == "ok"  # not blamed on the store
        assert [c.file for c in report.problems] == ["manifest.json"]


class TestTwoCreators:
    def test_the_second_ingest_into_a_new_folder_is_told_locked(self, tmp_path, monkeypatch, embedder):
        from contextkit.ingestion import _steps
        from contextkit.ingestion._types import IngestConfig

        first = Index.create(tmp_path / "ix", model=embedder.model_name, dim=embedder.dim)  # holds the lock
        try:
            # the second run looked for a manifest before the first wrote one, so it creates too
            monkeypatch.setattr(Index, "exists", classmethod(lambda cls, path: False))
            with pytest.raises(IndexLockedError, match="another process is writing"):
                _steps.open_index(tmp_path / "ix", IngestConfig(), embedder)
        finally:
            first.close()
