"""``engine="ray"``: the same index as local ingestion, on a local 2-CPU Ray cluster started here."""

from __future__ import annotations

import logging
import shutil
import socket
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from contextkit.chunking import ChunkerConfig
from contextkit.cli import app
from contextkit.embedders import DEFAULT_MODEL
from contextkit.index import Index
from contextkit.ingestion import ingest
from contextkit.ingestion.ray import RayClusterError, RayIngestError, RayNotInstalledError
from contextkit.ingestion.ray._workers import FAULT_AFTER_ENV, FAULT_ENV
from contextkit.search import search_index

CHUNK_COLS = 'id, doc_id, ordinal, start, "end", tokens, total_tokens, header, text, metadata'


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, peps) -> Path:
    """Eight short PEPs (a few chunks each, some past the model's window), an empty file, a binary one."""
    root = tmp_path_factory.mktemp("ray") / "corpus"
    (root / "peps").mkdir(parents=True)
    small = [p for p in peps if 3000 <= p.stat().st_size <= 6000][:8]
    assert len(small) == 8
    for pep in small:
        shutil.copy(pep, root / "peps" / pep.name)
    (root / "empty.md").write_text("", encoding="utf-8")
    (root / "binary.txt").write_bytes(b"\x00\x01\x02 not text")
    return root


@pytest.fixture(scope="module")
def local_index(tmp_path_factory, corpus, embedder) -> tuple[Path, object]:
    folder = tmp_path_factory.mktemp("local") / "ix"
    report = ingest([corpus], folder, embedder=embedder, batch_chunks=8, **WIDE)
    assert report.chunks_added > 16
    return folder, report


def chunk_rows(index_dir: Path) -> list[tuple]:
    with sqlite3.connect(index_dir / "store.sqlite") as db:
        return db.execute(f"SELECT {CHUNK_COLS} FROM chunks ORDER BY id").fetchall()


def chunk_vectors(index_dir: Path) -> np.ndarray:
    with Index.open(index_dir, read_only=True) as index:
        with sqlite3.connect(index_dir / "store.sqlite") as db:
            rowids = [r[0] for r in db.execute("SELECT rowid FROM chunks ORDER BY id")]
        return index.store.vectors_by_rowid(rowids)


def file_rows(index_dir: Path) -> list[tuple]:
    with sqlite3.connect(index_dir / "store.sqlite") as db:
        return db.execute("SELECT path, sha256, size, n_documents FROM files ORDER BY path").fetchall()


def assert_same_index(ray_dir: Path, local_dir: Path) -> None:
    ours, theirs = chunk_rows(ray_dir), chunk_rows(local_dir)
    assert [r[0] for r in ours] == [r[0] for r in theirs]  # the same chunk ids, each once
    assert ours == theirs  # offsets, token counts, headers, texts, metadata
    np.testing.assert_allclose(chunk_vectors(ray_dir), chunk_vectors(local_dir), atol=1e-5)
    assert file_rows(ray_dir) == file_rows(local_dir)


