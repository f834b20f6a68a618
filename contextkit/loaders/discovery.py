"""Discovery: walk what the user named and list :class:`SourceFile` entries with stable ids.

Kept apart from reading so the ingest pipeline can hash and skip unchanged files
in between. Symlinks are the one way a walk can leave the folder the user named
(a link to ``/etc``, a relative ``../../secret``): by default such links are
reported, not followed; ``follow_symlinks=True`` follows them on purpose, with
cycle protection.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path, PurePath

from contextkit.loaders._common import (
    LoadError,
    SourceFile,
    _os_reason,
)
from contextkit.loaders.base import loader_for

_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})


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


def _id_prefix(user_path: str | Path) -> str:
    """The root as typed, normalised lexically to POSIX form; "" for the current directory."""
    posix = PurePath(os.path.normpath(os.fspath(user_path))).as_posix()
    return "" if posix == "." else posix


def _join_id(prefix: str, rel: str) -> str:
    if not prefix:
        return rel
    return prefix + rel if prefix.endswith("/") else f"{prefix}/{rel}"


def _wanted(rel: str, glob: str | None) -> bool:
    return loader_for(Path(rel).suffix) is not None and (glob is None or _glob_matches(rel, glob))


def _scan(root: str, glob: str | None,
          follow_symlinks: bool = False) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Walk the resolved ``root`` without following directory links into it.

    Returns (relative path, real path) for files to take and (relative path, reason)
    for problems, both unsorted. With ``follow_symlinks``, links whose target lies
    outside ``root`` are followed (a folder is walked once, whatever the number of
    links to it, so cycles end); links inside ``root`` are never followed, the real
    path reaches their target anyway.
    """
    found: list[tuple[str, str]] = []
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
                    stack.append((rel, os.path.join(real_dir, entry.name)))
                elif entry.is_file(follow_symlinks=False) and _wanted(rel, glob):
                    found.append((rel, os.path.join(real_dir, entry.name)))
                continue
            kind, value = _link(entry.path, rel, root, glob, follow_symlinks)
            if kind == "problem":
                problems.append((rel, value))
            elif kind == "file":
                found.append((rel, value))
            elif kind == "dir" and value not in walked:
                walked.add(value)
                stack.append((rel, value))
    return found, problems


def _link(path: str, rel: str, root: str, glob: str | None, follow_symlinks: bool) -> tuple[str, str]:
    """What a walk does with the symlink at ``path``: ``("file" | "dir", real target)`` to take it,
    ``("problem", reason)`` to report it, ``("skip", "")`` to pass it by (an unwanted file, or a
    folder inside ``root``, which the walk reaches through its real path)."""
    target = os.path.realpath(path)
    is_dir = os.path.isdir(target)
    if not is_dir and not _wanted(rel, glob):
        return "skip", ""
    inside = Path(target).is_relative_to(Path(root))
    if not is_dir and not os.path.isfile(target):
        return "problem", "broken symlink (missing target or a loop)"
    if not inside and not follow_symlinks:
        return "problem", f"symlink points outside {root} (not followed unless --follow-symlinks)"
    if not is_dir:
        return "file", target
    return ("skip", "") if inside else ("dir", target)


def _rel_key(item: tuple[str, str]) -> tuple[str, ...]:
    return tuple(item[0].split("/"))


def discover_files(
    paths: Sequence[str | Path], glob: str | None = None, follow_symlinks: bool = False
) -> tuple[list[SourceFile], list[LoadError]]:
    """List the files under ``paths`` in a deterministic order, with stable ids.

    Each path may be a file (taken whatever its suffix) or a directory (walked
    recursively; hidden entries, ``__pycache__`` and ``node_modules`` skipped;
    only the suffixes of the registered loaders, :data:`SUPPORTED_SUFFIXES` unless
    :func:`~contextkit.loaders.register_loader` added some, matching ``glob`` taken). A file reached
    twice is listed once, under the first id it was found with. Missing paths
    and symlinks leading outside the folder (unless ``follow_symlinks``) become
    :class:`LoadError` values, never exceptions.
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
            found, problems = _scan(real, glob, follow_symlinks)
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
    """Hex SHA-256 of a file, read in 1 MiB blocks so large files do not fill memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
