"""JSONL in the BEIR corpus shape: one ``{"_id", "title", "text", "metadata"}`` object a line.

A bad line is reported with its number and the other lines are kept: a corpus of
millions of records should not be lost to one truncated line.

The file is read a line at a time, each line in bounded pieces: a record longer than
``max_record_bytes`` (default :data:`MAX_RECORD_BYTES`, 16 MiB) is reported as an error
naming the file and the line, and skipped without being held in memory, so one huge line
(a 1 GB dump, a file that is not JSONL at all) cannot exhaust memory; the records around it
are kept. Memory is then one record and what ``json.loads`` makes of it. A file with a
UTF-16 or UTF-32 byte-order mark is the exception: it is decoded whole, as before.

A record is untrusted text, and so are its fields: it cannot say where it came from. A document's
``source`` (what the prompt's ``<document source=...>`` shows) is contextkit's: the file and the line,
``data.jsonl:12``. A record's own ``metadata`` is kept, but a key contextkit writes or reads as its
own (``source``, ``path``, ``id``, ``score``, ``title``, ``format``, ...: :data:`OWN_KEYS`) is stored
as ``claimed_<key>`` (``claimed_source``), and so is a key that already starts with ``claimed_``, so
no two keys meet. Fields other than ``_id``/``id``, ``title``, ``text`` and ``metadata`` are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Document
from contextkit.loaders._common import (
    _UTF8_BOM,
    LoadFailure,
    LoadIssue,
    LoadLimits,
    LoadResult,
    MiB,
    SourceFile,
    _bad_byte,
    _bom_encoding,
    _decode,
    _Failed,
    _os_reason,
    _short,
    _sniff_binary,
    open_source,
)
from contextkit.loaders.base import Loader


def _jsonl_record(obj: Any) -> tuple[str, str, str, dict[str, Any]]:
    """Validate one BEIR-style object; returns (id, title, text, extra metadata)."""
    if not isinstance(obj, dict):
        raise _Failed("not a JSON object")
    rid = obj.get("_id", obj.get("id"))
    if isinstance(rid, bool) or not isinstance(rid, str | int) or rid == "":
        raise _Failed("missing '_id' field" if rid is None else "'_id' is not a string or integer")
    if "text" not in obj:
        raise _Failed("missing 'text' field")
    text, title = obj["text"], obj.get("title") or ""
    if not isinstance(text, str) or not isinstance(title, str):
        raise _Failed("'text' and 'title' must be strings")
    for name, value in (("_id", str(rid)), ("title", title), ("text", text)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # JSON's "\ud800" escape: valid JSON, not text
            raise _Failed(f"'{name}' holds an unpaired surrogate (U+{ord(value[exc.start]):04X}) "
                          f"at character {exc.start}") from None
    extra = obj.get("metadata")  # parsed from JSON, so a dict here is JSON-serialisable
    return str(rid), title, text, dict(extra) if isinstance(extra, dict) else {}


#: Metadata keys contextkit writes or reads as its own: a record's are stored as ``claimed_<key>``.
OWN_KEYS = frozenset({"source", "path", "id", "doc_id", "score", "title", "format", "truncated", "page", "pages",
                      "line", "language", "merged_ids"})
CLAIMED = "claimed_"


def _claimed(extra: dict[str, Any]) -> dict[str, Any]:
    """A record's metadata with contextkit's own keys (and ``claimed_...`` ones) renamed ``claimed_<key>``:
    the record keeps what it said, and nothing it said reads as what contextkit says (one-to-one)."""
    return {(CLAIMED + key if key in OWN_KEYS or key.startswith(CLAIMED) else key): value
            for key, value in extra.items()}


def _records(source: SourceFile, lines: Iterable[tuple[int, str | Any]],
             limit: int = 0) -> Iterator[Document | LoadIssue]:
    """Documents and per-line errors, in line order; shared by the whole and the streamed reader."""
    first_line: dict[str, int] = {}
    for number, line in lines:
        if not isinstance(line, str):  # a _TooLong
            yield LoadIssue(source.doc_id, f"line {number}: record too large ({line.size / MiB:.1f} MiB > "
                                           f"{limit / MiB:.1f} MiB limit for one JSONL record); skipped")
            continue
        if not line.strip():
            continue
        try:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _Failed(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
            except (ValueError, RecursionError) as exc:  # e.g. huge integers, deep nesting
                raise _Failed(f"invalid JSON ({_short(exc)})") from None
            rid, title, text, extra = _jsonl_record(obj)
            if rid in first_line:
                raise _Failed(f"duplicate _id {rid!r} (first on line {first_line[rid]})")
        except _Failed as exc:
            yield LoadIssue(source.doc_id, f"line {number}: {exc}")
            continue
        first_line[rid] = number
        meta = {**_claimed(extra), "format": "jsonl", "title": title, "source": f"{source.doc_id}:{number}"}
        body = f"{title}\n\n{text}" if title else text
        yield Document(f"{source.doc_id}#{rid}", body, source.shown_path, meta)


def load_jsonl(source: SourceFile, data: bytes) -> LoadResult:
    docs: list[Document] = []
    errors: list[LoadIssue] = []
    for item in _records(source, enumerate(_decode(data).split("\n"), start=1)):
        if isinstance(item, LoadIssue):
            errors.append(item)
        else:
            docs.append(item)
    return LoadResult(docs, errors)


#: The longest record (one line, in bytes) a JSONL file may hold; longer ones are reported and skipped.
MAX_RECORD_BYTES = 16 * MiB
_PIECE = 1 * MiB  # how much of a line is read at once


class _TooLong:
    """A line over the limit, skipped: its length in bytes (at least), for the message."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


