import json

from typer.testing import CliRunner

from contextkit.cli import app

runner = CliRunner()


class TestCli:
    def test_help_lists_commands(self):
        result = runner.invoke(app, ["--help"])
        assert result.exit_code == 0
        for name in ("ingest", "chunk", "search", "info", "demo"):
            assert name in result.output

    def test_chunk_json_lines(self, tmp_path):
        f = tmp_path / "a.md"
        f.write_text("Hello there. " * 200, encoding="utf-8")
        result = runner.invoke(app, ["chunk", str(f), "--chunk-size", "64", "--overlap", "8", "--json"])
        assert result.exit_code == 0
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        text = f.read_text(encoding="utf-8")
        assert len(rows) > 1 and all(text[r["start"] : r["end"]] == r["text"] and r["tokens"] <= 64 for r in rows)

    def test_chunk_missing_file_is_a_usage_error(self, tmp_path):
        result = runner.invoke(app, ["chunk", str(tmp_path / "nope.md")])
        assert result.exit_code == 2 and "no such file" in result.output

    def test_ingest_search_info(self, tmp_path, small_corpus, embedder):
        ix = str(tmp_path / "ix")
        (small_corpus / "bad.txt").write_bytes(b"\x00binary")
        result = runner.invoke(app, ["ingest", str(small_corpus), "--index", ix, "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["files_new"] == 3 and report["failures"][0]["path"].endswith("bad.txt")
        strict = runner.invoke(app, ["ingest", str(small_corpus), "--index", ix, "--strict", "-q"])
        assert strict.exit_code == 1 and "bad.txt" in strict.stdout
        result = runner.invoke(app, ["search", "inverse document frequency", "--index", ix, "-k", "1", "--json"])
        assert result.exit_code == 0
        assert json.loads(result.stdout.splitlines()[0])["doc_id"].endswith("bm25.txt")
        result = runner.invoke(app, ["info", "--index", ix, "--json"])
        assert json.loads(result.stdout)["counts"]["chunks"] == 3

    def test_nothing_ingested_exits_1_without_traceback(self, tmp_path, embedder):
        (tmp_path / "only.txt").write_bytes(b"\x00\x00")
        result = runner.invoke(app, ["ingest", str(tmp_path / "only.txt"), "--index", str(tmp_path / "ix")])
        assert result.exit_code == 1 and "binary" in result.stdout
        assert result.exception is None or isinstance(result.exception, SystemExit)

    def test_search_without_index(self, tmp_path):
        result = runner.invoke(app, ["search", "x", "--index", str(tmp_path / "none")])
        assert result.exit_code == 1 and "no index here" in result.output
