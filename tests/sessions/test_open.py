"""Opening a store: bad URLs, unusable files and unreachable servers are clear errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness.errors import ConfigurationError, HarnessError, WorkspaceError
from harness.sessions import SessionKey, StoredState, open_store
from harness.sessions.sqlite import SqliteStore

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