def _raw_lines(fh: Any, limit: int) -> Iterator[tuple[int, int, bytes | _TooLong]]:
    """(line number, byte offset, bytes without the newline) for each line; a line longer than ``limit``
    bytes comes as :class:`_TooLong`, read past in pieces of :data:`_PIECE` and never held whole."""
    number, offset = 0, 0
    while True:
        raw = fh.readline(limit + 1)
        if not raw:
            return
        number += 1
        start = offset
        offset += len(raw)
        if len(raw) > limit and not raw.endswith(b"\n"):
            size = len(raw)
            while True:
                piece = fh.readline(_PIECE)
                offset += len(piece)
                size += len(piece)
                if not piece or piece.endswith(b"\n"):
                    break
            yield number, start, _TooLong(size - (1 if piece.endswith(b"\n") else 0))
            continue
        yield number, start, raw.removesuffix(b"\n")


def _text_lines(fh: Any, limit: int) -> Iterator[tuple[int, str | _TooLong]]:
    """Decoded lines (UTF-8, strictly; a BOM at the start dropped, a binary file refused)."""
    for number, offset, raw in _raw_lines(fh, limit):
        if isinstance(raw, _TooLong):
            yield number, raw
            continue
        if number == 1:
            _sniff_binary(raw)
            if raw.startswith(_UTF8_BOM):
                raw, offset = raw[len(_UTF8_BOM):], offset + len(_UTF8_BOM)
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad_byte("utf-8", raw[exc.start], offset + exc.start) from None


class JsonlLoader(Loader):
    """BEIR-style JSONL, one document a record; a bad line is an error and the others are kept.

    ``max_record_bytes`` bounds one line (see the module docstring); ``LoadLimits`` may carry its own
    ``max_record_bytes``, which then wins."""

    suffixes: ClassVar[frozenset[str]] = frozenset({".jsonl"})

    def __init__(self, max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        if not isinstance(max_record_bytes, int) or isinstance(max_record_bytes, bool) or max_record_bytes < 1:
            raise InvalidArgumentError(f"max_record_bytes must be a positive integer, not {max_record_bytes!r}")
        self.max_record_bytes = max_record_bytes

    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        limit = getattr(limits, "max_record_bytes", None) or self.max_record_bytes
        with open_source(source) as fh:
            if _bom_encoding(fh.read(4)) is not None:  # UTF-16/32: decoded whole, as any text file
                fh.seek(0)
                return load_jsonl(source, fh.read())
            fh.seek(0)
            docs: list[Document] = []
            errors: list[LoadIssue] = []
            for item in _records(source, _text_lines(fh, limit), limit):
                if isinstance(item, LoadIssue):
                    errors.append(item)
                else:
                    docs.append(item)
        return LoadResult(docs, errors)


def iter_jsonl(source: SourceFile, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Document | LoadIssue]:
    """The records of a large JSONL file one line at a time (memory: one line, and the ids seen
    for duplicate detection); the same documents and errors as a whole load.

    Check the file first (``TextStream(source).check()``): a whole-file failure (binary,
    invalid UTF-8) found here, after records were handed out, raises :class:`LoadFailure`.
    """

    try:
        with open_source(source) as fh:
            yield from _records(source, _text_lines(fh, max_record_bytes), max_record_bytes)
    except (_Failed, UnicodeDecodeError) as exc:
        reason = str(exc) if isinstance(exc, _Failed) else "not UTF-8 text (the file changed while it was read)"
        raise LoadFailure(LoadIssue(source.doc_id, reason)) from None
    except OSError as exc:
        raise LoadFailure(LoadIssue(source.doc_id, _os_reason(exc))) from None
