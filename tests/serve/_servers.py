"""Servers started as a user starts them: `contextkit serve` in another process, on a free local port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
