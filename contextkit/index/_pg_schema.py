"""The tables of an index in PostgreSQL, created and versioned by contextkit, and the connections to them.

One index is one schema (``?schema=name`` in the DSN, ``contextkit`` by default)::

    meta        key -> value: the schema version, the manifest (JSON), the generation
    files       path, sha256, size, n_documents: the files ingested whole (as the folder's store)
    documents   id, file, source, sha256, n_chars, metadata (JSON text, kept as written)
    chunks      rowid (identity), id, doc_id, offsets, counts, header, text, metadata, vector_key,
                text_sha, bm25_len (the chunk's number of BM25 terms)
    embeddings  rowid -> vector (pgvector): apart from the texts, so that an exact search scans vectors
                only (in the chunks' rows they were TOASTed: a scan 6x slower), and HNSW indexes them
    vectors     key -> vector: the embedding cache, as the folder's ``vectors`` table
    postings    term, rowid, tf, dl (the chunk's bm25_len again, so that scoring reads no chunk row); the
                key holds tf and dl too, so a term's postings are read from the index alone (a third
                of the time of visiting their rows, scattered over the table as chunks came)
    totals      chunks and BM25 terms added or removed, one row per statement (triggers on ``chunks``):
                their sums are N and the total length BM25 needs, read in microseconds, and no row is
                shared by writers (a counter row would make them wait on each other); compacted now and
                then (:func:`compact_totals`)

Rows of ``embeddings`` and ``postings`` go with their chunk (ON DELETE CASCADE).

Why term counts and not scores: a score depends on every chunk (idf, average length); counts do
not, so a writer adds its chunks' rows in its own transaction and a query scores its few terms from
the counts of the state it reads (:mod:`._pg_bm25`), as the folder's postings are scored.

The schema version is :data:`SCHEMA_VERSION`. A database written by a newer contextkit is refused
with a clear message (never read as if it were this one's); an older one is brought up by the
steps of :data:`MIGRATIONS`, in one transaction, under the schema's advisory lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from contextkit.core.errors import IndexDatabaseError
from contextkit.index._pg_dsn import Dsn

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "TOTALS_ROWS", "Connections", "compact_totals", "create_schema", "schema_lock_key", "schema_problem",
           "translated"]

SCHEMA_VERSION = 1

_TABLES = """
CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {s}.files (path text PRIMARY KEY, sha256 text NOT NULL, size bigint NOT NULL, n_documents integer NOT NULL);
CREATE TABLE {s}.documents (
    id text PRIMARY KEY, file text, source text NOT NULL, sha256 text NOT NULL, n_chars bigint NOT NULL,
    metadata text NOT NULL);
CREATE INDEX documents_file ON {s}.documents (file);
CREATE TABLE {s}.chunks (
    rowid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text UNIQUE NOT NULL, doc_id text NOT NULL, ordinal integer NOT NULL,
    start integer NOT NULL, "end" integer NOT NULL, tokens integer NOT NULL, total_tokens integer NOT NULL,
    header text NOT NULL, text text NOT NULL, metadata text NOT NULL, vector_key text NOT NULL, text_sha text,
    bm25_len integer NOT NULL);
CREATE INDEX chunks_doc ON {s}.chunks (doc_id);
CREATE TABLE {s}.embeddings (
    rowid bigint PRIMARY KEY REFERENCES {s}.chunks (rowid) ON DELETE CASCADE, embedding {vector}({dim}) NOT NULL);
CREATE TABLE {s}.vectors (key text PRIMARY KEY, vector {vector}({dim}) NOT NULL);
CREATE TABLE {s}.postings (
    term text NOT NULL, rowid bigint NOT NULL REFERENCES {s}.chunks (rowid) ON DELETE CASCADE,
    tf integer NOT NULL, dl integer NOT NULL, PRIMARY KEY (term, rowid) INCLUDE (tf, dl));
