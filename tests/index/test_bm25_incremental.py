"""BM25 kept as postings (issue 22): after any sequence of adds, removes and replacements, every score is
bit for bit that of bm25s built afresh over the same chunks, and a save writes only the change.

The reference is the real bm25s (``_bm25_legacy.bm25s_model``: the build every save used to make),
tokenised by the same tokenizer, queried as ``BM25Index.scores`` used to query it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from contextkit.index import Index, repair_index, verify_index
from contextkit.index import _bm25_postings as postings_module
from contextkit.index._bm25 import BM25Config, BM25Index
from contextkit.index._bm25_legacy import bm25s_model
from contextkit.index._checksums import file_sum
from contextkit.records import Chunk, Document

from .conftest import derived_path

DIM = 8
WORDS = ("python generator walrus operator typing annotation module import package release schedule "
         "deprecation syntax grammar parser bytecode interpreter garbage collector reference counting "
         "asyncio coroutine await lambda closure decorator metaclass descriptor slots dataclass").split()
QUERIES = ["generator walrus", "typing annotation annotation", "garbage collector", "asyncio await coroutine",
           "the", "zzz unknown", "decorator metaclass descriptor slots", "parser"]


def random_text(rng: np.random.Generator) -> str:
    n = int(rng.integers(0, 25))
    return " ".join(rng.choice(WORDS, n)) + (" and the of" if n % 3 == 0 else "")


def reference(config: BM25Config, texts: list[str], query: str) -> np.ndarray:
    """bm25s's scores over ``texts`` (queried as the bm25s-backed BM25Index used to query it)."""
    helper = BM25Index(config)
    if not texts:
        return np.zeros(0, dtype=np.float32)
    model = bm25s_model(helper.terms(texts), config.k1, config.b, config.method)
    known = [t for t in helper.terms([query])[0] if t in model.vocab_dict]
    if not known:
        return np.zeros(len(texts), dtype=np.float32)
    return np.asarray(model.get_scores(known), dtype=np.float32)


def assert_exact(bm25: BM25Index, corpus: dict[int, str], queries=QUERIES) -> None:
    rowids = sorted(corpus)
    assert bm25.rowids.tolist() == rowids
    texts = [corpus[r] for r in rowids]
    for query in queries:
        want = reference(bm25.config, texts, query)
        got = bm25.scores(query)
        assert got.dtype == np.float32 and np.array_equal(got, want), (query, got, want)
        if len(want):
            k = min(5, len(want))
            top = np.argpartition(-want, k - 1)[:k]
            top = top[np.argsort(-want[top], kind="stable")]
            top = top[want[top] > 0]
            assert bm25.search(query, k)[0].tolist() == [rowids[i] for i in top]


class TestExactScores:
    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
    def test_after_adds_removes_and_replacements(self, method, monkeypatch):
        monkeypatch.setattr(postings_module, "MAX_DELTAS", 3)  # deltas merged along the way too
        rng = np.random.default_rng(22)
        config = BM25Config(method=method)
        corpus = {int(r): random_text(rng) for r in range(1, 80)}
        bm25 = BM25Index(config)
        bm25.build(np.array(sorted(corpus)), [corpus[r] for r in sorted(corpus)], 1)
        assert_exact(bm25, corpus)
        next_rowid = 80
        seen = set()
        for step in range(12):
            for r in rng.choice(sorted(corpus), int(rng.integers(0, 4)), replace=False):
                del corpus[int(r)]  # removed (a replacement is a removal and an add: a new rowid)
            added = list(range(next_rowid, next_rowid + int(rng.integers(0, 5))))
            next_rowid += len(added)
            corpus.update({r: random_text(rng) for r in added})
            bm25 = bm25.updated(np.array(added, dtype=np.int64), [corpus[r] for r in added],
                                np.array(sorted(corpus), dtype=np.int64), step + 2)
            seen.add(len(bm25.postings.segments))
            assert_exact(bm25, corpus)
        assert max(seen) > 1  # some states had deltas

    def test_a_rowid_given_again_holds_its_newest_text(self):
        bm25 = BM25Index()
        bm25.build(np.array([1, 2, 3]), ["walrus operator", "typing module", "garbage collector"], 1)
        again = bm25.updated(np.array([2]), ["asyncio coroutine"], np.array([1, 2, 3]), 2)
        assert_exact(again, {1: "walrus operator", 2: "asyncio coroutine", 3: "garbage collector"},
                     ["typing", "asyncio", "walrus"])
        assert_exact(bm25, {1: "walrus operator", 2: "typing module", 3: "garbage collector"},
                     ["typing", "asyncio"])  # the older one is unchanged (a query may hold it)

    def test_filtered_scores_are_masked_as_before(self):
        corpus = {1: "walrus operator", 2: "walrus typing", 3: "typing"}
        bm25 = BM25Index()
        bm25.build(np.array([1, 2, 3]), list(corpus.values()), 1)
        got = bm25.scores("walrus typing", allowed=np.array([2, 3]))
        full = reference(bm25.config, list(corpus.values()), "walrus typing")
        assert got[0] == 0 and np.array_equal(got[1:], full[1:])

    def test_merges_by_policy(self, monkeypatch):
        monkeypatch.setattr(postings_module, "MAX_DELTAS", 2)
        rng = np.random.default_rng(3)
        corpus = {r: random_text(rng) for r in range(1, 1001)}
        bm25 = BM25Index()
        bm25.build(np.array(sorted(corpus)), [corpus[r] for r in sorted(corpus)], 1)
        shapes = []
        for step in range(4):  # a change of 5 chunks: deltas, merged into one past MAX_DELTAS
            del corpus[10 + step]
            corpus[2000 + step] = random_text(rng)
            bm25 = bm25.updated(np.array([2000 + step]), [corpus[2000 + step]], np.array(sorted(corpus)), step + 2)
            shapes.append([len(s.rowids) for s in bm25.postings.segments])
        assert shapes == [[1000, 1], [1000, 1, 1], [1000, 3], [1000, 3, 1]]
        added = list(range(3000, 3120))  # past MERGE_SHARE: all into a new base, removed chunks dropped
        corpus.update({r: random_text(rng) for r in added})
        bm25 = bm25.updated(np.array(added), [corpus[r] for r in added], np.array(sorted(corpus)), 9)
        assert [len(s.rowids) for s in bm25.postings.segments] == [len(corpus)]
        assert set(bm25.postings.vocabulary()) == {t for text in corpus.values() for t in bm25.terms([text])[0]}
        assert_exact(bm25, corpus)


