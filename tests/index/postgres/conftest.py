"""The database index tests' shared corpus: one folder and one database schema ingested once for the package."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contextkit import ingest
from tests._postgres import with_schema


@pytest.fixture(scope="package")
def corpus(peps: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 short PEPs (2-6 kB), copied to a temporary folder (never into the repo)."""
    small = sorted((p for p in peps if 2000 <= p.stat().st_size <= 6000), key=lambda p: p.name)[:24]
    folder = tmp_path_factory.mktemp("peps")
    for p in small:
        shutil.copy(p, folder / p.name)
    return folder


@pytest.fixture(scope="package")
def twins(corpus: Path, embedder, pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The same corpus ingested into a folder and into a database schema (same model, same chunks)."""
    folder = str(tmp_path_factory.mktemp("idx") / "peps.ck-index")
    dsn = with_schema(pg_server, "twins")
    ingest([corpus], folder, embedder=embedder)
    report = ingest([corpus], dsn, embedder=embedder)
    assert report.chunks_added > 100 and not report.failures
    return folder, dsn
