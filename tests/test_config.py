"""contextkit.toml / [tool.contextkit]: defaults for the CLI, read by the API when asked."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.config import ConfigError, find_config, load_config
from contextkit.ingestion import IngestConfig


class TestConfigFile:
    def test_found_upwards_and_paths_resolved(self, tmp_path):
        (tmp_path / ".git").mkdir()
        (tmp_path / "contextkit.toml").write_text('index = "docs.ck-index"\n[ingest]\nchunk_size = 384\n'
                                                  'overlap = 48\nredact = true\n[assemble]\nmodel = "gpt-4o"\n'
                                                  'order = "score"\n', encoding="utf-8")
        deep = tmp_path / "a" / "b"
        deep.mkdir(parents=True)
        assert find_config(deep) == tmp_path / "contextkit.toml"
        config = load_config(find_config(deep))
        assert config["index"] == str(tmp_path / "docs.ck-index")
        ingest = IngestConfig.from_config(tmp_path / "contextkit.toml", workers=2)
        assert (ingest.chunk_size, ingest.chunk_overlap, ingest.redact, ingest.workers) == (384, 48, True, 2)
        assembler = ContextAssembler.from_config(tmp_path / "contextkit.toml")
        assert assembler.to_dict()["budget"] == "gpt-4o" and assembler.config.evidence_order == "score"

    def test_pyproject_table(self, tmp_path):
        (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.contextkit.assemble]\nbudget = 900\n')
        assert load_config(find_config(tmp_path)) == {"assemble": {"budget": 900}}

    def test_bad_file_is_named(self, tmp_path):
        (tmp_path / "contextkit.toml").write_text("index = [unclosed\n")
        with pytest.raises(ConfigError, match="contextkit.toml: not valid TOML"):
            load_config(tmp_path / "contextkit.toml")


class TestConfigInCli:
    def test_defaults_and_unknown_keys(self, tmp_path, monkeypatch):
        import subprocess
        import sys

        (tmp_path / ".git").mkdir()
        (tmp_path / "contextkit.toml").write_text('index = "nope.ck-index"\n[assemble]\nbudget = 777\n')
        run = lambda *a: subprocess.run([sys.executable, "-m", "contextkit", *a], cwd=tmp_path,  # noqa: E731
                                        capture_output=True, text=True, timeout=120)
        result = run("assemble", "q")
        assert result.returncode == 1 and "nope.ck-index: no index here" in result.stderr  # index and budget from file
        (tmp_path / "contextkit.toml").write_text('[assemble]\nbugdet = 777\n')
        result = run("assemble", "q")
        assert result.returncode == 2 and "[assemble] got an unknown option 'bugdet'; did you mean 'budget'?" in result.stderr
        assert CliRunner  # the in-process runner does not read config files: main() does
