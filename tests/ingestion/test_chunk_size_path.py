"""``--chunk-size`` from the command line to the cut: checked once, in one form after another at most twice.

On 59edf24 the value was checked four times (the CLI's own overlap test, ``IngestConfig``'s ``ge=1``,
``ChunkerConfig``, ``TokenChunker``'s own check) and copied through seven forms; here the checks are
counted by wrapping each place a chunk setting can be checked, during a real ``contextkit ingest``.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from contextkit.cli import app


@pytest.fixture
def counted(monkeypatch):
    """How often each check of a chunk setting runs, while the test runs."""
    import contextkit.chunking._config as config_module
    import contextkit.chunking.token as token_module

    calls = {"ChunkerConfig": 0, "TokenChunker": 0}
    checked_settings = token_module._checked_settings
    chunker_config_init = config_module.ChunkerConfig.__init__

    def counted_chunker_config(self, /, **data):
        calls["ChunkerConfig"] += 1
        chunker_config_init(self, **data)

    def counted_token_chunker(values):
        calls["TokenChunker"] += 1
        return checked_settings(values)

    monkeypatch.setattr(config_module.ChunkerConfig, "__init__", counted_chunker_config)
    monkeypatch.setattr(token_module, "_checked_settings", counted_token_chunker)
    return calls


def test_a_new_index_checks_the_chunk_size_once(tmp_path, small_corpus, counted):
    from contextkit.index import Index

    result = CliRunner().invoke(app, ["ingest", str(small_corpus), "--index", str(tmp_path / "ix"),
                                      "--chunk-size", "64", "--overlap", "8", "-q"])
    assert result.exit_code == 0, result.output
    assert counted == {"ChunkerConfig": 1, "TokenChunker": 0}
    with Index.open(tmp_path / "ix", read_only=True) as index:
        assert (index.manifest.chunker["chunk_size"], index.manifest.chunker["chunk_overlap"]) == (64, 8)


def test_the_chunker_takes_the_checked_settings_as_they_are():
    from contextkit import IngestConfig, TokenChunker

    config = IngestConfig(chunk_size=64, chunk_overlap=8).chunker_config(None)
    chunker = TokenChunker.from_config(config)
    assert chunker.config is config and chunker.chunk_size == 64
    assert chunker.chunk("one two three " * 50) == TokenChunker(64, 8).chunk("one two three " * 50)


@pytest.mark.parametrize("args", [["--chunk-size", "0"], ["--chunk-size", "8", "--overlap", "9"],
                                  ["--overlap", "-1"]])
def test_a_bad_value_is_still_a_usage_error(tmp_path, args):
    (tmp_path / "a.txt").write_text("hello", encoding="utf-8")
    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "a.txt"), "--index", str(tmp_path / "ix"), *args])
    assert result.exit_code == 2 and not (tmp_path / "ix").exists()


def test_a_size_alone_may_suit_the_index_recorded_overlap(tmp_path, small_corpus):
    from contextkit import IngestConfig, ingest

    ingest([str(small_corpus)], tmp_path / "ix", IngestConfig(chunk_size=12, chunk_overlap=2))
    again = ingest([str(small_corpus)], tmp_path / "ix", IngestConfig(chunk_size=12))  # 12 < the default overlap 16
    assert again.files_unchanged == again.files_seen
