"""A small real index (three of our own docs pages) and servers started as a user starts them: `contextkit serve`
in another process, on a free local port, stopped at the end."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve._servers import running_server

pytest.importorskip("mcp")
pytest.importorskip("uvicorn")

REPO = Path(__file__).resolve().parents[2]
PAGES = ("assembly.md", "ray.md", "redaction.md")


@pytest.fixture(scope="session")
def serve_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("serve-corpus")
    for page in PAGES:
        shutil.copy(REPO / "docs" / page, folder / page)
    return folder


@pytest.fixture(scope="session")
def serve_index(serve_corpus: Path, tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:
    from contextkit import ingest

    index = tmp_path_factory.mktemp("serve-index") / "docs.ck-index"
    report = ingest([serve_corpus], index, embedder=embedder)
    assert report.documents == len(PAGES) and not report.failures
    return index


@pytest.fixture(scope="session")
def http_server(serve_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """One server for the suite's calls: no token, no rate limit (the guard's own tests start their own);
    yields its URL, its audit log and its stderr."""
    folder = tmp_path_factory.mktemp("serve-logs")
    audit, log = folder / "audit.jsonl", folder / "stderr.txt"
    with running_server(serve_index, "--audit-log", str(audit), "--rate-limit", "0", log=log) as base:
        yield base, audit, log
