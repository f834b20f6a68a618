"""``contextkit search`` and ``contextkit info`` (issue 18): usage errors exit 2, ``info`` shows what
applies to the index's type, in plain values."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from contextkit.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, embedder):
    from contextkit.ingestion import ingest

    folder = tmp_path_factory.mktemp("docs")
    (folder / "bread.md").write_text("# Bread\n\nKnead the dough, let it rise, bake it hot.\n", encoding="utf-8")
    (folder / "evil\x1b[2Jname.txt").write_text("Clearing screens is rude.\n", encoding="utf-8")
    (folder / "c1.txt").write_text("Controls in text: CSI \x9b31m, NEL \x85 and a line separator \u2028 here.\n",
                                   encoding="utf-8")
    ix = tmp_path_factory.mktemp("ix") / "ix.ck-index"
    ingest([folder], ix, embedder=embedder)
    return ix


class TestSearchCli:
    @pytest.mark.parametrize(("flag", "value", "said"), [
        ("--mode", "bm52", "'bm52' is not one of"), ("-k", "0", "-k"), ("--mmr", "1.5", "--mmr")])
    def test_bad_values_are_usage_errors(self, index_dir, flag, value, said):
        result = runner.invoke(app, ["search", "bread", "--index", str(index_dir), flag, value])
        assert result.exit_code == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1

    def test_names_in_the_table_are_escaped(self, index_dir):
        result = runner.invoke(app, ["search", "clearing screens", "--index", str(index_dir), "--mode", "bm25"])
        assert result.exit_code == 0 and "\x1b" not in result.stdout and "\\x1b[2Jname" in result.stdout


    def test_json_holds_no_raw_control_and_no_line_split_in_a_string(self, index_dir):
        """On 0cf31da ``--json`` wrote U+009B (a CSI to a terminal) and U+0085 raw: ``str.splitlines``
        cut a hit in two and ``json.loads`` failed on each half."""
        result = runner.invoke(app, ["search", "controls in text", "--index", str(index_dir), "--mode", "bm25",
                                     "-k", "3", "--json"])
        assert result.exit_code == 0
        assert not any(ch in result.stdout for ch in "\x1b\x9b\x85\u2028")
        assert result.stdout.splitlines() == result.stdout.split("\n")[:-1]  # no line split inside a string
        hits = json.loads(result.stdout)["hits"]
        assert hits and any("\x9b31m, NEL \x85 and a line separator \u2028" in h["text"] for h in hits)


    def test_json_is_one_object_as_ingest_prints(self, index_dir):
        """On 6e3bcce ``search --json`` printed JSON lines where ``ingest --json`` and ``info --json`` print
        one object: ``jq .hits`` or ``json.load`` failed on it (issue 31)."""
        result = runner.invoke(app, ["search", "clearing screens", "--index", str(index_dir), "--mode", "bm25",
                                     "-k", "2", "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert (data["query"], data["mode"], data["k"]) == ("clearing screens", "bm25", 2)
        assert 1 <= len(data["hits"]) <= 2 and all("score" in hit for hit in data["hits"])


class TestInfoCli:
    def test_plain_values_and_iso_time(self, index_dir):
        result = runner.invoke(app, ["info", "--index", str(index_dir)], terminal_width=200)
        assert result.exit_code == 0
        assert "hnsw" not in result.stdout and "ivfpq" not in result.stdout  # a flat index
        assert "{" not in result.stdout  # no JSON inside cells
        assert "128 tokens (cl100k_base), overlap 16" in result.stdout and "254 word pieces" in result.stdout
        data = json.loads(runner.invoke(app, ["info", "--index", str(index_dir), "--json"]).stdout)
        assert isinstance(data["checked_at"], str) and data["checked_at"].endswith("+00:00")

    def test_rows_follow_the_index_type(self):
        from contextkit.cli.search import info_rows

        base = {"index_type": "hnsw", "hnsw_m": 32, "ivfpq_nprobe": 8, "counts": {"files": 2, "chunks": 9},
                "redact": False, "bytes_on_disk": 3 * 1024 * 1024}
        rows = dict(info_rows(base))
        assert rows["hnsw_m"] == "32" and "ivfpq_nprobe" not in rows
        assert rows["counts"] == "files 2, chunks 9" and rows["redact"] == "no" and rows["size on disk"] == "3.0 MiB"
        rows = dict(info_rows({**base, "index_type": "ivfpq"}))
        assert "hnsw_m" not in rows and rows["ivfpq_nprobe"] == "8"
