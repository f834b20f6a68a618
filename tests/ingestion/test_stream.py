"""Large text files streamed: block decoding, windowed chunking equal to whole chunking, and
batch-by-batch ingestion that stays resumable, with memory bounded by the block size."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.chunking import TokenChunker
from contextkit.ingestion import _steps, ingest
from contextkit.loaders import (
    LoadError,
    LoadFailure,
    SourceFile,
    TextStream,
    iter_jsonl,
    load_file,
    open_text_stream,
)

SHAKESPEARE = Path(__file__).resolve().parents[3] / "shared/data/tinyshakespeare/input.txt"
TRICKY = ["é", "日本語", "😀", "\r\n", "\n\n", "\r\n\r\n", ". ", "  ", "\t", "/", "\u3000", "。", "x" * 300]


def source(path: Path) -> SourceFile:
    return SourceFile(path.resolve(), path.name)


def mixed_text(size: int, seed: int = 0) -> str:
    """Shakespeare (or words) with multi-byte characters, CRLF and long runs mixed in."""
    rng = random.Random(seed)
    base = SHAKESPEARE.read_text(encoding="utf-8") if SHAKESPEARE.is_file() else "to be or not to be\n\n" * 5000
    words = base.split(" ")
    out, n = [], 0
    while n < size:
        piece = rng.choice(TRICKY) if rng.random() < 0.05 else rng.choice(words)
        out.append(piece + " ")
        n += len(piece) + 1
    return "".join(out)[:size]


def blocks_of(path: Path, block: int) -> list[str]:
    return list(TextStream(source(path), block).blocks())


class TestTextStream:
    @pytest.mark.parametrize("block", [1, 2, 3, 5, 4096])
    def test_blocks_join_to_the_whole_load(self, tmp_path: Path, block: int) -> None:
        path = tmp_path / "t.md"
        path.write_bytes(b"\xef\xbb\xbf" + "caf\u00e9 \U0001F600\r\nline\r\n\r\n\u65e5\u672c".encode() * 50)
        stream = TextStream(source(path), block)
        assert "".join(stream.blocks()) == load_file(source(path)).documents[0].text
        assert stream.n_chars == len(load_file(source(path)).documents[0].text)
        # the same metadata as a whole load, title included (from the head of the file)
        assert stream.metadata == load_file(source(path)).documents[0].metadata and stream.check() is None

    @pytest.mark.parametrize("data", [
        b"abc\xffdef" * 3000, b"x" * 9000 + "\u00e9".encode() + b"\xc3(" + b"y" * 10,
        b"\xef\xbb\xbf" + b"z" * 10000 + b"\xe6\x97", b"a" * 10001 + b"\xe6\x97\x41",
    ])
    @pytest.mark.parametrize("block", [1, 3, 4096, 1 << 20])
    def test_invalid_utf8_reported_like_a_whole_load(self, tmp_path: Path, data: bytes, block: int) -> None:
        path = tmp_path / "bad.txt"
        path.write_bytes(data)
        whole = load_file(source(path)).errors
        assert len(whole) == 1 and "invalid byte" in whole[0].reason
        with pytest.raises(LoadFailure) as failure:
            blocks_of(path, block)
        assert failure.value.error == whole[0]
        assert TextStream(source(path), block).check() == whole[0]

    def test_binary_reported_like_a_whole_load(self, tmp_path: Path) -> None:
        path = tmp_path / "bin.txt"
        path.write_bytes(b"a" * 5000 + b"\x00" + b"b" * 5000)
        assert TextStream(source(path), 16).check() == load_file(source(path)).errors[0]

    def test_missing_file_is_a_failure_value(self, tmp_path: Path) -> None:
        stream = TextStream(source(tmp_path / "gone.txt"))
        assert stream.check() == LoadError("gone.txt", "no such file or directory")

    def test_only_text_formats_stream(self, tmp_path: Path) -> None:
        for name in ("a.html", "b.pdf", "c.jsonl"):
            assert open_text_stream(source(tmp_path / name)) is None
        assert open_text_stream(source(tmp_path / "d.py")).metadata == {"format": "code", "language": "python",
                                                                        "title": "d.py"}


def write_jsonl(path: Path, n: int) -> Path:
    text = mixed_text(400 * n, seed=11)
    lines = [json.dumps({"_id": f"r{i}", "title": f"Record {i}", "text": text[i * 400 : (i + 1) * 400],
                         "metadata": {"n": i}}) for i in range(n)]
    lines[3] = "{broken"
    lines[5] = json.dumps({"_id": "r1", "text": "duplicate id"})
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\n\n")
    return path


class TestIterJsonl:
    def test_records_and_errors_equal_a_whole_load(self, tmp_path: Path) -> None:
        path = write_jsonl(tmp_path / "c.jsonl", 40)
        whole = load_file(source(path))
        items = list(iter_jsonl(source(path)))
        assert [i for i in items if isinstance(i, LoadError)] == whole.errors and len(whole.errors) == 2
        assert [i for i in items if not isinstance(i, LoadError)] == whole.documents and len(whole.documents) == 38


class TestChunkStream:
    def test_megabytes_in_small_blocks_equal_whole_chunking(self, tmp_path: Path, cl100k) -> None:
        text = mixed_text(2_500_000)
        path = tmp_path / "big.txt"
        path.write_bytes(text.encode("utf-8"))
        data, block = path.read_bytes(), 4099
        cuts = range(block, len(data), block)
        assert any(data[c] & 0xC0 == 0x80 for c in cuts), "no block splits a multi-byte character"
        assert any(data[c - 1 : c + 1] == b"\r\n" for c in cuts), "no block splits a CRLF"
        chunker = TokenChunker(256, 32, cl100k, header="{format}: {id}")
        stream = open_text_stream(source(path), block)
        doc = load_file(source(path)).documents[0]
        want = chunker.chunk(doc)
        got = list(chunker.chunk_stream(stream.blocks(), doc.id, doc.source, doc.metadata, window_chars=20_000))
        assert len(got) == len(want) > 2000
        assert got == want  # ids, offsets into the whole text, texts, token counts, headers

    @settings(max_examples=60, deadline=None)
    @given(pieces=st.lists(st.sampled_from(TRICKY + ["word", "Stop.", "a", " "]), max_size=400),
           size=st.sampled_from([8, 24, 64]), overlap=st.sampled_from([0, 3, 7]), block=st.integers(1, 60),
           window=st.sampled_from([1, 50, 400]), encoding=st.sampled_from(["cl100k_base", "o200k_base"]))
    def test_any_text_any_blocks_equal_whole_chunking(self, pieces, size, overlap, block, window, encoding):
        text = "".join(pieces)
        chunker = TokenChunker(size, overlap, encoding)
        blocks = [text[i : i + block] for i in range(0, len(text), block)]
        assert list(chunker.chunk_stream(blocks, window_chars=window)) == chunker.chunk(text)

    def test_tokenizer_without_stable_boundaries_chunks_the_joined_text(self, embedder) -> None:
        chunker = TokenChunker(32, 4, "model")
        text = mixed_text(5000, seed=3)
        blocks = [text[i : i + 100] for i in range(0, len(text), 100)]
        assert list(chunker.chunk_stream(blocks, window_chars=50)) == chunker.chunk(text)

    def test_callable_header_refused(self) -> None:
        chunker = TokenChunker(32, 4, header=lambda doc: doc.id)
        with pytest.raises(TypeError, match="callable"):
            list(chunker.chunk_stream(["some text"]))


_MEASURE = """
import resource, sys
from pathlib import Path
from contextkit.chunking import TokenChunker
from contextkit.loaders import SourceFile, open_text_stream
chunker = TokenChunker(256, 32, "cl100k_base")
chunker.chunk("warm up: load the encoding and its tables. " * 2000)
hwm = lambda: int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])  # ru_maxrss keeps the parent's peak
before = hwm()
path = Path(sys.argv[1])
stream = open_text_stream(SourceFile(path, path.name), 256 * 1024)
n = sum(1 for _ in chunker.chunk_stream(stream.blocks(), path.name, window_chars=256 * 1024))
print(n, (hwm() - before) * 1024)
"""


class TestStreamingMemory:
    def test_load_and_chunk_peak_memory_does_not_grow_with_the_file(self, tmp_path: Path) -> None:
        """Peak RSS (which sees tiktoken's own allocations, unlike tracemalloc) in a fresh process, as
        ``VmHWM``: ``ru_maxrss`` keeps the forking test process's own peak, so it hid any growth below
        the suite's size. A fixed ~25 MB of buffers is fine; what must not be is growth with the file."""
        piece = mixed_text(1 << 20, seed=5).encode("utf-8")
        growth = {}
        for mib in (8, 32):
            path = tmp_path / f"huge{mib}.txt"
            with path.open("wb") as fh:
                for _ in range(mib):
                    fh.write(piece)
            out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True,
                                 check=True, timeout=300)
            chunks, growth[mib] = map(int, out.stdout.split())
            assert chunks > 1200 * mib
        assert growth[32] < 64e6, f"peak RSS grew {growth[32] / 1e6:.1f} MB for a 32 MiB file"
        assert growth[32] - growth[8] < 8e6, f"peak RSS grew with the file: {growth}"


