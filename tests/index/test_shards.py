"""ShardedIndex: several index folders searched as one, merged exactly as a single index ranks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contextkit.index import Index, IndexFolderError, IndexMismatchError
from contextkit.index.shards import ShardedIndex, ShardHit
from contextkit.records import Chunk

QUERIES = [
    "release schedule of a Python version", "who is the release manager", "unicode source file encoding",
    "deprecate and remove a standard library module", "the Zen of Python", "beautiful is better than ugly",
    "PEP purpose and guidelines", "voting on proposals", "migrating from CVS to Subversion",
    "decorators for classes", "reject this proposal", "bug fix releases", "final release date",
    "copyright public domain", "mailing list discussion", "backwards compatibility concerns",
    "syntax change to the grammar", "the BDFL pronouncement", "security fixes only", "reference implementation",
    "integer division", "string formatting", "documentation", "python-dev", "the standard library",
    "keyword arguments", "iterators and generators", "garbage collection", "threading and the GIL", "packaging",
]
TOL = 1e-5


def _files(peps: list[Path], n: int = 30) -> list[Path]:
    """The ``n`` smallest PEPs: a small real corpus, quick to embed."""
    return sorted(peps, key=lambda p: (p.stat().st_size, p.name))[:n]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, peps, embedder):
    """The same 30 PEPs ingested as 3 shards (files dealt round-robin) and as one index."""
    from contextkit.ingestion import ingest

    root = tmp_path_factory.mktemp("sharded")
    files = _files(peps)
    cache = embedder.cache
    try:
        for i in range(3):
            report = ingest(files[i::3], root / "shards" / f"shard-{i:05d}", embedder=embedder)
            assert report.ok
        report = ingest(files, root / "whole", embedder=embedder)
        assert report.ok
    finally:
        embedder.cache = cache
    return root


def assert_same_ranking(got: list, want: list, k: int, tol: float = TOL) -> int:
    """Same scores position by position; same chunk ids, except that chunks whose scores tie (within
    ``tol``) may come in another order, and a tie group cut by ``k`` may hold other members.
    ``want`` holds ``k + 1`` results when there are that many. Returns the positions compared by id."""
    assert len(got) == min(k, len(want))
    g_scores = np.array([h.score for h in got])
    w_scores = np.array([h.score for h in want])
    np.testing.assert_allclose(g_scores, w_scores[: len(got)], atol=tol, rtol=0)
    g_ids, w_ids = [h.chunk.id for h in got], [h.chunk.id for h in want]
    assert len(set(g_ids)) == len(g_ids)
    compared, i, n = 0, 0, len(got)
    while i < n:
        j = i
        while j + 1 < len(want) and w_scores[j] - w_scores[j + 1] <= tol:
            j += 1
        if j < n:  # the whole tie group is inside the top k
            assert set(g_ids[i: j + 1]) == set(w_ids[i: j + 1]), (i, j, g_ids[i: j + 1], w_ids[i: j + 1])
            compared += j + 1 - i
        i = j + 1
    return compared


class TestShardedRealModel:
    def test_dense_equals_single_index(self, corpus, embedder):
        rng = np.random.default_rng(0)
        with ShardedIndex.open(corpus / "shards") as sharded, Index.open(corpus / "whole", read_only=True) as whole:
            assert len(sharded.shards) == 3 and [Path(n).name for n in sharded.names] == [
                "shard-00000", "shard-00001", "shard-00002"]
            assert len(sharded) == len(whole) > 60
            own = np.concatenate([v for _, v in whole.store.iter_chunk_vectors()])
            random = rng.standard_normal((200, sharded.dim)).astype(np.float32)
            random /= np.linalg.norm(random, axis=1, keepdims=True)
            groups = {"text": embedder.embed(QUERIES), "random": random, "own chunk": own}
            compared = total = 0
            for name, queries in groups.items():
                for k in (1, 10, 37, len(whole)):
                    got, want = sharded.search(queries, k), whole.search(queries, k + 1)
                    for g, w in zip(got, want):
                        compared += assert_same_ranking(g, w, k)
                        total += len(g)
                    if name == "own chunk" and k == 1:  # a chunk's own vector finds the chunk (or its twin)
                        assert all(abs(g[0].score - 1) < 1e-4 for g in got)
            assert total > 10_000 and compared / total > 0.99  # ties are rare: nearly every position is checked by id
            # one query at a time (FAISS's single-query path) ranks the same
            for q in groups["text"][:5]:
                assert_same_ranking(sharded.search(q, 10)[0], whole.search(q, 11)[0], 10)

    def test_hits_are_deterministic_and_point_into_shards(self, corpus, embedder):
        with ShardedIndex.open(sorted((corpus / "shards").iterdir())) as sharded:
            q = embedder.embed(QUERIES[:8])
            first, again = sharded.search_hits(q, 20), sharded.search_hits(q, 20)
            assert first == again
            for row, chunks in zip(first, sharded.search(q, 20)):
                assert all(isinstance(h, ShardHit) for h in row)
                keys = [(-h.score, h.shard, h.rowid) for h in row]
                assert keys == sorted(keys)
                for h, sc in zip(row, chunks):
                    assert sharded.shards[h.shard].store.chunks_by_rowid([h.rowid])[h.rowid] == sc.chunk
                    assert sc.score == h.score

    def test_bm25_exact_equals_single_index_and_merged_is_approximate(self, corpus):
        with ShardedIndex.open(corpus / "shards") as sharded, Index.open(corpus / "whole", read_only=True) as whole:
            differs = 0
            for query in QUERIES:
                rowids, scores = whole.bm25.search(query, 11)
                chunks = whole.store.chunks_by_rowid(rowids)
                want = [type("W", (), {"chunk": chunks[int(r)], "score": float(s)}) for r, s in zip(rowids, scores)]
                got = sharded.bm25_search(query, 10, exact=True)
                assert_same_ranking(got, want, 10)
                merged = sharded.bm25_search(query, 10)
                assert len(merged) == min(10, sum(len(s.bm25.search(query, 10)[0]) for s in sharded.shards))
                exact_score = {h.chunk.id: h.score for h in sharded.bm25_search(query, len(sharded), exact=True)}
                differs += sum(abs(h.score - exact_score[h.chunk.id]) > 1e-4 for h in merged)
            assert differs > 0  # per-shard IDF: the same chunk scores differently in its shard


def _manual_index(path: Path, vectors: np.ndarray, doc: str, model: str = "m", embedder: dict | None = None) -> Index:
    index = Index.create(path, model=model, dim=vectors.shape[1], embedder=embedder)
    chunks = [Chunk(id=f"{doc}::{i}", doc_id=doc, ordinal=i, text=f"chunk {i}", start=0, end=len(f"chunk {i}"),
                    token_count=2) for i in range(len(vectors))]
    index.begin()
    index.store.put_document(doc, doc, doc, "sha", 10, {})
    index.add_chunks(chunks, vectors.astype(np.float32), [f"{doc}-{i}" for i in range(len(vectors))])
    index.commit()
    index.save()
    return index


class TestShardedSynthetic:
    def test_ties_break_by_shard_then_rowid(self, tmp_path):
        e = np.eye(4, dtype=np.float32)
        # shard 0: rows e0, e1, e0; shard 1: e0, e2 -> query e0 ties three ways at 1.0
        with _manual_index(tmp_path / "a", e[[0, 1, 0]], "a") as a, _manual_index(tmp_path / "b", e[[0, 2]], "b") as b:
            sharded = ShardedIndex.from_indexes([b, a])  # order given: b first
            hits = sharded.search_hits(e[0], 3)[0]
            assert [(h.shard, h.score) for h in hits] == [(0, 1.0), (1, 1.0), (1, 1.0)]
            assert hits[1].rowid < hits[2].rowid
            chunks = sharded.search(e[0], 5)[0]
            assert [c.chunk.id for c in chunks[:3]] == ["b::0", "a::0", "a::2"]
            assert [c.score for c in chunks] == [1.0, 1.0, 1.0, 0.0, 0.0]
            assert sharded.search(e[0], 0) == [[]]
            with pytest.raises(ValueError, match="dimension 3"):
                sharded.search(np.ones(3), 2)

    def test_empty_shard_and_single_folder(self, tmp_path):
        e = np.eye(4, dtype=np.float32)
        _manual_index(tmp_path / "s" / "one", e[:2], "x").close()
        Index.create(tmp_path / "s" / "two", model="m", dim=4).close()
        with ShardedIndex.open(tmp_path / "s") as sharded:
            assert len(sharded) == 2
            assert [c.chunk.id for c in sharded.search(e[1], 5)[0]] == ["x::1", "x::0"]
        with ShardedIndex.open(tmp_path / "s" / "one") as single:
            assert len(single.shards) == 1

    def test_mismatches_are_clear_errors(self, tmp_path):
        e = np.eye(4, dtype=np.float32)
        _manual_index(tmp_path / "m1", e, "a", model="model-one").close()
        _manual_index(tmp_path / "m2", e, "b", model="model-two").close()
        _manual_index(tmp_path / "d8", np.eye(8, dtype=np.float32), "c", model="model-one").close()
        _manual_index(tmp_path / "w", e, "d", model="model-one", embedder={"long_text": "truncate"}).close()
        _manual_index(tmp_path / "dup", e, "a", model="model-one").close()
        with pytest.raises(IndexMismatchError, match="model is 'model-two'.*'model-one'"):
            ShardedIndex.open([tmp_path / "m1", tmp_path / "m2"])
        with pytest.raises(IndexMismatchError, match="dim is 8"):
            ShardedIndex.open([tmp_path / "m1", tmp_path / "d8"])
        with pytest.raises(IndexMismatchError, match="long_text='truncate'"):
            ShardedIndex.open([tmp_path / "m1", tmp_path / "w"])
        with pytest.raises(IndexFolderError, match="document 'a' is in shard"):
            ShardedIndex.open([tmp_path / "m1", tmp_path / "dup"])
        with ShardedIndex.open([tmp_path / "m1", tmp_path / "dup"], check_overlap=False) as sharded:
            assert len(sharded) == 8
        with pytest.raises(IndexMismatchError, match="built with model"):
            ShardedIndex.open([tmp_path / "m1"], expect_model="other")
        (tmp_path / "nothing").mkdir()
        with pytest.raises(IndexFolderError, match="no shard folders"):
            ShardedIndex.open(tmp_path / "nothing")
