"""Opening a store: bad URLs, unusable files and unreachable servers are clear errors."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ConfigurationError, HarnessError, WorkspaceError
from harness.sessions import SessionKey, StoredState, open_store
from harness.sessions.sqlite.store import SqliteStore

from .conftest import new_database
from .pg_server import PostgresServer, free_port

KEY = SessionKey("u", "a", "s")


@pytest.mark.parametrize(
    "url",
    ["", "sessions.db", "mysql://localhost/db", "sqlite:relative.db", "sqlite://relative.db"],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_store(url)
    assert "sqlite:///" in str(caught.value)


async def test_in_memory_store_is_private() -> None:
    first, second = open_store("sqlite://"), open_store("sqlite://")
    try:
        await first.commit(KEY, expected_version=0, events=[], state=StoredState(title="mine"))
        assert await second.load(KEY) is None
        loaded = await first.load(KEY)
        assert loaded is not None and loaded[0].title == "mine"
    finally:
        await first.aclose()
        await second.aclose()


async def test_parent_folders_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "sessions.db"
    store = open_store(f"sqlite://{path}")
    try:
        await store.commit(KEY, expected_version=0, events=[], state=StoredState())
    finally:
        await store.aclose()
    assert path.is_file()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_a_folder_is_not_a_database(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path}")
    with pytest.raises(WorkspaceError) as caught:
        await store.sessions("u")
    assert "is a folder" in str(caught.value)
    assert str(tmp_path / "sessions.db") in str(caught.value)
    await store.aclose()


async def test_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not the sessions you are looking for\n" * 100)
    store = open_store(f"sqlite://{path}")
    with pytest.raises(WorkspaceError) as caught:
        await store.load(KEY)
    assert "not a usable session database" in str(caught.value)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)
    await store.aclose()


async def test_a_folder_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = open_store(f"sqlite://{blocker / 'sub' / 'sessions.db'}")
    with pytest.raises(WorkspaceError) as caught:
        await store.load(KEY)
    assert "cannot create the folder" in str(caught.value)
    await store.aclose()


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    store = SqliteStore(f"sqlite://{path}")
    with pytest.raises(ConfigurationError) as caught:
        await store.load(KEY)
    assert "schema version 99" in str(caught.value) and "upgrade" in str(caught.value)
    await store.aclose()


async def test_a_closed_store_says_so() -> None:
    store = open_store("sqlite://")
    await store.aclose()
    with pytest.raises(HarnessError) as caught:
        await store.load(KEY)
    assert "closed" in str(caught.value)


async def test_reopening_keeps_everything(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'sessions.db'}"
    store = open_store(url)
    await store.commit(KEY, expected_version=0, events=[], state=StoredState(title="kept"))
    await store.aclose()
    again = open_store(url)
    try:
        loaded = await again.load(KEY)
        assert loaded is not None and (loaded[0].title, loaded[0].version) == ("kept", 1)
    finally:
        await again.aclose()


# ------------------------------------------------------------------ PostgreSQL
def test_psycopg_is_not_imported_with_harness() -> None:
    code = (
        "import sys, harness, harness.sessions; "
        "print(sorted(m for m in sys.modules if m.startswith('psycopg')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_missing_driver_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from harness.errors import ConfigurationError\n"
        "from harness.sessions import open_store\n"
        "try:\n"
        "    open_store('postgresql://u@127.0.0.1/db')\n"
        "except ConfigurationError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "context-harness[postgres]" in done.stdout
    assert done.stderr == ""


def test_a_malformed_postgres_url() -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_store("postgresql://u@host/db?sslmode")
    assert "not a valid PostgreSQL URL" in str(caught.value)


async def test_an_unreachable_server_is_one_clear_error() -> None:
    port = free_port()
    store = open_store(f"postgresql://someone:hunter2@127.0.0.1:{port}/sessions")
    assert "hunter2" not in store.url and "***" in store.url
    with pytest.raises(ConfigurationError) as caught:
        await store.sessions("u")
    message = str(caught.value)
    assert message.startswith(
        f"cannot connect to the session store postgresql://someone:***@127.0.0.1:{port}"
    )
    assert "hunter2" not in message and "server is running" in message
    assert "\n" not in message
    await store.aclose()


async def test_a_missing_database_is_one_clear_error(pg_server: PostgresServer) -> None:
    store = open_store(pg_server.database("no_such_database"))
    with pytest.raises(ConfigurationError) as caught:
        await store.load(KEY)
    assert "no_such_database" in str(caught.value) and "does not exist" in str(caught.value)
    await store.aclose()


async def test_a_newer_postgres_schema_is_refused(pg_server: PostgresServer) -> None:
    url = new_database(pg_server)
    pg_server.sql("UPDATE harness_schema SET version = 99", database=url.rsplit("/", 1)[1])
    store = open_store(url)
    with pytest.raises(ConfigurationError) as caught:
        await store.load(KEY)
    assert "schema version 99" in str(caught.value)
    await store.aclose()


async def test_schema_is_created_in_an_empty_database(pg_server: PostgresServer) -> None:
    pg_server.sql("CREATE DATABASE empty_one")
    store = open_store(pg_server.database("empty_one"))
    try:
        await store.commit(KEY, expected_version=0, events=[], state=StoredState(title="t"))
        assert [s.title for s in await store.sessions("u")] == ["t"]
    finally:
        await store.aclose()
    with pytest.raises(HarnessError):
        await store.load(KEY)
