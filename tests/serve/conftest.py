"""A small real index (three of our own docs pages) and servers started as a user starts them: `contextkit serve`
in another process, on a free local port, stopped at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_command(index: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "contextkit", "serve", "--index", str(index), *args]


def server_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}
    env.pop("CONTEXTKIT_SERVE_TOKEN", None)
    env.update(extra)
    return env


@contextmanager
def running_server(index: Path, *args: str, env: dict[str, str] | None = None,
                   log: Path | None = None) -> Iterator[str]:
    """``contextkit serve`` over HTTP in another process; yields its base URL once /v1/health answers."""
    import httpx

    port = free_port()
    errors = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(serve_command(index, "--port", str(port), *args), env=env or server_env(),
                            stdout=subprocess.DEVNULL, stderr=errors)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the server exited with {proc.returncode}"
                                     + (f": {log.read_text()[-2000:]}" if log else ""))
            try:
                if httpx.get(base + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the server did not answer within 180 s")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            errors.close()  # type: ignore[union-attr]


@pytest.fixture(scope="session")
def http_server(serve_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """One server for the suite's calls: no token, no rate limit (the guard's own tests start their own);
    yields its URL, its audit log and its stderr."""
    folder = tmp_path_factory.mktemp("serve-logs")
    audit, log = folder / "audit.jsonl", folder / "stderr.txt"
    with running_server(serve_index, "--audit-log", str(audit), "--rate-limit", "0", log=log) as base:
        yield base, audit, log
