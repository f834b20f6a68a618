"""How a redacting index names files: a path with personal data masked, and a keyed digest of it.

An index built with ``redact=True`` must not keep personal data anywhere in its store, and a
file's name may hold some (``notes/carol@example.net.txt``). Yet a re-run has to find each
file again (unchanged, changed, gone), and it finds files by the id their path gives them. So
the id of such a file is its path with each personal value replaced by its kind, then ``~`` and
a BLAKE2b digest of the real path (80 bits, base32: letters, so no detector takes it for a phone
number), keyed with a random salt the store keeps (``meta.file_key_salt``):
``notes/<EMAIL>~n5qgzv3ak2m7xw4e``. The same path gives the same
id in every run, two paths never share one, and the real path is kept nowhere. Documents and
chunks take their ids from it, and the run's report names the file by it.

What it does not do: someone holding the store (salt included) can confirm a guessed path by
computing its digest; they cannot read one back. A path without personal data keeps its id.
An index written before these ids held real paths in ``files.path`` and ``documents.file``;
the first run that needs the salt renames those rows (:func:`file_keys`).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Callable
from typing import Any

from contextkit.compressors.base import Redactor
from contextkit.compressors.redact import PIIRedactor
from contextkit.index import Index

__all__ = ["file_keys"]

_SALT_KEY = "file_key_salt"


def file_keys(index: Index, redactor: Redactor | None) -> Callable[[str], str]:
    """The function from a file's id (its path as discovered) to the id the store keeps.

    Identity unless ``index`` redacts. Creates the salt on first use (a writer only) and
    renames the rows of files an older run recorded under their real paths."""
    if not index.manifest.redact or not isinstance(redactor, PIIRedactor):  # the keyed ids need its detect()
        return lambda doc_id: doc_id
    recorded = index.store.get_meta(_SALT_KEY)
    fresh = recorded is None
    salt_hex = secrets.token_hex(16) if recorded is None else recorded
    salt = bytes.fromhex(salt_hex)
    cache: dict[str, str] = {}

    def key(doc_id: str) -> str:
        if doc_id not in cache:
            cache[doc_id] = _masked_id(doc_id, redactor, salt)
        return cache[doc_id]

    if fresh:
        with index.transaction():
            index.store.set_meta(_SALT_KEY, salt_hex)
            _rename_recorded(index, key)
    return key


def _masked_id(doc_id: str, redactor: PIIRedactor, salt: bytes) -> str:
    """``doc_id`` with each personal value replaced by ``<KIND>`` and the keyed digest appended; as it is
    when it holds none. A JSONL record's part (after ``#``) is masked later with the document id."""
    spans = sorted(redactor.detect(doc_id))
    if not spans:
        return doc_id
    out, at = [], 0
    for start, end, kind, _ in spans:
        if start < at:
            continue
        out += [doc_id[at:start], f"<{kind}>"]
        at = end
    out.append(doc_id[at:])
    digest = hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), key=salt, digest_size=10,
                             person=b"ctxkit-file").digest()
    return f"{''.join(out)}~{base64.b32encode(digest).decode('ascii').lower()}"


def _rename_recorded(index: Any, key: Callable[[str], str]) -> None:
    """Rows an older run recorded under a real path with personal data in it take their masked ids."""
    for path in sorted(index.store.recorded_files()):
        new = key(path)
        if new != path:
            index.store.rename_file(path, new)
