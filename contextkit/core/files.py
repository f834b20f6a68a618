"""What kind of file a ``st_mode`` names, in words: one table for every message that refuses a non-file.

The loaders (a document that is a FIFO or a device is reported, not read) and the index (a file of
an index folder that is not a regular file is refused) both name the kind they met; they read it
from here so that a user sees the same words from ``ingest`` and from ``verify``.
"""

from __future__ import annotations

import stat

__all__ = ["file_kind"]

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a regular file`` for the one kind either side reads)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((words for test, words in _KINDS if test(mode)), "a special file")