#: Chunks wider than the default (128 tokens), so some overflow the model's window and the
#: windowed embedding path runs on the Ray workers too.
WIDE = {"chunk_size": 256, "chunk_overlap": 32}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
class TestRayIngest:
    def test_same_index_as_local_and_rerun_does_nothing(self, ray_cluster, corpus, local_index, tmp_path):
        local_dir, local_report = local_index
        ix = tmp_path / "ray-ix"
        report = ingest([corpus], ix, **WIDE, engine="ray", batch_chunks=8)
        assert_same_index(ix, local_dir)
        for field in ("files_new", "documents", "empty_documents", "chunks_added", "tokens"):
            assert getattr(report, field) == getattr(local_report, field), field
        assert report.failures == local_report.failures and "binary.txt" in report.failures[0].path
        assert report.embedding.texts == report.chunks_added and report.embedding.coverage == 1.0
        assert report.embedding.windowed_texts == local_report.embedding.windowed_texts > 0
        question = "What does the PEP propose?"
        assert [h.chunk.id for h in search_index(ix, question, k=5)] == \
               [h.chunk.id for h in search_index(local_dir, question, k=5)]
        again = ingest([corpus], ix, **WIDE, engine="ray")
        assert (again.files_unchanged, again.files_new, again.chunks_added, again.embedding.model_inputs) == \
               (report.files_new, 0, 0, 0)

    def test_changed_files_replace_their_chunks_and_unchanged_text_costs_no_model_call(
            self, ray_cluster, corpus, embedder, tmp_path):
        ix = tmp_path / "ix"
        copy = tmp_path / "corpus"
        shutil.copytree(corpus, copy)
        ingest([copy], ix, embedder=embedder)  # a local index, continued on Ray
        replaced, same_text = sorted((copy / "peps").iterdir())[:2]
        replaced.write_text("Replaced.\n\nOne short paragraph now.\n", encoding="utf-8")
        same_text.write_bytes(b"\xef\xbb\xbf" + same_text.read_bytes())  # new bytes (a BOM), the same text
        same_id, replaced_id = (f"{copy.name}/{p.relative_to(copy).as_posix()}" for p in (same_text, replaced))
        kept = [r for r in chunk_rows(ix) if r[1] == same_id]
        kept_vectors = chunk_vectors(ix)[[r[1] == same_id for r in chunk_rows(ix)]]
        report = ingest([copy], ix, engine="ray")
        assert (report.files_changed, report.chunks_added) == (2, 1 + len(kept)) and report.chunks_removed > 1
        assert (report.embedding.cache_hits, report.embedding.model_inputs) == (len(kept), 1)
        rows = chunk_rows(ix)
        assert len({r[0] for r in rows}) == len(rows)
        assert [r[0] for r in rows if r[1] == replaced_id] == [f"{replaced_id}::0"]
        assert [r for r in rows if r[1] == same_id] == kept
        np.testing.assert_allclose(chunk_vectors(ix)[[r[1] == same_id for r in rows]], kept_vectors, atol=1e-6)

    def test_files_above_the_stream_limit_are_streamed_on_the_driver_with_the_same_result(
            self, ray_cluster, corpus, local_index, embedder, tmp_path, caplog):
        sizes = sorted(p.stat().st_size for p in (corpus / "peps").iterdir())
        limit = sizes[len(sizes) // 2]  # half the PEPs above it
        ix = tmp_path / "ray-ix"
        with caplog.at_level(logging.INFO, logger="contextkit"):
            report = ingest([corpus], ix, **WIDE, engine="ray", batch_chunks=8, stream_above_bytes=limit,
                            stream_block_bytes=1024, embedder=embedder)
        said = [r.getMessage() for r in caplog.records if "streamed and embedded on this machine" in r.getMessage()]
        assert said and said[0].startswith(f"ray: {sum(s > limit for s in sizes)} file(s) above {limit} bytes")
        assert_same_index(ix, local_index[0])
        assert report.chunks_added == local_index[1].chunks_added

    def test_redaction_masks_on_the_driver_in_one_session_like_a_local_run(self, ray_cluster, embedder, tmp_path):
        folder = tmp_path / "mail"
        folder.mkdir()
        (folder / "a.txt").write_text("Write to ines.silva@example.org or call +44 20 7946 0958.\n" * 3, encoding="utf-8")
        (folder / "b.txt").write_text("Ines (ines.silva@example.org) paid with 4111 1111 1111 1111.\n", encoding="utf-8")
        (folder / "c.txt").write_text("Ask bob@example.com, not ines.silva@example.org.\n", encoding="utf-8")
        local = ingest([folder], tmp_path / "local", embedder=embedder, redact=True)
        # parts of ~100 bytes: the driver masks and ships the files in three Ray jobs, one session throughout
        ray = ingest([folder], tmp_path / "ray", engine="ray", redact=True, embedder=embedder, stream_above_bytes=100)
        assert ray.redactions == local.redactions == {"EMAIL": 6, "PHONE": 3, "CARD": 1}
        assert ray.seconds.get("ray", 0) > 0  # b.txt and c.txt went through Ray (a.txt, over the limit, did not)
        assert_same_index(tmp_path / "ray", tmp_path / "local")  # same placeholders, chunks and vectors
        texts = " ".join(r[8] for r in chunk_rows(tmp_path / "ray"))
        assert "example.org" not in texts and "<EMAIL_1>" in texts and "<EMAIL_2>" in texts

    def test_a_worker_killed_mid_job_loses_and_duplicates_nothing(self, ray_cluster, corpus, local_index,
                                                                  tmp_path, monkeypatch):
        marker = tmp_path / "killed"
        monkeypatch.setenv(FAULT_ENV, str(marker))
        monkeypatch.setenv(FAULT_AFTER_ENV, "2")  # the embedding actor dies on its third batch
        ix = tmp_path / "ray-ix"
        report = ingest([corpus], ix, **WIDE, engine="ray", batch_chunks=1)
        assert marker.is_file()  # the worker process really did exit
        assert report.chunks_added == local_index[1].chunks_added
        assert_same_index(ix, local_index[0])

    def test_a_job_failing_past_its_retries_says_so_and_commits_nothing_partial(self, ray_cluster, corpus,
                                                                               tmp_path):
        ix = tmp_path / "ix"  # an index whose recorded model window no worker's model has
        settings = {"model": DEFAULT_MODEL, "dim": 384, "max_tokens": 999, "long_text": "window"}
        Index.create(ix, model=DEFAULT_MODEL, dim=384, embedder=settings, tokenizer="cl100k_base",
                     chunker=ChunkerConfig(chunk_size=256, chunk_overlap=32).model_dump()).close()
        with pytest.raises(RayIngestError, match=r"after 0 of 10 changed files were committed") as failed:
            ingest([corpus], ix, **WIDE, engine="ray")
        assert "does not match the index" in str(failed.value) and "run the same ingestion again" in str(failed.value)
        assert chunk_rows(ix) == [] and file_rows(ix) == []

    def test_unreachable_cluster_is_a_typed_error_and_writes_nothing(self, corpus, tmp_path):
        pytest.importorskip("ray")
        ix = tmp_path / "ix"
        address = f"ray://127.0.0.1:{free_port()}"
        with pytest.raises(RayClusterError, match=f"cannot reach the Ray cluster at {address}"):
            ingest([corpus], ix, **WIDE, engine="ray", ray_address=address)
        assert not ix.exists()
        result = CliRunner().invoke(app, ["ingest", str(corpus), "--index", str(ix), "--engine", "ray",
                                          "--address", f"127.0.0.1:{free_port()}", "-q"])
        assert result.exit_code == 2, result.output
        assert "cannot reach the Ray cluster" in result.output and "Traceback" not in result.output
        assert not ix.exists()

    def test_asking_for_gpus_the_cluster_lacks_writes_nothing(self, ray_cluster, corpus, tmp_path):
        ix = tmp_path / "ix"
        with pytest.raises(RayClusterError, match="the Ray cluster has 0"):
            ingest([corpus], ix, **WIDE, engine="ray", num_gpus=1)
        assert not ix.exists()


class TestWithoutRay:
    def test_engine_ray_says_how_to_install(self, corpus, tmp_path, monkeypatch):
        monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
        monkeypatch.setitem(sys.modules, "ray.data", None)
        with pytest.raises(RayNotInstalledError, match=r"pip install 'contextkit\[ray\]'"):
            ingest([corpus], tmp_path / "ix", **WIDE, engine="ray")
        result = CliRunner().invoke(app, ["ingest", str(corpus), "--index", str(tmp_path / "ix"), "--engine", "ray"])
        assert result.exit_code == 2 and "pip install 'contextkit[ray]'" in " ".join(result.output.split())
        assert not (tmp_path / "ix").exists()

    def test_retry_limits_go_where_ray_takes_them_and_are_never_a_type_error(self, caplog, monkeypatch):
        from contextkit.ingestion.ray import _pipeline

        def deprecated_style(fn, *, batch_size=None, **ray_remote_args): ...  # Ray 2.10 to 2.63

        def named_only(fn, *, batch_size=None, num_gpus=None): ...  # a Ray without **ray_remote_args

        monkeypatch.setattr(_pipeline, "_warned_unbounded", False)
        assert _pipeline.retry_limits(deprecated_style, max_retries=3) == {"max_retries": 3}
        with caplog.at_level(logging.WARNING, logger="contextkit"):
            assert _pipeline.retry_limits(named_only, max_retries=3) == {}
            assert _pipeline.retry_limits(named_only, max_restarts=3) == {}
        said = [r.getMessage() for r in caplog.records if "takes no retry limits" in r.getMessage()]
        assert len(said) == 1 and "max_retries=3" in said[0]  # once per process

    def test_ray_options_need_engine_ray(self, corpus, tmp_path):
        result = CliRunner().invoke(app, ["ingest", str(corpus), "--index", str(tmp_path / "ix"), "--num-gpus", "1"])
        assert result.exit_code == 2 and "--engine ray" in result.output
