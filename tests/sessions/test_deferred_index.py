"""SQLite's deferred full-text index and its durability option.

Commits do not index (`fts_marks` holds how far the index goes); `search` and
`search_fragments` bring the index up to date first, so a search right after a commit still
finds it. Purging removes indexed texts, rowids reused after a purge are indexed, a version-2
database (indexed by triggers) is upgraded without indexing anything twice, and the URL's
``synchronous`` option sets the pragma.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.errors import ConfigurationError
from harness.fragments.model import Fragment, FragmentChange, FragmentScope
from harness.messages import Message
from harness.sessions import MessageEvent, SessionKey, StoredState, open_store
from harness.sessions.sqlite.store import SCHEMA_VERSION, SqliteStore

USER = "alice"


def _key(session: str, user: str = USER) -> SessionKey:
    return SessionKey(user, "agent", session)


async def _say(store: SqliteStore, key: SessionKey, version: int, *texts: str) -> int:
    events = [MessageEvent(message=Message.user(text)) for text in texts]
    return await store.commit(key, expected_version=version, events=events, state=StoredState())


@contextmanager
def _db(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of its own to the store's file, committed and closed at the end."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def _check_indexes(path: Path) -> None:
    """Check both indexes: FTS5's own consistency check, and exactly the rows up to the mark.

    ``texts`` is an external-content index over the events that carry a text, so its entries
    are listed through ``fts5vocab``: the events up to the mark, no more and no fewer.
    """
    with _db(path) as conn:
        conn.execute("INSERT INTO texts (texts) VALUES ('integrity-check')")
        conn.execute(
            "INSERT INTO fragment_texts (fragment_texts, rank) VALUES ('integrity-check', 1)"
        )
        conn.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, texts, instance)")
        indexed = {r[0] for r in conn.execute("SELECT DISTINCT doc FROM temp.terms")}
        expected = {
            r[0]
            for r in conn.execute(
                "SELECT id FROM events WHERE length(text) >= 3 "
                "AND id <= (SELECT upto FROM fts_marks WHERE name = 'events')"
            )
        }
        assert indexed == expected


def _mark(path: Path, name: str = "events") -> int:
    with _db(path) as conn:
        return int(conn.execute("SELECT upto FROM fts_marks WHERE name = ?", (name,)).fetchone()[0])


@pytest.fixture
async def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = SqliteStore(f"sqlite://{tmp_path / 'sessions.db'}")
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_a_commit_does_not_index_and_a_search_right_after_finds_it(
    store: SqliteStore, tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    version = await _say(store, _key("s1"), 0, "the deferred trigram index", "上下文管理的策略")
    assert _mark(path) == 0  # nothing indexed by the commit
    with _db(path) as conn:
        assert conn.execute(
            "SELECT count(*) FROM texts WHERE texts MATCH '\"deferred\"'"
        ).fetchone() == (0,)
    hits = await store.search(USER, "deferred trigram")
    assert [h.snippet for h in hits] == ["the deferred trigram index"]
    assert [h.snippet for h in await store.search(USER, "上下文管理")] == ["上下文管理的策略"]
    assert _mark(path) == 2
    await _say(store, _key("s1"), version, "a second round, deferred too")
    assert len(await store.search(USER, "deferred")) == 2  # indexed on the next search
    assert [h.snippet for h in await store.search(USER, "策略")] == ["上下文管理的策略"]  # LIKE
    _check_indexes(path)


async def test_in_memory_search_sees_every_commit() -> None:
    store = open_store("sqlite://")
    try:
        version = 0
        for n in range(5):
            version = await _say(store, _key("s"), version, f"round number {n} 中文测试{n}")  # type: ignore[arg-type]
            assert len(await store.search(USER, "round number")) == n + 1
            assert len(await store.search(USER, f"中文测试{n}")) == 1
    finally:
        await store.aclose()


async def test_purge_removes_indexed_and_unindexed_texts_and_reused_rowids_are_indexed(
    store: SqliteStore, tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    await _say(store, _key("old"), 0, "needle in the old session")
    await _say(store, _key("kept"), 0, "needle in the kept session")
    assert len(await store.search(USER, "needle")) == 2  # both indexed now
    await _say(store, _key("late"), 0, "needle committed after the search")  # not indexed
    assert await store.purge(_key("late"))
    assert await store.purge(_key("old"))
    _check_indexes(path)
    assert [h.session_id for h in await store.search(USER, "needle")] == ["kept"]
    # The purged rows' ids are free again: new commits reuse them and must be found.
    await _say(store, _key("new"), 0, "needle in a new session", "another needle")
    assert sorted(h.session_id for h in await store.search(USER, "needle")) == [
        "kept",
        "new",
        "new",
    ]
    assert len(await store.search(USER, "old session")) == 0
    _check_indexes(path)


async def test_purge_older_than_keeps_the_index_consistent(
    store: SqliteStore, tmp_path: Path
) -> None:
    await _say(store, _key("a"), 0, "retention needle")
    await store.search(USER, "needle")
    await _say(store, _key("b"), 0, "retention needle")
    assert len(await store.purge_older_than(-1)) == 2
    _check_indexes(tmp_path / "sessions.db")
    assert await store.search(USER, "needle") == []
    await _say(store, _key("c"), 0, "retention needle again")
    assert [h.session_id for h in await store.search(USER, "needle")] == ["c"]


async def test_fragment_texts_are_indexed_on_search(store: SqliteStore, tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    scope = FragmentScope.of_session(_key("f"))
    first = Fragment(id="n1", kind="user", title="deployment notes", content="use blue green")
    version = await store.commit_fragments(
        scope,
        expected_version=0,
        changes=[FragmentChange(fragment=first, op="add", old_version=0)],
        log=_key("f"),
    )
    assert _mark(path, "fragments") == 0
    assert [f.id for f in await store.search_fragments(scope, "blue green")] == ["n1"]
    edited = Fragment(
        id="n1",
        kind="user",
        title="deployment notes",
        content="canary 发布",
        version=2,
        edited=True,
    )
    await store.commit_fragments(
        scope,
        expected_version=version,
        changes=[FragmentChange(fragment=edited, op="edit", old_version=1)],
    )
    assert await store.search_fragments(scope, "blue green") == []
    assert [f.content for f in await store.search_fragments(scope, "canary")] == ["canary 发布"]
    _check_indexes(path)
    assert await store.purge(_key("f"))
    _check_indexes(path)
    with _db(path) as conn:
        assert conn.execute("SELECT count(*) FROM fragment_texts").fetchone() == (0,)


_V2_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    state BLOB NOT NULL,
    version INTEGER NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    n_events INTEGER NOT NULL DEFAULT 0,
    n_messages INTEGER NOT NULL DEFAULT 0,
    UNIQUE (user_id, agent_id, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions (user_id, updated_at);
CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions (updated_at);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    session INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    tag TEXT NOT NULL,
    body BLOB NOT NULL,
    at REAL NOT NULL,
    message_id TEXT,
    role TEXT,
    text TEXT,
    UNIQUE (session, seq)
);
CREATE INDEX IF NOT EXISTS events_by_message ON events (session, message_id)
    WHERE message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_by_tag ON events (session, tag, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5 (
    text, content='events', content_rowid='id', tokenize='trigram'
);
CREATE TRIGGER IF NOT EXISTS texts_insert AFTER INSERT ON events WHEN new.text IS NOT NULL
BEGIN
    INSERT INTO texts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS texts_delete AFTER DELETE ON events WHEN old.text IS NOT NULL
BEGIN
    INSERT INTO texts (texts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TABLE IF NOT EXISTS fragment_sets (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (user_id, agent_id, scope, name)
);
CREATE TABLE IF NOT EXISTS fragments (
    id INTEGER PRIMARY KEY,
    fset INTEGER NOT NULL REFERENCES fragment_sets (id) ON DELETE CASCADE,
    fragment_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    body BLOB NOT NULL,
    text TEXT NOT NULL,
    removed INTEGER NOT NULL,
    UNIQUE (fset, fragment_id)
);
CREATE TABLE IF NOT EXISTS fragment_versions (
    fset INTEGER NOT NULL REFERENCES fragment_sets (id) ON DELETE CASCADE,
    fragment_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    op TEXT NOT NULL,
    at REAL NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (fset, fragment_id, version)
);
CREATE VIRTUAL TABLE IF NOT EXISTS fragment_texts USING fts5 (
    text, content='fragments', content_rowid='id', tokenize='trigram'
);
CREATE TRIGGER IF NOT EXISTS fragment_texts_insert AFTER INSERT ON fragments
BEGIN
    INSERT INTO fragment_texts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS fragment_texts_delete AFTER DELETE ON fragments
BEGIN
    INSERT INTO fragment_texts (fragment_texts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER IF NOT EXISTS fragment_texts_update AFTER UPDATE ON fragments
BEGIN
    INSERT INTO fragment_texts (fragment_texts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO fragment_texts (rowid, text) VALUES (new.id, new.text);
END;
"""