# ----------------------------------------------------------------------------- through Index
def make_doc(doc: str, texts: list[str], rng: np.random.Generator) -> tuple[Document, list[Chunk], np.ndarray]:
    chunks = [Chunk(id=f"{doc}::{i}", doc_id=doc, ordinal=i, text=t, start=0, end=len(t), token_count=4)
              for i, t in enumerate(texts)]
    vectors = rng.standard_normal((len(texts), DIM)).astype(np.float32)
    return Document(id=doc, text=doc, source=f"{doc}.txt"), chunks, vectors / np.linalg.norm(vectors, axis=1,
                                                                                               keepdims=True)


def store_corpus(index: Index) -> dict[int, str]:
    return {int(r): t for ids, batch in index.store.iter_chunk_texts() for r, t in zip(ids, batch)}


@pytest.fixture()
def pep_texts(peps) -> list[str]:
    """Chunks of real text: paragraphs of a few PEPs."""
    paragraphs = []
    for path in peps[:12]:
        paragraphs += [p.strip() for p in re.split(r"\n\s*\n", path.read_text(errors="replace")) if p.strip()]
    return paragraphs[:600]


@pytest.fixture()
def pep_index(tmp_path, pep_texts) -> Path:
    rng = np.random.default_rng(1)
    path = tmp_path / "ix"
    with Index.create(path, model="m", dim=DIM) as index:
        for d in range(0, 500, 20):
            index.upsert(*make_doc(f"d{d // 20}", pep_texts[d: d + 20], rng))
    return path


def folder_files(path: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_size) for p in path.iterdir()}


