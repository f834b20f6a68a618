"""Several writer processes and reader processes on one database index, and writers killed with ``kill -9``.

Run as a user would: ``bench/bench_pg_writers.py`` in its own process, small (8 PEPs, 3 writers on
overlapping halves, 2 readers, 2 kills), against the session's real PostgreSQL. The bench checks every
reader answer against a ground truth for the state the reader saw and the final index against a clean
single-writer ingest; this test holds it to 0 errors, 0 mismatches, nothing lost or doubled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_writers_and_readers_and_kills(pg_server: str, peps: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    run = subprocess.run([sys.executable, str(REPO / "bench" / "bench_pg_writers.py"), "--dsn", pg_server,
                          "--peps", "8", "--writers", "3", "--readers", "2", "--kills", "2", "--reader-pause", "0.01", "--warm-cache", "0.5",
                          "--json", str(out)], capture_output=True, text=True, timeout=1200,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    figures = json.loads(out.read_text())
    writers, kills = figures["writers"], figures["kills"]
    assert writers["records"] > 50 and writers["states_seen"] >= 2
    assert writers["errors"] == 0 and writers["mismatches"] == 0, writers
    assert writers["writer_failures"] == [] and writers["final_differs"] == [] and writers["duplicate_ids"] == 0
    assert writers["chunks"] == figures["chunks"]
    assert kills["all_equal"], kills
