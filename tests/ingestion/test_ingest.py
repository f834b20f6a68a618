import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextkit.index import Index, IndexMismatchError
from contextkit.ingestion import IngestConfig, ingest
from contextkit.search import search_index


def chunk_ids(index_dir: Path) -> list[str]:
    db = sqlite3.connect(index_dir / "store.sqlite")
    return sorted(r[0] for r in db.execute("SELECT id FROM chunks"))


class TestIngest:
    def test_ingest_search_and_no_op_rerun(self, tmp_path, small_corpus, embedder):
        ix = tmp_path / "ix"
        first = ingest([small_corpus], ix)
        assert (first.files_new, first.documents, first.failures) == (3, 3, [])
        assert first.chunks_added == 3 and first.embedding.coverage == 1.0
        hits = search_index(ix, "how long should dough rise?", k=2)
        assert hits[0].chunk.doc_id.endswith("cooking.rst")
        again = ingest([small_corpus], ix)
        assert (again.files_unchanged, again.files_new, again.chunks_added, again.embedding.model_inputs) == (3, 0, 0, 0)

    def test_only_changed_files_are_redone_and_prune(self, tmp_path, small_corpus, embedder):
        ix = tmp_path / "ix"
        ingest([small_corpus], ix)
        (small_corpus / "bm25.txt").write_text("BM25 is a bag-of-words ranking function.\n", encoding="utf-8")
        (small_corpus / "faiss.md").unlink()
        report = ingest([small_corpus], ix)
        assert (report.files_changed, report.files_unchanged, report.files_removed) == (1, 1, 0)
        assert any(i.startswith(f"{small_corpus.name}/faiss.md") for i in chunk_ids(ix))  # kept without --prune
        report = ingest([small_corpus], ix, prune=True)
        assert report.files_removed == 1
        assert not any("faiss.md" in i for i in chunk_ids(ix))
        with Index.open(ix, read_only=True) as index:
            assert len(index) == len(chunk_ids(ix)) == 2

    def test_unchanged_text_costs_no_model_call(self, tmp_path, small_corpus, embedder):
        ix = tmp_path / "ix"
        ingest([small_corpus], ix)
        path = small_corpus / "bm25.txt"
        text = path.read_text(encoding="utf-8")
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())  # new bytes (a BOM), the same text
        report = ingest([small_corpus], ix)
        assert report.files_changed == 1 and report.embedding.cache_hits == 1 and report.embedding.model_inputs == 0

    def test_bad_inputs_are_reported_not_fatal(self, tmp_path, small_corpus, embedder):
        (small_corpus / "binary.txt").write_bytes(b"\x00\x01\x02binary")
        (small_corpus / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
        (small_corpus / "broken.pdf").write_bytes(b"%PDF-1.4 garbage")
        report = ingest([small_corpus, tmp_path / "missing"], tmp_path / "ix")
        reasons = {Path(f.path).name: f.reason for f in report.failures}
        assert set(reasons) == {"binary.txt", "latin1.md", "broken.pdf", "missing"}
        assert report.files_new == 3 and not report.nothing_ingested

    def test_settings_must_match_the_index(self, tmp_path, small_corpus, embedder):
        ingest([small_corpus], tmp_path / "ix", chunk_size=128)
        with pytest.raises(IndexMismatchError, match="chunk_size"):
            ingest([small_corpus], tmp_path / "ix", chunk_size=64)
        with pytest.raises(IndexMismatchError, match="model"):
            ingest([small_corpus], tmp_path / "ix", model="sentence-transformers/other")

    def test_long_chunks_are_fully_read_by_the_model(self, tmp_path, peps, embedder):
        folder = tmp_path / "peps"
        folder.mkdir()
        (folder / peps[0].name).write_text(peps[0].read_text(encoding="utf-8")[:6000], encoding="utf-8")
        report = ingest([folder], tmp_path / "ix", IngestConfig(chunk_size=512, chunk_overlap=64))
        assert report.embedding.windowed_texts > 0 and report.embedding.coverage == 1.0


@pytest.mark.slow
class TestResume:
    def test_kill_minus_nine_then_rerun_finishes_exactly(self, tmp_path, peps, embedder):
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        for p in peps[:30]:
            (corpus / p.name).write_text(p.read_text(encoding="utf-8")[:1500], encoding="utf-8")
        ix = tmp_path / "ix"
        script = (
            "import sys; from contextkit.ingestion import ingest; "
            "ingest([sys.argv[1]], sys.argv[2], batch_chunks=1)"
        )
        proc = subprocess.Popen([sys.executable, "-c", script, str(corpus), str(ix)], env=os.environ.copy())
        deadline = time.time() + 240
        done = 0
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
            try:
                done = sqlite3.connect(ix / "store.sqlite", timeout=1).execute("SELECT COUNT(*) FROM files").fetchone()[0]
            except sqlite3.Error:
                continue
            if done >= 5:
                break
        assert proc.poll() is None, "ingestion finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        partial = len(chunk_ids(ix))
        report = ingest([corpus], ix)
        assert report.files_unchanged >= 5 and report.files_new == 30 - report.files_unchanged
        fresh = tmp_path / "fresh"
        ingest([corpus], fresh)
        assert chunk_ids(ix) == chunk_ids(fresh)  # no duplicate, none missing
        assert len(chunk_ids(ix)) > partial
        with Index.open(ix, read_only=True) as index:
            assert len(index) == len(chunk_ids(ix))


class TestIngestReuse:
    def test_a_loaded_embedder_is_reused_and_reports_per_run(self, tmp_path, small_corpus, embedder):
        first = ingest([small_corpus], tmp_path / "a", embedder=embedder)
        second = ingest([small_corpus], tmp_path / "b", embedder=embedder)
        assert first.embedding.texts == second.embedding.texts == 3  # not accumulated across runs
        assert second.embedding.cache_hits == 0  # each index is its own cache
        assert embedder.cache is None  # the closed index store is not left behind

    def test_a_refused_run_leaves_the_callers_embedder_usable(self, tmp_path, small_corpus, embedder):
        # A notebook keeps one embedder; a run refused for a setting that differs from the index's
        # must not leave it holding that index's (closed) store as its cache.
        from contextkit.index import IndexMismatchError

        ingest([small_corpus], tmp_path / "ix", embedder=embedder)
        with pytest.raises(IndexMismatchError):
            ingest([small_corpus], tmp_path / "ix", embedder=embedder, redact=True)
        assert embedder.cache is None
        assert embedder.embed(["still works"]).shape == (1, embedder.dim)

    def test_workers_chunk_folders_in_parallel_with_the_same_result(self, tmp_path, peps, embedder):
        folder = tmp_path / "peps"
        folder.mkdir()
        for p in peps[:6]:
            (folder / p.name).write_text(p.read_text(encoding="utf-8")[:1200], encoding="utf-8")
        ingest([folder], tmp_path / "one", embedder=embedder)
        ingest([folder], tmp_path / "two", embedder=embedder, workers=2)
        assert chunk_ids(tmp_path / "one") == chunk_ids(tmp_path / "two")


class TestIngestRedaction:
    def test_pii_is_masked_before_chunking_and_recorded(self, tmp_path, embedder):
        from contextkit.index import Index, IndexMismatchError

        folder = tmp_path / "mail"
        folder.mkdir()
        (folder / "a.txt").write_text("Write to ines.silva@example.org or call +44 20 7946 0958.\n", encoding="utf-8")
        (folder / "b.txt").write_text("Ines (ines.silva@example.org) paid with 4111 1111 1111 1111.\n", encoding="utf-8")
        report = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        assert report.redactions == {"EMAIL": 2, "PHONE": 1, "CARD": 1}
        with Index.open(tmp_path / "ix", read_only=True) as index:
            texts = " ".join(c.text for d in index.store.document_ids() for c in index.store.chunks_of(d))
            assert index.manifest.redact
        assert "example.org" not in texts and "4111" not in texts and texts.count("<EMAIL_1>") == 2
        with pytest.raises(IndexMismatchError, match="redact"):
            ingest([folder], tmp_path / "ix", embedder=embedder, redact=False)


class TestFirstHour:
    """The mistakes of a first hour (issue 18): refused before anything is written."""

    def test_unknown_options_are_refused(self, tmp_path, small_corpus):
        from contextkit.errors import UnknownOptionError

        with pytest.raises(UnknownOptionError, match="'chunk_sise'; did you mean 'chunk_size'"):
            ingest([small_corpus], tmp_path / "ix", chunk_sise=512)
        with pytest.raises(UnknownOptionError, match="IngestConfig got an unknown option 'overlap'"):
            IngestConfig(overlap=8)
        with pytest.raises(ValueError, match="chunk_size"):  # overrides are validated too
            ingest([small_corpus], tmp_path / "ix", IngestConfig(chunk_overlap=8), chunk_size=0)
        assert not (tmp_path / "ix").exists()

    def test_a_run_that_finds_nothing_writes_nothing(self, tmp_path):
        from contextkit.errors import NothingToIngestError

        (tmp_path / "empty").mkdir()
        for paths in ([tmp_path / "typo"], [tmp_path / "empty"]):
            with pytest.raises(NothingToIngestError, match="nothing to ingest"):
                ingest(paths, tmp_path / "ix")
        assert not (tmp_path / "ix").exists()

    def test_the_same_file_under_another_name_stays_one_document(self, tmp_path, small_corpus, embedder,
                                                               monkeypatch):
        monkeypatch.chdir(small_corpus)
        ix = tmp_path / "ix"
        ingest(["."], ix, embedder=embedder)  # ids bm25.txt, ...; the folder by name gives corpus/bm25.txt, ...
        report = ingest([small_corpus.resolve()], ix, embedder=embedder, prune=True)
        assert report.files_unchanged == 3 and report.chunks_added == report.files_removed == 0
        assert sorted((n.path, n.reason) for n in report.notes) == sorted(
            (f"{small_corpus.name}/{rel}", f"already indexed as {rel}: kept as {rel}")
            for rel in ("bm25.txt", "faiss.md", "sub/cooking.rst"))
        with Index.open(ix, read_only=True) as index:
            assert index.store.counts()["documents"] == 3

    def test_config_file_takes_the_cli_names(self, tmp_path):
        (tmp_path / "contextkit.toml").write_text(
            '[ingest]\nembed_model = "m"\nstream_above = 2\nstrict = true\nquiet = true\noverlap = 8\n',
            encoding="utf-8")
        config = IngestConfig.from_config(tmp_path / "contextkit.toml")
        assert (config.model, config.stream_above_bytes, config.chunk_overlap) == ("m", 2 << 20, 8)

    def test_a_followed_folder_link_that_broke_is_reported_and_its_files_kept(self, tmp_path, embedder):
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        (outside / "kept.md").write_text("# Kept\n\nText reached through a link.\n", encoding="utf-8")
        root = tmp_path / "root"
        root.mkdir()
        (root / "a.md").write_text("# A\n\nA file of the root.\n", encoding="utf-8")
        os.symlink(outside, root / "ext")
        ix = tmp_path / "ix"
        assert ingest([root], ix, embedder=embedder, follow_symlinks=True).files_new == 2
        (root / "ext").unlink()
        os.symlink(tmp_path / "gone", root / "ext")  # the link breaks
        report = ingest([root], ix, embedder=embedder, follow_symlinks=True, prune=True)
        assert [f.reason for f in report.failures] == ["broken symlink (missing target or a loop)"]
        assert report.files_removed == 0  # not pruned silently
        with Index.open(ix, read_only=True) as index:
            assert index.store.counts()["files"] == 2