async def test_a_version_2_database_is_upgraded_without_indexing_twice(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    with _db(path) as conn:
        conn.executescript(_V2_SCHEMA)
        conn.execute(
            "INSERT INTO sessions (user_id, agent_id, session_id, state, version, created_at, "
            "updated_at, n_events, n_messages) VALUES (?, 'agent', 'old', ?, 1, 0, 0, 1, 1)",
            (USER, b'{"working_ids":[],"version":1}'),
        )
        body = b'{"type":"message","message":{"role":"user","content":"x"},"at":0}'
        conn.execute(
            "INSERT INTO events (session, seq, tag, body, at, message_id, role, text) "
            "VALUES (1, 1, 'message', ?, 0, 'm1', 'user', 'indexed by the old trigger')",
            (body,),
        )
        conn.execute(
            "INSERT INTO fragment_sets (user_id, agent_id, scope, name, version, updated_at) "
            "VALUES (?, 'agent', 'session', 'old', 1, 0)",
            (USER,),
        )
        fragment = Fragment(id="f1", kind="user", title="legacy fragment", content="kept")
        from harness.sessions import _rows

        conn.execute(
            "INSERT INTO fragments (fset, fragment_id, version, body, text, removed) "
            "VALUES (1, 'f1', 1, ?, ?, 0)",
            (_rows.ENCODER.encode(fragment), _rows.fragment_text(fragment)),
        )
        conn.execute(
            "INSERT INTO fragment_versions (fset, fragment_id, version, op, at, body) "
            "VALUES (1, 'f1', 1, 'add', 0, ?)",
            (_rows.ENCODER.encode(fragment),),
        )
        conn.execute("PRAGMA user_version = 2")
    store = SqliteStore(f"sqlite://{path}")
    try:
        await _say(store, _key("new"), 0, "indexed by the search")
        assert len(await store.search(USER, "indexed by")) == 2
        scope = FragmentScope.of_session(_key("old"))
        assert [f.id for f in await store.search_fragments(scope, "legacy")] == ["f1"]
    finally:
        await store.aclose()
    _check_indexes(path)
    with _db(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        triggers = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        }
        assert triggers == {"texts_delete", "fragment_texts_delete"}


@pytest.mark.parametrize(
    ("query", "pragma"), [("", 1), ("?synchronous=normal", 1), ("?synchronous=FULL", 2)]
)
async def test_synchronous_option(tmp_path: Path, query: str, pragma: int) -> None:
    store = SqliteStore(f"sqlite://{tmp_path / 'sessions.db'}{query}")
    try:
        await store.sessions(USER)
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (pragma,)
        assert store._conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "url", ["sqlite:///tmp/x.db?synchronous=off", "sqlite:///tmp/x.db?mode=ro", "sqlite:///x.db#f"]
)
def test_bad_options(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SqliteStore(url)
    assert "sqlite:///path/to/sessions.db" in str(caught.value)


async def test_a_version_3_database_gets_the_set_index_and_keeps_its_fragment_index(
    tmp_path: Path,
) -> None:
    """Only the steps past a database's version run: a version-3 file keeps its FTS rows."""
    path = tmp_path / "v3.db"
    scope = FragmentScope.of_session(_key("f"))
    store = SqliteStore(f"sqlite://{path}")
    try:
        notes = [
            Fragment(id=f"n{i}", kind="user", content=f"rollout step {i}", version=1)
            for i in range(3)
        ]
        await store.commit_fragments(
            scope,
            expected_version=0,
            changes=[FragmentChange(fragment=n, op="add", old_version=0) for n in notes],
        )
        assert len(await store.search_fragments(scope, "rollout")) == 3  # indexed up to the mark
    finally:
        await store.aclose()
    with _db(path) as conn:
        conn.execute("DROP INDEX fragments_by_set")
        conn.execute("PRAGMA user_version = 3")
    store = SqliteStore(f"sqlite://{path}")
    try:
        assert [f.id for f in await store.search_fragments(scope, "rollout")] == ["n0", "n1", "n2"]
        assert [f.id for f in (await store.fragments(scope))[1]] == ["n0", "n1", "n2"]
    finally:
        await store.aclose()
    _check_indexes(path)
    with _db(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (7,)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"usage", "learned"} <= tables  # version 7's tables, added to the old file
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT body FROM fragments WHERE fset = 1 ORDER BY id"
        ).fetchall()
        assert [row[3] for row in plan] == [
            "SEARCH fragments USING INDEX fragments_by_set (fset=?)"
        ]
