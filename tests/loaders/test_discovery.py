"""Discovery as a new user meets it: index folders beside the documents, one file reached by two
names, a followed folder link that breaks (issue 18)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contextkit.loaders import LoadError, discover, discover_files, is_index_folder


def write(path: Path, text: str = "text\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def fake_index(folder: Path) -> Path:
    """The files an index folder holds that a walk would otherwise take (JSON, by suffix)."""
    write(folder / "manifest.json", json.dumps({"format_version": 1, "model": "m", "dim": 3}))
    write(folder / "bm25" / "vocab.index.json", '{"faiss": 0}')
    write(folder / "bm25" / "params.index.json", "{}")
    (folder / "store.sqlite").write_bytes(b"SQLite format 3\x00")
    return folder


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write(tmp_path / "docs" / "a.md", "# A\n")
    write(tmp_path / "docs" / "guide" / "b.rst", "B\n=\n")
    fake_index(tmp_path / "docs" / "my.ck-index")
    monkeypatch.chdir(tmp_path)
    return tmp_path


class TestIndexFolders:
    def test_an_index_folder_inside_an_input_is_never_read(self, tree: Path) -> None:
        found = discover(["docs"])
        assert [f.doc_id for f in found.files] == ["docs/a.md", "docs/guide/b.rst"]
        assert found.errors == []
        assert found.notes == [LoadError("docs/my.ck-index", "a contextkit index folder: not read")]

    def test_the_index_being_written_is_skipped_before_it_has_a_manifest(self, tree: Path) -> None:
        write(tree / "docs" / "new.ck-index" / "bm25" / "meta.json", "{}")  # a creation in progress
        files, errors = discover_files(["docs"], exclude=[tree / "docs" / "new.ck-index"])
        assert [f.doc_id for f in files] == ["docs/a.md", "docs/guide/b.rst"] and errors == []

    def test_a_path_named_inside_an_index_is_an_error(self, tree: Path) -> None:
        found = discover(["docs/my.ck-index/manifest.json", "docs/my.ck-index"])
        assert found.files == []
        assert [e.path for e in found.errors] == ["docs/my.ck-index/manifest.json", "docs/my.ck-index"]
        assert all("contextkit index folder" in e.reason for e in found.errors)

    def test_a_manifest_of_something_else_is_read(self, tmp_path: Path) -> None:
        write(tmp_path / "web" / "manifest.json", '{"name": "my app", "icons": []}')
        assert not is_index_folder(tmp_path / "web")
        assert [f.path.name for f in discover_files([tmp_path / "web"])[0]] == ["manifest.json"]

    def test_an_index_whose_manifest_was_lost_is_still_an_index(self, tmp_path: Path) -> None:
        folder = fake_index(tmp_path / "ix")
        (folder / "manifest.json").unlink()
        assert is_index_folder(folder)


class TestReachedTwice:
    def test_the_same_file_by_two_names_is_listed_once_with_a_note(self, tree: Path) -> None:
        found = discover(["docs", "docs/guide/b.rst", "docs/guide"])
        assert [f.doc_id for f in found.files] == ["docs/a.md", "docs/guide/b.rst"]
        os.symlink(tree / "docs" / "a.md", tree / "alias.md")
        found = discover(["docs", "alias.md"])
        assert [f.doc_id for f in found.files] == ["docs/a.md", "docs/guide/b.rst"]
        said = {n.path: n.reason for n in found.notes if "same file" in n.reason}
        assert said == {"alias.md": "the same file as docs/a.md: loaded once, as docs/a.md"}

    def test_an_absolute_folder_gives_the_ids_of_the_folder_named(self, tree: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """Issue 31: on 6e3bcce ``/home/me/proj/docs`` gave ids ``/home/me/proj/docs/a.md``, and the
        absolute local path went into every prompt as a citation."""
        absolute = str((tree / "docs").resolve())
        found = discover([absolute])
        assert [f.doc_id for f in found.files] == ["docs/a.md", "docs/guide/b.rst"]
        assert [f.doc_id for f in discover(["docs", absolute]).files] == ["docs/a.md", "docs/guide/b.rst"]
        assert [f.doc_id for f in discover([str(tree / "docs" / "a.md")]).files] == ["docs/a.md"]
        monkeypatch.chdir(tree / "docs" / "guide")
        assert [f.doc_id for f in discover([".."]).files] == ["docs/a.md", "docs/guide/b.rst"]

    def test_two_folders_of_one_name_keep_apart(self, tmp_path: Path) -> None:
        for side in ("a", "b"):
            write(tmp_path / side / "docs" / "x.md")
        write(tmp_path / "c" / "x.md")
        found = discover([tmp_path / "a" / "docs", tmp_path / "b" / "docs", tmp_path / "c" / "x.md"])
        assert [f.doc_id for f in found.files] == ["a/docs/x.md", "b/docs/x.md", "c/x.md"]
        assert found.errors == []


class TestFollowedLinks:
    def test_a_followed_folder_link_that_broke_is_reported(self, tmp_path: Path) -> None:
        outside = write(tmp_path / "elsewhere" / "c.md").parent
        root = tmp_path / "root"
        write(root / "a.md")
        os.symlink(outside, root / "ext")
        files, errors = discover_files([root], follow_symlinks=True)
        assert sorted(f.path.name for f in files) == ["a.md", "c.md"] and errors == []
        (outside / "c.md").unlink()
        outside.rmdir()
        files, errors = discover_files([root], follow_symlinks=True)
        assert [f.path.name for f in files] == ["a.md"]
        assert len(errors) == 1 and errors[0].path.endswith("root/ext") and "broken symlink" in errors[0].reason