CREATE INDEX postings_rowid ON {s}.postings (rowid);
CREATE TABLE {s}.totals (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, chunks bigint NOT NULL, terms bigint NOT NULL);
CREATE FUNCTION {s}.chunks_added() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO {s}.totals (chunks, terms) SELECT count(*), coalesce(sum(bm25_len), 0) FROM new_rows HAVING count(*) > 0; RETURN NULL; END $$;
CREATE FUNCTION {s}.chunks_removed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO {s}.totals (chunks, terms) SELECT -count(*), -coalesce(sum(bm25_len), 0) FROM old_rows HAVING count(*) > 0; RETURN NULL; END $$;
CREATE FUNCTION {s}.chunks_emptied() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN DELETE FROM {s}.totals; RETURN NULL; END $$;
CREATE TRIGGER chunks_added AFTER INSERT ON {s}.chunks REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.chunks_added();
CREATE TRIGGER chunks_removed AFTER DELETE ON {s}.chunks REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.chunks_removed();
CREATE TRIGGER chunks_emptied AFTER TRUNCATE ON {s}.chunks FOR EACH STATEMENT EXECUTE FUNCTION {s}.chunks_emptied();
"""

#: ``{version: step}``: the step that brings a schema at ``version`` to ``version + 1`` (none yet: the
#: first format). A step takes the connection, inside the migration's transaction, and the schema name.
MIGRATIONS: dict[int, Callable[[Any, str], None]] = {}


def schema_lock_key(schema: str) -> str:
    """The advisory lock (``hashtext``) that serialises creating and migrating one schema."""
    return f"contextkit:schema:{schema}"


def _connect(dsn: Dsn) -> Any:
    try:
        import pgvector  # noqa: F401
        import psycopg
    except ImportError:
        raise IndexDatabaseError(f"{dsn.display}: an index in PostgreSQL needs psycopg and pgvector: "
                                 "pip install 'contextkit[postgres]'") from None

    try:
        conn = psycopg.connect(dsn.conninfo, autocommit=True, connect_timeout=30,
                               application_name="contextkit")
    except psycopg.OperationalError as exc:
        raise IndexDatabaseError(f"{dsn.display}: cannot connect: {_first_line(exc)}") from None
    return conn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _with_vector_type(conn: Any, dsn: Dsn) -> None:
    """Teach the connection pgvector's types (numpy arrays in and out); a clear error without the extension."""
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except Exception as exc:  # psycopg.ProgrammingError: "vector type not found in the database"
        raise IndexDatabaseError(f"{dsn.display}: the pgvector extension is not installed in this database "
                                 f"({_first_line(exc)}); `CREATE EXTENSION vector` as a user allowed to") from None


def create_schema(conn: Any, dsn: Dsn, dim: int, manifest_json: str) -> bool:
    """Create the extension (when allowed), the schema and its tables; False when another process already
    created them (the caller opens it then). Runs in one transaction under the schema's advisory lock."""
    import psycopg
    from psycopg import sql

    s = sql.Identifier(dsn.schema)
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error as exc:
        if not _has_vector(conn):
            raise IndexDatabaseError(f"{dsn.display}: the pgvector extension is not available "
                                     f"({_first_line(exc)}); install pgvector on the server, then "
                                     "`CREATE EXTENSION vector` in this database") from None
    vector = sql.SQL(_vector_type_name(conn))
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema_lock_key(dsn.schema),))
        if _table_exists(conn, dsn.schema, "meta"):
            return False
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
        for statement in _TABLES.strip().split(";\n"):
            if statement.strip():
                conn.execute(sql.SQL(statement).format(s=s, vector=vector, dim=sql.Literal(dim)))
        conn.execute(sql.SQL("INSERT INTO {}.meta (key, value) VALUES ('schema_version', %s), ('manifest', %s), "
                             "('generation', '0')").format(s), (str(SCHEMA_VERSION), manifest_json))
    return True


def _has_vector(conn: Any) -> bool:
    return conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is not None


