"""Readers beside a writer: every result comes from one committed generation (issue 16).

Runs bench/bench_concurrency.py in a subprocess, CI-sized: a writer flips 6 of 20 files between
two versions and re-ingests 50 times (one save each) while two long-lived readers (one ``Index``
kept open), two per-call readers and one CLI reader (``search --json``, ``assemble``) query dense,
BM25 and hybrid. The writer records each generation's answers; every reader result must equal
the answer of the generation it ran on, and none may fail or be empty.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class TestReadersBesideAWriter:
    def test_every_result_is_one_committed_generations_answer(self, tmp_path):
        out = tmp_path / "report.json"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run([sys.executable, str(REPO / "bench" / "bench_concurrency.py"), "--saves", "50",
                               "--no-baseline", "--json", str(out), "--workdir", str(tmp_path / "work")],
                              capture_output=True, text=True, env=env, timeout=600)
        assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
        run = json.loads(out.read_text())["with_writer"]
        assert run["problems"] == [], run["problems"][:10]
        assert run["saves"] == 50 and run["generations"] >= 50
        readers = run["readers"]
        assert set(readers) == {"long-lived-1", "long-lived-2", "per-call-1", "per-call-2", "cli"}
        assert all(r["queries"] >= 6 and r["errors"] == r["empty"] == r["wrong"] == 0 for r in readers.values())
        # the long-lived readers moved along with the writer, without being reopened
        assert readers["long-lived-1"]["generations_seen"] >= 5 and readers["long-lived-2"]["generations_seen"] >= 5
        assert proc.returncode == 0, proc.stdout[-2000:]
