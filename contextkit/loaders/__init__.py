"""Find source files and turn them into :class:`~contextkit.records.Document` records.

Two stages, kept apart so the ingest pipeline can hash and skip unchanged files
between them: :func:`discover_files` walks what the user named and returns
:class:`SourceFile` entries with stable ids; :func:`load_file` reads one file
(:func:`open_text_stream` reads a large text file block by block instead, and
:func:`iter_jsonl` a large JSONL file record by record).
One module per format: :mod:`.text`, :mod:`.html`, :mod:`.pdf`, :mod:`.jsonl`;
:mod:`.discovery` walks folders.

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
* Walking never follows directory symlinks inside the root (their target is
  reached through its real path anyway, and this rules out cycles). A symlink
  whose target lies outside the root (``/etc/passwd``, ``../../secret``) is
  skipped with a :class:`LoadError` unless ``follow_symlinks=True``.
* HTML and PDF files above :attr:`LoadLimits.max_parse_bytes` are reported as too
  large; a PDF whose parsing takes longer than :attr:`LoadLimits.pdf_timeout` is
  reported and its worker process replaced.
"""

from __future__ import annotations

from contextkit.loaders._common import (
    SUPPORTED_SUFFIXES,
    LoadError,
    LoadFailure,
    LoadLimits,
    LoadResult,
    SourceFile,
    _Failed,
    _os_reason,
    _too_large,
)
from contextkit.loaders.discovery import discover_files, file_sha256
from contextkit.loaders.jsonl import iter_jsonl
from contextkit.loaders.text import TextStream, open_text_stream

__all__ = [
    "SUPPORTED_SUFFIXES", "LoadError", "LoadFailure", "LoadLimits", "LoadResult", "SourceFile", "TextStream",
    "discover_files", "file_sha256", "iter_jsonl", "load_file", "open_text_stream",
]

_DEFAULT_LIMITS = LoadLimits()


def load_file(source: SourceFile, limits: LoadLimits | None = None) -> LoadResult:
    """Read one file into documents; every failure comes back as a :class:`LoadError`.

    The format follows the suffix; an unknown suffix (a file named explicitly)
    is read as UTF-8 text. The whole file is read: for text files too large for
    memory, use :func:`open_text_stream`.
    """
    from contextkit.loaders.text import load_text

    limits = limits or _DEFAULT_LIMITS
    suffix = source.path.suffix.lower()
    try:
        if suffix in (".html", ".htm", ".pdf"):
            size = source.path.stat().st_size
            if size > limits.max_parse_bytes:
                raise _too_large(size, limits.max_parse_bytes, "PDF" if suffix == ".pdf" else "HTML")
        if suffix == ".pdf":
            from contextkit.loaders.pdf import load_pdf

            return LoadResult(load_pdf(source, limits.pdf_timeout), [])
        data = source.path.read_bytes()
        if suffix == ".jsonl":
            from contextkit.loaders.jsonl import load_jsonl

            return load_jsonl(source, data)
        if suffix in (".html", ".htm"):
            from contextkit.loaders.html import load_html

            docs = load_html(source, data)
        else:
            docs = load_text(source, data, suffix)
    except OSError as exc:
        return LoadResult([], [LoadError(source.doc_id, _os_reason(exc))])
    except _Failed as exc:
        return LoadResult([], [LoadError(source.doc_id, str(exc))])
    return LoadResult(docs, [])
