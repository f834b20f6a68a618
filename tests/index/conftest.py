"""Helpers of the index tests: where a generation's files are (each save writes files named by its generation)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest


def derived_path(folder: Path, role: str) -> Path:
    """The file playing ``role`` (``vectors.faiss``, ``bm25``, ``bm25/vocab.index.json``...) in the
    generation ``manifest.json`` names now, e.g. ``vectors.12.faiss``."""
    files = json.loads((Path(folder) / "manifest.json").read_text()).get("files", {})
    if role.startswith("bm25/"):
        return Path(folder) / files.get("bm25", "bm25") / role[5:]
    return Path(folder) / files.get(role, role)


@pytest.fixture
def derived() -> Callable[[Path, str], Path]:
    return derived_path
