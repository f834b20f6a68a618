"""Plain text, Markdown, reStructuredText and source code: whole, or streamed block by block.

The text is kept exactly as in the file (no newline normalisation, only a UTF-8
BOM dropped) because chunk offsets index it. A file too large to hold in memory
is read as a :class:`TextStream`: blocks of bytes through an incremental UTF-8
decoder, so memory is bounded by the block size while errors still name the byte
offset in the file.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, ClassVar

from contextkit.core.records import Document
from contextkit.loaders._common import (
    _BINARY_SNIFF,
    _CODE_LANGUAGES,
    _PROSE_FORMATS,
    _UTF8_BOM,
    LoadFailure,
    LoadIssue,
    LoadLimits,
    LoadResult,
    MiB,
    SourceFile,
    _bad_byte,
    _check_holes,
    _check_nul_run,
    _decode,
    _Failed,
    _os_reason,
    _sniff_binary,
    open_source,
    read_source,
)
from contextkit.loaders.base import Loader, loader_for


def text_metadata(suffix: str) -> dict[str, Any]:
    """Document metadata for a text file of this (lower-case) suffix."""
    if suffix in _CODE_LANGUAGES:
        return {"format": "code", "language": _CODE_LANGUAGES[suffix]}
    return {"format": _PROSE_FORMATS.get(suffix, "text")}


_ATX = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$")
_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1{2,}[ \t]*$")
_FIELD_TITLE = re.compile(r"^Title:[ \t]*(.+?)[ \t]*$")
_TITLE_LINES = 200  # a title comes early; the search is bounded whatever the file
_TITLE_CHARS = 1 << 16  # ...in lines and in characters, so a streamed file finds it in its first block


def first_heading(text: str, fmt: str) -> str:
    """The title of a Markdown or reStructuredText text: a ``Title:`` field (PEPs), the first ATX
    heading (``# Title``, Markdown) or the first underlined line (``Title`` over ``=====``); "" if none.

    Why: ``--header '{title}'`` would otherwise be empty for every .md/.rst file (only HTML,
    PDF and JSONL carry a title of their own)."""
    lines = text.splitlines()[:_TITLE_LINES]
    for i, line in enumerate(lines):
        stripped = line.strip()
        if fmt == "rst" and (m := _FIELD_TITLE.match(stripped)):
            return m.group(1)
        if fmt == "markdown" and (m := _ATX.match(line)):
            return m.group(1).strip()
        if stripped and i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1].strip()) \
                and not _UNDERLINE.match(stripped) and len(lines[i + 1].strip()) >= min(len(stripped), 3):
            return stripped
    return ""


def load_text(source: SourceFile, data: bytes, suffix: str) -> list[Document]:
    text = _decode(data)
    metadata = text_metadata(suffix)
    metadata["title"] = _title(text, metadata["format"], source)
    return [Document(source.doc_id, text, source.shown_path, metadata)]


def _title(text: str, fmt: str, source: SourceFile) -> str:
    """The document's title from the first :data:`_TITLE_CHARS` characters, else the file name."""
    title = first_heading(text[:_TITLE_CHARS], fmt) if fmt in ("markdown", "rst") else ""
    return title or PurePosixPath(source.doc_id).name


def _head_text(source: SourceFile) -> str:
    """The first :data:`_TITLE_CHARS` characters of a UTF-8 file, as a whole load decodes them
    (a BOM dropped; an undecodable head, or a file that cannot be opened, gives "": the file fails
    later, when it is read)."""
    try:
        fh = open_source(source)
    except (OSError, _Failed):
        return ""
    with fh:
        data = fh.read(4 * _TITLE_CHARS)
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM):]
    try:
        return codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=False)[:_TITLE_CHARS]
    except UnicodeDecodeError:
        return ""


class TextLoader(Loader):
    """Prose (text, Markdown, reStructuredText) and source code, whole; also what reads a file
    named explicitly whose suffix no loader claims."""

    suffixes: ClassVar[frozenset[str]] = frozenset({*_PROSE_FORMATS, *_CODE_LANGUAGES})

    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        return LoadResult(load_text(source, read_source(source), source.path.suffix.lower()), [])


@dataclass
class TextStream:
    """A text file read in blocks of ``block_bytes``; iterate :meth:`blocks` for its decoded text.

    Each call to :meth:`blocks` reads the file again from the start, so the ingest
    pipeline can :meth:`check` a file completely before it writes any of its chunks.
    Failures (binary, invalid UTF-8 with its byte offset, I/O) raise
    :class:`LoadFailure`. ``n_chars`` is the length of the text after a full pass.
    """

    source: SourceFile
    block_bytes: int = 4 * MiB
    metadata: dict[str, Any] = field(default_factory=dict)
    n_chars: int = -1

    def __post_init__(self) -> None:
        if not self.metadata:
            self.metadata = text_metadata(self.source.path.suffix.lower())
            head = _head_text(self.source)  # "" if unreadable: reported when the blocks are read
            self.metadata["title"] = _title(head, self.metadata["format"], self.source)

    @property
    def doc_id(self) -> str:
        return self.source.doc_id

    def document(self) -> Document:
        """The document without its text (id, source, metadata): what a chunk header may use."""
        return Document(self.source.doc_id, "", self.source.shown_path, dict(self.metadata))

    def blocks(self) -> Iterator[str]:
        try:
            yield from self._blocks()
        except _Failed as exc:
            raise LoadFailure(LoadIssue(self.doc_id, str(exc))) from None
        except OSError as exc:
            raise LoadFailure(LoadIssue(self.doc_id, _os_reason(exc))) from None

    def _blocks(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        fed = chars = 0
        with open_source(self.source) as fh:
            _check_holes(fh)
            data = fh.read(max(self.block_bytes, _BINARY_SNIFF))  # the sniff sees what a whole load sees
            _sniff_binary(data)
            if data.startswith(_UTF8_BOM):
                data, fed = data[len(_UTF8_BOM):], len(_UTF8_BOM)
            while True:
                _check_nul_run(data, fed)  # fed: the bytes of the file before data
                final = not data
                pending = decoder.getstate()[0]
                try:
                    text = decoder.decode(data, final=final)
                except UnicodeDecodeError as exc:
                    # exc.object is the bytes held back from the last block followed by this one
                    raise _bad_byte("utf-8", exc.object[exc.start], fed - len(pending) + exc.start) from None
                fed += len(data)
                if text:
                    chars += len(text)
                    yield text
                if final:
                    break
                data = fh.read(self.block_bytes)
        self.n_chars = chars

    def check(self) -> LoadIssue | None:
        """Read the whole file once, keeping nothing: the error it would fail with, if any."""
        try:
            for _ in self.blocks():
                pass
        except LoadFailure as exc:
            return exc.error
        return None


def open_text_stream(source: SourceFile, block_bytes: int = 4 * MiB) -> TextStream | None:
    """A :class:`TextStream` over ``source``, or None when its format is not plain text
    (HTML, PDF, JSONL and any registered format have loaders of their own)."""
    loader = loader_for(source.path.suffix)
    if loader is not None and not isinstance(loader, TextLoader):
        return None
    return TextStream(source, block_bytes)
