"""Tests for contextkit.loaders: discovery, each format, and errors as values."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.loaders import (
    SUPPORTED_SUFFIXES,
    LoadError,
    LoadLimits,
    SourceFile,
    discover_files,
    file_sha256,
    load_file,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SCIFACT = Path(__file__).resolve().parents[3] / "shared/data/beir_scifact/corpus.jsonl"


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_bytes(content.encode("utf-8"))
    return path


def source_for(path: Path, doc_id: str | None = None) -> SourceFile:
    return SourceFile(path.resolve(), doc_id or path.name)


def load_one(path: Path, doc_id: str | None = None):
    result = load_file(source_for(path, doc_id))
    assert result.errors == []
    assert len(result.documents) == 1
    return result.documents[0]


def load_error(path: Path, doc_id: str | None = None) -> LoadError:
    result = load_file(source_for(path, doc_id))
    assert result.documents == []
    assert len(result.errors) == 1
    return result.errors[0]


def ids(files: list[SourceFile]) -> list[str]:
    return [f.doc_id for f in files]


def make_pdf(text: str | None = "Hello PDF world", title: str | None = "Test Title", ops: int = 1) -> bytes:
    """A minimal valid one-page PDF with a Helvetica font and a correct xref table
    (``ops`` repeats the show-text operator: many make a page slow to extract)."""
    content = (b"BT /F1 12 Tf 72 712 Td" + f" ({text}) Tj".encode() * ops + b" ET") if text else b""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    if title:
        objects.append(f"<< /Title ({title}) >>".encode())
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    info = b" /Info 6 0 R" if title else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\n" % (len(objects) + 1, info)
    out += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small docs tree; the working directory is tmp_path so roots can be relative."""
    write(tmp_path / "docs/index.md", "# Index\n")
    write(tmp_path / "docs/guide/a.md", "A\n")
    write(tmp_path / "docs/guide/b.txt", "B\n")
    write(tmp_path / "docs/guide/deep/c.md", "C\n")
    write(tmp_path / "docs/src/main.py", "print('hi')\n")
    write(tmp_path / "docs/image.png", b"\x89PNG\r\n\x1a\n\x00\x00")
    write(tmp_path / "docs/Makefile", "all:\n")
    write(tmp_path / "docs/.hidden.md", "secret\n")
    write(tmp_path / "docs/.git/HEAD.md", "ref\n")
    write(tmp_path / "docs/__pycache__/x.py", "cached\n")
    write(tmp_path / "docs/node_modules/pkg/readme.md", "pkg\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


class TestDiscoverFiles:
    def test_walks_recursively_sorted_with_relative_ids(self, tree: Path) -> None:
        files, errors = discover_files(["docs"])
        assert errors == []
        assert ids(files) == [
            "docs/guide/a.md", "docs/guide/b.txt", "docs/guide/deep/c.md",
            "docs/index.md", "docs/src/main.py",
        ]
        for f in files:
            assert f.path.is_absolute()
            assert f.path == f.path.resolve()
            assert f.path == (tree / f.doc_id).resolve()

    def test_order_is_deterministic(self, tree: Path) -> None:
        assert discover_files(["docs"]) == discover_files(["docs"])

    @pytest.mark.parametrize("typed", ["docs/", "./docs", "docs/guide/..", "docs//"])
    def test_root_is_normalised(self, tree: Path, typed: str) -> None:
        files, _ = discover_files([typed])
        assert ids(files)[0] == "docs/guide/a.md"

    def test_current_directory_root_has_no_prefix(self, tree: Path) -> None:
        os.chdir(tree / "docs")
        files, _ = discover_files(["."])
        assert ids(files)[0] == "guide/a.md"

    def test_absolute_root_gives_ids_under_its_own_name(self, tree: Path) -> None:
        root = str(tree.resolve() / "docs")
        files, _ = discover_files([root])
        assert ids(files)[0] == "docs/guide/a.md"  # no absolute local path in an id (issue 31)

    def test_path_objects_accepted(self, tree: Path) -> None:
        files, _ = discover_files([Path("docs/guide")])
        assert ids(files) == ["docs/guide/a.md", "docs/guide/b.txt", "docs/guide/deep/c.md"]

    def test_hidden_and_vendor_dirs_skipped(self, tree: Path) -> None:
        files, _ = discover_files(["docs"])
        joined = " ".join(ids(files))
        for skipped in (".hidden", ".git", "__pycache__", "node_modules"):
            assert skipped not in joined

    def test_unsupported_suffix_skipped_when_walking(self, tree: Path) -> None:
        files, _ = discover_files(["docs"])
        assert "docs/image.png" not in ids(files)
        assert "docs/Makefile" not in ids(files)

    def test_explicit_file_taken_whatever_its_suffix(self, tree: Path) -> None:
        files, errors = discover_files(["docs/Makefile", "./docs/.hidden.md"])
        assert errors == []
        assert ids(files) == ["docs/Makefile", "docs/.hidden.md"]

    def test_single_file_id_is_name_as_typed(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        write(tmp_path / "notes.txt", "n")
        monkeypatch.chdir(tmp_path)
        files, _ = discover_files(["notes.txt"])
        assert files == [SourceFile((tmp_path / "notes.txt").resolve(), "notes.txt")]

    @pytest.mark.parametrize("glob", ["*.md", "**/*.md"])
    def test_glob_matches_at_any_depth(self, tree: Path, glob: str) -> None:
        files, _ = discover_files(["docs"], glob=glob)
        assert ids(files) == ["docs/guide/a.md", "docs/guide/deep/c.md", "docs/index.md"]

    def test_glob_with_directory_part(self, tree: Path) -> None:
        files, _ = discover_files(["docs"], glob="guide/**/*.md")
        assert ids(files) == ["docs/guide/a.md", "docs/guide/deep/c.md"]
        files, _ = discover_files(["docs"], glob="deep/*")
        assert ids(files) == ["docs/guide/deep/c.md"]

    def test_leading_slash_anchors_glob_at_root(self, tree: Path) -> None:
        files, _ = discover_files(["docs"], glob="/*.md")
        assert ids(files) == ["docs/index.md"]
        files, _ = discover_files(["docs"], glob="/guide/*")
        assert ids(files) == ["docs/guide/a.md", "docs/guide/b.txt"]

    def test_glob_does_not_filter_explicit_files(self, tree: Path) -> None:
        files, _ = discover_files(["docs/guide/b.txt"], glob="*.md")
        assert ids(files) == ["docs/guide/b.txt"]

    def test_missing_path_is_an_error_value(self, tree: Path) -> None:
        files, errors = discover_files(["nope", "docs/guide/a.md"])
        assert ids(files) == ["docs/guide/a.md"]
        assert errors == [LoadError("nope", "no such file or directory")]

    def test_overlapping_roots_deduplicated(self, tree: Path) -> None:
        files, errors = discover_files(["docs/guide", "docs", "docs/guide/a.md"])
        assert errors == []
        assert len(files) == len({f.path for f in files}) == 5
        assert ids(files)[:3] == ["docs/guide/a.md", "docs/guide/b.txt", "docs/guide/deep/c.md"]

    def test_file_symlink_escaping_root_skipped(self, tmp_path: Path) -> None:
        write(tmp_path / "outside/secret.md", "secret")
        write(tmp_path / "root/ok.md", "ok")
        (tmp_path / "root/leak.md").symlink_to(tmp_path / "outside/secret.md")
        files, errors = discover_files([tmp_path / "root"])
        assert [f.path.name for f in files] == ["ok.md"]
        assert len(errors) == 1
        assert errors[0].path.endswith("root/leak.md")
        assert errors[0].reason == (
            f"symlink points outside {(tmp_path / 'root').resolve()} (not followed unless --follow-symlinks)")

    def test_directory_symlink_escaping_root_not_followed(self, tmp_path: Path) -> None:
        write(tmp_path / "outside/secret.md", "secret")
        write(tmp_path / "root/ok.md", "ok")
        (tmp_path / "root/linked").symlink_to(tmp_path / "outside", target_is_directory=True)
        files, errors = discover_files([tmp_path / "root"])
        assert [f.path.name for f in files] == ["ok.md"]
        assert [e.path.rsplit("/", 1)[-1] for e in errors] == ["linked"]
        assert "symlink points outside" in errors[0].reason

    def test_symlink_inside_root_is_deduplicated(self, tmp_path: Path) -> None:
        write(tmp_path / "root/real.md", "r")
        (tmp_path / "root/alias.md").symlink_to(tmp_path / "root/real.md")
        files, errors = discover_files([tmp_path / "root"])
        assert errors == []
        assert len(files) == 1 and files[0].path == (tmp_path / "root/real.md").resolve()

    def test_symlink_cycles_do_not_hang(self, tmp_path: Path) -> None:
        write(tmp_path / "root/sub/a.md", "a")
        (tmp_path / "root/sub/self").symlink_to(tmp_path / "root", target_is_directory=True)
        (tmp_path / "root/sub/up").symlink_to("..", target_is_directory=True)
        (tmp_path / "root/x.md").symlink_to(tmp_path / "root/y.md")
        (tmp_path / "root/y.md").symlink_to(tmp_path / "root/x.md")
        started = time.monotonic()
        files, errors = discover_files([tmp_path / "root"])
        assert time.monotonic() - started < 5
        assert [f.path.name for f in files] == ["a.md"]
        assert sorted(e.path.rsplit("/", 1)[-1] for e in errors) == ["x.md", "y.md"]
        assert all("broken symlink" in e.reason for e in errors)

    def test_symlinked_root_is_followed(self, tmp_path: Path) -> None:
        write(tmp_path / "real/a.md", "a")
        (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
        files, errors = discover_files([tmp_path / "alias"])
        assert errors == []
        assert files[0].doc_id == "alias/a.md"

    def test_relative_dotdot_symlinks_leading_outside_are_reported(self, tmp_path: Path) -> None:
        write(tmp_path / "outside/secret.md", "secret")
        write(tmp_path / "outside/more/deep.md", "deep")
        write(tmp_path / "root/sub/ok.md", "ok")
        (tmp_path / "root/sub/leak.md").symlink_to("../../outside/secret.md")
        (tmp_path / "root/sub/up").symlink_to("../../outside", target_is_directory=True)
        files, errors = discover_files([tmp_path / "root"])
        assert [f.path.name for f in files] == ["ok.md"]
        assert sorted(e.path.rsplit("/", 1)[-1] for e in errors) == ["leak.md", "up"]
        assert all("points outside" in e.reason and "--follow-symlinks" in e.reason for e in errors)

    def test_follow_symlinks_takes_links_outside(self, tmp_path: Path) -> None:
        write(tmp_path / "outside/secret.md", "secret")
        write(tmp_path / "outside/more/deep.md", "deep")
        write(tmp_path / "root/ok.md", "ok")
        (tmp_path / "root/leak.md").symlink_to("../outside/secret.md")
        (tmp_path / "root/up").symlink_to("../outside", target_is_directory=True)
        (tmp_path / "outside/more/loop").symlink_to("..", target_is_directory=True)  # a cycle outside the root
        (tmp_path / "outside/back").symlink_to(tmp_path / "root", target_is_directory=True)  # back inside
        files, errors = discover_files([tmp_path / "root"], follow_symlinks=True)
        assert errors == []
        assert ids(files) == [f"root/{rel}" for rel in ["leak.md", "ok.md", "up/more/deep.md"]]
        # the file is reached twice (leak.md and up/secret.md): listed once, under the first id in walk order
        assert files[0].path == (tmp_path / "outside/secret.md").resolve()

    def test_follow_symlinks_keeps_glob_and_broken_link_rules(self, tmp_path: Path) -> None:
        write(tmp_path / "outside/a.md", "a")
        write(tmp_path / "outside/b.txt", "b")
        write(tmp_path / "root/x.md", "x")
        (tmp_path / "root/ext").symlink_to(tmp_path / "outside", target_is_directory=True)
        (tmp_path / "root/gone.md").symlink_to(tmp_path / "nowhere.md")
        files, errors = discover_files([tmp_path / "root"], glob="*.md", follow_symlinks=True)
        assert [f.doc_id.rsplit("root/", 1)[1] for f in files] == ["ext/a.md", "x.md"]
        assert [e.reason for e in errors] == ["broken symlink (missing target or a loop)"]

    def test_supported_suffixes(self) -> None:
        for suffix in (".txt", ".md", ".rst", ".html", ".pdf", ".jsonl", ".py", ".ts", ".go"):
            assert suffix in SUPPORTED_SUFFIXES
        assert ".png" not in SUPPORTED_SUFFIXES

    def test_import_does_not_load_pypdf(self) -> None:
        code = "import sys, contextkit.loaders; print('pypdf' in sys.modules)"
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        assert out.stdout.strip() == "False"


class TestLoadText:
    def test_markdown_loaded_exactly(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.md", "# Title\n\nBody  text\n")
        doc = load_one(path, "docs/a.md")
        assert doc.id == "docs/a.md"
        assert doc.text == "# Title\n\nBody  text\n"
        assert doc.source == str(path.resolve())
        assert doc.metadata == {"format": "markdown", "title": "Title"}

    @pytest.mark.parametrize(("name", "fmt"), [("a.txt", "text"), ("a.rst", "rst"), ("a.markdown", "markdown"),
                                               ("LICENSE", "text"), ("A.MD", "markdown")])
    def test_format_from_suffix(self, tmp_path: Path, name: str, fmt: str) -> None:
        assert load_one(write(tmp_path / name, "x")).metadata["format"] == fmt

    def test_code_has_language(self, tmp_path: Path) -> None:
        doc = load_one(write(tmp_path / "m.py", "def f():\n    return 1\n"))
        assert doc.metadata == {"format": "code", "language": "python", "title": "m.py"}
        assert load_one(write(tmp_path / "x.tsx", "x")).metadata["language"] == "typescript"

    def test_crlf_preserved(self, tmp_path: Path) -> None:
        path = write(tmp_path / "w.txt", b"one\r\ntwo\r\n\r\nthree")
        assert load_one(path).text == "one\r\ntwo\r\n\r\nthree"

    def test_bom_stripped(self, tmp_path: Path) -> None:
        path = write(tmp_path / "b.md", b"\xef\xbb\xbfHello")
        assert load_one(path).text == "Hello"

    def test_binary_rejected(self, tmp_path: Path) -> None:
        path = write(tmp_path / "bin.txt", b"abcdefghijkl\x00\x01\x02")
        assert load_error(path, "docs/bin.txt") == LoadError("docs/bin.txt", "binary file (NUL byte at offset 12)")

    def test_invalid_utf8_rejected_with_offset(self, tmp_path: Path) -> None:
        path = write(tmp_path / "bad.md", b"abc\xffdef")
        assert load_error(path, "docs/bad.md") == LoadError("docs/bad.md", "not UTF-8 text: invalid byte 0xff at offset 3")

    def test_invalid_utf8_offset_counts_bom(self, tmp_path: Path) -> None:
        path = write(tmp_path / "bad.md", b"\xef\xbb\xbfab\xc3(")
        assert load_error(path).reason == "not UTF-8 text: invalid byte 0xc3 at offset 5"

    @pytest.mark.parametrize("content", ["", "  \n\t\n"])
    def test_empty_or_blank_file_yields_one_document(self, tmp_path: Path, content: str) -> None:
        assert load_one(write(tmp_path / "e.txt", content)).text == content

    def test_missing_file(self, tmp_path: Path) -> None:
        assert load_error(tmp_path / "gone.txt", "gone.txt") == LoadError("gone.txt", "no such file or directory")

    def test_directory_is_an_error(self, tmp_path: Path) -> None:
        (tmp_path / "d.md").mkdir()
        assert load_error(tmp_path / "d.md").reason == "is a directory"

    @pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
    def test_permission_denied(self, tmp_path: Path) -> None:
        path = write(tmp_path / "locked.txt", "x")
        path.chmod(0)
        try:
            assert load_error(path).reason == "permission denied"
        finally:
            path.chmod(0o600)

    @settings(max_examples=50, deadline=None)
    @given(st.text(alphabet=st.characters(blacklist_characters="\x00\ufeff", blacklist_categories=("Cs",))))
    def test_any_utf8_text_round_trips(self, text: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = write(Path(tmp) / "t.txt", text)
            assert load_one(path).text == text


class TestLoadHtml:
    PAGE = """<!DOCTYPE html>
<html><head><title> My   Page </title>
<style>body { color: red }</style><script>var x = "<p>no</p>";</script></head>
<body>
<!-- a comment -->
<h1>Heading</h1>
<p>First   paragraph
 spans lines &amp; has <b>bold</b> text.</p>
<div>Second &lt;para&gt;&nbsp;here</div>
<ul><li>one</li><li>two</li></ul>
<p>line one<br>line two</p>
<noscript>enable js</noscript><template><p>tmpl</p></template>
<pre>
code   keeps
    its  spacing
</pre>
<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>
</body></html>
"""

    def test_visible_text_with_structure(self, tmp_path: Path) -> None:
        doc = load_one(write(tmp_path / "p.html", self.PAGE))
        assert doc.text == (
            "Heading\n\n"
            "First paragraph spans lines & has bold text.\n\n"
            "Second <para>\xa0here\n\n"
            "one\ntwo\n\n"
            "line one\nline two\n\n"
            "code   keeps\n    its  spacing\n\n"
            "a b\nc"
        )
        assert doc.metadata == {"format": "html", "title": "My Page"}

    def test_dropped_content_absent(self, tmp_path: Path) -> None:
        text = load_one(write(tmp_path / "p.htm", self.PAGE)).text
        for absent in ("color", "var x", "no</p>", "comment", "enable js", "tmpl", "My Page"):
            assert absent not in text

    def test_no_title_no_metadata_title(self, tmp_path: Path) -> None:
        doc = load_one(write(tmp_path / "f.html", "<p>just text</p>"))
        assert doc.text == "just text"
        assert "title" not in doc.metadata

    def test_meta_charset_used(self, tmp_path: Path) -> None:
        raw = '<meta charset="iso-8859-1"><p>caf\xe9</p>'.encode("latin-1")
        assert load_one(write(tmp_path / "l.html", raw)).text == "café"

    @pytest.mark.parametrize("charset", ["base64", "no-such-codec"])
    def test_unusable_meta_charset_falls_back_to_utf8(self, tmp_path: Path, charset: str) -> None:
        raw = f'<meta charset="{charset}"><p>caf\xe9</p>'.encode()
        assert load_one(write(tmp_path / "u.html", raw)).text == "café"

    def test_undecodable_html_rejected(self, tmp_path: Path) -> None:
        error = load_error(write(tmp_path / "bad.html", b"<p>\xff</p>"))
        assert error.reason == "not UTF-8 text: invalid byte 0xff at offset 3"

    def test_malformed_html_does_not_raise(self, tmp_path: Path) -> None:
        result = load_file(source_for(write(tmp_path / "m.html", "<p><b>unclosed <div <<>> &bogus; <!x")))
        assert len(result.documents) + len(result.errors) == 1


class TestLoadPdf:
    def test_text_extracted(self, tmp_path: Path) -> None:
        doc = load_one(write(tmp_path / "hello.pdf", make_pdf()), "docs/hello.pdf")
        assert "Hello PDF world" in doc.text
        assert doc.id == "docs/hello.pdf"
        assert doc.metadata == {"format": "pdf", "pages": 1, "page_starts": [0], "title": "Test Title"}

    def test_no_info_no_title(self, tmp_path: Path) -> None:
        doc = load_one(write(tmp_path / "hello.pdf", make_pdf(title=None)))
        assert "title" not in doc.metadata

    def test_garbage_is_corrupt(self, tmp_path: Path) -> None:
        error = load_error(write(tmp_path / "junk.pdf", os.urandom(64) + b"not a pdf"), "junk.pdf")
        assert error.path == "junk.pdf"
        assert error.reason.startswith("corrupt PDF: ")

    def test_truncated_is_an_error(self, tmp_path: Path) -> None:
        data = make_pdf()
        error = load_error(write(tmp_path / "cut.pdf", data[: len(data) // 2]))
        assert error.reason.startswith(("corrupt PDF", "PDF has no extractable text"))

    def test_empty_file_is_corrupt(self, tmp_path: Path) -> None:
        assert load_error(write(tmp_path / "empty.pdf", b"")).reason.startswith("corrupt PDF: ")

    def test_page_without_text(self, tmp_path: Path) -> None:
        error = load_error(write(tmp_path / "scan.pdf", make_pdf(text=None)))
        assert error.reason == "PDF has no extractable text (scanned?)"

    def test_encrypted(self, tmp_path: Path) -> None:
        pypdf = pytest.importorskip("pypdf")
        import io

        writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_pdf())))
        writer.encrypt(user_password="secret", algorithm="RC4-128")
        path = tmp_path / "locked.pdf"
        with path.open("wb") as fh:
            writer.write(fh)
        assert load_error(path).reason.startswith("encrypted PDF")


    def test_worker_is_reused_across_files(self, tmp_path: Path) -> None:
        from contextkit.loaders import pdf

        load_one(write(tmp_path / "a.pdf", make_pdf()))
        first = pdf._worker._proc
        load_one(write(tmp_path / "b.pdf", make_pdf(text="Second")))
        assert first is not None and pdf._worker._proc is first and first.poll() is None

    def test_hanging_parser_is_killed_and_replaced(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from contextkit.loaders import pdf

        path = write(tmp_path / "hang.pdf", make_pdf())
        monkeypatch.setattr(pdf, "_worker_delay", 30.0)  # the worker sleeps as if pypdf looped
        started = time.monotonic()
        result = load_file(source_for(path, "docs/hang.pdf"), LoadLimits(pdf_timeout=0.5))
        assert time.monotonic() - started < 10
        assert result.errors == [LoadError("docs/hang.pdf", "PDF parsing exceeded 0.5 s time limit")]
        monkeypatch.setattr(pdf, "_worker_delay", 0.0)
        assert "Hello PDF world" in load_one(path).text  # a fresh worker: the run goes on

    def test_slow_content_stream_hits_the_time_limit(self, tmp_path: Path) -> None:
        """A real hostile file: 600 KB of text operators on one page keep pypdf busy for seconds."""
        path = write(tmp_path / "bomb.pdf", make_pdf(text="a", ops=40_000))
        result = load_file(source_for(path), LoadLimits(pdf_timeout=0.3))
        assert [e.reason for e in result.errors] == ["PDF parsing exceeded 0.3 s time limit"]
        assert "Hello PDF world" in load_one(write(tmp_path / "ok.pdf", make_pdf())).text

    def test_in_process_parsing_when_no_limit(self, tmp_path: Path) -> None:
        path = write(tmp_path / "hello.pdf", make_pdf())
        result = load_file(source_for(path), LoadLimits(pdf_timeout=None))
        assert "Hello PDF world" in result.documents[0].text


class TestSizeLimits:
    @pytest.mark.parametrize("name, kind", [("big.html", "HTML"), ("big.pdf", "PDF")])
    def test_html_and_pdf_above_the_limit_are_reported(self, tmp_path: Path, name: str, kind: str) -> None:
        path = write(tmp_path / name, b"<p>x</p>" * 25_000 if kind == "HTML" else make_pdf() * 400)
        assert load_file(source_for(path, name)).documents  # under the default limit it is parsed
        assert load_file(source_for(path, name), LoadLimits(max_parse_bytes=100_000)).errors == [
            LoadError(name, f"file too large for {kind} parsing ({path.stat().st_size / (1 << 20):.1f} MiB > "
                            "0.1 MiB limit)")]

    def test_text_files_have_no_parse_limit(self, tmp_path: Path) -> None:
        path = write(tmp_path / "big.txt", "word " * 300_000)
        result = load_file(source_for(path), LoadLimits(max_parse_bytes=1024))
        assert result.errors == [] and len(result.documents[0].text) == 1_500_000

class TestLoadJsonl:
    def test_beir_records(self, tmp_path: Path) -> None:
        lines = [
            {"_id": "1", "title": "T one", "text": "Body one", "metadata": {"year": 2020}},
            {"_id": 2, "title": "", "text": "Body two"},
            {"id": "three", "text": "Body three"},
        ]
        path = write(tmp_path / "corpus.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
        result = load_file(source_for(path, "data/corpus.jsonl"))
        assert result.errors == []
        docs = result.documents
        assert [d.id for d in docs] == ["data/corpus.jsonl#1", "data/corpus.jsonl#2", "data/corpus.jsonl#three"]
        assert [d.text for d in docs] == ["T one\n\nBody one", "Body two", "Body three"]
        assert docs[0].metadata == {"year": 2020, "format": "jsonl", "title": "T one", "source": "data/corpus.jsonl:1"}
        assert docs[2].metadata == {"format": "jsonl", "title": "", "source": "data/corpus.jsonl:3"}
        assert all(d.source == str(path.resolve()) for d in docs)

    def test_partial_success(self, tmp_path: Path) -> None:
        content = "\n".join([
            json.dumps({"_id": "a", "text": "A"}),
            "",
            "{not json",
            json.dumps({"_id": "b", "text": "B"}),
            json.dumps({"_id": "a", "text": "again"}),
            json.dumps({"_id": "c", "title": "no text"}),
            json.dumps(["a", "list"]),
            json.dumps({"text": "no id"}),
            "   ",
            json.dumps({"_id": "d", "text": "D"}),
        ])
        result = load_file(source_for(write(tmp_path / "c.jsonl", content), "c.jsonl"))
        assert [d.id for d in result.documents] == ["c.jsonl#a", "c.jsonl#b", "c.jsonl#d"]
        assert [e.path for e in result.errors] == ["c.jsonl"] * 5
        reasons = [e.reason for e in result.errors]
        assert reasons[0].startswith("line 3: invalid JSON (")
        assert reasons[1:] == [
            "line 5: duplicate _id 'a' (first on line 1)",
            "line 6: missing 'text' field",
            "line 7: not a JSON object",
            "line 8: missing '_id' field",
        ]

    def test_pathological_lines_are_errors_not_exceptions(self, tmp_path: Path) -> None:
        content = "[" * 100_000 + "\n" + '{"_id": "1", "text": "' + "9" * 10 + '", "n": ' + "9" * 5000 + "}\n"
        result = load_file(source_for(write(tmp_path / "p.jsonl", content), "p.jsonl"))
        assert result.documents == []
        assert [e.reason[:22] for e in result.errors] == ["line 1: invalid JSON ("] + ["line 2: invalid JSON ("]

    def test_crlf_lines(self, tmp_path: Path) -> None:
        path = write(tmp_path / "w.jsonl", b'{"_id": "1", "text": "x"}\r\n{"_id": "2", "text": "y"}\r\n')
        result = load_file(source_for(path))
        assert result.errors == [] and [d.text for d in result.documents] == ["x", "y"]

    def test_non_serialisable_metadata_ignored(self, tmp_path: Path) -> None:
        path = write(tmp_path / "m.jsonl", json.dumps({"_id": "1", "text": "x", "metadata": "nope"}))
        assert load_file(source_for(path)).documents[0].metadata == {"format": "jsonl", "title": "", "source": "m.jsonl:1"}

    def test_binary_jsonl_rejected(self, tmp_path: Path) -> None:
        assert load_error(write(tmp_path / "b.jsonl", b"\x00\x01")).reason.startswith("binary file")

    @pytest.mark.skipif(not SCIFACT.exists(), reason="BEIR SciFact corpus not present")
    def test_real_scifact_corpus(self) -> None:
        files, errors = discover_files([SCIFACT])
        assert errors == [] and len(files) == 1
        result = load_file(files[0])
        assert result.errors == []
        assert len(result.documents) == 5183
        assert len({d.id for d in result.documents}) == 5183
        first = result.documents[0]
        assert first.id.startswith("beir_scifact/corpus.jsonl#")
        assert first.metadata["format"] == "jsonl" and first.metadata["title"]
        assert first.text.startswith(first.metadata["title"] + "\n\n")


class TestFileSha256:
    def test_matches_hashlib_across_blocks(self, tmp_path: Path) -> None:
        data = os.urandom((1 << 20) * 2 + 123)
        path = write(tmp_path / "big.bin", data)
        assert file_sha256(path) == hashlib.sha256(data).hexdigest()

    def test_empty_file(self, tmp_path: Path) -> None:
        assert file_sha256(write(tmp_path / "e", b"")) == hashlib.sha256(b"").hexdigest()
