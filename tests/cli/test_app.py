"""The app's conventions (``cli/_app.py``): help as written, defaults shown, readable at 80 columns,
usage errors as one line with exit 2, ``--version``, control characters escaped (issue 18)."""

from __future__ import annotations

import re

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from contextkit.cli import app

runner = CliRunner()
NARROW = {"COLUMNS": "80"}


def help_of(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env=NARROW, terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


class TestHelp:
    def test_brackets_in_help_text_show(self):
        text = " ".join(help_of("ingest").split())
        assert "'contextkit[ray]'" in text
        assert "[default: 128, or the index's]" in text

    def test_defaults_are_shown(self):
        assert "[default: 16, or the index's]" in " ".join(help_of("ingest").split())
        chunk = " ".join(help_of("chunk").split())
        assert "[default: 128]" in chunk and "[default: 16]" in chunk
        assert "[default: hybrid]" in " ".join(help_of("search").split())

    def test_every_command_fits_80_columns_with_whole_option_names(self):
        for name, command in get_command(app).commands.items():
            text = help_of(name)
            assert max(len(line) for line in text.splitlines()) <= 80, name
            for param in command.params:
                for opt in param.opts:
                    if opt.startswith("--") and not getattr(param, "hidden", False):
                        assert opt in text, f"{name}: {opt} cut"

    def test_help_names_values_as_click_does(self):
        """On 6e3bcce the help showed Typer's type names: ``search [OPTIONS] {query}``, ``paths...
        <list[Path]>``, ``--index <path>``, ``-k <int range>`` (issue 31)."""
        for name in ("ingest", "search", "assemble", "demo", "eval", "serve", "chunk"):
            text = help_of(name)
            assert not re.search(r"<(str|int|float|path|list\[|int range|float range)", text), (name, text)
            assert "{" not in text.splitlines()[0], (name, text.splitlines()[0])
        assert help_of("search").startswith("Usage: contextkit search [OPTIONS] QUERY\n")
        assert "Usage: contextkit ingest [OPTIONS] PATHS...\n" in help_of("ingest")
        search = help_of("search")
        for shown in ("-i, --index PATH", "-k INTEGER", "--mode [dense|bm25|hybrid]", "--filter KEY=VALUE",
                      "--mmr FLOAT", "\n  QUERY  what to look for"):
            assert shown in search, shown
        assert "Usage: contextkit index copy [OPTIONS] SOURCE DESTINATION" in help_of("index", "copy")

    def test_help_never_breaks_a_line_at_a_hyphen(self):
        """On 6e3bcce ``my.ck-index`` was cut to ``my.ck-`` / ``index`` (and ``no-`` / ``strict``): not
        what a user can copy back."""
        for name in get_command(app).commands:
            for line in help_of(name).splitlines():
                assert not re.search(r"\w-$", line), (name, line)

    def test_short_q_is_quiet_everywhere(self):
        """``-q`` meant ``--query`` for demo and ``--quiet`` for ingest, assemble and eval."""
        for name in ("demo", "ingest", "assemble", "eval"):
            assert "-q, --quiet" in help_of(name), name
        assert "-q, --query" not in help_of("demo")

    def test_version(self):
        from contextkit import __version__

        result = runner.invoke(app, ["--version"])
        assert result.exit_code == 0 and result.stdout.strip() == f"contextkit {__version__}"


class TestUsageErrors:
    @pytest.mark.parametrize("args", [
        ["search", "q", "--index", "ix", "--mode", "bm52"],
        ["search", "q", "--index", "ix", "-k", "0"],
        ["search", "q", "--index", "ix", "-k", "x"],
        ["search", "q", "--index", "ix", "--mmr", "2"],
        ["search", "q", "--index", "ix", "--filter", "nokey"],
        ["chunk", "nope.md", "--chunk-size", "ten"],
        ["ingest", "docs"],
        ["bogus"],
        ["search", "q", "--index", "ix", "--frobnicate"],
    ])
    def test_one_line_and_exit_2(self, args, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert "Traceback" not in result.output and "Usage:" not in result.output


class TestSafe:
    def test_control_characters_become_escapes(self):
        from contextkit.cli._app import safe

        assert safe("a\x1b[31mb\nc\td\u202ee") == "a\\x1b[31mb\\nc\\td\\u202ee"
        assert safe("line one\nline two\x07", keep_lines=True) == "line one\nline two\\x07"
        assert safe("plain ünïcode 文字") == "plain ünïcode 文字"
