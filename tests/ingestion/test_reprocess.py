"""``--reprocess``: a loader that reads a format differently reaches an index built before it.

The sceptic's case is an upgrade: contextkit's HTML loader learned to leave a Sphinx table of
contents out (stop 45), but a folder ingested before keeps its old chunks, because a run skips every
file whose SHA-256 is the one indexed. The old loader is played by the HTML loader without that rule
(registered in its place for the first run, as an older release had it); the runs after it are the
CLI, in another process, as a user types them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from contextkit import ingest
from contextkit.index import Index
from contextkit.loaders import HtmlLoader, HtmlRules, loader_for, register_loader

TOC = ('<div class="toctree-wrapper compound"><ul><li class="toctree-l1"><a href="itertools.html">itertools — '
       'Functions creating iterators for efficient looping</a></li><li class="toctree-l1"><a href="operator.html">'
       'operator — Standard operators as functions</a></li></ul></div>')
PAGE = """<!DOCTYPE html><html><head><title>{title} — Python 3.11 documentation</title></head><body>
<div class="body" role="main"><h1>{title}</h1>{toc}<p>{body}</p></div></body></html>"""


def _pages(folder: Path) -> None:
    folder.mkdir()
    (folder / "functional.html").write_text(PAGE.format(
        title="Functional Programming Modules", toc=TOC,
        body="The modules described in this chapter provide functions and classes that support a functional "
             "programming style, and general operations on callables."), encoding="utf-8")
    (folder / "functools.html").write_text(PAGE.format(
        title="functools — Higher-order functions", toc="",
        body="The functools module is for higher-order functions: functions that act on or return other "
             "functions. lru_cache(maxsize=128) wraps a function with a memoizing callable."), encoding="utf-8")


def _texts(index_dir: Path) -> dict[str, str]:
    with Index.open(index_dir, read_only=True) as index:
        return {d: " ".join(c.text for c in index.document_chunks(d)) for d in index.documents()}


def _cli(*args: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "contextkit", "ingest", *args, "--json", "-q"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_reprocess_brings_a_new_loader_to_an_index_built_before_it(tmp_path: Path, embedder) -> None:
    docs, ix = tmp_path / "html", tmp_path / "docs.ck-index"
    _pages(docs)
    builtin = loader_for(".html")
    assert builtin is not None
    old_rules = HtmlRules(drop_classes=HtmlRules().drop_classes - {"toctree-wrapper"})
    try:
        register_loader(HtmlLoader(old_rules), replace=True)  # the release before the table-of-contents rule
        ingest([docs], ix, embedder=embedder)
    finally:
        register_loader(builtin, replace=True)
    assert any("itertools" in text for text in _texts(ix).values())  # the old index holds the list

    plain = _cli(str(docs), "--index", str(ix))
    assert (plain["files_unchanged"], plain["files_changed"], plain["files_reprocessed"]) == (2, 0, 0)
    assert any("itertools" in text for text in _texts(ix).values())  # skipped: the old chunks stay

    dry = subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(docs), "--index", str(ix), "--dry-run",
                          "--reprocess", "--json", "-q"], env={**os.environ, "HF_HUB_OFFLINE": "1"},
                         capture_output=True, text=True, timeout=600, check=False)
    assert dry.returncode == 0, dry.stderr[-2000:]
    preview = json.loads(dry.stdout)
    assert (preview["changed"], preview["reprocessed"], preview["unchanged"]) == (2, 2, 0)

    redone = _cli(str(docs), "--index", str(ix), "--reprocess")
    assert (redone["files_changed"], redone["files_reprocessed"], redone["files_unchanged"]) == (2, 2, 0)
    texts = _texts(ix)
    assert not any("itertools" in text for text in texts.values())
    assert any("support a functional programming style" in text for text in texts.values())
    # the page the rule does not touch comes out the same: its chunk keeps its vector, nothing is embedded for it
    assert redone["embedding"]["cache_hits"] >= 1
    assert redone["embedding"]["model_inputs"] == 1
    again = _cli(str(docs), "--index", str(ix))
    assert (again["files_unchanged"], again["files_changed"]) == (2, 0)


def test_a_streamed_file_reprocessed_counts_once_and_a_new_one_is_new(tmp_path: Path, embedder) -> None:
    """A file streamed in parts is committed part by part: it is one file re-read, not one per part; a file
    that was never indexed is new whatever the flag."""
    docs, ix = tmp_path / "notes", tmp_path / "notes.ck-index"
    docs.mkdir()
    (docs / "long.txt").write_text("".join(f"Paragraph {i}: the glacier moved {i} metres in year {1900 + i}.\n\n"
                                           for i in range(400)), encoding="utf-8")
    first = ingest([docs], ix, embedder=embedder, stream_above_bytes=4096, stream_block_bytes=4096)
    chunks = first.chunks_added
    assert first.files_new == 1 and chunks > 10
    (docs / "short.txt").write_text("Sea ice covers about 7% of the ocean's surface.\n", encoding="utf-8")
    again = ingest([docs], ix, embedder=embedder, stream_above_bytes=4096, stream_block_bytes=4096, reprocess=True)
    assert (again.files_new, again.files_changed, again.files_reprocessed, again.files_unchanged) == (1, 1, 1, 0)
    assert again.chunks_added == chunks + 1 and again.chunks_removed == chunks
    assert again.embedding.model_inputs == 1  # only the new file's chunk: the long one's came out the same
