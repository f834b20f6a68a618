"""The one atomic writer (``contextkit.core.atomic``): whole files, durable, the old file kept on a failure."""

import os
import stat

import pytest

from contextkit.core import atomic
from contextkit.core.atomic import atomic_file, atomic_path, write_bytes_atomic, write_text_atomic


@pytest.fixture
def fsyncs(monkeypatch):
    """What os.fsync is called on, in order: "file" or "dir"."""
    calls = []
    real = os.fsync

    def record(fd):
        calls.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    return calls


class TestWriteTextAtomic:
    def test_permissions_follow_the_umask_like_an_ordinary_write(self, tmp_path):
        old = os.umask(0o022)
        try:
            plain = tmp_path / "plain.txt"
            plain.write_text("x", encoding="utf-8")
            written = write_text_atomic(tmp_path / "atomic.txt", "x")
        finally:
            os.umask(old)
        assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o644

    def test_replaces_whole_and_leaves_no_temporary_file(self, tmp_path):
        target = tmp_path / "prompt.txt"
        target.write_text("old", encoding="utf-8")
        write_text_atomic(target, "new\r\nline", newline="")
        assert target.read_bytes() == b"new\r\nline"
        assert [p.name for p in tmp_path.iterdir()] == ["prompt.txt"]

    def test_newlines_as_open_writes_them(self, tmp_path):
        target = tmp_path / "a.txt"
        write_text_atomic(target, "a\nb", newline="\r\n")
        assert target.read_bytes() == b"a\r\nb"
        write_text_atomic(target, "a\nb")
        assert target.read_bytes() == f"a{os.linesep}b".encode()

    def test_a_failed_write_keeps_the_old_file(self, tmp_path):
        target = tmp_path / "prompt.txt"
        target.write_text("old", encoding="utf-8")
        with pytest.raises(UnicodeEncodeError):
            write_text_atomic(target, "bad \ud800")
        assert target.read_text(encoding="utf-8") == "old"
        assert [p.name for p in tmp_path.iterdir()] == ["prompt.txt"]


class TestDurable:
    def test_the_file_then_the_folder_are_fsynced(self, tmp_path, fsyncs):
        target = tmp_path / "manifest.json"
        write_bytes_atomic(target, b"{}")
        assert target.read_bytes() == b"{}"
        assert fsyncs == ["file", "dir"]  # the temporary file before the rename, the folder after it

    def test_the_file_is_fsynced_before_the_rename(self, tmp_path, monkeypatch):
        order = []
        real_fsync, real_replace = os.fsync, os.replace
        monkeypatch.setattr(os, "fsync", lambda fd: (order.append("fsync"), real_fsync(fd)))
        monkeypatch.setattr(os, "replace", lambda a, b: (order.append("replace"), real_replace(a, b)))
        write_text_atomic(tmp_path / "a.txt", "x")
        assert order == ["fsync", "replace", "fsync"]

    def test_sync_folder_off_leaves_the_folder_to_the_caller(self, tmp_path, fsyncs):
        write_bytes_atomic(tmp_path / "a", b"x", sync_folder=False)
        assert fsyncs == ["file"]

    def test_a_writer_by_name_is_fsynced_too(self, tmp_path, fsyncs):
        with atomic_path(tmp_path / "model.onnx", temporary="model.1.onnx.part") as tmp:
            assert tmp.name == "model.1.onnx.part"
            tmp.write_bytes(b"onnx")
        assert (tmp_path / "model.onnx").read_bytes() == b"onnx" and fsyncs == ["file", "dir"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]

    def test_a_folder_that_cannot_be_synced_is_skipped(self, tmp_path, monkeypatch):
        def einval(fd):
            raise OSError(22, "Invalid argument")

        monkeypatch.setattr(os, "fsync", einval)
        atomic.fsync_dir(tmp_path)  # no error: the file system does not sync folders


class TestFailureMidWrite:
    def test_a_failure_while_streaming_keeps_the_old_file(self, tmp_path):
        target = tmp_path / "vectors.ids.npy"
        target.write_bytes(b"old")
        with pytest.raises(OSError, match="No space"):
            with atomic_file(target, temporary="vectors.ids.npy.tmp") as fh:
                fh.write(b"half of the new")
                raise OSError(28, "No space left on device")
        assert target.read_bytes() == b"old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors.ids.npy"]

    def test_a_failed_fsync_keeps_the_old_file(self, tmp_path, monkeypatch):
        target = tmp_path / "manifest.json"
        target.write_bytes(b"old")

        def eio(fd):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", eio)
        with pytest.raises(OSError, match="Input/output"):
            write_bytes_atomic(target, b"new")
        monkeypatch.undo()
        assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]

    def test_a_named_temporary_left_by_a_crash_is_overwritten(self, tmp_path):
        (tmp_path / "manifest.json.tmp").write_bytes(b"half a file from a crash")
        write_bytes_atomic(tmp_path / "manifest.json", b"{}", temporary="manifest.json.tmp")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]

    def test_the_index_writes_through_it(self, tmp_path, fsyncs):
        from contextkit.index._disk import atomic_write

        atomic_write(tmp_path / "manifest.json", b"{}")
        assert (tmp_path / "manifest.json").read_bytes() == b"{}" and fsyncs == ["file", "dir"]
