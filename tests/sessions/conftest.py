"""Fixtures for the session-store contract suite: one store per test, on every backend.

``store_url`` is parametrized over a SQLite file and a database of a real PostgreSQL server that
this module starts once per test session (see `pg_server`) and stops at the end. Each PostgreSQL
test gets a fresh database cloned from a template that already holds the schema.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from harness.sessions import SessionStore, open_store

from .pg_server import PostgresServer, find_bindir

BACKENDS = ("sqlite", "postgres")
_databases = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on a free loopback port for the whole test session."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL server binaries (initdb, pg_ctl) on this machine; `make setup` "
            "installs them (Debian's postgresql package)"
        )
    server = PostgresServer(bindir)
    server.start()
    try:
        server.sql("CREATE DATABASE harness_template")
        _migrate(server.database("harness_template"))
        yield server
    finally:
        server.stop()


def _migrate(url: str) -> None:
    """Create the store's schema in ``url`` (through the store itself)."""
    import anyio

    async def main() -> None:
        store = open_store(url)
        await store.sessions("nobody")
        await store.aclose()

    anyio.run(main)


def new_database(server: PostgresServer) -> str:
    """Return the URL of a fresh database that already holds the schema."""
    name = f"t{next(_databases)}"
    server.sql(f"CREATE DATABASE {name} TEMPLATE harness_template")
    return server.database(name)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test."""
    name: str = request.param
    return name


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A URL of an empty store of the backend under test."""
    if backend == "sqlite":
        return f"sqlite://{tmp_path / 'sessions.db'}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    return new_database(server)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SessionStore]:
    """An open store of the backend under test, closed afterwards."""
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        await opened.aclose()
