"""HTML: a page's main content as text, with block tags turned into line and paragraph breaks.

Why main content: a documentation page is mostly the site around it. In Debian's python3-doc, 7.1%
of the chunks were Sphinx's navigation, sidebars and footers, and one of them ranked second of 1,308
for an ``lru_cache`` question; every heading carried a "¶" permalink. So the loader keeps what the page
marks as its content (``<main>``, ``role="main"``, else ``<article>``), drops the site's chrome
(``<nav>``, ``role="navigation"`` and the other landmark roles, sidebars and footers by class, and
``<header>``/``<footer>``/``<aside>``/``<form>`` outside the main content) and permalinks (an anchor to
``#...`` whose whole text is "¶", "§", "#" or a link symbol, or of class ``headerlink``). A page that
marks nothing keeps all its text but the chrome. :class:`HtmlRules` holds the rules; a site with other
conventions registers ``HtmlLoader(HtmlRules(...))`` (see ``docs/ingestion.md``).

``html.parser`` needs the whole file decoded in memory (and its output is a few
times larger), so files above the parse limit are reported rather than read.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
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
#: Elements with no end tag: never on the stack of open elements.
_VOID_TAGS = frozenset("area base br col embed hr img input link meta param source track wbr".split())


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


@dataclass(frozen=True)
class HtmlRules:
    """What the HTML loader keeps of a page: its main content, without the site's chrome.

    ``main_tags``/``main_roles``: elements holding the page's own content; when a page has any (with
    text), only their text is kept (``article`` counts only when no ``main`` does). ``drop_tags``,
    ``drop_roles``, ``drop_classes``, ``drop_ids``: chrome, dropped with everything inside;
    ``outside_main_tags``: dropped only outside the main content (an article's ``<header>`` holds
    its title). ``permalinks``: the whole text of an in-page anchor that is a permalink, dropped.
    ``whole_page=True`` keeps every visible text (the loader before main-content extraction)."""

    main_tags: frozenset[str] = field(default_factory=lambda: _words("main"))
    article_tags: frozenset[str] = field(default_factory=lambda: _words("article"))
    main_roles: frozenset[str] = field(default_factory=lambda: _words("main"))
    drop_tags: frozenset[str] = field(default_factory=lambda: _words("nav"))
    outside_main_tags: frozenset[str] = field(default_factory=lambda: _words("header footer aside form"))
    drop_roles: frozenset[str] = field(default_factory=lambda: _words(
        "navigation banner contentinfo complementary search menubar menu toolbar"))
    drop_classes: frozenset[str] = field(default_factory=lambda: _words(
        "sphinxsidebar sphinxsidebarwrapper related footer headerlink sidebar navbar breadcrumb breadcrumbs "
        "skip-link skiplink mobile-nav site-header site-footer wy-nav-side rst-footer-buttons md-sidebar "
        "md-header md-footer toctree-wrapper"))
    drop_ids: frozenset[str] = field(default_factory=lambda: _words("sidebar navigation footer header"))
    permalinks: frozenset[str] = field(default_factory=lambda: frozenset({"¶", "§", "#", "🔗", "⚓", "⚓︎"}))
    whole_page: bool = False


DEFAULT_RULES = HtmlRules()
_SPACES = re.compile(r"[ \t\n\r\f]+")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.-]+)""", re.IGNORECASE)


