"""Find source files and turn them into :class:`~contextkit.records.Document` records.

Two stages, kept apart so the ingest pipeline can hash and skip unchanged files
between them: :func:`discover_files` walks what the user named and returns
:class:`SourceFile` entries with stable ids; :func:`load_file` reads one file.

Bad input never raises: a corpus of thousands of files always contains a few
broken ones, and one of them must not abort the run. Problems come back as
:class:`LoadError` values for the end-of-run report.

Rules the caller must know:

* ``doc_id`` is the path relative to the root the user named, with POSIX
  separators, prefixed by that root as typed and lexically normalised
  (``docs/`` -> ``docs/guide/a.md``, ``./notes.txt`` -> ``notes.txt``, ``.`` ->
  ``guide/a.md``, ``/x/y`` -> ``/x/y/a.md``). Ids therefore depend on how the
  user names the roots; re-ingest with the same arguments to keep them stable.
* ``glob`` is matched against the path relative to its root, segment by segment
  with :func:`fnmatch.fnmatchcase` (case-sensitive), ``**`` matching zero or more
  directories. Like :meth:`PurePath.match`, a relative pattern is anchored at the
  right only: ``*.md`` and ``**/*.md`` both match ``c.md`` and ``a/b/c.md``;
  ``guide/*.md`` matches ``guide/a.md`` and ``x/guide/a.md``. A leading ``/``
  anchors at the root: ``/guide/*.md`` matches only ``guide/a.md``. The glob
  only filters files found by walking; a file named explicitly is always taken.
* Walking never follows directory symlinks (a link inside the root is reached
  through its real path anyway, and this rules out cycles). A symlink whose
  target lies outside the root is skipped with a :class:`LoadError`.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from html.parser import HTMLParser
from pathlib import Path, PurePath
from typing import Any

from contextkit.records import Document

__all__ = [
    "SUPPORTED_SUFFIXES", "LoadError", "LoadResult", "SourceFile", "discover_files", "file_sha256", "load_file",
]

_PROSE_FORMATS = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".rst": "rst"}
#: Source-code and config suffixes, loaded as text with format "code" and this language.
_CODE_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".jsx": "javascript",
    ".mjs": "javascript", ".ts": "typescript", ".tsx": "typescript", ".java": "java",
    ".c": "c", ".h": "c", ".cpp": "cpp", ".hpp": "cpp", ".cc": "cpp", ".cxx": "cpp",
    ".go": "go", ".rs": "rust", ".rb": "ruby", ".php": "php", ".cs": "csharp",
    ".swift": "swift", ".kt": "kotlin", ".scala": "scala", ".sh": "shell",
    ".bash": "shell", ".sql": "sql", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml",
    ".json": "json", ".css": "css", ".ini": "ini", ".cfg": "ini",
}
#: Suffixes (lower-case) taken when walking a directory.
SUPPORTED_SUFFIXES: frozenset[str] = frozenset(
    {*_PROSE_FORMATS, *_CODE_LANGUAGES, ".html", ".htm", ".pdf", ".jsonl"}
)
_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
_BINARY_SNIFF = 8192
_UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class LoadError:
    """A file that could not be (fully) loaded, as a value for the end-of-run report."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file to load: its resolved absolute ``path`` and its stable ``doc_id``."""

    path: Path
    doc_id: str


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one file yielded; both lists may be non-empty (partial JSONL success)."""

    documents: list[Document]
    errors: list[LoadError]


class _Failed(Exception):
    """Internal: carries a LoadError reason up to :func:`load_file`."""


# ----------------------------------------------------------------------------- discovery


def _glob_parts_match(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_parts_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _glob_parts_match(pattern[1:], parts[1:])


def _glob_matches(rel_posix: str, glob: str) -> bool:
    """Match a relative POSIX path against ``glob`` (semantics in the module docstring)."""
    anchored = glob.startswith("/")
    pattern = [seg for seg in glob.split("/") if seg]
    if not anchored:
        pattern = ["**", *pattern]
    return _glob_parts_match(pattern, rel_posix.split("/"))


def _id_prefix(user_path: str | Path) -> str:
    """The root as typed, normalised lexically to POSIX form; "" for the current directory."""
    posix = PurePath(os.path.normpath(os.fspath(user_path))).as_posix()
    return "" if posix == "." else posix


def _join_id(prefix: str, rel: str) -> str:
    if not prefix:
        return rel
    return prefix + rel if prefix.endswith("/") else f"{prefix}/{rel}"


def _wanted(rel: str, glob: str | None) -> bool:
    return Path(rel).suffix.lower() in SUPPORTED_SUFFIXES and (glob is None or _glob_matches(rel, glob))


def _scan(root: str, glob: str | None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Walk the resolved ``root`` without following directory links.

    Returns (relative path, real path) for files to take and (relative path, reason)
    for problems, both unsorted.
    """
    root_path, found, problems, stack = Path(root), [], [], [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir)) as it:
                entries = list(it)
        except OSError as exc:
            problems.append((rel_dir or ".", _os_reason(exc)))
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.name in _SKIP_DIRS:
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if not entry.is_symlink():
                if entry.is_dir(follow_symlinks=False):
                    stack.append(rel)
                elif entry.is_file(follow_symlinks=False) and _wanted(rel, glob):
                    found.append((rel, os.path.join(root, rel)))
                continue
            target = os.path.realpath(entry.path)
            is_dir = os.path.isdir(target)
            if not is_dir and not _wanted(rel, glob):
                continue
            if not Path(target).is_relative_to(root_path):
                problems.append((rel, f"symlink points outside {root}"))
            elif not is_dir and not os.path.isfile(target):
                problems.append((rel, "broken symlink (missing target or a loop)"))
            elif not is_dir:  # links to directories inside the root: reached via the real path
                found.append((rel, target))
    return found, problems


