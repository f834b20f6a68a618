"""``contextkit ingest`` and ``contextkit chunk`` as a new user meets them (issue 18): an index kept
beside the documents, one folder named three ways, the usual typos, one set of defaults."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextkit.cli import app

runner = CliRunner()


def ingest(*args: str):
    return runner.invoke(app, ["ingest", *args])


@pytest.fixture(scope="module")
def pep_folder(tmp_path_factory, peps) -> Path:
    """Four real PEPs in a folder of their own (copied: the index is written beside them)."""
    folder = tmp_path_factory.mktemp("peps")
    for name in ("pep-0002.rst", "pep-0004.rst", "pep-0020.rst", "pep-0257.rst"):
        shutil.copy(next(p for p in peps if p.name == name), folder / name)
    return folder


class TestIndexBesideTheDocuments:
    def test_three_runs_of_ingest_dot_settle_on_the_real_documents(self, pep_folder, monkeypatch, embedder):
        monkeypatch.chdir(pep_folder)
        runs = [json.loads(ingest(".", "--index", "my.ck-index", "--json").stdout) for _ in range(3)]
        assert runs[0]["files_new"] == 4
        for later in runs[1:]:
            assert later["files_seen"] == 4 and later["files_unchanged"] == 4
            assert later["chunks_added"] == later["embedding"]["texts"] == 0  # nothing re-embedded
            assert later["notes"] == [{"path": "my.ck-index", "reason": "a contextkit index folder: not read"}]
        info = json.loads(runner.invoke(app, ["info", "--index", "my.ck-index", "--json"]).stdout)
        assert info["counts"]["files"] == info["counts"]["documents"] == 4

    def test_one_folder_named_three_ways_is_stored_once(self, pep_folder, tmp_path, monkeypatch, embedder):
        monkeypatch.chdir(pep_folder.parent)
        ix = str(tmp_path / "ix.ck-index")
        first = json.loads(ingest(pep_folder.name, "--index", ix, "--json").stdout)
        again = json.loads(ingest(str(pep_folder.resolve()), "--index", ix, "--json").stdout)
        monkeypatch.chdir(pep_folder)
        third = ingest(".", "--index", ix)
        assert first["files_new"] == 4 and again["files_unchanged"] == 4 and again["chunks_added"] == 0
        assert not [n for n in again["notes"] if "already indexed" in n["reason"]]  # the same ids (issue 31)
        assert third.exit_code == 0 and "already indexed as" in third.stdout, third.output
        info = json.loads(runner.invoke(app, ["info", "--index", ix, "--json"]).stdout)
        assert info["counts"]["documents"] == 4
        hits = json.loads(runner.invoke(
            app, ["search", "beautiful is better than ugly", "--index", ix, "--mode", "bm25", "-k", "3",
                  "--json"]).stdout)["hits"]
        assert len({(h["doc_id"], h["start"]) for h in hits}) == 3  # three passages, not one three times


class TestNothingToIngest:
    @pytest.mark.parametrize("case", ["missing", "empty", "glob"])
    def test_exit_1_with_a_message_and_nothing_written(self, tmp_path, case):
        (tmp_path / "empty").mkdir()
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "a.md").write_text("# A\n", encoding="utf-8")
        args = {"missing": ["dcos"], "empty": [str(tmp_path / "empty")],
                "glob": [str(tmp_path / "docs"), "--glob", "*.mdx"]}[case]
        result = ingest(*args, "--index", str(tmp_path / "ix"))
        assert result.exit_code == 1
        message = " ".join(result.stderr.split())
        assert "nothing to ingest" in message and "nothing was written" in message
        assert {"missing": "dcos: no such file", "empty": "no file of a supported format",
                "glob": "matches --glob '*.mdx'"}[case] in message
        assert not (tmp_path / "ix").exists()

    def test_index_on_a_folder_of_other_files_is_refused(self, tmp_path, small_corpus):
        (tmp_path / "photos").mkdir()
        (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
        result = ingest(str(small_corpus), "--index", str(tmp_path / "photos"))
        assert result.exit_code == 1 and "not an index" in result.stderr
        assert sorted(p.name for p in (tmp_path / "photos").iterdir()) == ["cat.jpg"]


class TestEmbedModelFlag:
    def test_an_llm_name_is_one_line_and_a_usage_error(self, tmp_path, small_corpus, monkeypatch):
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        result = ingest(str(small_corpus), "--index", str(tmp_path / "ix"), "--embed-model", "gpt-4o")
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "embedding model 'gpt-4o' cannot be loaded" in lines[0]
        assert "assemble --model gpt-4o" in lines[0] and "Traceback" not in result.output
        assert not (tmp_path / "ix").exists()

    def test_model_is_a_deprecated_alias(self, tmp_path, small_corpus, monkeypatch):
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        result = ingest(str(small_corpus), "--index", str(tmp_path / "ix"), "--model", "gpt-4o")
        assert result.exit_code == 2 and "--model is deprecated" in result.stderr and "--embed-model" in result.stderr
        clash = ingest(str(small_corpus), "--index", str(tmp_path / "ix"), "--model", "a", "--embed-model", "b")
        assert clash.exit_code == 2 and "give one of them" in clash.stderr


class TestOneSetOfDefaults:
    def test_chunk_shows_what_ingest_stores(self, tmp_path, pep_folder, embedder):
        pep = pep_folder / "pep-0257.rst"
        shown = [json.loads(line) for line in runner.invoke(app, ["chunk", str(pep), "--json"]).stdout.splitlines()]
        ix = tmp_path / "ix"
        stored = json.loads(ingest(str(pep), "--index", str(ix), "--json").stdout)
        assert stored["chunks_added"] == len(shown) > 1
        info = json.loads(runner.invoke(app, ["info", "--index", str(ix), "--json"]).stdout)
        from contextkit import TokenChunker

        defaults = TokenChunker().config
        assert (info["chunker"]["chunk_size"], info["chunker"]["chunk_overlap"]) == (
            defaults.chunk_size, defaults.chunk_overlap)
        assert stored["embedding"]["windowed_texts"] <= 0.02 * len(shown)  # chunks fit the model's window

    def test_header_title_comes_from_the_first_heading(self, pep_folder):
        from contextkit import TokenChunker
        from contextkit.loaders import SourceFile, load_file

        for name, title in (("pep-0020.rst", "The Zen of Python"), ("pep-0257.rst", "Docstring Conventions")):
            doc = load_file(SourceFile(pep_folder / name, name)).documents[0]
            assert TokenChunker(header="{title}").chunk(doc)[0].embedding_text.startswith(title + "\n")
        result = runner.invoke(app, ["chunk", str(pep_folder / "pep-0020.rst"), "--header", "{title", "--json"])
        assert result.exit_code == 2 and "not a valid template" in result.stderr


class TestPrintedNames:
    def test_control_characters_in_file_names_are_escaped(self, tmp_path, embedder):
        folder = tmp_path / "docs"
        folder.mkdir()
        (folder / "ok.md").write_text("# Fine\n\nplain text about bread.\n", encoding="utf-8")
        (folder / "evil\x1b[31mred\nforged: ok.txt").write_bytes(b"\x00\x01binary")
        result = ingest(str(folder), "--index", str(tmp_path / "ix"))
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "evil\\x1b[31mred\\nforged: ok.txt" in result.output


class TestChunkWorkers:
    def test_chunk_workers_give_the_chunks_of_one(self, tmp_path, peps):
        # Over a megabyte: the text is cut by this process and a worker, into the same chunks.
        big = tmp_path / "peps.txt"
        big.write_text("\n\n".join(p.read_text(encoding="utf-8") for p in peps[:120]), encoding="utf-8")
        assert big.stat().st_size > 1 << 20
        one = runner.invoke(app, ["chunk", str(big), "--json", "--chunk-size", "512", "--overlap", "64"])
        two = runner.invoke(app, ["chunk", str(big), "--json", "--chunk-size", "512", "--overlap", "64",
                                  "--workers", "2"])
        assert one.exit_code == two.exit_code == 0
        assert two.stdout == one.stdout and len(one.stdout.splitlines()) > 100

    def test_chunk_workers_below_one_refused(self, tmp_path):
        small = tmp_path / "a.txt"
        small.write_text("a few words", encoding="utf-8")
        result = runner.invoke(app, ["chunk", str(small), "--workers", "0"])
        assert result.exit_code == 2


def test_repeatable_glob_exclude_and_what_was_passed_by_is_said(tmp_path):
    """Issue 31: a second --glob replaced the first, there was no --exclude, and unsupported files were passed
    by without a word. A Sphinx-like folder, as a user points the CLI at it."""
    import subprocess
    import sys

    docs = tmp_path / "html"
    (docs / "_sources").mkdir(parents=True)
    (docs / "_static").mkdir()
    (docs / "guide.md").write_text("# Guide\n\nKnead the dough for ten minutes.\n", encoding="utf-8")
    (docs / "api.rst").write_text("API\n===\n\nThe oven runs at 220 degrees.\n", encoding="utf-8")
    (docs / "notes.txt").write_text("Not asked for by any --glob.\n", encoding="utf-8")
    (docs / "_sources" / "guide.md").write_text("# Guide\n\nKnead the dough for ten minutes.\n", encoding="utf-8")
    (docs / "_static" / "jquery.min.js").write_text("var a=1;", encoding="utf-8")
    (docs / "python.1").write_text(".TH PYTHON 1\n", encoding="utf-8")
    (docs / "changelog.gz").write_bytes(b"\x1f\x8b\x08\x00")
    index = tmp_path / "ix"
    result = subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(index),
                             "--glob", "*.md", "--glob", "*.rst", "--glob", "*.js", "--exclude", "_sources",
                             "--exclude", "*.min.js", "--no-default-excludes", "--json", "-q"],
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-1000:]
    report = json.loads(result.stdout)
    assert report["files_new"] == 2  # guide.md and api.rst: both globs apply; _sources and the .min.js do not
    notes = {(n["path"], n["reason"]) for n in report["notes"]}
    assert ("_sources", "folder excluded by --exclude '_sources': not walked") in notes
    assert ("(1 file)", "excluded by --exclude '*.min.js'") in notes
    assert ("*.1", "1 file of a format no loader reads: passed by") in notes
    assert ("*.gz", "1 file of a format no loader reads: passed by") in notes


def test_a_sphinx_build_is_read_without_its_generated_assets(tmp_path):
    """Issue 31: a plain ingest of a Sphinx build indexed its reST copies (_sources), the search index and
    jQuery beside the pages (65% of python3-doc's chunks). By default they are passed by, counted in
    the report; --no-default-excludes reads them."""
    import subprocess
    import sys

    docs = tmp_path / "html"
    for folder in ("_sources/library", "_static", "library"):
        (docs / folder).mkdir(parents=True, exist_ok=True)
    page = "<html><body><div role='main'><h1>functools</h1><p>lru_cache memoizes calls.</p></div></body></html>"
    (docs / "library" / "functools.html").write_text(page, encoding="utf-8")
    (docs / "index.html").write_text(page.replace("functools", "Contents"), encoding="utf-8")
    (docs / "_sources" / "library" / "functools.rst.txt").write_text("functools\n=========\n\nlru_cache.\n")
    (docs / "_static" / "doctools.js").write_text("const Documentation = {};\n", encoding="utf-8")
    (docs / "_static" / "basic.css").write_text("body { margin: 0 }\n", encoding="utf-8")
    (docs / "searchindex.js").write_text('Search.setIndex({"docnames": ["index"]})', encoding="utf-8")
    (docs / "genindex-A.html").write_text("<html><body><div role='main'>abs()</div></body></html>")
    (docs / "py-modindex.html").write_text("<html><body><div role='main'>abc</div></body></html>")
    (docs / "search.html").write_text("<html><body><div role='main'>Please activate JavaScript</div></body></html>")
    (docs / "theme.min.js").write_text("var a=1;", encoding="utf-8")

    def run(*extra: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index",
                              str(tmp_path / f"ix{len(extra)}"), "--json", "-q", *extra],
                             capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
        assert out.returncode == 0, out.stderr[-1000:]
        return json.loads(out.stdout)

    report = run()
    assert report["files_new"] == 2  # the two pages, nothing else
    notes = {(n["path"], n["reason"]) for n in report["notes"]}
    assert ("_sources", "folder excluded by default as a generated asset ('_sources'; --no-default-excludes "
            "reads it): not walked") in notes
    assert ("_static", "folder excluded by default as a generated asset ('_static'; --no-default-excludes "
            "reads it): not walked") in notes
    for pattern in ("searchindex.js", "genindex*.html", "py-modindex.html", "search.html", "*.min.js"):
        assert ("(1 file)", f"excluded by default as a generated asset ({pattern!r}; --no-default-excludes "
                "reads it)") in notes, pattern
    assert run("--no-default-excludes")["files_new"] == 10


def test_a_deleted_file_is_named_with_a_hint_about_prune(tmp_path):
    """Issue 31: a file deleted from the folder stayed searchable after the next ingest, without a word.
    Now the run names it and says that --prune removes it; with --prune it is gone and nothing is said."""
    import subprocess
    import sys

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.md").write_text("# Keep\n\nThe kept page about sourdough.\n", encoding="utf-8")
    (docs / "old.md").write_text("# Old\n\nThe deleted page about glaciers.\n", encoding="utf-8")

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index",
                               str(tmp_path / "ix"), *extra], capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)

    assert run("-q").returncode == 0
    (docs / "old.md").unlink()
    again = run("--json", "-q")
    assert again.returncode == 0, again.stderr[-1000:]
    notes = [(n["path"], n["reason"]) for n in json.loads(again.stdout)["notes"]]
    assert [r for _, r in notes if "--prune removes them" in r and "old.md" in r], notes
    shown = run()  # as a user reads it
    assert "old.md" in shown.stdout + shown.stderr and "--prune" in shown.stdout + shown.stderr
    pruned = run("--prune", "--json", "-q")
    report = json.loads(pruned.stdout)
    assert report["files_removed"] == 1 and not [n for n in report["notes"] if "--prune" in n["reason"]]


def test_a_dry_run_writes_nothing_and_estimates_what_the_run_does(tmp_path, peps):
    """Issue 31: a real folder surprised users (hours of embedding for copies and scripts). --dry-run
    counts the files by format, estimates the chunks from a sample and times the model, writing nothing;
    the estimate is checked against the real run, then a second preview sees everything unchanged."""
    import shutil
    import subprocess
    import sys

    docs = tmp_path / "docs"
    docs.mkdir()
    for pep in peps[:12]:
        shutil.copy(pep, docs / pep.name)
    (docs / "_static").mkdir()
    (docs / "_static" / "theme.css").write_text("body { margin: 0 }\n", encoding="utf-8")
    ix = tmp_path / "ix"

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(ix), *extra],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)

    shown = run("--dry-run")
    assert shown.returncode == 0, shown.stderr[-1000:]
    assert "nothing written" in shown.stdout and "12 new" in shown.stdout and "chunks/s measured here" in shown.stdout
    assert not ix.exists()  # no index folder made
    preview = json.loads(run("--dry-run", "--json").stdout)
    assert preview["files"] == 12 and preview["new"] == 12 and preview["formats"][".rst"]["to_do"] == 12
    assert preview["embed_chunks_per_second"] > 0 and preview["estimated_seconds"] > 0
    assert any("_static" in n["path"] for n in preview["notes"])  # what the walk passes by, as the run would
    report = json.loads(run("--json", "-q").stdout)
    assert abs(preview["estimated_chunks"] - report["chunks_added"]) <= 0.05 * report["chunks_added"]
    again = json.loads(run("--dry-run", "--json").stdout)
    assert (again["unchanged"], again["new"], again["estimated_chunks"]) == (12, 0, 0) and again["index_exists"]


def test_a_copy_of_a_file_is_indexed_once_and_named(tmp_path):
    """Issue 31: duplicate documents were indexed once per copy, and each copy then took a place in every
    prompt. A file with the content of one already taken is passed by with a note naming the first."""
    import subprocess
    import sys

    docs = tmp_path / "docs"
    (docs / "copies").mkdir(parents=True)
    text = "# Sourdough\n\nFeed the starter with rye flour and water every twelve hours.\n"
    (docs / "a.md").write_text(text, encoding="utf-8")
    (docs / "copies" / "a-copy.md").write_text(text, encoding="utf-8")
    (docs / "b.md").write_text("# Glaciers\n\nMoraines are ridges of debris that a glacier leaves.\n")

    def run(ix: str, *extra: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(tmp_path / ix),
                              "--json", "-q", *extra], capture_output=True, text=True,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
        assert out.returncode == 0, out.stderr[-1000:]
        return json.loads(out.stdout)

    preview = run("ix", "--dry-run")
    assert (preview["new"], preview["duplicates"]) == (2, 1)
    report = run("ix")
    assert (report["files_new"], report["files_duplicate"]) == (2, 1)
    (note,) = [n for n in report["notes"] if "same content" in n["reason"]]
    assert note["path"].endswith("copies/a-copy.md") and note["reason"].startswith(f"same content as {docs.name}/a.md")
    again = run("ix")  # a re-run: still passed by, still said
    assert again["files_duplicate"] == 1 and again["files_new"] == 0
    kept = run("ix2", "--keep-duplicates")
    assert (kept["files_new"], kept["files_duplicate"]) == (3, 0)


def test_ctrl_c_says_what_is_kept_and_leaves_an_index_that_verifies(tmp_path, peps):
    """Issue 31: Ctrl-C exited 130 without a word, and `contextkit verify` then reported damage (exit 1)
    until the next ingest, though the docs say an interrupted run is safe: the vectors embedded so far
    are kept as a cache for the next run. Both as a user meets them: a real SIGINT to a real run."""
    import shutil
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    docs = tmp_path / "docs"
    docs.mkdir()
    for pep in peps[:120]:
        shutil.copy(pep, docs / pep.name)
    ix = tmp_path / "ix"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = subprocess.Popen([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(ix)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and run.poll() is None:  # until some vectors are cached
            time.sleep(0.5)
            try:
                with sqlite3.connect(f"file:{ix / 'store.sqlite'}?mode=ro", uri=True) as db:
                    if db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] > 0:
                        break
            except sqlite3.Error:
                continue
        assert run.poll() is None, "the run ended before it could be interrupted"
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130 and "interrupted: what was committed before is kept" in err, err[-800:]
    verify = subprocess.run([sys.executable, "-m", "contextkit", "verify", "--index", str(ix)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert verify.returncode == 0, verify.stdout[-1500:]


class TestProgressBar:
    """Issue 31: the bar sat at "files 0/36 · 0 chunks" for minutes with no ETA (files count only when a batch
    commits, after it is embedded) and was cut to "12/…" at 80 columns. Now it fills as chunks are embedded,
    out of the chunks made (estimated from the bytes read until every file is read), with the elapsed time,
    an ETA, and every field within 80 columns."""

    COUNTS = re.compile(r"([\d,.]+k?)/(~?)([\d,.]+k?|\?) chunks · (\d+)/(\d+|\?) files")

    @staticmethod
    def frames(stderr: str) -> list[str]:
        """The lines a terminal showed, in order, each once: rich redraws the bar after ``\\r`` and ``ESC [2K``."""
        parts = re.split(r"\r|\x1b\[2K|\x1b\[1A", stderr)
        lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", p).rstrip("\n") for p in parts]
        return list(dict.fromkeys(line for line in lines if line.strip()))

    def test_a_user_at_80_columns_sees_chunks_embedded_an_eta_and_nothing_cut(self, tmp_path, peps):
        """Twelve real PEPs (440 chunks: one batch, so any frame between 0 and all embedded is drawn before
        the first file is committed), drawn as on a terminal 80 columns wide."""
        import subprocess
        import sys

        docs = tmp_path / "docs"
        docs.mkdir()
        for pep in peps[:12]:
            shutil.copy(pep, docs / pep.name)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "80", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
        run = subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(tmp_path / "ix")],
                             capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr[-1500:]
        frames = self.frames(run.stderr)
        assert frames and all(len(f) <= 80 and "…" not in f for f in frames), "\n".join(frames)
        counts = [(m.group(1), m.group(2), m.group(3)) for f in frames if (m := self.COUNTS.search(f))]
        assert len(counts) == len(frames), "\n".join(frames)  # every frame says chunks and files
        partial = [f for f in frames if (m := self.COUNTS.search(f)) and m.group(3) != "?"
                   and 0 < int(m.group(1).replace(",", "")) < int(m.group(3).replace(",", ""))]
        assert partial, "\n".join(frames)  # the bar moved while the one batch was being embedded
        assert any(re.search(r" · eta \d+:\d\d:\d\d$", f) for f in partial), "\n".join(frames)
        assert all(re.search(r" \d+:\d\d:\d\d( · eta \d+:\d\d:\d\d)?$", f) for f in frames)  # elapsed, always
        added = int(re.search(r"chunks added\s*│\s*(\d+)", run.stdout).group(1))
        last = frames[-1]
        assert last.startswith("done") and f"{added:,}/{added:,} chunks · 12/12 files" in last, last
        quiet = subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs / peps[0].name), "--index",
                                str(tmp_path / "ix2"), "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert quiet.returncode == 0, quiet.stderr[-1500:]
        assert json.loads(re.sub(r"\x1b\[[0-9;]*m", "", quiet.stdout))["files_new"] == 1  # coloured: a "terminal"
        assert "chunks ·" not in quiet.stderr and "\x1b" not in quiet.stderr  # --json draws no bar

    @pytest.mark.parametrize("width", [80, 120])
    def test_a_long_run_fits_the_line_with_an_estimate(self, width):
        """Six-figure counts and hours of work, rendered as rich's live display draws the bar at ``width``."""
        import io

        from rich.console import Console

        from contextkit.cli.ingest import IngestProgress
        from contextkit.ingestion import IngestEvent

        bar = IngestProgress(disabled=True)  # drawn here, onto a console of the width asked
        events = [IngestEvent("plan", files=123_456, bytes=10_000_000_000),
                  IngestEvent("chunked", files=12_345, chunks=923_456, tokens=200_000_000, bytes=4_000_000_000),
                  IngestEvent("embedded", chunks=899_999), IngestEvent("file", files=12_000, chunks=899_000)]
        for event in events:
            bar.update(event)
        bar.progress.tasks[0].start_time = bar.progress.get_time() - 45_000  # 12.5 hours in
        console = Console(file=io.StringIO(), width=width, color_system=None)
        console.print(bar.progress.get_renderable())
        (line,) = console.file.getvalue().splitlines()
        assert len(line) <= width and "…" not in line, line
        assert line.startswith("embedding") and "900k/~2.3M chunks · 12.3k/123k files" in line, line
        assert re.search(r" 12:30:00 · eta \d+:\d\d:\d\d$", line), line

    def test_the_library_says_what_is_chunked_before_it_is_embedded(self, small_corpus, tmp_path, embedder):
        """The events a bar is drawn from: the plan's bytes, then each batch's chunks before its vectors."""
        from contextkit.ingestion import ingest as run_ingest

        events = []
        report = run_ingest([small_corpus], tmp_path / "ix", progress=events.append, embedder=embedder)
        kinds = [e.kind for e in events]
        assert kinds[0] == "plan" and kinds.index("chunked") < kinds.index("embedded") < kinds.index("file"), kinds
        sizes = sum(p.stat().st_size for p in small_corpus.rglob("*") if p.is_file())
        chunked = [e for e in events if e.kind == "chunked"]
        assert events[0].bytes == sum(e.bytes for e in chunked) == sizes
        assert sum(e.files for e in chunked) == events[0].files == 3
        assert sum(e.chunks for e in chunked) == report.chunks_added == sum(e.chunks for e in events
                                                                             if e.kind == "embedded")
        assert sum(e.tokens for e in chunked) == report.tokens
