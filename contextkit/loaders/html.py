"""HTML: the visible text, with block tags turned into line and paragraph breaks.

``html.parser`` needs the whole file decoded in memory (and its output is a few
times larger), so files above the parse limit are reported rather than read.
"""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser
from typing import Any, ClassVar

from contextkit.core.records import Document
from contextkit.loaders._common import (
    _HTML_SUFFIXES,
    LoadLimits,
    LoadResult,
    SourceFile,
    _decode,
    _Failed,
    _short,
    read_source,
)
from contextkit.loaders.base import Loader

#: Block tags and the break they make: 1 = line break, 2 = blank line (paragraph).
_BLOCK_TAGS = {
    **dict.fromkeys(["br", "li", "tr", "dt", "dd"], 1),
    **dict.fromkeys("p div h1 h2 h3 h4 h5 h6 pre table ul ol dl blockquote hr section article "
                    "header footer main nav aside figure form".split(), 2),
}
_SKIP_TAGS = frozenset({"script", "style", "noscript", "template"})
_SPACES = re.compile(r"[ \t\n\r\f]+")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.-]+)""", re.IGNORECASE)


class _HtmlText(HTMLParser):
    """Collects visible text: block tags become line breaks, ``<pre>`` keeps its whitespace."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.title: list[str] = []
        self._line: list[str] = []
        self._pre: list[str] = []
        self._pending = 0
        self._skip = self._pre_depth = 0
        self._in_title = False

    def _emit(self, text: str) -> None:
        if self.out:
            self.out.append("\n\n" if self._pending >= 2 else "\n")
        self.out.append(text)
        self._pending = 0

    def _break(self, level: int) -> None:
        line = _SPACES.sub(" ", "".join(self._line)).strip()
        self._line.clear()
        if line:
            self._emit(line)
        self._pending = max(self._pending, level)

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif self._pre_depth:
            self._pre_depth += tag == "pre"
            if tag == "br":
                self._pre.append("\n")
        elif tag == "pre":
            self._break(2)
            self._pre_depth = 1
        elif tag in _BLOCK_TAGS:
            self._break(_BLOCK_TAGS[tag])
        elif tag in ("td", "th"):
            self._line.append(" ")  # adjacent cells must not run together

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif self._pre_depth:
            self._pre_depth -= tag == "pre"
            if not self._pre_depth:
                self._end_pre()
        elif tag in _BLOCK_TAGS and tag != "br":
            self._break(_BLOCK_TAGS[tag])

    def _end_pre(self) -> None:
        text = "".join(self._pre)
        self._pre.clear()
        text = text.removeprefix("\n")  # HTML drops a newline right after <pre>
        if text.strip():
            self._emit(text.rstrip("\n"))
        self._pending = 2

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title.append(data)
        else:
            (self._pre if self._pre_depth else self._line).append(data)

    def text(self) -> str:
        if self._pre_depth:  # unclosed <pre>
            self._end_pre()
        self._break(0)
        return "".join(self.out)


def _html_charset(data: bytes) -> str:
    """The ``<meta charset>`` declared near the start if Python knows it as a text codec, else UTF-8."""
    declared = _META_CHARSET.search(data[:4096])
    if declared:
        try:
            info = codecs.lookup(declared.group(1).decode("ascii"))
        except LookupError:
            return "utf-8"
        if getattr(info, "_is_text_encoding", True):  # bytes.decode refuses base64, rot13...
            return info.name
    return "utf-8"


def load_html(source: SourceFile, data: bytes) -> list[Document]:
    parser = _HtmlText()
    try:
        parser.feed(_decode(data, _html_charset(data)))
        parser.close()
    except (AssertionError, ValueError, IndexError) as exc:
        raise _Failed(f"malformed HTML: {_short(exc)}") from None
    meta: dict[str, Any] = {"format": "html"}
    title = _SPACES.sub(" ", "".join(parser.title)).strip()
    if title:
        meta["title"] = title
    return [Document(source.doc_id, parser.text(), source.shown_path, meta)]


class HtmlLoader(Loader):
    """HTML's visible text; files above ``limits.max_parse_bytes`` are reported, not parsed."""

    suffixes: ClassVar[frozenset[str]] = _HTML_SUFFIXES

    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        return LoadResult(load_html(source, read_source(source, limits.max_parse_bytes, "HTML")), [])
