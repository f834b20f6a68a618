"""The records store's schema checked in full before any statement of ours reads its tables, and the
values a crafted store may hold checked before use.

Why: an index folder from elsewhere is untrusted, and SQLite runs what its schema says. Names alone
prove nothing: a table named ``chunks`` may have a generated column that computes 400 MB per row read,
an index named ``chunks_doc`` may index an expression that ``PRAGMA integrity_check`` evaluates for
every row, a table may be ``WITHOUT ROWID``, a column may be missing or of another type, and a
trigger or view runs its SQL at our next statement. So every object in ``sqlite_master`` must be one
contextkit creates, with the very ``CREATE`` statement it creates it with (compared with whitespace
normalised; the statement is what SQLite builds the schema from, so the same text is the same table,
columns, types, constraints, generated columns and indexed expressions alike). Two stores of older
contextkit versions are accepted as they are: without ``text_sha`` (added by ``ALTER TABLE``, which
appends it to the statement) and without ``retired_chunks``.

Values are checked where they are used (a generation must be a decimal integer, metadata a JSON
object, a vector its dimension's bytes) and all at once by :func:`value_problems` (``verify``): a
crafted value gives a one-line ``StoreCorruptError``, never a raw ``ValueError``. A leaf: it imports
only the errors.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from pathlib import Path

from contextkit.core.errors import StoreCorruptError

__all__ = ["parse_generation", "schema_problem", "value_problems"]

#: Objects a store written by an older contextkit may lack (it reads as it is; a writer creates them).
_OPTIONAL = frozenset({("table", "retired_chunks"), ("index", "retired_chunks_gen"),
                       ("index", "sqlite_autoindex_retired_chunks_1")})
#: Tables SQLite itself writes on ``ANALYZE`` (statistics for the planner; read, never run).
_STAT_TABLES = {"sqlite_stat1": "CREATE TABLE sqlite_stat1(tbl,idx,stat)",
                "sqlite_stat4": "CREATE TABLE sqlite_stat4(tbl,idx,neq,nlt,ndlt,sample)"}
_LEGACY_COLUMN = ",text_sha TEXT)"


@functools.lru_cache(maxsize=256)
def _normal(sql: str | None) -> str | None:
    """``sql`` with runs of whitespace made one space and none around punctuation (how it was typed aside).
    Cached: a healthy store's statements are the same at every open, so the check costs a lookup each."""
    if sql is None:
        return None
    return re.sub(r"\s*([(),;])\s*", r"\1", re.sub(r"\s+", " ", sql.strip()))


@functools.cache
def expected_objects(schema: str) -> dict[tuple[str, str], tuple[str, str | None]]:
    """``{(type, name): (table, normalised sql)}`` of what ``schema`` creates, read back from SQLite itself."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(schema)
        rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        db.close()
    out = {(kind, name): (table, _normal(sql)) for kind, name, table, sql in rows}
    out.update({("table", name): (name, _normal(sql)) for name, sql in _STAT_TABLES.items()})
    return out


def schema_problem(db: sqlite3.Connection, schema: str, require_all: bool = True) -> str | None:
    """What in the store's schema contextkit does not create (an object, or one of ours in another form), or
    None. ``require_all``: also a table or index it needs and lacks (a writer creates missing ones instead)."""
    expected = expected_objects(schema)
    rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    found: set[tuple[str, str]] = set()
    wrong: list[str] = []
    for kind, name, table, sql in rows:
        key = (str(kind), str(name))
        found.add(key)
        want = expected.get(key)
        have = (table, _normal(sql))
        if want is None:
            wrong.append(f"{kind} {name!r}")
        elif have != want and not _legacy_chunks(key, have, want):
            wrong.append(f"{kind} {name!r} in another form than contextkit creates ({_short(sql)})")
    if require_all:
        missing = sorted(f"{k} {n!r}" for k, n in set(expected) - found - _OPTIONAL
                         if not n.startswith("sqlite_stat"))
        wrong += [f"no {what}" for what in missing]
    if not wrong:
        return None
    return "; ".join(wrong[:4]) + (f" and {len(wrong) - 4} more" if len(wrong) > 4 else "")


def _legacy_chunks(key: tuple[str, str], have: tuple[str, str | None], want: tuple[str, str | None]) -> bool:
    """``chunks`` as an older contextkit created it: the same statement without its last column, ``text_sha``."""
    if key != ("table", "chunks") or have[1] is None or want[1] is None or not want[1].endswith(_LEGACY_COLUMN):
        return False
    return have[1] == want[1][: -len(_LEGACY_COLUMN)] + ")"


def _short(sql: str | None) -> str:
    text = " ".join(str(sql).split())
    return text if len(text) <= 90 else text[:87] + "..."


def parse_generation(value: object, path: Path) -> int:
    """The store's generation from its ``meta`` value (a decimal integer), else ``StoreCorruptError``."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62:
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,18}", value):
        return int(value)
    raise StoreCorruptError(f"{path}: its generation is {_short(repr(value))}, not a whole number (crafted or "
                            "damaged); restore the store or re-ingest into a new index", file=path.name)


_JSON_OBJECT = "typeof(metadata) != 'text' OR NOT json_valid(metadata) OR json_type(metadata) != 'object'"
#: ``verify``'s scan of every value a read relies on: column, table and the SQL that counts the bad rows.
_VALUE_CHECKS = (
    ("chunks", "a rowid, ordinal, offset or count that is not an integer",
     "typeof(ordinal) != 'integer' OR typeof(start) != 'integer' OR typeof(end) != 'integer' OR "
     "typeof(tokens) != 'integer' OR typeof(total_tokens) != 'integer'"),
    ("chunks", "an id, header, text or vector key that is not text",
     "typeof(id) != 'text' OR typeof(doc_id) != 'text' OR typeof(header) != 'text' OR typeof(text) != 'text' "
     "OR typeof(vector_key) != 'text'"),
    ("chunks", "metadata that is not a JSON object", _JSON_OBJECT),
    ("documents", "metadata that is not a JSON object", _JSON_OBJECT),
    ("vectors", "a vector that is not a blob", "typeof(vector) != 'blob'"),
    ("meta", "a generation that is not a whole number",
     "key = 'generation' AND (typeof(value) != 'text' OR value GLOB '*[^0-9]*' OR value = '')"),
)


def value_problems(db: sqlite3.Connection) -> str | None:
    """Rows whose values a read would fail on (types, JSON, the generation): one line, or None. One pass per
    check over its table (what ``verify`` affords; reads check the rows they read)."""
    found = []
    for table, what, where in _VALUE_CHECKS:
        bad = int(db.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}").fetchone()[0])
        if bad:
            found.append(f"{bad} {table} rows with {what}")
    return "; ".join(found) if found else None