class TestIndexSaves:
    def test_a_small_change_writes_only_its_delta_and_scores_stay_exact(self, pep_index, pep_texts):
        rng = np.random.default_rng(2)
        pep_queries = ["packaging metadata", "generator expressions", "the release schedule of Python",
                       "unicode strings bytes", "import hooks", "typing annotations"]
        with Index.open(pep_index, read_only=True) as reader, reader.snapshot():  # pins the first generation
            before = {q: reader.bm25.search(q, 10) for q in pep_queries}
            old_folder = pep_index / reader.manifest.file("bm25")
            old_files = {p.name: (p.stat().st_mtime_ns, file_sum(p).sha256) for p in old_folder.iterdir()}
            with Index.open(pep_index) as index:
                base_files = folder_files(pep_index / index.manifest.file("bm25"))
                index.upsert(*make_doc("d3", pep_texts[500:510], rng))  # 20 chunks replaced by 10
                index.save()
                folder = pep_index / index.manifest.file("bm25")
                files = folder_files(folder)
                assert_exact(index.bm25, store_corpus(index), pep_queries)
            for name, (inode, _size) in base_files.items():
                if not name.startswith(("rowids", "meta")):  # the base segment: hard links, not copies
                    assert files[name][0] == inode and os.stat(folder / name).st_nlink >= 2
            assert {n for n in files if n.startswith("delta.")} == {f"delta.1.{n}" for n in (
                "vocab.index.json", "docs.index.npy", "doclen.index.npy", "indptr.csc.index.npy",
                "indices.csc.index.npy", "tf.csc.index.npy")}
            for q in pep_queries:  # the pinned reader still answers from its generation, unchanged on disk
                got = reader.bm25.search(q, 10)
                assert np.array_equal(got[0], before[q][0]) and np.array_equal(got[1], before[q][1])
            assert {p.name: (p.stat().st_mtime_ns, file_sum(p).sha256) for p in old_folder.iterdir()} == old_files
        with Index.open(pep_index, read_only=True) as reader:  # a new reader: the new generation, exact
            assert_exact(reader.bm25, store_corpus(reader), pep_queries)
        report = verify_index(pep_index)
        assert report.ok, [c for c in report.checks if c.problem]

    def test_where_links_are_refused_the_kept_files_are_written_again(self, pep_index, pep_texts, monkeypatch):
        from contextkit.index import _bm25_files

        def refuse(src, dst):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(_bm25_files.os, "link", refuse)
        with Index.open(pep_index) as index:
            index.upsert(*make_doc("d4", pep_texts[500:503], np.random.default_rng(4)))
            index.save()
            assert_exact(index.bm25, store_corpus(index), ["packaging metadata", "import hooks"])
        folder = derived_path(pep_index, "bm25")
        assert all(p.stat().st_nlink == 1 for p in folder.iterdir())
        assert (folder / "delta.1.tf.csc.index.npy").is_file() and verify_index(pep_index).ok

    def test_many_saves_stay_exact_and_verify(self, tmp_path, monkeypatch):
        monkeypatch.setattr(postings_module, "MAX_DELTAS", 2)
        rng = np.random.default_rng(5)
        path = tmp_path / "ix"
        with Index.create(path, model="m", dim=DIM) as index:
            for d in range(20):
                index.upsert(*make_doc(f"d{d}", [random_text(rng) for _ in range(10)], rng))
        for step in range(6):
            with Index.open(path) as index:
                index.upsert(*make_doc(f"d{rng.integers(0, 25)}", [random_text(rng) for _ in range(3)], rng))
                if step % 2:
                    index.delete(f"d{rng.integers(0, 25)}")
                index.save()
                assert_exact(index.bm25, store_corpus(index))
            with Index.open(path, read_only=True) as reader:
                assert_exact(reader.bm25, store_corpus(reader))
            assert verify_index(path).ok

    def test_a_rolled_back_rowid_given_again_is_not_served_stale(self, tmp_path):
        rng = np.random.default_rng(6)
        path = tmp_path / "ix"
        with Index.create(path, model="m", dim=DIM) as index:
            index.upsert(*make_doc("a", ["walrus operator", "typing module"], rng))
            with pytest.raises(RuntimeError):
                with index.transaction():
                    doc, chunks, vectors = make_doc("b", ["garbage collector"], rng)
                    index.store.put_document(doc.id, None, doc.source, "sha", 1, {})
                    index.add_chunks(chunks, vectors, ["kb"])
                    assert len(index.bm25.search("garbage", 3)[0]) == 1  # seen inside the transaction
                    raise RuntimeError("rolled back")
            index.upsert(*make_doc("c", ["asyncio coroutine"], rng))  # may be given the same rowid
            assert_exact(index.bm25, store_corpus(index), ["garbage", "asyncio", "walrus"])
            assert len(index.bm25.search("garbage", 3)[0]) == 0
        assert verify_index(path).ok


# ----------------------------------------------------------------------------- old folders, damage
def edit_manifest(ix: Path, **changes) -> None:
    manifest = json.loads((ix / "manifest.json").read_text())
    manifest.update(changes)
    for name in ("manifest.json", f"manifest.{manifest['generation']}.json"):
        (ix / name).write_text(json.dumps(manifest, indent=2))


def record_sums(ix: Path) -> None:
    """Record the current files of the BM25 folder in the manifest (as a crafted or older folder would)."""
    manifest = json.loads((ix / "manifest.json").read_text())
    folder = derived_path(ix, "bm25")
    sums = {k: v for k, v in manifest["checksums"].items() if not k.startswith("bm25/")}
    sums.update({f"bm25/{p.name}": file_sum(p).model_dump() for p in folder.iterdir()})
    edit_manifest(ix, checksums=sums)


