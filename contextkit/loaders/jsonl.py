"""JSONL in the BEIR corpus shape: one ``{"_id", "title", "text", "metadata"}`` object a line.

A bad line is reported with its number and the other lines are kept: a corpus of
millions of records should not be lost to one truncated line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from contextkit.loaders._common import (
    _UTF8_BOM,
    LoadError,
    LoadFailure,
    LoadLimits,
    LoadResult,
    SourceFile,
    _decode,
    _Failed,
    _os_reason,
    _short,
    _sniff_binary,
)
from contextkit.loaders.base import Loader
from contextkit.records import Document


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


def _records(source: SourceFile, lines: Iterable[tuple[int, str]]) -> Iterator[Document | LoadError]:
    """Documents and per-line errors, in line order; shared by the whole and the streamed reader."""
    first_line: dict[str, int] = {}
    for number, line in lines:
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
            yield LoadError(source.doc_id, f"line {number}: {exc}")
            continue
        first_line[rid] = number
        meta = {**extra, "format": "jsonl", "title": title}
        body = f"{title}\n\n{text}" if title else text
        yield Document(f"{source.doc_id}#{rid}", body, str(source.path), meta)


def load_jsonl(source: SourceFile, data: bytes) -> LoadResult:
    docs: list[Document] = []
    errors: list[LoadError] = []
    for item in _records(source, enumerate(_decode(data).split("\n"), start=1)):
        (errors if isinstance(item, LoadError) else docs).append(item)
    return LoadResult(docs, errors)


class JsonlLoader(Loader):
    """BEIR-style JSONL, one document a record; a bad line is an error and the others are kept."""

    suffixes: ClassVar[frozenset[str]] = frozenset({".jsonl"})

    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        return load_jsonl(source, source.path.read_bytes())


def iter_jsonl(source: SourceFile) -> Iterator[Document | LoadError]:
    """The records of a large JSONL file one line at a time (memory: one line, and the ids seen
    for duplicate detection); the same documents and errors as a whole load.

    Check the file first (``TextStream(source).check()``): a whole-file failure (binary,
    invalid UTF-8) found here, after records were handed out, raises :class:`LoadFailure`.
    """

    def lines() -> Iterator[tuple[int, str]]:
        with open(source.path, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                if number == 1:
                    _sniff_binary(raw)
                    raw = raw.removeprefix(_UTF8_BOM)
                yield number, raw.decode("utf-8").removesuffix("\n")

    try:
        yield from _records(source, lines())
    except (_Failed, UnicodeDecodeError) as exc:
        reason = str(exc) if isinstance(exc, _Failed) else "not UTF-8 text (the file changed while it was read)"
        raise LoadFailure(LoadError(source.doc_id, reason)) from None
    except OSError as exc:
        raise LoadFailure(LoadError(source.doc_id, _os_reason(exc))) from None
