"""The loader role: ``Loader``, the suffix registry, and a loader of our own used by ``load_file`` and discovery."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from contextkit.loaders import (
    SUPPORTED_SUFFIXES,
    HtmlLoader,
    JsonlLoader,
    Loader,
    LoadError,
    LoadFailure,
    LoadLimits,
    LoadResult,
    PdfLoader,
    SourceFile,
    TextLoader,
    discover_files,
    load_file,
    loader_for,
    open_text_stream,
    register_loader,
    registered_suffixes,
    unregister_loader,
)
from contextkit.records import Document

from .test_loaders import make_pdf


class CsvLoader(Loader):
    """A loader of our own: one document per CSV row, ``id`` and ``text`` columns; a bad row is an error."""

    suffixes: ClassVar[frozenset[str]] = frozenset({".csv", ".tsv"})

    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        text = source.path.read_text(encoding="utf-8")
        if not text.strip():
            raise LoadFailure(LoadError(source.doc_id, "empty CSV"))
        docs, errors = [], []
        for number, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
            if not row.get("text"):
                errors.append(LoadError(source.doc_id, f"row {number}: no text"))
                continue
            docs.append(Document(f"{source.doc_id}#{row['id']}", row["text"], str(source.path), {"format": "csv"}))
        return LoadResult(docs, errors)


@pytest.fixture()
def csv_loader() -> Iterator[CsvLoader]:
    loader = CsvLoader()
    register_loader(loader)
    yield loader
    unregister_loader(loader)


def source(path: Path) -> SourceFile:
    return SourceFile(path.resolve(), path.name)


class TestBuiltinLoaders:
    @pytest.mark.parametrize("suffix, kind", [(".md", TextLoader), (".PY", TextLoader), (".html", HtmlLoader),
                                              (".htm", HtmlLoader), (".pdf", PdfLoader), (".jsonl", JsonlLoader)])
    def test_each_suffix_has_its_loader(self, suffix, kind):
        assert isinstance(loader_for(suffix), kind)

    def test_the_registry_is_what_discovery_walks(self):
        assert registered_suffixes() == SUPPORTED_SUFFIXES
        assert loader_for(".png") is None

    def test_each_loader_gives_what_load_file_gives(self, tmp_path):
        files = {
            "a.md": b"# Title\n\nSome text.\n",
            "b.html": b"<html><title>T</title><body><p>One</p><p>Two</p></body></html>",
            "c.jsonl": b'{"_id": "1", "text": "first"}\nnot json\n{"_id": "2", "text": "second"}\n',
            "d.pdf": make_pdf("Hello base loader"),
        }
        for name, data in files.items():
            path = tmp_path / name
            path.write_bytes(data)
            loader = loader_for(path.suffix)
            assert loader is not None
            assert loader.load(source(path), LoadLimits()) == load_file(source(path)), name

    def test_limits_reach_the_loader(self, tmp_path):
        path = tmp_path / "big.html"
        path.write_bytes(b"<p>" + b"x" * 4096 + b"</p>")
        result = load_file(source(path), LoadLimits(max_parse_bytes=1024))
        assert result.documents == [] and result.errors[0].reason.startswith("file too large for HTML parsing")

    def test_an_unknown_suffix_named_explicitly_is_text(self, tmp_path):
        path = tmp_path / "notes.weird"
        path.write_text("plain words", encoding="utf-8")
        assert load_file(source(path)).documents[0].text == "plain words"
        assert open_text_stream(source(path)) is not None


class TestCustomLoader:
    def test_the_base_needs_load(self):
        with pytest.raises(TypeError, match="abstract"):
            Loader()  # type: ignore[abstract]

    def test_registered_loader_is_used_by_load_file(self, tmp_path, csv_loader):
        path = tmp_path / "rows.csv"
        path.write_text("id,text\n1,first row\n2,\n3,third row\n", encoding="utf-8")
        result = load_file(source(path))
        assert [d.id for d in result.documents] == ["rows.csv#1", "rows.csv#3"]
        assert result.errors == [LoadError("rows.csv", "row 3: no text")]
        assert open_text_stream(source(path)) is None  # it has a loader of its own: never streamed as text

    def test_its_failures_are_values(self, tmp_path, csv_loader):
        empty, missing = tmp_path / "empty.tsv", tmp_path / "gone.csv"
        empty.write_text("\n", encoding="utf-8")
        assert load_file(source(empty)) == LoadResult([], [LoadError("empty.tsv", "empty CSV")])
        assert load_file(SourceFile(missing, "gone.csv")).errors == [
            LoadError("gone.csv", "no such file or directory")]

    def test_discovery_walks_its_suffixes(self, tmp_path, csv_loader):
        (tmp_path / "rows.csv").write_text("id,text\n1,x\n", encoding="utf-8")
        (tmp_path / "a.md").write_text("a", encoding="utf-8")
        files, errors = discover_files([tmp_path])
        assert sorted(Path(f.doc_id).name for f in files) == ["a.md", "rows.csv"] and not errors

    def test_unregistered_it_is_gone(self, tmp_path):
        (tmp_path / "rows.csv").write_text("id,text\n1,x\n", encoding="utf-8")
        assert loader_for(".csv") is None
        assert [Path(f.doc_id).name for f in discover_files([tmp_path])[0]] == []

    def test_a_taken_suffix_needs_replace(self, csv_loader):
        class Markdown(TextLoader):
            suffixes: ClassVar[frozenset[str]] = frozenset({".md"})

        builtin = loader_for(".md")
        with pytest.raises(ValueError, match=r"\.md already have a loader"):
            register_loader(Markdown())
        mine = Markdown()
        register_loader(mine, replace=True)
        try:
            assert loader_for(".md") is mine
        finally:
            unregister_loader(mine)
            register_loader(builtin)  # type: ignore[arg-type]
        assert loader_for(".md") is builtin and registered_suffixes() == SUPPORTED_SUFFIXES | CsvLoader.suffixes

    def test_suffixes_are_checked(self):
        class Bad(CsvLoader):
            suffixes: ClassVar[frozenset[str]] = frozenset({"CSV"})

        with pytest.raises(ValueError, match="lower-case and start with a dot"):
            register_loader(Bad())
        with pytest.raises(ValueError, match="names no suffixes"):
            register_loader(type("Nothing", (CsvLoader,), {"suffixes": frozenset()})())
