"""The contract of an attack script (issue 33): each ``tools/attacks/<category>.py`` is a module of
``attack_<name>(work: Path) -> None`` functions that act as an attacker or a careless user would
(real processes, real files, real limits) and raise ``Fails`` (or ``AssertionError``) when contextkit
does not hold. An attack that hangs past its time limit, or kills its process, fails too.

Helpers below are what several categories share: running the CLI in another process, building a
small index with the real model, and a memory cap for a child process."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}


class Fails(AssertionError):
    """contextkit did not hold; the message says what an attacker got."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise Fails(message)


def cli(args: Sequence[str], *, cwd: Path | None = None, timeout: float = 300, input: str | None = None,
        memory_mib: int | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``contextkit ARGS`` in another process (``python -m contextkit``), optionally under an address
    space cap of ``memory_mib`` (``RLIMIT_AS``, as ``ulimit -v``)."""
    return run([sys.executable, "-m", "contextkit", *args], cwd=cwd, timeout=timeout, input=input,
               memory_mib=memory_mib, env=env)


def python(code: str, *, cwd: Path | None = None, timeout: float = 300, memory_mib: int | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A Python snippet in another process, optionally under a memory cap."""
    return run([sys.executable, "-c", code], cwd=cwd, timeout=timeout, memory_mib=memory_mib, env=env)


def run(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 300, input: str | None = None,
        memory_mib: int | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    limit = None
    if memory_mib is not None:
        cap = memory_mib * 1024 * 1024

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run(list(argv), cwd=cwd, timeout=timeout, input=input, capture_output=True, text=True,
                          env={**ENV, **(env or {})}, preexec_fn=limit, errors="replace")


def no_traceback(result: subprocess.CompletedProcess[str], what: str) -> None:
    check("Traceback (most recent call last)" not in result.stderr + result.stdout,
          f"{what}: a traceback reached the user:\n{result.stderr[-1500:]}")


def build_index(folder: Path, index: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``contextkit ingest FOLDER --index INDEX`` with the real model; fails the attack if it fails."""
    result = cli(["ingest", str(folder), "--index", str(index), "--quiet", *extra])
    check(result.returncode == 0, f"setup ingest failed ({result.returncode}): {result.stderr[-800:]}")
    return result


def small_corpus(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    topics = ["The Eiffel Tower is 330 metres tall and stands in Paris.",
              "Photosynthesis turns light, water and CO2 into glucose in chloroplasts.",
              "The Python GIL lets one thread run bytecode at a time in CPython.",
              "Mount Everest is 8,849 m high on the Nepal-China border.",
              "The Rhine flows 1,230 km from the Alps to the North Sea."]
    for i in range(n):
        (folder / f"doc{i}.txt").write_text(f"{topics[i % len(topics)]} More words about item {i}.\n" * 5)
    return folder
