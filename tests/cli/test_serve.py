"""``contextkit serve``: usage errors exit 2 with one line, before anything is loaded or bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextkit.cli import app

runner = CliRunner()


@pytest.mark.parametrize("args, words", [
    (["--mcp", "tcp"], "--mcp is http or stdio, not 'tcp'"),
    (["--port", "0"], "--port must be 1-65535"),
    (["--port", "70000"], "--port must be 1-65535"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--rate-limit", "-1"], "--rate-limit must be 0 (off) or more"),
    (["--default-result-tokens", "5000", "--max-result-tokens", "1000"], "is more than --max-result-tokens"),
    (["--host", "0.0.0.0"], "not a loopback address: add --allow-remote"),
    (["--host", "0.0.0.0", "--allow-remote"], "needs a bearer token"),
])
def test_usage_errors_exit_2_before_loading(tmp_path: Path, args: list[str], words: str) -> None:
    result = runner.invoke(app, ["serve", "--index", str(tmp_path / "none.ck-index"), *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()) and "Traceback" not in result.output


def test_a_bad_token_file_is_a_clear_error(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc\n")
    for path, words in [(tmp_path / "missing", "cannot read the token file"), (short, "at least 16 characters")]:
        result = runner.invoke(app, ["serve", "--index", str(tmp_path), "--token-file", str(path)],
                               env={"COLUMNS": "200"})
        assert result.exit_code == 2 and words in " ".join(result.output.split())


def test_a_missing_index_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "--index", str(tmp_path / "nowhere.ck-index")], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "nowhere.ck-index" in result.output and "Traceback" not in result.output
