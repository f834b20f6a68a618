"""PDF text through pypdf, parsed in a worker process with a time limit.

pypdf is pure Python and can loop (or crawl for minutes) on a crafted or broken
file, and a thread cannot be stopped. So PDFs are parsed in one persistent worker
process, reused across files so the common case costs a pipe round trip, and
killed and replaced when a file exceeds the limit: the run goes on and the file
is reported. ``timeout=None`` parses in this process (no limit).

The worker is sent the file's bytes, never its path: this process opens the file the one checked
way (:func:`~contextkit.loaders._common.open_source`: no link swapped in since discovery is
followed, only the regular file discovery found is read), and a path opened again in another
process would undo that.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from contextkit.core.records import Document
from contextkit.loaders._common import (
    LoadLimits,
    LoadResult,
    SourceFile,
    _Failed,
    _short,
    read_source,
)
from contextkit.loaders.base import Loader

#: Test hook: seconds the worker sleeps before parsing (a stand-in for a parser that hangs).
_worker_delay = 0.0


def _parse(data: bytes) -> tuple[list[str], str | None]:
    """Pages' text and the title; every failure as :class:`_Failed` with the report's reason."""
    import pypdf  # lazy: keeps `import contextkit.loaders` fast

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise _Failed("encrypted PDF")
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        title = info.title if info is not None else None
    except _Failed:
        raise
    except RecursionError:
        raise _Failed("corrupt PDF: objects nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - pypdf raises many unrelated types on bad input
        if isinstance(exc, pypdf.errors.FileNotDecryptedError | pypdf.errors.DependencyError):
            raise _Failed(f"encrypted PDF ({_short(exc)})") from None
        raise _Failed(f"corrupt PDF: {_short(exc)}") from None
    return [str(p) for p in pages], str(title) if isinstance(title, str) else None  # plain str: no pypdf types cross the pipe


def _serve() -> None:
    """The worker's loop (``python -m contextkit.loaders.pdf``): a request is one JSON line on stdin,
    ``{"size": n, "delay": s}``, followed by the file's ``n`` bytes; the reply one line on stdout,
    ``{"ok": [pages, title]}`` or ``{"error": reason}``.

    JSON lines and raw bytes over pipes, not multiprocessing: no pickle, and nothing depends on how
    the parent's ``__main__`` was started (a script, stdin, a notebook).
    """
    out, stdin = sys.stdout, sys.stdin.buffer
    sys.stdout = sys.stderr  # a stray print from a library must not break the protocol
    while line := stdin.readline():
        request = json.loads(line)
        data = stdin.read(request["size"])
        if len(data) < request["size"]:
            return  # the parent went away mid-request
        if request.get("delay"):
            time.sleep(request["delay"])
        try:
            reply: dict[str, Any] = {"ok": _parse(data)}
        except _Failed as exc:
            reply = {"error": str(exc)}
        except MemoryError:
            reply = {"error": "PDF too large to parse (out of memory)"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


class PdfWorker:
    """One parser process, started on first use and replaced after a timeout or a crash."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def parse(self, data: bytes, timeout: float) -> tuple[list[str], str | None]:
        """Pages and title of the PDF ``data`` (the bytes, not a path: see the module docstring)."""
        with self._lock:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"size": len(data), "delay": _worker_delay}).encode() + b"\n")
                proc.stdin.write(data)
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], timeout)
                line = proc.stdout.readline() if ready else None
            except OSError:
                line = b""
            if line is None:
                self.close()
                raise _Failed(f"PDF parsing exceeded {timeout:g} s time limit")
            if not line:
                code = proc.poll()
                self.close()
                raise _Failed(f"PDF parser crashed (worker exit code {code})")
        reply = json.loads(line)
        if "ok" in reply:
            pages, title = reply["ok"]
            return pages, title
        raise _Failed(reply["error"])

    def _start(self) -> subprocess.Popen[bytes]:
        self.close()
        root = str(Path(__file__).resolve().parents[2])  # where this contextkit is, installed or not
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "contextkit.loaders.pdf"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env)
        return self._proc

    def close(self) -> None:
        """Stop the worker (killed: it may be stuck in a loop)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


_worker = PdfWorker()
atexit.register(_worker.close)


def load_pdf(source: SourceFile, timeout: float | None, max_bytes: int | None = None) -> list[Document]:
    data = read_source(source, max_bytes, "PDF")
    pages, title = _parse(data) if timeout is None else _worker.parse(data, timeout)
    if not any(page.strip() for page in pages):
        raise _Failed("PDF has no extractable text (scanned?)")
    starts, offset = [], 0
    for page in pages:  # where each page starts in the joined text: chunks are cited by page
        starts.append(offset)
        offset += len(page) + 2
    meta: dict[str, Any] = {"format": "pdf", "pages": len(pages), "page_starts": starts}
    if title and title.strip():
        meta["title"] = title.strip()
    return [Document(source.doc_id, "\n\n".join(pages), source.shown_path, meta)]


class PdfLoader(Loader):
    """PDF text, parsed in the worker process within ``limits.pdf_timeout`` (see :class:`PdfWorker`)."""

    suffixes: ClassVar[frozenset[str]] = frozenset({".pdf"})

    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        return LoadResult(load_pdf(source, limits.pdf_timeout, limits.max_parse_bytes), [])


if __name__ == "__main__":
    _serve()
