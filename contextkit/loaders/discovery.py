"""Discovery: walk what the user named and list :class:`SourceFile` entries with stable ids.

Kept apart from reading so the ingest pipeline can hash and skip unchanged files
in between. Symlinks are the one way a walk can leave the folder the user named
(a link to ``/etc``, a relative ``../../secret``): by default such links are
reported, not followed; ``follow_symlinks=True`` follows them on purpose, with
cycle protection. Each file found is recorded with its (device, inode), and every
later read goes through :func:`~contextkit.loaders._common.open_source`: a link
swapped in after the walk (at the file, or a folder on its path) is not followed,
and a file that is no longer the one found is not read. Only regular files are
taken: a FIFO, a socket or a device named like a document is reported.

Index folders are never read: a folder holding a contextkit ``manifest.json`` (or the
records store and ``bm25/`` of one whose manifest was lost), and the folders named in
``exclude`` (the index being written), are passed by with a note; a file named
explicitly inside one is an error. Otherwise an index kept beside the documents
(``contextkit ingest . --index my.ck-index``) would ingest its own manifest and BM25
vocabulary, and never settle, since they change at every run.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePath
from typing import Any

from contextkit.loaders._common import (
    LoadFailure,
    LoadIssue,
    SourceFile,
    _Failed,
    _os_reason,
    file_identity,
    not_regular,
    open_source,
    storable_id,
)
from contextkit.loaders.base import loader_for

_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
_MANIFEST_SNIFF = 4096
INDEX_FOLDER_NOTE = "a contextkit index folder: not read"


def is_index_folder(path: str | os.PathLike[str]) -> bool:
    """True for a folder that holds a contextkit index (its ``manifest.json``, or the store and
    ``bm25/`` of an index whose manifest was lost): discovery never reads one.

    The manifest is recognised by its first bytes (a JSON object naming ``format_version``), so a
    documentation folder that happens to hold some other ``manifest.json`` is still read."""
    folder = os.fspath(path)
    manifest = os.path.join(folder, "manifest.json")
    if os.path.isfile(manifest):
        try:  # open_source: a manifest.json swapped for a FIFO since isfile must not hang the walk
            with open_source(SourceFile(Path(manifest), "manifest.json")) as fh:
                head = fh.read(_MANIFEST_SNIFF)
        except (OSError, _Failed):
            head = b""
        if head.lstrip().startswith(b"{") and b'"format_version"' in head:
            return True
    return os.path.isfile(os.path.join(folder, "store.sqlite")) and os.path.isdir(os.path.join(folder, "bm25"))


def _inside_index(real: str, exclude: frozenset[str]) -> str | None:
    """The index folder (among ``real``'s ancestors, itself included) that holds ``real``, if any."""
    here = real if os.path.isdir(real) else os.path.dirname(real)
    while True:
        if here in exclude or is_index_folder(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


@dataclass
class Discovery:
    """What a walk found: ``files`` to load, ``errors`` for the report (failed inputs), and
    ``notes``: what was passed by on purpose and why (index folders, a file reached twice)."""

    files: list[SourceFile] = field(default_factory=list)
    errors: list[LoadIssue] = field(default_factory=list)
    notes: list[LoadIssue] = field(default_factory=list)
    #: ``{id: real path}`` of the files taken: two files never share an id (see :func:`_take`).
    taken: dict[str, str] = field(default_factory=dict, repr=False)


def _glob_parts_match(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_parts_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _glob_parts_match(pattern[1:], parts[1:])


def _glob_matches(rel_posix: str, glob: str) -> bool:
    """Match a relative POSIX path against ``glob`` (semantics in the package docstring)."""
    anchored = glob.startswith("/")
    pattern = [seg for seg in glob.split("/") if seg]
    if not anchored:
        pattern = ["**", *pattern]
    return _glob_parts_match(pattern, rel_posix.split("/"))


def _id_prefixes(paths: Sequence[str | Path]) -> list[str]:
    """Each input's id prefix. A path inside the working folder gives the path as typed, normalised
    lexically to POSIX form ("" for the current directory): ``docs`` gives ``docs/a.md``. A path typed
    absolute, or climbing out with ``..``, gives the folder's own name, and a file its folder's name and
    its own (``/home/me/proj/docs`` gives ``docs/a.md``, and so does ``/home/me/proj/docs/a.md``), with as
    many parent names more as make it differ from the other inputs': ``/a/docs`` beside ``/b/docs``
    gives ``a/docs/...`` and ``b/docs/...``.

    Why: ids reach every prompt as citations; an absolute local path (a user name, a home folder's
    layout) is not something to send to a model provider, and ids relative to the folder named are
    the same on every machine that indexes a copy of it."""
    typed = [PurePath(os.path.normpath(os.fspath(p))).as_posix() for p in paths]
    names = [PurePath(os.path.abspath(t)).parts[1:] if _outside(t) else None for t in typed]
    real = [os.path.realpath(t) for t in typed]  # one folder named two ways is no clash

    def at(j: int, n: int) -> str:
        parts = names[j]
        if parts is None:
            return "" if typed[j] == "." else typed[j]
        return "/".join(parts[-n:]) if n <= len(parts) else typed[j]

    prefixes = []
    for i, parts in enumerate(names):
        n = 2 if parts is not None and os.path.isfile(typed[i]) else 1
        while parts is not None and n <= len(parts) and any(
                real[j] != real[i] and at(j, n) == at(i, n) for j in range(len(typed))):
            n += 1
        prefixes.append(storable_id(at(i, n)))
    return prefixes


def _outside(typed: str) -> bool:
    """Whether a normalised path typed by the user lies outside the working folder (absolute, or ``..``)."""
    return os.path.isabs(typed) or typed == ".." or typed.startswith("../")


def _join_id(prefix: str, rel: str) -> str:
    rel = storable_id(rel)
    if not prefix:
        return rel
    return prefix + rel if prefix.endswith("/") else f"{prefix}/{rel}"


Globs = tuple[str, ...]


def _patterns(value: str | Sequence[str] | None) -> Globs:
    """One pattern, several, or none, as a tuple (``--glob`` and ``--exclude`` are repeatable)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


#: Generated files that documentation builds put beside the pages and a user almost never wants
#: indexed: passed by unless ``default_excludes`` is off (``--no-default-excludes``), each counted in
#: the report. In Debian's python3-doc they were 65% of the chunks of a plain ingest (reST copies of
#: every page, the search index, jQuery, generated index pages).
GENERATED_ASSETS: tuple[str, ...] = (
    "_sources",  # Sphinx: a copy of each page's source beside its HTML
    "_static",  # Sphinx: the theme's scripts, styles and images
    "searchindex.js", "genindex*.html", "py-modindex.html", "search.html",  # Sphinx: search and index pages
    "*.min.js", "*.min.css", "*.js.map", "*.css.map",  # minified bundles and their source maps
)


@dataclass
class _Filter:
    """What a walk takes: a file of a supported format matching one of ``globs`` (any, when none) and none
    of ``skip``; a folder matching a ``skip`` pattern is not entered. What it passes by is counted, so that
    the report can say it (a folder of 15,000 files excluded is one note, not 15,000)."""

    globs: Globs = ()
    skip: Globs = ()
    defaults: Globs = ()  # GENERATED_ASSETS, when on: after ``skip``, noted as defaults
    unsupported: dict[str, int] = field(default_factory=dict)  # by suffix
    excluded: dict[str, int] = field(default_factory=dict)  # by the --exclude pattern that matched
    pruned: list[tuple[str, str]] = field(default_factory=list)  # (folder, pattern)

    def skipped_by(self, rel: str) -> str | None:
        return next((p for p in (*self.skip, *self.defaults) if _glob_matches(rel, p)), None)

    def why(self, pattern: str) -> str:
        """How the report names a pattern that passed something by."""
        if pattern in self.skip:
            return f"by --exclude {pattern!r}"
        return f"by default as a generated asset ({pattern!r}; --no-default-excludes reads it)"

    def wanted(self, rel: str) -> bool:
        if loader_for(Path(rel).suffix) is None:
            suffix = Path(rel).suffix.lower() or "(no suffix)"
            self.unsupported[suffix] = self.unsupported.get(suffix, 0) + 1
            return False
        if self.globs and not any(_glob_matches(rel, g) for g in self.globs):
            return False
        pattern = self.skipped_by(rel)
        if pattern is not None:
            self.excluded[pattern] = self.excluded.get(pattern, 0) + 1
            return False
        return True



#: A file a walk takes: (relative path, real path, (device, inode) as found).
_Found = tuple[str, str, tuple[int, int]]


def _scan(root: str, filt: _Filter, follow_symlinks: bool = False, exclude: frozenset[str] = frozenset(),
          skipped: list[str] | None = None) -> tuple[list[_Found], list[tuple[str, str]]]:
    """Walk the resolved ``root`` without following directory links into it.

    Returns (relative path, real path, identity) for files to take and (relative path, reason)
    for problems, both unsorted. With ``follow_symlinks``, links whose target lies
    outside ``root`` are followed (a folder is walked once, whatever the number of
    links to it, so cycles end); links inside ``root`` are never followed, the real
    path reaches their target anyway. Index folders (and ``exclude``) are not entered; their
    relative paths go to ``skipped``.
    """
    found: list[_Found] = []
    problems: list[tuple[str, str]] = []
    stack: list[tuple[str, str]] = [("", root)]
    walked = {root}
    while stack:
        rel_dir, real_dir = stack.pop()
        try:
            with os.scandir(real_dir) as it:
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
                    if not _pruned(filt, rel):
                        _enter(stack, skipped, rel, os.path.join(real_dir, entry.name), exclude)
                elif filt.wanted(rel):
                    _entry_file(entry, rel, os.path.join(real_dir, entry.name), found, problems)
                continue
            if os.path.isdir(entry.path) and _pruned(filt, rel):
                continue
            kind, value = _link(entry.path, rel, root, filt, follow_symlinks)
            if kind == "problem":
                problems.append((rel, value))
            elif kind == "file":
                _target_file(rel, value, found, problems)
            elif kind == "dir" and value not in walked:
                walked.add(value)
                _enter(stack, skipped, rel, value, exclude)
    return found, problems


def _pruned(filt: _Filter, rel: str) -> bool:
    """True (and noted) when a folder matches an ``--exclude`` pattern: nothing under it is walked."""
    pattern = filt.skipped_by(rel)
    if pattern is not None:
        filt.pruned.append((rel, pattern))
    return pattern is not None


def _entry_file(entry: os.DirEntry[str], rel: str, real: str, found: list[_Found],
                problems: list[tuple[str, str]]) -> None:
    """Take the directory entry at ``real`` if it is a regular file (as ``lstat`` says now: it may
    have been swapped since the folder was listed); report a FIFO, a socket or a device."""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as exc:
        problems.append((rel, _os_reason(exc)))
        return
    reason = "a symlink now (swapped in while the folder was walked): not followed" \
        if stat.S_ISLNK(st.st_mode) else not_regular(st.st_mode)
    if reason is None:
        found.append((rel, real, file_identity(st)))
    else:
        problems.append((rel, reason))


def _target_file(rel: str, target: str, found: list[_Found], problems: list[tuple[str, str]]) -> None:
    """Take the regular file a symlink led to (its real path ``target``), or report why not."""
    try:
        st = os.stat(target, follow_symlinks=False)
    except OSError as exc:
        problems.append((rel, _os_reason(exc)))
        return
    reason = not_regular(st.st_mode)
    if reason is None:
        found.append((rel, target, file_identity(st)))
    else:
        problems.append((rel, f"symlink target is {reason}"))


def _enter(stack: list[tuple[str, str]], skipped: list[str] | None, rel: str, folder: str,
           exclude: frozenset[str]) -> None:
    """Walk ``folder`` next, unless it is an index folder (then its path goes to ``skipped``)."""
    if folder in exclude or is_index_folder(folder):
        if skipped is not None:
            skipped.append(rel)
    else:
        stack.append((rel, folder))


def _link(path: str, rel: str, root: str, filt: _Filter, follow_symlinks: bool) -> tuple[str, str]:
    """What a walk does with the symlink at ``path``: ``("file" | "dir", real target)`` to take it,
    ``("problem", reason)`` to report it, ``("skip", "")`` to pass it by (an unwanted file, or a
    folder inside ``root``, which the walk reaches through its real path)."""
    try:
        target = os.path.realpath(path)
    except OSError as exc:  # the link was swapped for something else while it was resolved
        return "problem", f"changed while the folder was walked ({_os_reason(exc)})"
    is_dir = os.path.isdir(target)
    if follow_symlinks and not os.path.exists(target):
        # It may have led to a folder whose files an earlier run indexed: say so, never pass it by.
        return "problem", "broken symlink (missing target or a loop)"
    if not is_dir and not filt.wanted(rel):
        return "skip", ""
    inside = Path(target).is_relative_to(Path(root))
    if not is_dir and not os.path.exists(target):
        return "problem", "broken symlink (missing target or a loop)"
    if not inside and not follow_symlinks:
        return "problem", f"symlink points outside {root} (not followed unless --follow-symlinks)"
    if not is_dir:
        return "file", target
    return ("skip", "") if inside else ("dir", target)


def _rel_key(item: tuple[str, Any] | tuple[str, Any, Any]) -> tuple[str, ...]:
    return tuple(item[0].split("/"))


def discover(
    paths: Sequence[str | Path], glob: str | Sequence[str] | None = None, follow_symlinks: bool = False,
    exclude: Sequence[str | Path] = (), skip: Sequence[str] = (), default_skip: Sequence[str] = (),
) -> Discovery:
    """List the files under ``paths`` in a deterministic order, with stable ids, and say what was passed by.

    As :func:`discover_files`, plus ``notes``: index folders not entered (any folder holding a
    contextkit index, and the folders in ``exclude``: the index being written) and each file
    reached a second time (``docs`` and ``./docs/a.md``: one file, loaded once, under the id it was
    first found with). A path named explicitly inside an index folder is an error. ``glob``: one pattern
    or several (a file matching any is taken); ``skip``: patterns of files and folders passed by (a
    folder matching one is not entered). The notes also count what a walk passed by: files of a format
    no loader reads (by suffix), files and folders matching ``skip`` (by pattern). ``default_skip``
    (:data:`GENERATED_ASSETS` for an ingest) is applied after ``skip`` and noted as a default.
    """
    found = Discovery()
    filt = _Filter(_patterns(glob), _patterns(skip), tuple(default_skip))
    seen: dict[str, str] = {}
    excluded = frozenset(os.path.realpath(os.fspath(p)) for p in exclude)
    for user_path, prefix in zip(paths, _id_prefixes(paths), strict=True):
        given = os.fspath(user_path)
        shown = storable_id(str(given))
        if not os.path.exists(given):
            reason = "broken symlink" if os.path.lexists(given) else "no such file or directory"
            found.errors.append(LoadIssue(shown, reason))
            continue
        real = os.path.realpath(given)
        holder = _inside_index(real, excluded)
        if holder is not None:
            what = "the index folder being written" if holder in excluded else "a contextkit index folder"
            where = "" if holder == real else f" ({holder})"
            found.errors.append(LoadIssue(shown, f"inside {what}{where}: not read as input"))
            continue
        if os.path.isdir(real):
            _take_folder(found, seen, real, prefix, filt, follow_symlinks, excluded)
        else:
            _take_named(found, seen, real, shown, prefix or storable_id(PurePath(real).name))
    _note_passed_by(found, filt)
    return found


def _note_passed_by(found: Discovery, filt: _Filter) -> None:
    """One note per folder excluded, per exclude pattern and per unsupported suffix (counts, not every file)."""
    for rel, pattern in sorted(filt.pruned):
        found.notes.append(LoadIssue(rel, f"folder excluded {filt.why(pattern)}: not walked"))
    for pattern, n in sorted(filt.excluded.items()):
        found.notes.append(LoadIssue(f"({n:,} file{'s' * (n != 1)})", f"excluded {filt.why(pattern)}"))
    for suffix, n in sorted(filt.unsupported.items()):
        found.notes.append(LoadIssue(f"*{suffix}" if suffix.startswith(".") else suffix,
                                     f"{n:,} file{'s' * (n != 1)} of a format no loader reads: passed by"))


def _take_named(found: Discovery, seen: dict[str, str], real: str, shown: str, doc_id: str) -> None:
    """Take the file the user named (its real path ``real``), if it is a regular file."""
    try:
        st = os.stat(real, follow_symlinks=False)
    except OSError as exc:
        found.errors.append(LoadIssue(shown, _os_reason(exc)))
        return
    reason = not_regular(st.st_mode)
    if reason is not None:
        found.errors.append(LoadIssue(shown, reason))
    else:
        _take(found, seen, real, doc_id, file_identity(st))


def _take_folder(found: Discovery, seen: dict[str, str], real: str, prefix: str, filt: _Filter,
                 follow_symlinks: bool, excluded: frozenset[str]) -> None:
    skipped: list[str] = []
    files, problems = _scan(real, filt, follow_symlinks, excluded, skipped)
    for rel, why in sorted(problems, key=_rel_key):
        found.errors.append(LoadIssue(_join_id(prefix, rel) or ".", why))
    for rel in sorted(skipped):
        found.notes.append(LoadIssue(_join_id(prefix, rel), INDEX_FOLDER_NOTE))
    for rel, target, identity in sorted(files, key=_rel_key):
        _take(found, seen, target, _join_id(prefix, rel), identity)


def _take(found: Discovery, seen: dict[str, str], real: str, doc_id: str, identity: tuple[int, int]) -> None:
    """Take the file at ``real`` under ``doc_id``, unless it was reached already (then a note)."""
    first = seen.get(real)
    if first is None and doc_id in found.taken:  # e.g. ``docs`` and ``/elsewhere/docs`` reaching one name
        found.errors.append(LoadIssue(doc_id, f"another file ({found.taken[doc_id]}) has this id: not read; "
                                      "ingest the two folders apart, or name them by other paths"))
    elif first is None:
        seen[real] = doc_id
        found.taken[doc_id] = real
        found.files.append(SourceFile(Path(real), doc_id, identity))
    elif first != doc_id:
        found.notes.append(LoadIssue(doc_id, f"the same file as {first}: loaded once, as {first}"))


def discover_files(
    paths: Sequence[str | Path], glob: str | None = None, follow_symlinks: bool = False,
    exclude: Sequence[str | Path] = (),
) -> tuple[list[SourceFile], list[LoadIssue]]:
    """List the files under ``paths`` in a deterministic order, with stable ids.

    Each path may be a file (taken whatever its suffix) or a directory (walked
    recursively; hidden entries, ``__pycache__``, ``node_modules`` and index folders
    skipped; only the suffixes of the registered loaders, :data:`SUPPORTED_SUFFIXES` unless
    :func:`~contextkit.loaders.register_loader` added some, matching ``glob`` taken). A file reached
    twice is listed once, under the first id it was found with. Missing paths
    and symlinks leading outside the folder (unless ``follow_symlinks``) become
    :class:`LoadIssue` values, never exceptions. :func:`discover` also says what was passed by.
    """
    found = discover(paths, glob, follow_symlinks, exclude)
    return found.files, found.errors


def file_sha256(path: Path | SourceFile) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks so large files do not fill memory.

    A :class:`SourceFile` is read the checked way (:func:`source_digest`); a path as it is named
    (only a regular file: a FIFO or a device raises ``OSError``, it is never read)."""
    source = path if isinstance(path, SourceFile) else SourceFile(Path(path), os.fspath(path))
    try:
        return source_digest(source)[0]
    except LoadFailure as exc:  # callers of this old function catch OSError
        raise OSError(exc.error.reason) from None


def source_digest(source: SourceFile) -> tuple[str, int]:
    """(hex SHA-256, size in bytes) of ``source``, read once through
    :func:`~contextkit.loaders._common.open_source`, so the hash is of the file discovery found.

    Raises :class:`LoadFailure` for a file that is not the one found (or not a regular file),
    ``OSError`` for one that cannot be read."""
    digest = hashlib.sha256()
    size = 0
    try:
        fh = open_source(source)
    except _Failed as exc:
        raise LoadFailure(LoadIssue(source.doc_id, str(exc))) from None
    with fh:
        while block := fh.read(1 << 20):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size
