"""Find source files and turn them into :class:`~contextkit.records.Document` records.

Two stages, kept apart so the ingest pipeline can hash and skip unchanged files
between them: :func:`discover_files` walks what the user named and returns
:class:`SourceFile` entries with stable ids; :func:`load_file` reads one file
(:func:`open_text_stream` reads a large text file block by block instead, and
:func:`iter_jsonl` a large JSONL file record by record).
One module per format, each with a :class:`~contextkit.loaders.base.Loader`:
:mod:`.text` (:class:`TextLoader`), :mod:`.html` (:class:`HtmlLoader`), :mod:`.pdf`
(:class:`PdfLoader`), :mod:`.jsonl` (:class:`JsonlLoader`); :mod:`.discovery` walks
folders. :func:`load_file` picks the loader registered for the file's suffix, so a
new format is a :class:`Loader` subclass and one :func:`register_loader` call (see
:mod:`.base`); discovery then walks its suffixes too.

Bad input never raises: a corpus of thousands of files always contains a few
broken ones, and one of them must not abort the run. Problems come back as
:class:`LoadIssue` values for the end-of-run report.

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
* Index folders are never read: a folder holding a contextkit ``manifest.json`` (and
  the index being written, passed as ``exclude``) is passed by with a note
  (:func:`discover` returns them); a file named explicitly inside one is an error.
  A file reached twice (``docs`` and ``docs/a.md``) is loaded once, with a note.
* Walking never follows directory symlinks inside the root (their target is
  reached through its real path anyway, and this rules out cycles). A symlink
  whose target lies outside the root (``/etc/passwd``, ``../../secret``) is
  skipped with a :class:`LoadIssue` unless ``follow_symlinks=True``.
* Every read opens the file through :func:`open_source`: a discovered file is opened one folder
  at a time from ``/`` without following any link, without blocking, and must be the regular file
  (device and inode) the walk found, so a file or folder swapped for a link (or a FIFO, a device)
  after discovery is reported, never read from elsewhere. FIFOs, sockets and devices named like
  documents are reported by the walk. A custom loader reads through :func:`open_source` too.
* A JSONL record's ``metadata["source"]`` is ``file:line``; its own ``source`` (and other keys
  contextkit uses) are kept as ``claimed_<key>``: a record cannot claim where it came from.
* HTML and PDF files above :attr:`LoadLimits.max_parse_bytes` are reported as too
  large; a PDF whose parsing takes longer than :attr:`LoadLimits.pdf_timeout` is
  reported and its worker process replaced.
"""

from __future__ import annotations

from contextkit.core.lazy import lazy_exports
from contextkit.loaders._common import (
    SUPPORTED_SUFFIXES,
    LoadFailure,
    LoadIssue,
    LoadLimits,
    LoadResult,
    SourceFile,
    _Failed,
    _os_reason,
    open_source,
)
from contextkit.loaders.base import (
    Loader,
    loader_for,
    register_loader,
    registered_suffixes,
    unregister_loader,
)
from contextkit.loaders.discovery import (
    GENERATED_ASSETS,
    Discovery,
    discover,
    discover_files,
    file_sha256,
    is_index_folder,
    source_digest,
)
from contextkit.loaders.html import HtmlLoader, HtmlRules
from contextkit.loaders.jsonl import JsonlLoader, iter_jsonl
from contextkit.loaders.pdf import PdfLoader
from contextkit.loaders.text import TextLoader, TextStream, open_text_stream

__all__ = [
    "GENERATED_ASSETS", "SUPPORTED_SUFFIXES", "Discovery", "HtmlLoader", "HtmlRules", "JsonlLoader", "LoadIssue", "LoadFailure", "LoadLimits",
    "LoadResult", "Loader", "PdfLoader", "SourceFile", "TextLoader", "TextStream", "discover", "discover_files",
    "file_sha256", "is_index_folder", "iter_jsonl", "load_file", "loader_for", "open_source", "open_text_stream",
    "register_loader", "registered_suffixes", "source_digest", "unregister_loader",
]

__getattr__, _ = lazy_exports("contextkit.loaders", {}, globals(), deprecated={
    "LoadError": ("LoadIssue", "a record of a file that failed, not an exception"),
})

_DEFAULT_LIMITS = LoadLimits()
#: Reads a file named explicitly whose suffix no loader claims.
_FALLBACK = TextLoader()

for _builtin in (_FALLBACK, HtmlLoader(), PdfLoader(), JsonlLoader()):
    register_loader(_builtin)


def load_file(source: SourceFile, limits: LoadLimits | None = None) -> LoadResult:
    """Read one file into documents; every failure comes back as a :class:`LoadIssue`.

    The loader is the one registered for the suffix (:func:`loader_for`); an unknown
    suffix (a file named explicitly) is read as UTF-8 text. The whole file is read:
    for text files too large for memory, use :func:`open_text_stream`.
    """
    loader = loader_for(source.path.suffix) or _FALLBACK
    try:
        return loader.load(source, limits or _DEFAULT_LIMITS)
    except OSError as exc:
        return LoadResult([], [LoadIssue(source.doc_id, _os_reason(exc))])
    except _Failed as exc:
        return LoadResult([], [LoadIssue(source.doc_id, str(exc))])
    except LoadFailure as exc:
        return LoadResult([], [exc.error])