def rows(index_dir: Path) -> dict[str, list[tuple]]:
    db = sqlite3.connect(index_dir / "store.sqlite")
    try:
        return {
            "chunks": db.execute("SELECT id, doc_id, ordinal, start, end, tokens, total_tokens, header, text, "
                                 "metadata, vector_key FROM chunks ORDER BY id").fetchall(),
            "documents": db.execute("SELECT * FROM documents ORDER BY id").fetchall(),
            "files": db.execute("SELECT * FROM files ORDER BY path").fetchall(),
        }
    finally:
        db.close()


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "big.txt").write_bytes(mixed_text(24_000, seed=7).encode("utf-8"))
    (folder / "small.md").write_text("# Small\n\nA file that is loaded whole.\n", encoding="utf-8")
    return folder


STREAM = {"stream_above_bytes": 1000, "stream_block_bytes": 4096, "batch_chunks": 4}


class TestStreamedIngest:
    def test_streamed_ingest_equals_whole_ingest(self, tmp_path: Path, corpus: Path, embedder) -> None:
        whole = ingest([corpus], tmp_path / "whole", embedder=embedder)
        streamed = ingest([corpus], tmp_path / "streamed", embedder=embedder, **STREAM)
        assert whole.failures == streamed.failures == []
        assert rows(tmp_path / "streamed") == rows(tmp_path / "whole")
        for field in ("files_new", "documents", "chunks_added", "tokens", "empty_documents"):
            assert getattr(streamed, field) == getattr(whole, field), field
        assert streamed.chunks_added > 4 * STREAM["batch_chunks"]

    def test_crash_half_way_then_rerun_equals_a_clean_ingest(self, tmp_path: Path, corpus: Path, embedder,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
        ingest([corpus], tmp_path / "clean", embedder=embedder, **STREAM)
        real_commit, calls = _steps.commit_batch, []

        def crash_on_third(batch, *args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("simulated crash")
            return real_commit(batch, *args, **kwargs)

        monkeypatch.setattr(_steps, "commit_batch", crash_on_third)
        ix = tmp_path / "ix"
        with pytest.raises(RuntimeError, match="simulated crash"):
            ingest([corpus / "big.txt"], ix, embedder=embedder, **STREAM)
        half = rows(ix)
        assert len(half["chunks"]) == 2 * STREAM["batch_chunks"]  # two parts committed...
        assert half["files"] == []  # ...but the file is not recorded as done
        monkeypatch.setattr(_steps, "commit_batch", real_commit)
        again = ingest([corpus], ix, embedder=embedder, **STREAM)
        assert again.failures == [] and again.files_new == 2
        assert again.embedding.cache_hits >= 2 * STREAM["batch_chunks"]  # the committed parts are not re-embedded
        assert rows(ix) == rows(tmp_path / "clean")

    def test_prune_removes_the_parts_of_a_file_gone_after_a_crash(self, tmp_path: Path, corpus: Path, embedder,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
        real_commit, calls = _steps.commit_batch, []

        def crash_on_second(batch, *args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("simulated crash")
            return real_commit(batch, *args, **kwargs)

        monkeypatch.setattr(_steps, "commit_batch", crash_on_second)
        ix = tmp_path / "ix"
        with pytest.raises(RuntimeError):
            ingest([corpus / "big.txt"], ix, embedder=embedder, **STREAM)
        monkeypatch.setattr(_steps, "commit_batch", real_commit)
        assert rows(ix)["chunks"] and rows(ix)["files"] == []
        (corpus / "big.txt").unlink()
        report = ingest([corpus], ix, embedder=embedder, prune=True, **STREAM)
        assert report.files_removed == 1 and report.chunks_removed == STREAM["batch_chunks"]
        assert {r[1] for r in rows(ix)["chunks"]} == {f"{corpus.name}/small.md"}

    def test_late_invalid_utf8_keeps_the_indexed_version(self, tmp_path: Path, corpus: Path, embedder) -> None:
        ix = tmp_path / "ix"
        ingest([corpus], ix, embedder=embedder, **STREAM)
        before = rows(ix)
        big = corpus / "big.txt"
        data = big.read_bytes()
        big.write_bytes(data + b"\n\xff tail")
        report = ingest([corpus], ix, embedder=embedder, **STREAM)
        assert [(Path(f.path).name, f.reason) for f in report.failures] == [
            ("big.txt", f"not UTF-8 text: invalid byte 0xff at offset {len(data) + 1}")]
        assert rows(ix) == before

    def test_streamed_jsonl_ingest_equals_whole_ingest(self, tmp_path: Path, embedder) -> None:
        corpus = tmp_path / "jsonl"
        corpus.mkdir()
        write_jsonl(corpus / "records.jsonl", 30)
        whole = ingest([corpus], tmp_path / "whole", embedder=embedder, batch_chunks=4)
        streamed = ingest([corpus], tmp_path / "streamed", embedder=embedder, **STREAM)
        assert [f.reason for f in streamed.failures] == [f.reason for f in whole.failures] and len(whole.failures) == 2
        assert rows(tmp_path / "streamed") == rows(tmp_path / "whole")
        assert (streamed.documents, streamed.chunks_added) == (whole.documents, whole.chunks_added)
        assert whole.documents == 28 and whole.chunks_added >= 28  # a record may take two chunks at 128 tokens

