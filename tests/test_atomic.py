import os
import stat

import pytest

from contextkit._atomic import write_text_atomic


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

    def test_a_failed_write_keeps_the_old_file(self, tmp_path):
        target = tmp_path / "prompt.txt"
        target.write_text("old", encoding="utf-8")
        with pytest.raises(UnicodeEncodeError):
            write_text_atomic(target, "bad \ud800")
        assert target.read_text(encoding="utf-8") == "old"
        assert [p.name for p in tmp_path.iterdir()] == ["prompt.txt"]