def _vector_type_name(conn: Any) -> str:
    """``schema.vector``, quoted: the extension's type wherever it was installed (usually ``public``)."""
    row = conn.execute("SELECT quote_ident(n.nspname) || '.vector' FROM pg_type t JOIN pg_namespace n "
                       "ON n.oid = t.typnamespace WHERE t.typname = 'vector' LIMIT 1").fetchone()
    return str(row[0]) if row else "vector"


def _table_exists(conn: Any, schema: str, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{table}',)).fetchone()
    return row is not None and row[0] is not None


def schema_problem(conn: Any, dsn: Dsn) -> str | None:
    """Why this database cannot be opened as an index, or None; an older schema is migrated first."""
    from psycopg import sql

    if not _table_exists(conn, dsn.schema, "meta"):
        return "no index here (schema or tables missing); create one with `contextkit ingest`"
    row = conn.execute(sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'")
                       .format(sql.Identifier(dsn.schema))).fetchone()
    version = int(row[0]) if row and str(row[0]).isdigit() else None
    if version is None:
        return "the schema holds no contextkit version (not an index of contextkit's)"
    if version > SCHEMA_VERSION:
        return (f"written by a newer contextkit (schema version {version}; this one reads up to "
                f"{SCHEMA_VERSION}); upgrade contextkit")
    if version < SCHEMA_VERSION:
        _migrate(conn, dsn, version)
    return None


def _migrate(conn: Any, dsn: Dsn, version: int) -> None:
    from psycopg import sql

    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema_lock_key(dsn.schema),))
        row = conn.execute(sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'")
                           .format(sql.Identifier(dsn.schema))).fetchone()
        current = int(row[0])
        while current < SCHEMA_VERSION:  # (another process may have migrated it while we waited)
            MIGRATIONS[current](conn, dsn.schema)
            current += 1
        conn.execute(sql.SQL("UPDATE {}.meta SET value = %s WHERE key = 'schema_version'")
                     .format(sql.Identifier(dsn.schema)), (str(current),))


def translated(exc: BaseException, dsn: Dsn) -> Exception | None:
    """A driver error a user can act on as contextkit's own, naming the database without its password:
    a lost or refused connection, a permission denied, a write sent to a read-only server (a replica).
    None for the rest (a bug keeps its traceback)."""
    import psycopg
    from psycopg import errors

    from contextkit.core.errors import IndexReadOnlyError

    if isinstance(exc, errors.ReadOnlySqlTransaction):
        return IndexReadOnlyError(f"{dsn.display}: the server takes no writes (a read replica?): {_first_line(exc)}")
    if isinstance(exc, errors.InsufficientPrivilege):
        return IndexReadOnlyError(f"{dsn.display}: permission denied: {_first_line(exc)}")
    if isinstance(exc, psycopg.OperationalError):
        return IndexDatabaseError(f"{dsn.display}: the database failed: {_first_line(exc)}")
    return None


#: More ``totals`` rows than this and a commit folds them into one.
TOTALS_ROWS = 256


def compact_totals(conn: Any) -> None:
    """Fold the committed ``totals`` rows into one (inside a writer's transaction). Rows other writers have
    not committed are not seen and stay; two compactions at once leave one sum (the second finds nothing)."""
    conn.execute("WITH gone AS (DELETE FROM totals WHERE id <= (SELECT max(id) FROM totals) RETURNING chunks, terms) "
                 "INSERT INTO totals (chunks, terms) SELECT sum(chunks), sum(terms) FROM gone HAVING count(*) > 0")


class Connections:
    """One connection per thread (a psycopg connection is not for two threads at once), each with the
    index's schema first on its ``search_path`` and pgvector's types; closed together."""

    def __init__(self, dsn: Dsn) -> None:
        self.dsn = dsn
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def get(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = _connect(self.dsn)
            try:
                _with_vector_type(conn, self.dsn)
                conn.execute(f'SET search_path TO "{self.dsn.schema}", public')
            except BaseException:
                conn.close()
                raise
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except Exception:  # noqa: S110 - closing a broken connection: nothing left to do
                pass