def _rel_key(item: tuple[str, str]) -> tuple[str, ...]:
    return tuple(item[0].split("/"))


def discover_files(
    paths: Sequence[str | Path], glob: str | None = None
) -> tuple[list[SourceFile], list[LoadError]]:
    """List the files under ``paths`` in a deterministic order, with stable ids.

    Each path may be a file (taken whatever its suffix) or a directory (walked
    recursively; hidden entries, ``__pycache__`` and ``node_modules`` skipped;
    only :data:`SUPPORTED_SUFFIXES` matching ``glob`` taken). A file reached
    twice is listed once, under the first id it was found with. Missing paths
    and escaping symlinks become :class:`LoadError` values, never exceptions.
    """
    files: list[SourceFile] = []
    errors: list[LoadError] = []
    seen: set[str] = set()
    for user_path in paths:
        shown = os.fspath(user_path)
        prefix = _id_prefix(user_path)
        if not os.path.exists(shown):
            reason = "broken symlink" if os.path.lexists(shown) else "no such file or directory"
            errors.append(LoadError(shown, reason))
            continue
        real = os.path.realpath(shown)
        if os.path.isdir(real):
            found, problems = _scan(real, glob)
            for rel, why in sorted(problems, key=_rel_key):
                errors.append(LoadError(_join_id(prefix, rel) or ".", why))
            for rel, target in sorted(found, key=_rel_key):
                if target not in seen:
                    seen.add(target)
                    files.append(SourceFile(Path(target), _join_id(prefix, rel)))
        elif not os.path.isfile(real):
            errors.append(LoadError(shown, "not a regular file"))
        elif real not in seen:
            seen.add(real)
            files.append(SourceFile(Path(real), prefix or PurePath(real).name))
    return files, errors


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks so large PDFs do not fill memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# ----------------------------------------------------------------------------- reading


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file or directory"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return exc.strerror or str(exc) or type(exc).__name__


def _decode(data: bytes, encoding: str = "utf-8") -> str:
    """Decode strictly; the text is kept exactly (no newline normalisation) since chunk offsets index it."""
    nul = data.find(b"\x00", 0, _BINARY_SNIFF)
    if nul >= 0:
        raise _Failed(f"binary file (NUL byte at offset {nul})")
    skip = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    if skip:
        encoding = "utf-8"
    try:
        return data[skip:].decode(encoding)
    except UnicodeDecodeError as exc:
        name = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else encoding
        bad = data[skip + exc.start]
        raise _Failed(f"not {name} text: invalid byte 0x{bad:02x} at offset {skip + exc.start}") from None


def _load_text(source: SourceFile, data: bytes, suffix: str) -> list[Document]:
    if suffix in _CODE_LANGUAGES:
        meta: dict[str, Any] = {"format": "code", "language": _CODE_LANGUAGES[suffix]}
    else:
        meta = {"format": _PROSE_FORMATS.get(suffix, "text")}
    return [Document(source.doc_id, _decode(data), str(source.path), meta)]


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
        text = text[1:] if text.startswith("\n") else text  # HTML drops a newline right after <pre>
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


def _load_html(source: SourceFile, data: bytes) -> list[Document]:
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
    return [Document(source.doc_id, parser.text(), str(source.path), meta)]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:120] if text else "") or type(exc).__name__


def _load_pdf(source: SourceFile, data: bytes) -> list[Document]:
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
    except Exception as exc:  # pypdf raises many unrelated types on bad input
        if isinstance(exc, pypdf.errors.FileNotDecryptedError | pypdf.errors.DependencyError):
            raise _Failed(f"encrypted PDF ({_short(exc)})") from None
        raise _Failed(f"corrupt PDF: {_short(exc)}") from None
    if not any(page.strip() for page in pages):
        raise _Failed("PDF has no extractable text (scanned?)")
    meta: dict[str, Any] = {"format": "pdf", "pages": len(pages)}
    if isinstance(title, str) and title.strip():
        meta["title"] = title.strip()
    return [Document(source.doc_id, "\n\n".join(pages), str(source.path), meta)]


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
    extra = obj.get("metadata")  # parsed from JSON, so a dict here is JSON-serialisable
    return str(rid), title, text, dict(extra) if isinstance(extra, dict) else {}


def _load_jsonl(source: SourceFile, data: bytes) -> LoadResult:
    docs: list[Document] = []
    errors: list[LoadError] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(_decode(data).split("\n"), start=1):
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
            errors.append(LoadError(source.doc_id, f"line {number}: {exc}"))
            continue
        first_line[rid] = number
        meta = {**extra, "format": "jsonl", "title": title}
        body = f"{title}\n\n{text}" if title else text
        docs.append(Document(f"{source.doc_id}#{rid}", body, str(source.path), meta))
    return LoadResult(docs, errors)


def load_file(source: SourceFile) -> LoadResult:
    """Read one file into documents; every failure comes back as a :class:`LoadError`.

    The format follows the suffix; an unknown suffix (a file named explicitly)
    is read as UTF-8 text.
    """
    suffix = source.path.suffix.lower()
    try:
        data = source.path.read_bytes()
        if suffix == ".jsonl":
            return _load_jsonl(source, data)
        if suffix in (".html", ".htm"):
            docs = _load_html(source, data)
        elif suffix == ".pdf":
            docs = _load_pdf(source, data)
        else:
            docs = _load_text(source, data, suffix)
    except OSError as exc:
        return LoadResult([], [LoadError(source.doc_id, _os_reason(exc))])
    except _Failed as exc:
        return LoadResult([], [LoadError(source.doc_id, str(exc))])
    return LoadResult(docs, [])
