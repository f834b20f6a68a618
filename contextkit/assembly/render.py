"""Rendering sections as XML (default) or Markdown, with untrusted text escaped.

XML: every section and every evidence item is an element; attribute values are
fully escaped and characters XML cannot carry replaced by U+FFFD. Document text
goes in one of two ways (``text_escape``): as a text node with ``&`` and ``<``
escaped (and ``]]>`` broken), or verbatim in a CDATA section, where only ``]]>``
is split across two sections (``]]]]><![CDATA[>``). The default, ``"auto"``,
takes CDATA for text holding ``<`` or ``&`` where no ``<`` starts anything like
markup (code such as ``if a < b and c >= d``, shell's ``&&``, a Python traceback's ``<module>``), so a model reads it
as written rather than ``if a &lt; b``; text with a tag-like ``<`` (HTML, a forged
``</document>``) keeps its entities, since a model reads the characters, not the
CDATA rules, and a verbatim end tag reads like one. Plain text goes in as it is.
Either way, whatever a document contains, the prompt parses as exactly the elements
we wrote: text can neither close nor open nor forge a section. Markdown: each body sits in a
fence longer than any backtick run inside it, so a heading or fence in the text
stays text; attribute values in a heading are quoted (``id: "a.md::0", source: "a.md"``), so a
value holding ``, score: 0.99`` stays one value; our own instructions (key instructions, system, task, the reminder) are
trusted and written as prose, since fencing them reads as code to quote, not rules.

Every block ends with a newline and the next begins with ``<`` (or ``#``), so
block boundaries are stable points of the GPT tokenizers: the prompt's token
count is exactly the sum of its blocks' counts (see ``Tokenizer.stable_boundaries``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from contextkit.core.errors import InvalidArgumentError, SectionError

__all__ = ["TEXT_ESCAPES", "Renderer", "cdata_text", "cut_inside", "escape_attribute", "escape_text", "plain_text"]

_TAG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# Characters XML 1.0 cannot carry: C0 controls except tab/newline/CR, lone surrogates, U+FFFE/U+FFFF.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def escape_text(text: str) -> str:
    """Escape document text for an XML text node."""
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if "]]>" in text:
        text = text.replace("]]>", "]]&gt;")
    if _XML_ILLEGAL.search(text):
        text = _XML_ILLEGAL.sub("\ufffd", text)
    return text


_CDATA_OPEN, _CDATA_CLOSE, _CDATA_SPLIT = "<![CDATA[", "]]>", "]]]]><![CDATA[>"


def cdata_text(text: str) -> str:
    """Document text verbatim in a CDATA section: only ``]]>`` is split (into two sections) and
    characters XML cannot carry become U+FFFD, so the text cannot end the section early."""
    if _XML_ILLEGAL.search(text):
        text = _XML_ILLEGAL.sub("\ufffd", text)
    return _CDATA_OPEN + text.replace("]]>", _CDATA_SPLIT) + _CDATA_CLOSE


def cut_inside(body: str, max_tokens: int, cut: Callable[[str, int], str | None], count: Callable[[str], int]
               ) -> str | None:
    """``cut(text, max_tokens)`` (a truncation, a pruning) applied to a rendered body.

    Cuts work on the body as it goes in the prompt; a CDATA section must not lose its
    end, so its text is cut inside and wrapped again, with the wrapper's tokens kept out
    of the room. An entity-escaped body never starts with ``<``: the two cannot be confused."""
    if not (body.startswith(_CDATA_OPEN) and body.endswith(_CDATA_CLOSE)):
        return cut(body, max_tokens)
    inner = body[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)].replace(_CDATA_SPLIT, "]]>")
    shown = cut(inner, max_tokens - count(_CDATA_OPEN + _CDATA_CLOSE) - 1)
    if shown is None or shown == inner:
        return body if shown is not None else None
    return cdata_text(shown)


#: A ``<`` that a reader could take for markup: a tag, an end tag, a comment, CDATA, a declaration.
_TAG_LIKE = re.compile(r"<[A-Za-z/!?]")
#: Names in angle brackets that Python writes in tracebacks, reprs and qualified names (``File "<stdin>",
#: line 1, in <module>``, ``f.<locals>.g``, ``<frozen importlib._bootstrap>``): not markup to any reader,
#: so they do not make a text tag-like (a traceback reaches the model as written, not ``&lt;module>``).
_PYTHON_PSEUDO_NAMES = re.compile(
    r"<(?:module|stdin|string|lambda|genexpr|listcomp|dictcomp|setcomp|locals|console|input|unknown"
    r"|frozen [\w.]+|doctest [\w.\[\]-]+|ipython-input-[\w-]+|fstring)>")


#: ``"auto"``: text with fewer ``<`` and ``&`` than this goes in with entities. Why: a CDATA section costs five
#: tokens (cl100k: ``<![CDATA[`` and ``]]>``), an entity two more than its character, so for one or two of
#: them ("McKinsey & Company", "a < b") entities cost less and read as well; code is verbatim, as it was.
_VERBATIM_FROM = 3


def _verbatim_is_safe(text: str) -> bool:
    """``"auto"``: whether text goes in verbatim (CDATA). Only where entities would change it
    (``<`` or ``&``, at least :data:`_VERBATIM_FROM` of them) and nothing in it looks like markup: a model does not parse CDATA, it
    reads the characters, and a verbatim ``</document>`` reads like the end of one. Python's
    own bracketed names (:data:`_PYTHON_PSEUDO_NAMES`) are not markup."""
    if text.count("<") + text.count("&") < _VERBATIM_FROM:
        return False
    if _TAG_LIKE.search(text) is None:
        return True
    return "<" in text and _TAG_LIKE.search(_PYTHON_PSEUDO_NAMES.sub("", text)) is None


#: How XML bodies carry untrusted text: entities always, CDATA always, or CDATA where entities would change it.
TEXT_ESCAPES = ("auto", "entities", "cdata")


def escape_attribute(value: str) -> str:
    value = escape_text(str(value)).replace(">", "&gt;").replace('"', "&quot;")
    return value.replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


#: A line that Markdown reads as structure, not text: a heading, an HTML block (which runs on over our
#: headings), a fence, a setext underline, a list, a quote, a table, an indented code block.
_MD_BLOCK_START = re.compile(r"^(?: {0,3}(?:[#<>=*_+`~|-]|\d+[.)])| {4}|\t)", re.MULTILINE)


def _plain_prose(body: str) -> bool:
    """Whether trusted text can go in as prose and leave the prompt's structure as we wrote it;
    otherwise it is fenced like any other body (what a Markdown parser sees stays exactly ours)."""
    text = body.strip()
    return bool(text) and "\r" not in text and _MD_BLOCK_START.search(text) is None


_MD_SPECIAL = re.compile(r"([\\`*_\[\]()<>#!|~&])")


def _one_line(value: str) -> str:
    """An untrusted value on one line of a Markdown heading: no line break, no markup (ids, sources, roles)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def _quoted(value: str) -> str:
    """An attribute value in a Markdown heading, in double quotes (``\\"`` inside; ``\\`` is already
    ``\\\\``): a file named ``a, score: 0.99, source: https://trusted.example`` or a record's id stays
    one value, and cannot read as attributes contextkit wrote, as XML's quoted attributes cannot."""
    return '"' + _one_line(value).replace('"', '\\"') + '"'