class _HtmlText(HTMLParser):
    """Collects visible text: block tags become line breaks, ``<pre>`` keeps its whitespace; each line is
    marked as inside the main content or not, and chrome (see :class:`HtmlRules`) is left out."""

    def __init__(self, rules: HtmlRules = DEFAULT_RULES) -> None:
        super().__init__(convert_charrefs=True)
        self.rules = rules
        self.pieces: list[tuple[int, str, int]] = []  # (break before it, text, 2 main / 1 article / 0 neither)
        self.title: list[str] = []
        self._line: list[str] = []
        self._pre: list[str] = []
        self._pending = 0
        self._skip = self._pre_depth = 0
        self._in_title = False
        self._open: list[tuple[str, str]] = []  # open elements: (tag, "main" | "article" | "chrome" | "")
        self._chrome = self._main = self._article = 0
        self._anchor: list[str] | None = None  # the text of an in-page anchor, held until its end
        self._permalink = False  # the held anchor is a permalink by its class

    # ------------------------------------------------------------ what an element is
    def _kind(self, tag: str, attrs: Any) -> str:
        if self.rules.whole_page:
            return ""
        values = {k: (v or "") for k, v in attrs}
        rules = self.rules
        role = values.get("role", "").strip().lower()
        classes = set(values.get("class", "").lower().split())
        if (tag in rules.drop_tags or role in rules.drop_roles or classes & rules.drop_classes
                or values.get("id", "").strip().lower() in rules.drop_ids
                or (tag in rules.outside_main_tags and not (self._main or self._article))):
            return "chrome"
        if tag in rules.main_tags or role in rules.main_roles:
            return "main"
        return "article" if tag in rules.article_tags else ""

    def _push(self, tag: str, kind: str) -> None:
        if kind:
            self._break(2)  # a region begins on a line of its own
        self._open.append((tag, kind))
        self._chrome += kind == "chrome"
        self._main += kind == "main"
        self._article += kind == "article"

    def _pop(self, tag: str) -> None:
        """Close ``tag`` and whatever was left open inside it (a missing end tag); an end tag that
        matches nothing open is ignored, as browsers do."""
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                for _, kind in self._open[i:]:
                    if kind:
                        self._break(2)
                    self._chrome -= kind == "chrome"
                    self._main -= kind == "main"
                    self._article -= kind == "article"
                del self._open[i:]
                return

    # ------------------------------------------------------------ text
    def _emit(self, text: str) -> None:
        if self._chrome:
            return
        self.pieces.append((self._pending, text, 2 if self._main else 1 if self._article else 0))
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
            return
        if tag == "title":
            self._in_title = True
        elif tag == "a" and not self.rules.whole_page:
            self._start_anchor(attrs)
        elif self._anchor is not None and (tag in _BLOCK_TAGS or tag == "pre"):
            self._end_anchor(block=True)
        if tag not in _VOID_TAGS and tag != "a":
            self._push(tag, self._kind(tag, attrs))
        if self._pre_depth:
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

    def handle_startendtag(self, tag: str, attrs: Any) -> None:  # <br/>, <div/>: opened and closed at once
        self.handle_starttag(tag, attrs)
        if tag not in _VOID_TAGS:
            self.handle_endtag(tag)

    def _start_anchor(self, attrs: Any) -> None:
        """An in-page anchor's text is held until its end: a permalink's is then dropped."""
        values = {k: (v or "") for k, v in attrs}
        self._permalink = bool({"headerlink"} & set(values.get("class", "").lower().split()) & self.rules.drop_classes)
        if self._permalink or values.get("href", "").startswith("#"):
            self._anchor = []

    def _end_anchor(self, block: bool = False) -> None:
        """The held anchor ends (``block``: a block element began inside it, so it is no permalink)."""
        text, self._anchor = "".join(self._anchor or []), None
        if not block and (self._permalink or text.strip() in self.rules.permalinks):
            return
        (self._pre if self._pre_depth else self._line).append(text)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
            return
        if tag == "title":
            self._in_title = False
        elif tag == "a" and self._anchor is not None:
            self._end_anchor()
        if self._pre_depth:
            self._pre_depth -= tag == "pre"
            if not self._pre_depth:
                self._end_pre()
        elif tag in _BLOCK_TAGS and tag != "br":
            self._break(_BLOCK_TAGS[tag])
        if tag not in _VOID_TAGS and tag != "a":
            self._pop(tag)

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
        elif self._anchor is not None:
            self._anchor.append(data)
        elif not self._chrome:
            (self._pre if self._pre_depth else self._line).append(data)

    def text(self) -> str:
        if self._anchor is not None:  # unclosed <a>
            self._end_anchor()
        if self._pre_depth:  # unclosed <pre>
            self._end_pre()
        self._break(0)
        best = max((where for _, _, where in self.pieces), default=0)
        kept = [(level, text) for level, text, where in self.pieces if where >= best]
        return "".join((("\n\n" if level >= 2 else "\n") if i else "") + text for i, (level, text) in enumerate(kept))


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


def load_html(source: SourceFile, data: bytes, rules: HtmlRules = DEFAULT_RULES) -> list[Document]:
    parser = _HtmlText(rules)
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
    """A page's main content (:class:`HtmlRules`); files above ``limits.max_parse_bytes`` are reported,
    not parsed."""

    suffixes: ClassVar[frozenset[str]] = _HTML_SUFFIXES

    def __init__(self, rules: HtmlRules | None = None) -> None:
        self.rules = rules or DEFAULT_RULES

    def load(self, source: SourceFile, limits: LoadLimits) -> LoadResult:
        return LoadResult(load_html(source, read_source(source, limits.max_parse_bytes, "HTML"), self.rules), [])