def write_bm25s_layout(ix: Path) -> None:
    """Replace the BM25 folder by the bm25s layout an earlier contextkit saved (its exact files)."""
    with Index.open(ix, read_only=True) as index:
        corpus = store_corpus(index)
        generation = index.generation
        config = BM25Config(**index.manifest.bm25)  # the index's own settings (its chunks have no titles)
    folder = derived_path(ix, "bm25")
    shutil.rmtree(folder)
    folder.mkdir()
    rowids = np.array(sorted(corpus), dtype=np.int64)
    model = bm25s_model(BM25Index(config).terms([corpus[r] for r in rowids]), config.k1, config.b, config.method)
    model.save(str(folder), allow_pickle=False)
    np.save(folder / "rowids.npy", rowids, allow_pickle=False)
    (folder / "meta.json").write_text(json.dumps({"generation": generation, "config": config.model_dump(),
                                                  "chunks": len(rowids)}))
    record_sums(ix)


class TestOldAndDamagedFolders:
    def test_a_bm25s_layout_is_served_then_converted_at_the_next_save(self, pep_index, pep_texts):
        write_bm25s_layout(pep_index)
        queries = ["packaging metadata", "generator expressions", "import hooks"]
        with Index.open(pep_index, read_only=True) as reader:
            assert reader.bm25.legacy
            assert_exact(reader.bm25, store_corpus(reader), queries)
        assert verify_index(pep_index).ok
        with Index.open(pep_index) as index:
            index.upsert(*make_doc("d1", pep_texts[500:505], np.random.default_rng(0)))
            index.save()
            assert not index.bm25.legacy
            assert_exact(index.bm25, store_corpus(index), queries)
        meta = json.loads(derived_path(pep_index, "bm25/meta.json").read_text())
        assert meta["format"] == "contextkit-bm25-postings" and [s["prefix"] for s in meta["segments"]] == [""]
        assert verify_index(pep_index).ok

    @pytest.mark.parametrize("damage", ["tf_zero", "indptr_order", "header_claims", "duplicate_term", "prefix",
                                        "doc_count"])
    def test_crafted_values_are_refused_found_and_repaired(self, pep_index, pep_texts, damage):
        with Index.open(pep_index) as index:  # a delta to damage too
            index.upsert(*make_doc("d2", pep_texts[500:505], np.random.default_rng(0)))
        folder = derived_path(pep_index, "bm25")
        for name in os.listdir(folder):  # break the links first: the damage is to this generation only
            data = (folder / name).read_bytes()
            (folder / name).unlink()
            (folder / name).write_bytes(data)
        if damage == "tf_zero":
            arr = np.load(folder / "delta.1.tf.csc.index.npy")
            arr[0] = 0
            np.save(folder / "delta.1.tf.csc.index.npy", arr, allow_pickle=False)
        elif damage == "indptr_order":
            arr = np.load(folder / "indptr.csc.index.npy")
            arr[1], arr[2] = arr[2] + 5, arr[1]
            np.save(folder / "indptr.csc.index.npy", arr, allow_pickle=False)
        elif damage == "header_claims":
            path = folder / "delta.1.docs.index.npy"
            data = path.read_bytes()
            path.write_bytes(data.replace(b"(5,)", b"(100000000000,)", 1))
        elif damage == "duplicate_term":
            vocab = json.loads((folder / "delta.1.vocab.index.json").read_text())
            base = json.loads((folder / "vocab.index.json").read_text())
            vocab[0] = base[0]
            (folder / "delta.1.vocab.index.json").write_text(json.dumps(vocab))
        else:
            meta = json.loads((folder / "meta.json").read_text())
            if damage == "prefix":
                meta["segments"][1]["prefix"] = "../../x."
            else:
                meta["segments"][0]["docs"] = 10 ** 12
            (folder / "meta.json").write_text(json.dumps(meta))
        record_sums(pep_index)
        assert BM25Index.load(folder) is None
        with Index.open(pep_index, read_only=True) as reader:  # rebuilt in memory from the store, exact
            assert_exact(reader.bm25, store_corpus(reader), ["packaging metadata"])
        assert {c.file: c.status for c in verify_index(pep_index).checks}["bm25/"] == "corrupt"
        assert repair_index(pep_index).ok and verify_index(pep_index).ok

    def test_changed_counts_with_their_checksums_are_a_mismatch_and_repair_does_not_build_on_them(self, pep_index):
        folder = derived_path(pep_index, "bm25")
        arr = np.load(folder / "tf.csc.index.npy")
        arr[len(arr) // 2] += 3
        (folder / "tf.csc.index.npy").unlink()
        np.save(folder / "tf.csc.index.npy", arr, allow_pickle=False)
        record_sums(pep_index)
        check = {c.file: c for c in verify_index(pep_index).checks}["bm25/"]
        assert check.status == "mismatch" and "postings of" in check.detail
        assert repair_index(pep_index).ok and verify_index(pep_index).ok