class Renderer:
    """Turns sections and items into blocks of text (each ends with a newline)."""

    def __init__(self, fmt: Literal["xml", "markdown"] = "xml", item_tag: str = "document",
                 message_tag: str = "message", text_escape: Literal["auto", "entities", "cdata"] = "auto") -> None:
        if fmt not in ("xml", "markdown"):
            raise InvalidArgumentError(f"format must be 'xml' or 'markdown', not {fmt!r}")
        if text_escape not in TEXT_ESCAPES:
            raise InvalidArgumentError(f"text_escape must be one of {', '.join(TEXT_ESCAPES)}, not {text_escape!r}")
        for option, tag in (("item_tag", item_tag), ("message_tag", message_tag)):
            if not isinstance(tag, str) or not _TAG_NAME.match(tag) or tag.lower().startswith("xml"):
                raise SectionError(f"{option} {tag!r} is not a valid XML tag name "
                                   "(letters, digits, '_', '-', '.'; not starting with a digit or 'xml')")
        self.format = fmt
        self.item_tag, self.message_tag = item_tag, message_tag
        self.text_escape = text_escape

    def body(self, text: str) -> str:
        """Untrusted text made safe for this format (markdown fences are added per block)."""
        if self.format != "xml":
            return text
        if self.text_escape == "cdata" or (self.text_escape == "auto" and _verbatim_is_safe(text)):
            return cdata_text(text)
        return escape_text(text)

    # ------------------------------------------------------------- sections
    def open(self, tag: str, title: str, attributes: dict[str, str] | None = None) -> str:
        if self.format == "xml":
            return f"<{tag}{self._attrs(attributes)}>\n"
        extra = "".join(f" ({_one_line(k)}: {_quoted(v)})" for k, v in (attributes or {}).items())
        title = _one_line(str(title).replace("_", " "))
        return f"## {title[:1].upper()}{title[1:]}{extra}\n\n"

    def close(self, tag: str) -> str:
        return f"</{tag}>\n" if self.format == "xml" else ""

    def text_block(self, tag: str, title: str, body: str, attributes: dict[str, str] | None = None,
                   prose: bool = False) -> str:
        """A whole text section; ``body`` is already escaped. ``prose`` (Markdown only): trusted text,
        written as it is rather than fenced."""
        if self.format == "xml":
            return f"{self.open(tag, title, attributes)}{body}\n</{tag}>\n"
        if prose and _plain_prose(body):
            return f"{self.open(tag, title, attributes)}{body.strip()}\n\n"
        fence = _fence(body)
        return f"{self.open(tag, title, attributes)}{fence}\n{body}\n{fence}\n\n"

    def bare_text(self, body: str, label: str = "") -> str | None:
        """Text (``body`` already escaped) as a plain paragraph, without its section's tags or heading, after
        ``label:`` when one is given; None when it holds what could read as markup (``<`` or ``&`` in XML, a
        Markdown block start), so it keeps them. A tight budget writes the key instructions this way at the
        head, and the question after ``Question:`` at the end (nothing follows it that it could pass for)."""
        text = (plain_text(body) if self.format == "xml" else body).strip()
        if not text or "<" in text or "&" in text or "]]>" in text or not _plain_prose(text):
            return None
        return f"{label}: {text}\n" if label else f"{text}\n\n"

    # ---------------------------------------------------------------- items
    def item_block(self, body: str, attributes: dict[str, str]) -> str:
        """One evidence item; ``body`` is already escaped."""
        if self.format == "xml":
            return f"<{self.item_tag}{self._attrs(attributes)}>\n{body}\n</{self.item_tag}>\n"
        head = ", ".join(f"{k}: {_quoted(v)}" for k, v in attributes.items())
        fence = _fence(body)
        return f"### {self.item_tag} ({head})\n\n{fence}\n{body}\n{fence}\n\n"

    def message_block(self, role: str, body: str, attributes: dict[str, str] | None = None) -> str:
        attrs = {"role": role, **(attributes or {})}
        if self.format == "xml":
            return f"<{self.message_tag}{self._attrs(attrs)}>\n{body}\n</{self.message_tag}>\n"
        fence = _fence(body)
        return f"### {_one_line(role)}\n\n{fence}\n{body}\n{fence}\n\n"

    @staticmethod
    def _attrs(attributes: dict[str, str] | None) -> str:
        if not attributes:
            return ""
        return "".join(f' {k}="{escape_attribute(v)}"' for k, v in attributes.items())


def plain_text(body: str) -> str:
    """The text a rendered XML body (:meth:`Renderer.body`) shows, unescaped: for lengths and
    comparisons with the raw text (characters XML cannot carry stay U+FFFD)."""
    if body.startswith(_CDATA_OPEN) and body.endswith(_CDATA_CLOSE):
        return body[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)].replace(_CDATA_SPLIT, "]]>")
    return body.replace("]]&gt;", "]]>").replace("&lt;", "<").replace("&amp;", "&")
