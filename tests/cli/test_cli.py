import json

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextkit.cli import app

runner = CliRunner()


class TestCli:
    def test_help_lists_commands(self):
        result = runner.invoke(app, ["--help"])
        assert result.exit_code == 0
        for name in ("ingest", "chunk", "search", "info", "demo"):
            assert name in result.output

    def test_every_command_has_an_example_and_json_output(self):
        from typer.main import get_command

        group = get_command(app)
        commands = [([name], command) for name, command in group.commands.items()]
        while commands:
            path, command = commands.pop()
            if hasattr(command, "commands"):  # a group (`contextkit index copy`): each command of it
                commands += [([*path, n], c) for n, c in command.commands.items()]
                continue
            result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
            name = " ".join(path)
            assert result.exit_code == 0, name
            example = " ".join(result.output.split()).partition("Example:")[2]
            assert "contextkit " + name in example, f"{name} --help has no example"
            assert any("--json" in p.opts for p in command.params), f"{name} has no --json"

    def test_demo_json_is_one_object_and_a_rerun_reembeds_nothing(self, tmp_path, embedder):
        ix = tmp_path / "demo.ck-index"
        first = runner.invoke(app, ["demo", "--index", str(ix), "--json", "--query", "median of numbers"])
        assert first.exit_code == 0, first.output
        data = json.loads(first.stdout)
        assert data["ingest"]["chunks_added"] > 0 and data["searches"][0]["query"] == "median of numbers"
        assert "statistics" in data["searches"][0]["hits"][0]["doc_id"]
        again = json.loads(runner.invoke(app, ["demo", "--index", str(ix), "--json"]).stdout)
        assert again["ingest"]["chunks_added"] == 0 and again["ingest"]["files_unchanged"] == data["ingest"]["files_new"]

    def test_chunk_json_lines(self, tmp_path):
        f = tmp_path / "a.md"
        f.write_text("Hello there. " * 200, encoding="utf-8")
        result = runner.invoke(app, ["chunk", str(f), "--chunk-size", "64", "--overlap", "8", "--json"])
        assert result.exit_code == 0
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        text = f.read_text(encoding="utf-8")
        assert len(rows) > 1 and all(text[r["start"] : r["end"]] == r["text"] and r["tokens"] <= 64 for r in rows)

    def test_chunk_shown_plainly_into_a_pipe(self, tmp_path):
        """Not a terminal: a rule per chunk, then its text as it is (a long line not re-wrapped,
        a control character escaped)."""
        f = tmp_path / "a.md"
        long_line = "word " * 40
        f.write_text(("Hello there. " * 30 + "\n" + long_line + "\n\tindented\x1b[31m\n") * 20, encoding="utf-8")
        result = runner.invoke(app, ["chunk", str(f), "--chunk-size", "64", "--overlap", "8"])
        assert result.exit_code == 0
        rows = [json.loads(line) for line in runner.invoke(
            app, ["chunk", str(f), "--chunk-size", "64", "--overlap", "8", "--json"]).stdout.splitlines()]
        rules = [line for line in result.stdout.splitlines() if line.startswith("─")]
        assert len(rules) == len(rows) > 1
        assert all(f"a.md::{r['ordinal']}  [{r['start']}:{r['end']}]  {r['tokens']} tokens" in rule
                   for r, rule in zip(rows, rules, strict=True))
        assert long_line.strip() in result.stdout and "\\x1b[31m" in result.stdout and "\x1b" not in result.stdout
        assert "\n\tindented" in result.stdout

    @settings(max_examples=300, deadline=None)
    @given(st.text(st.characters(codec="utf-8"), max_size=60))
    def test_safe_keeps_lines_as_the_char_by_char_rule(self, text):
        from contextkit.cli._app import safe

        def rule(ch: str) -> str:
            if ch.isprintable() or ch in "\n\t":
                return ch
            code = ord(ch)
            return ({"\r": "\\r"}.get(ch) or (f"\\x{code:02x}" if code <= 0xFF else
                    f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"))

        assert safe(text, keep_lines=True) == "".join(map(rule, text))

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
        assert json.loads(result.stdout)["hits"][0]["doc_id"].endswith("bm25.txt")
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


class TestAssembleCli:
    def test_prompt_report_and_bad_input(self, tmp_path, small_corpus, embedder, cl100k):
        from contextkit.ingestion import ingest

        ix = tmp_path / "ix"
        ingest([small_corpus], ix, embedder=embedder)
        (tmp_path / "rules.txt").write_text("Cite the document id.\n", encoding="utf-8")
        (tmp_path / "h.jsonl").write_text('{"role": "user", "content": "I bake."}\n', encoding="utf-8")
        out, rep = tmp_path / "prompt.txt", tmp_path / "report.json"
        args = ["assemble", "How long do I knead dough?", "--index", str(ix), "--budget", "300",
                "--instructions", str(tmp_path / "rules.txt"), "--history", str(tmp_path / "h.jsonl")]
        result = runner.invoke(app, [*args, "--out", str(out), "--report", str(rep)])
        assert result.exit_code == 0, result.output
        prompt = out.read_text(encoding="utf-8")
        report = json.loads(rep.read_text())
        assert cl100k.count(prompt) == report["tokens"] <= 300
        assert prompt.startswith("<instructions>\nCite the document id.\n</instructions>") and "Knead" in prompt
        assert "evidence" in result.stderr and "tokens" in result.stderr  # the table goes to stderr

        to_stdout = runner.invoke(app, [*args, "-q"])
        assert to_stdout.exit_code == 0 and to_stdout.stdout == prompt
        pruned = runner.invoke(app, [*args, "--compress-evidence", "2", "--redact", "--report", str(rep), "-q"])
        assert pruned.exit_code == 0, pruned.output
        assert {c["compressor"] for c in json.loads(rep.read_text())["compression"]} >= {"evidence", "pii_redactor"}

        (tmp_path / "bad.jsonl").write_text('{"role": "user", "content": "hi"}\n{oops\n', encoding="utf-8")
        fresh = tmp_path / "fresh.txt"
        bad = runner.invoke(app, [*args[:4], "--budget", "300", "--history", str(tmp_path / "bad.jsonl"),
                                  "--out", str(fresh)])
        assert bad.exit_code == 1 and "bad.jsonl:2" in bad.output and not fresh.exists()
        assert not list(tmp_path.glob(".fresh.txt.*"))
        tiny = runner.invoke(app, [*args, "--budget", "5", "--out", str(fresh)])
        assert tiny.exit_code == 1 and "over by" in tiny.output and not fresh.exists()
        unknown = runner.invoke(app, [*args[:4], "--model", "gpt-17"])
        assert unknown.exit_code == 2 and "gpt-4o" in unknown.output  # a bad option value: a usage error (issue 31)
        none = runner.invoke(app, args[:4])
        assert none.exit_code == 2 and "--budget" in none.output
        missing = runner.invoke(app, ["assemble", "q", "--index", str(tmp_path / "nope"), "--budget", "100"])
        assert missing.exit_code == 1 and "no index here" in missing.output

    def test_models_lists_profiles(self):
        result = runner.invoke(app, ["models", "--json"])
        assert result.exit_code == 0
        assert {"gpt-4o", "gemini-1.5-pro"} <= {p["name"] for p in json.loads(result.stdout)}


class TestSummarizeCli:
    def test_summary_and_bad_file(self, tmp_path):
        chat = tmp_path / "chat.jsonl"
        lines = [{"role": "user", "content": "My name is Ines and my budget is 1800 euros."}] + [
            {"role": "assistant" if i % 2 else "user", "content": f"Turn {i} talks about trains and food."}
            for i in range(10)]
        chat.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
        result = runner.invoke(app, ["summarize", str(chat), "--question", "What is my budget?",
                                     "--keep-last", "2", "--max-tokens", "40", "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert "1800 euros" in data["summary"] and len(data["recent"]) == 2
        (tmp_path / "bad.jsonl").write_text("[1, 2]\n", encoding="utf-8")
        bad = runner.invoke(app, ["summarize", str(tmp_path / "bad.jsonl")])
        assert bad.exit_code == 1 and "bad.jsonl:1" in bad.output


class TestRedactCli:
    def test_masks_and_counts(self, tmp_path):
        f = tmp_path / "t.txt"
        f.write_text("Mail ines.silva@example.org, key AKIAIOSFODNN7EXAMPLE.\n", encoding="utf-8")
        result = runner.invoke(app, ["redact", str(f)])
        assert result.exit_code == 0
        assert "example.org" not in result.stdout and "<EMAIL_1>" in result.stdout
        assert "1 email" in result.stderr
        data = json.loads(runner.invoke(app, ["redact", str(f), "--json"]).stdout)
        assert "ines" not in json.dumps(data["spans"])
        (tmp_path / "bad.txt").write_bytes(b"\xff\xfe bad")
        bad = runner.invoke(app, ["redact", str(tmp_path / "bad.txt")])
        assert bad.exit_code == 1 and "UTF-8" in bad.output


class TestReported:
    """The CLI catches one base: contextkit's own errors (and invalid settings) become one line and
    an exit code; anything else is a bug and keeps its traceback."""

    def test_a_contextkit_error_is_one_line_and_the_exit_code(self, capsys):
        import pytest
        import typer

        from contextkit.cli._app import reported
        from contextkit.errors import IndexMismatchError

        with pytest.raises(typer.Exit) as info:
            with reported(2):
                raise IndexMismatchError("ix: built with model 'a', not 'b'")
        assert info.value.exit_code == 2
        assert "ix: built with model 'a', not 'b'" in capsys.readouterr().err

    def test_invalid_settings_are_caught_too(self):
        import pytest
        import typer

        from contextkit.chunking import ChunkerConfig
        from contextkit.cli._app import reported

        with pytest.raises(typer.Exit):
            with reported():
                ChunkerConfig(chunk_size=10, chunk_overlap=10)

    def test_a_bug_is_not_hidden(self):
        import pytest

        from contextkit.cli._app import reported

        with pytest.raises(ZeroDivisionError):
            with reported():
                1 / 0  # noqa: B018

    def test_invalid_argument_errors_are_still_value_errors(self):
        from contextkit.errors import ContextkitError, InvalidArgumentError
        from contextkit.retrievers import mmr_select

        try:
            mmr_select([], [], k=1, lambda_=2.0)
        except ValueError as exc:
            assert isinstance(exc, InvalidArgumentError) and isinstance(exc, ContextkitError)
        else:
            raise AssertionError("lambda_=2.0 was accepted")

    def test_bad_options_exit_without_a_traceback(self, tmp_path):
        (tmp_path / "a.txt").write_text("some text\n", encoding="utf-8")
        cases = [
            (["chunk", str(tmp_path / "a.txt"), "--chunk-size", "8", "--overlap", "8"], 2),
            (["ingest", str(tmp_path), "--index", str(tmp_path / "ix"), "--chunk-size", "8", "--overlap", "9"], 2),
            (["summarize", str(tmp_path / "a.txt")], 1),
            (["info", "--index", str(tmp_path)], 1),
            (["search", "q", "--index", str(tmp_path), "--mode", "nope"], 2),  # a usage error (issue 18)
        ]
        for args, code in cases:
            result = runner.invoke(app, args)
            assert result.exit_code == code, (args, result.output, result.exception)
            assert "Traceback" not in result.output, args
            assert isinstance(result.exception, SystemExit), (args, result.exception)
            assert "errors.pydantic.dev" not in result.output, args  # one line, not pydantic's dump
