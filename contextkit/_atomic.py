"""Atomic text writes: a temporary file beside the target, then a rename.

A reader (or a crash) never sees half a file. The temporary file is opened with
mode 0o666 so the kernel applies the user's umask: the result has the permissions
any ordinary write would give it (``tempfile.mkstemp`` would leave it 0o600).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | Path, text: str, newline: str | None = None) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically; returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
