"""JSONL records of bounded size (issue 20): a line over the limit is reported with the file and the
line and skipped, without being read into memory whole; the other records are kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contextkit.errors import ContextkitError
from contextkit.loaders import LoadLimits, SourceFile, iter_jsonl, load_file
from contextkit.loaders.jsonl import MAX_RECORD_BYTES, JsonlLoader

MiB = 1 << 20


def record(rid: str, text: str) -> str:
    return json.dumps({"_id": rid, "text": text})


def source(path: Path) -> SourceFile:
    return SourceFile(path.resolve(), path.name)


class TestRecordSizeLimit:
    def test_a_record_over_the_limit_is_an_error_and_the_others_are_kept(self, tmp_path):
        path = tmp_path / "big.jsonl"
        path.write_text("\n".join([record("a", "A"), record("huge", "x" * 5000), record("b", "B")]) + "\n")
        result = JsonlLoader(max_record_bytes=1000).load(source(path), LoadLimits())
        assert [d.id for d in result.documents] == ["big.jsonl#a", "big.jsonl#b"]
        assert len(result.errors) == 1
        error = result.errors[0]
        assert error.path == "big.jsonl" and error.reason.startswith("line 2: record too large (")
        assert "limit for one JSONL record" in error.reason

    def test_the_streamed_reader_applies_the_same_limit(self, tmp_path):
        path = tmp_path / "s.jsonl"
        path.write_text("\n".join([record("a", "A"), record("huge", "y" * 3000), record("b", "B")]))  # no final \n
        items = list(iter_jsonl(source(path), max_record_bytes=1000))
        assert [getattr(i, "id", None) for i in items] == ["s.jsonl#a", None, "s.jsonl#b"]
        assert items[1].reason.startswith("line 2: record too large")

    def test_the_default_limit_and_a_bad_one(self):
        assert JsonlLoader().max_record_bytes == MAX_RECORD_BYTES == 16 * MiB
        with pytest.raises(ContextkitError, match="max_record_bytes"):
            JsonlLoader(max_record_bytes=0)

    def test_lines_at_the_limit_still_load(self, tmp_path):
        line = record("a", "z" * 100)
        path = tmp_path / "edge.jsonl"
        path.write_text(line + "\n" + line.replace('"a"', '"b"'))
        result = JsonlLoader(max_record_bytes=len(line) + 1).load(source(path), LoadLimits())
        assert result.errors == [] and len(result.documents) == 2

    def test_bad_utf8_is_still_a_whole_file_failure_with_its_offset(self, tmp_path):
        path = tmp_path / "bad.jsonl"
        head = record("a", "A").encode() + b"\n" + b'{"_id": "b", "text": "'
        path.write_bytes(head + b'\xff"}\n')
        result = load_file(source(path))
        assert result.documents == [] and len(result.errors) == 1
        assert result.errors[0].reason == f"not UTF-8 text: invalid byte 0xff at offset {len(head)}"

    def test_a_huge_line_is_not_held_in_memory(self, tmp_path):
        # 100 MB in one line: reading it whole (then decoding, splitting, parsing) cost 2.76 GB before
        path = tmp_path / "one_line.jsonl"
        with open(path, "wb") as fh:
            fh.write(record("a", "A").encode() + b"\n" + b'{"_id": "big", "text": "')
            chunk = b"x" * MiB
            fh.writelines(chunk for _ in range(100))
            fh.write(b'"}\n' + record("b", "B").encode() + b"\n")
        # measured in a fresh process by tracemalloc (ru_maxrss would carry the test process's own peak)
        code = ("import tracemalloc; from pathlib import Path; from contextkit.loaders import load_file, SourceFile; "
                f"tracemalloc.start(); r = load_file(SourceFile(Path({str(path)!r}), 'one_line.jsonl')); "
                "print(len(r.documents), len(r.errors), tracemalloc.get_traced_memory()[1])")
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
        docs, errors, peak = int(out[0]), int(out[1]), int(out[2])
        assert (docs, errors) == (2, 1)
        assert peak < 3 * MAX_RECORD_BYTES, f"peak {peak / MiB:.0f} MiB for a 100 MiB line"
