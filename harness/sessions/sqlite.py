"""The embedded session store: one SQLite file (or a private in-memory database).

``sqlite:///path/to/sessions.db`` opens (and creates, with its folder) a database file;
``sqlite://`` opens a private database in memory. The standard library's ``sqlite3`` runs in
worker threads (`anyio.to_thread.run_sync`) on one connection guarded by a lock, so many tasks
can call the store at once while SQLite sees one writer at a time; other processes on the same
file wait on SQLite's own lock (busy timeout). Every commit is one ``BEGIN IMMEDIATE``
transaction in a WAL journal. A round's `SqliteStore.commit` runs on the event loop itself when
nothing can make it wait (the hop to a worker thread cost more than the commit); the store
checkpoints the WAL in a worker thread every `CHECKPOINT_EVERY` commits.

**Durability.** ``synchronous=NORMAL`` by default: a commit is written to the WAL (the
operating system's page cache) before `commit` returns, and the WAL is fsynced at checkpoints.

- Guaranteed: a commit that returned survives the *process* dying at any moment (an exception,
  SIGKILL, the OOM killer): the kernel still writes the WAL out. The database is never
  corrupted, by a crash or a power loss, and a transaction is all or nothing.
- Not guaranteed: after a *power loss or an operating-system crash*, the last commits before
  it (those since the last checkpoint's fsync) may be missing — rolled back as whole rounds,
  never half-written.

``sqlite:///path/to/sessions.db?synchronous=full`` fsyncs the WAL on every commit, so a
returned commit survives a power loss too, at the price of one fsync per round (0.5–5 ms
depending on the disk). ``synchronous`` is the URL's only option.

**Search.** An FTS5 index with the ``trigram`` tokenizer (any script, CJK included); terms
shorter than three characters fall back to ``LIKE``. The index is not maintained in the
commit transaction (indexing a round's texts cost several times the rest of the commit):
``fts_marks`` holds the highest ``events`` rowid indexed (and, for fragments, the highest
``fragment_versions`` rowid), and `search` / `search_fragments` first index whatever was
committed past the mark, in one transaction on the locked connection, then query — so a search
sees every commit that returned before it, and the first search after many rounds pays for
indexing them. `purge` removes a session's indexed texts in its own transaction.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, TypeVar

import anyio.to_thread
import msgspec

from harness.errors import ConfigurationError, WorkspaceError
from harness.fragments import Fragment, FragmentChange, FragmentScope, SetsFound
from harness.messages import Message
from harness.sessions import _rows
from harness.sessions.store import (
    Event,
    LoggedEvent,
    SearchHit,
    SessionInfo,
    SessionKey,
    StoredState,
)

T = TypeVar("T")

BUSY_TIMEOUT_MS: Final = 30_000
"""How long a writer waits for another process's transaction before giving up."""

SCHEMA_VERSION: Final = 5
"""The SQLite layout: `_rows.SCHEMA_VERSION` (2, the tables both backends share) plus the
deferred full-text index of version 3 (``fts_marks``, no insert triggers, ``fragment_texts``
with its own copy of the texts), version 4's ``fragments_by_set`` index (a set is read in
row order without sorting its bodies in a temporary tree) and version 5's ``working`` table
(the working ids one row each, so a commit writes only those that changed; rewriting them in
the state blob cost ~1.2 ms a commit at 10,000 ids). A database with a newer version
is refused, so an older context-harness (whose triggers would index rows a second time)
cannot open a version-3 file. Each upgrade step runs once, in order."""

SYNCHRONOUS: Final = ("normal", "full")
"""The values of the URL's ``synchronous`` option (``normal`` by default)."""

SIDE_BY_SIDE_S: Final = 0.05
"""Commits of two sessions this close together mean they run side by side: a commit then goes
to a worker thread, where it overlaps with the other sessions' work on the event loop."""
CHECKPOINT_EVERY: Final = 256
"""Commits between the WAL checkpoints the store runs in a worker thread. SQLite's automatic
checkpoint is off on the store's connection: it would run inside whichever commit crossed
the WAL's size, and a commit may run on the event loop (`SqliteStore.commit`)."""

_IN_CHUNK: Final = 500
"""Ids per ``IN (…)`` query (SQLite's variable limit is 32766, but short queries plan better)."""

_SCHEMA: Final = """
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
"""

_UPGRADE_3: Final = """
DROP TRIGGER IF EXISTS texts_insert;
DROP TRIGGER IF EXISTS texts_delete;
DROP TRIGGER IF EXISTS fragment_texts_insert;
DROP TRIGGER IF EXISTS fragment_texts_delete;
DROP TRIGGER IF EXISTS fragment_texts_update;
DROP TABLE IF EXISTS fragment_texts;
CREATE TABLE IF NOT EXISTS fts_marks (name TEXT PRIMARY KEY, upto INTEGER NOT NULL);
INSERT OR IGNORE INTO fts_marks (name, upto)
    VALUES ('events', coalesce((SELECT max(id) FROM events), 0));
INSERT OR IGNORE INTO fts_marks (name, upto) VALUES ('fragments', 0);
CREATE TRIGGER texts_delete AFTER DELETE ON events
WHEN old.text IS NOT NULL AND old.id <= (SELECT upto FROM fts_marks WHERE name = 'events')
BEGIN
    INSERT INTO texts (texts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE VIRTUAL TABLE fragment_texts USING fts5 (text, tokenize='trigram');
CREATE TRIGGER fragment_texts_delete AFTER DELETE ON fragments
BEGIN
    DELETE FROM fragment_texts WHERE rowid = old.id;
END;
"""

_UPGRADE_4: Final = """
CREATE INDEX IF NOT EXISTS fragments_by_set ON fragments (fset);
"""

_UPGRADE_5: Final = """
CREATE TABLE IF NOT EXISTS working (
    session INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    pos INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    PRIMARY KEY (session, pos)
) WITHOUT ROWID;
ALTER TABLE sessions ADD COLUMN working_n INTEGER;
"""
"""A session's working ids as rows (``working_n`` of them), written as changes when a commit
says how many are unchanged (`StoredState.unchanged`: the agent's recorder does). ``working_n``
NULL: the ids are in the state blob (a commit without that hint, one written before version 5,
or a session only a fragment change created)."""

_UPGRADES: Final = ((3, _UPGRADE_3), (4, _UPGRADE_4), (5, _UPGRADE_5))
"""The steps after the shared tables, by the version each brings a database to."""


class SqliteStore:
    """A `SessionStore` in one SQLite file, or in memory for ``sqlite://``."""

    def __init__(self, url: str) -> None:
        """Parse ``url``; the database is opened on first use.

        Raises:
            ConfigurationError: the URL is not ``sqlite://`` or ``sqlite:///path``.
        """
        self.url = url
        self.path, self.synchronous = _parse(url)
        """The database file, or ``None`` for a private in-memory database."""
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._sets = _SetCache(self.path)
        self._unchecked = 0
        """Commits since the last WAL checkpoint."""
        self._last_key: SessionKey | None = None
        self._last_at = float("-inf")
        """The session that committed last, and when (`_side_by_side`)."""

    def __repr__(self) -> str:
        return f"SqliteStore({self.url!r})"

    # ------------------------------------------------------------------ plumbing
    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._locked, work)

    def _locked(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise ConfigurationError(f"the session store {self.url} is closed; open a new one")
            if self._conn is None:
                self._conn = self._open()
            conn = self._conn
            try:
                return work(conn)
            except sqlite3.Error as error:
                _rollback(conn)
                raise self._failure(error) from error
            except BaseException:
                _rollback(conn)
                raise

    def _failure(self, error: sqlite3.Error) -> WorkspaceError:
        where = "the in-memory session store" if self.path is None else f"{self.path}"
        return WorkspaceError(
            f"the session database {where} failed: {error}. Check that the file is a "
            "context-harness session database, that the disk is not full and that no other "
            "program holds a lock on it.",
            path=str(self.path or ""),
        )

    def _open(self) -> sqlite3.Connection:
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            _check_file(self.path)
        try:
            conn = sqlite3.connect(
                target,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as error:
            raise WorkspaceError(
                f"cannot open the session database {target}: {error}. Check the path and its "
                "permissions.",
                path=target,
            ) from error
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            if self.path is not None:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # see CHECKPOINT_EVERY
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            _migrate(conn, target)
            if self.path is not None:
                self._sets.watch(conn)
                (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
                if str(mode).lower() == "wal":  # else a leftover -shm file says nothing
                    self._sets.shm = _wal_index(self.path)
        except sqlite3.DatabaseError as error:
            conn.close()
            raise WorkspaceError(
                f"{target} is not a usable session database: {error}. Point the store at a "
                "new file or at a database that context-harness created.",
                path=target,
            ) from error
        except BaseException:
            conn.close()
            raise
        return conn

    # ------------------------------------------------------------------ the API
    async def load(self, key: SessionKey) -> tuple[StoredState, dict[str, Message]] | None:
        """Return the state and its working messages by id, or ``None`` for a new session."""

        def work(conn: sqlite3.Connection) -> tuple[StoredState, dict[str, Message]] | None:
            row = conn.execute(
                "SELECT id, state, version, working_n FROM sessions "
                "WHERE user_id = ? AND agent_id = ? AND session_id = ?",
                (key.user_id, key.agent_id, key.session_id),
            ).fetchone()
            if row is None:
                return None
            state = _rows.STATE_DECODER.decode(row[1])
            state.version = row[2]
            if row[3] is not None:
                state.working_ids = tuple(
                    i
                    for (i,) in conn.execute(
                        "SELECT message_id FROM working WHERE session = ? ORDER BY pos", (row[0],)
                    )
                )
            return state, _messages(conn, row[0], state.working_ids)

        return await self._run(work)

    async def commit(
        self, key: SessionKey, *, expected_version: int, events: Sequence[Event], state: StoredState
    ) -> int:
        """Append ``events`` and replace the state in one transaction; return the new version.

        The transaction runs on the calling thread when nothing can make it wait — the
        connection is free, no other process holds the write lock (tried without a busy
        timeout) and ``synchronous`` is ``normal`` (no fsync): a round's WAL append then takes
        less than the hop to a worker thread and back (75–250 µs on a busy 2-core machine).
        Otherwise, and every `CHECKPOINT_EVERY` commits (then followed by a WAL checkpoint),
        it runs in a worker thread and waits there. With ``state.unchanged`` the working ids
        are written as changes to the ``working`` rows (a round that appended writes its new
        ids, not the whole history's); without it they go whole into the state blob.

        Raises:
            StateConflict: the stored version is not ``expected_version`` (nothing written).
        """
        batch = list(events)
        new_version = expected_version + 1
        ids = tuple(state.working_ids)
        # With a hint the ids go to ``working`` as changes; without, whole into the blob.
        rows = min(state.unchanged, len(ids)) > 0
        body = _rows.ENCODER.encode(_stored(state, new_version, with_ids=not rows))
        count = len(ids) if rows else None
        messages = _rows.count_messages(batch)

        def work(conn: sqlite3.Connection) -> int:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "SELECT id, version, n_events, working_n FROM sessions "
                "WHERE user_id = ? AND agent_id = ? AND session_id = ?",
                (key.user_id, key.agent_id, key.session_id),
            ).fetchone()
            actual = 0 if row is None else row[1]
            if actual != expected_version:
                raise _rows.conflict(key, expected_version, actual)
            if row is None:
                cursor = conn.execute(
                    "INSERT INTO sessions (user_id, agent_id, session_id, state, version, title, "
                    "created_at, updated_at, n_events, n_messages, working_n) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        key.user_id,
                        key.agent_id,
                        key.session_id,
                        body,
                        new_version,
                        state.title,
                        now,
                        now,
                        len(batch),
                        messages,
                        count,
                    ),
                )
                session, first, stored = int(cursor.lastrowid or 0), 1, 0
            else:
                session, first, stored = row[0], row[2] + 1, row[3] or 0
                conn.execute(
                    "UPDATE sessions SET state = ?, version = ?, title = ?, updated_at = ?, "
                    "n_events = n_events + ?, n_messages = n_messages + ?, working_n = ? "
                    "WHERE id = ?",
                    (body, new_version, state.title, now, len(batch), messages, count, session),
                )
            # The rows the stored state shares with this one stay; the rest are written anew.
            kept = min(state.unchanged, stored, len(ids)) if rows else 0
            if stored > kept:
                conn.execute("DELETE FROM working WHERE session = ? AND pos >= ?", (session, kept))
            if rows and len(ids) > kept:
                conn.executemany(
                    "INSERT INTO working (session, pos, message_id) VALUES (?, ?, ?)",
                    [(session, pos, ids[pos]) for pos in range(kept, len(ids))],
                )
            conn.executemany(
                "INSERT INTO events (session, seq, tag, body, at, message_id, role, text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (session, r.seq, r.tag, r.body, r.at, r.message_id, r.role, r.text)
                    for r in _rows.event_rows(batch, first)
                ],
            )
            before = self._sets.header()  # the write lock is held: no one else commits now
            conn.commit()
            self._sets.committed(before)
            return new_version

        alone = not self._side_by_side(key)
        if self._unchecked < CHECKPOINT_EVERY:
            self._unchecked += 1
            done = self._commit_here(work) if alone else None
            if done is not None:
                return done
            return await self._run(work)  # a checkpoint only every CHECKPOINT_EVERY commits
        self._unchecked = 0
        return await self._run(lambda conn: _checkpointed(conn, work(conn)))

    def _side_by_side(self, key: SessionKey) -> bool:
        """Return whether another session committed within `SIDE_BY_SIDE_S` (and note this one).

        Sessions then run side by side in this process: a commit on the event loop would hold
        up every other session's preparation, while in a worker thread it overlaps with it
        (SQLite releases the GIL for its work). One session at a time commits on the loop.
        """
        now = time.monotonic()
        others = self._last_key != key and now - self._last_at < SIDE_BY_SIDE_S
        self._last_key, self._last_at = key, now
        return others

    def _commit_here(self, work: Callable[[sqlite3.Connection], int]) -> int | None:
        """Run ``work`` on this thread if nothing makes it wait; ``None``: nothing was written."""
        conn = self._conn
        if conn is None or self.synchronous != "normal" or not self._lock.acquire(blocking=False):
            return None
        try:
            if self._closed or self._conn is not conn:
                return None
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                return work(conn)
            except sqlite3.OperationalError as error:
                _rollback(conn)
                if error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                    return None  # another process writes: wait for it in a worker thread
                raise self._failure(error) from error
            except sqlite3.Error as error:
                _rollback(conn)
                raise self._failure(error) from error
            except BaseException:
                _rollback(conn)
                raise
            finally:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        finally:
            self._lock.release()

    async def events(
        self, key: SessionKey, *, offset: int = 0, limit: int = 100, kinds: Sequence[str] = ()
    ) -> list[LoggedEvent]:
        """Return a page of the log, oldest first (``kinds`` filters by event tag)."""
        tags = tuple(kinds)

        def work(conn: sqlite3.Connection) -> list[LoggedEvent]:
            session = _session_id(conn, key)
            if session is None:
                return []
            where = ""
            if tags:
                where = f" AND tag IN ({', '.join('?' * len(tags))})"
            rows = conn.execute(
                f"SELECT seq, body FROM events WHERE session = ?{where} "
                "ORDER BY seq LIMIT ? OFFSET ?",
                (session, *tags, max(0, limit), max(0, offset)),
            ).fetchall()
            return [
                LoggedEvent(seq=seq, event=_rows.EVENT_DECODER.decode(body)) for seq, body in rows
            ]

        return await self._run(work)

    async def messages(self, key: SessionKey, ids: Sequence[str]) -> dict[str, Message]:
        """Return the messages of the log with these ids (originals, copies and summaries)."""
        wanted = tuple(dict.fromkeys(ids))

        def work(conn: sqlite3.Connection) -> dict[str, Message]:
            session = _session_id(conn, key)
            return {} if session is None else _messages(conn, session, wanted)

        return await self._run(work)

    async def sessions(self, user_id: str, agent_id: str | None = None) -> list[SessionInfo]:
        """Return the user's sessions, most recently active first."""

        def work(conn: sqlite3.Connection) -> list[SessionInfo]:
            sql = (
                "SELECT agent_id, session_id, title, n_messages, n_events, created_at, "
                "updated_at FROM sessions WHERE user_id = ?"
            )
            args: tuple[str, ...] = (user_id,)
            if agent_id is not None:
                sql += " AND agent_id = ?"
                args += (agent_id,)
            rows = conn.execute(sql + " ORDER BY updated_at DESC, id DESC", args).fetchall()
            return [
                SessionInfo(
                    agent_id=r[0],
                    session_id=r[1],
                    title=r[2],
                    messages=r[3],
                    events=r[4],
                    created_at=r[5],
                    updated_at=r[6],
                )
                for r in rows
            ]

        return await self._run(work)

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Full-text search over the messages of the user's sessions (CJK included)."""
        terms = _rows.search_terms(query)
        if not terms or limit <= 0:
            return []
        long_terms = [t for t in terms if len(t) >= 3]
        short_terms = [t for t in terms if len(t) < 3]

        def work(conn: sqlite3.Connection) -> list[SearchHit]:
            args: list[object] = []
            if long_terms:
                _index_events(conn)
                # Each term a quoted phrase: a trigram phrase matches as a substring.
                match = " AND ".join('"' + t.replace('"', '""') + '"' for t in long_terms)
                sql = (
                    "SELECT s.agent_id, s.session_id, e.seq, e.message_id, e.role, e.text, e.at "
                    "FROM texts JOIN events e ON e.id = texts.rowid "
                    "JOIN sessions s ON s.id = e.session "
                    "WHERE texts MATCH ? AND s.user_id = ?"
                )
                args += [match, user_id]
                order = " ORDER BY texts.rank, e.at DESC"
            else:
                sql = (
                    "SELECT s.agent_id, s.session_id, e.seq, e.message_id, e.role, e.text, e.at "
                    "FROM events e JOIN sessions s ON s.id = e.session "
                    "WHERE s.user_id = ? AND e.text IS NOT NULL"
                )
                args.append(user_id)
                order = " ORDER BY e.at DESC"
            for term in short_terms:
                sql += " AND e.text LIKE ? ESCAPE '\\'"
                args.append(f"%{_rows.escape_like(term)}%")
            rows = conn.execute(sql + order + " LIMIT ?", (*args, limit)).fetchall()
            return [
                SearchHit(
                    agent_id=r[0],
                    session_id=r[1],
                    seq=r[2],
                    message_id=r[3],
                    role=r[4],
                    snippet=_rows.snippet(r[5], terms),
                    at=r[6],
                )
                for r in rows
            ]

        return await self._run(work)

    async def purge(self, key: SessionKey) -> bool:
        """Delete one session entirely; return whether it existed."""

        def work(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            session = _session_id(conn, key)
            if session is not None:
                _delete(conn, session)
            conn.commit()
            return session is not None

        return await self._run(work)

    async def purge_older_than(self, seconds: float) -> list[SessionKey]:
        """Delete every session whose last activity is older; return their keys."""

        def work(conn: sqlite3.Connection) -> list[SessionKey]:
            cutoff = time.time() - seconds
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                "SELECT id, user_id, agent_id, session_id FROM sessions WHERE updated_at < ?",
                (cutoff,),
            ).fetchall()
            for row in rows:
                _delete(conn, row[0])
            conn.commit()
            return [SessionKey(r[1], r[2], r[3]) for r in rows]

        return await self._run(work)

    # ------------------------------------------------------------ fragments
    async def fragments(self, scope: FragmentScope) -> tuple[int, list[Fragment]]:
        """Return the set's version (0 when never written) and its fragments' current versions."""
        (found,) = await self.fragment_sets((scope,))
        return found

    async def fragment_sets(
        self, scopes: Sequence[FragmentScope]
    ) -> list[tuple[int, list[Fragment]]]:
        """Return `fragments` of each scope: from the cache when unchanged, else in one trip.

        FragmentEditor reads the session's and the project's set before every request. On a
        file, `_SetCache` answers on the event loop: while no fragment set was written since
        it last looked (one ``PRAGMA data_version`` on the store's connection, which moves
        only for other connections' commits, and a count of this connection's own fragment
        writes) it repeats that answer; else it looks the sets' rows up through its own
        read-only connection (a WAL reader never waits for a writer). When every set is
        absent (a session with no fragments) or at the stamp it was cached at, the answer
        takes no worker-thread trip — so a thousand sessions starting at once do not queue
        for the thread limiter — and an edit by another process still reaches the next
        request.
        """
        wanted = tuple(scopes)
        found = self._sets.answer(wanted, self._conn, self._lock)
        if found is not None:
            return found
        return await self._run(lambda conn: self._sets.read(conn, wanted))

    def fragment_sets_now(self, scopes: Sequence[FragmentScope]) -> SetsFound | None:
        """Return `fragment_sets` from the cache when it can tell at once, else ``None``.

        What `fragment_sets` does first, without a coroutine
        (`harness.fragments.AnswersSetsAtOnce`); the answer repeated most is the cache's
        own, read-only (`_SetCache.repeated`).
        """
        wanted = scopes if type(scopes) is tuple else tuple(scopes)
        found = self._sets.repeated(wanted)
        if found is not None:
            return found
        return self._sets.answer(wanted, self._conn, self._lock)

    async def fragment(self, scope: FragmentScope, fragment_id: str) -> tuple[int, Fragment | None]:
        """Return the set's version and one fragment's current version (one read snapshot).

        A write checks the set version and changes one fragment: it need not read the set
        (`harness.fragments.ReadsOneFragment`).
        """

        def work(conn: sqlite3.Connection) -> tuple[int, Fragment | None]:
            conn.execute("BEGIN")
            try:
                row = _fragment_set(conn, scope)
                if row is None:
                    return 0, None
                found = conn.execute(
                    "SELECT body FROM fragments WHERE fset = ? AND fragment_id = ?",
                    (row[0], fragment_id),
                ).fetchall()
            finally:
                conn.commit()
            return row[1], _rows.FRAGMENT_DECODER.decode(found[0][0]) if found else None

        return await self._run(work)

    async def commit_fragments(
        self,
        scope: FragmentScope,
        *,
        expected_version: int,
        changes: Sequence[FragmentChange],
        log: SessionKey | None = None,
    ) -> int:
        """Write new fragment versions in one transaction; return the set's new version.

        Raises:
            StateConflict: the set's version is not ``expected_version`` (nothing written).
        """
        batch = list(changes)
        new_version = expected_version + 1
        events = _rows.fragment_events(scope, batch, new_version)

        def work(conn: sqlite3.Connection) -> int:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            row = _stamp(conn, scope)
            actual = 0 if row is None else row[1]
            if actual != expected_version:
                raise _rows.fragment_conflict(scope, expected_version, actual)
            if row is None:
                cursor = conn.execute(
                    "INSERT INTO fragment_sets (user_id, agent_id, scope, name, version, "
                    "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (scope.user_id, scope.agent_id, scope.scope, scope.name, new_version, now),
                )
                fset = int(cursor.lastrowid or 0)
            else:
                fset = row[0]
                conn.execute(
                    "UPDATE fragment_sets SET version = ?, updated_at = ? WHERE id = ?",
                    (new_version, now, fset),
                )
            for change in batch:
                fragment = change.fragment
                body = _rows.ENCODER.encode(fragment)
                conn.execute(
                    "INSERT INTO fragments (fset, fragment_id, version, body, text, removed) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (fset, fragment_id) DO UPDATE SET "
                    "version = excluded.version, body = excluded.body, text = excluded.text, "
                    "removed = excluded.removed",
                    (
                        fset,
                        fragment.id,
                        fragment.version,
                        body,
                        _rows.fragment_text(fragment),
                        int(fragment.removed),
                    ),
                )
                conn.execute(
                    "INSERT INTO fragment_versions (fset, fragment_id, version, op, at, body) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (fset, fragment.id, fragment.version, change.op, now, body),
                )
            if log is not None and events:
                session, first = _session_for_log(conn, log, now, len(events))
                conn.executemany(
                    "INSERT INTO events (session, seq, tag, body, at, message_id, role, text) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (session, r.seq, r.tag, r.body, r.at, r.message_id, r.role, r.text)
                        for r in _rows.event_rows(events, first)
                    ],
                )
            conn.commit()
            self._sets.wrote(scope, row, (fset, new_version, now), [c.fragment for c in batch])
            return new_version

        return await self._run(work)

    async def fragment_versions(self, scope: FragmentScope, fragment_id: str) -> list[Fragment]:
        """Return every stored version of one fragment, oldest first."""

        def work(conn: sqlite3.Connection) -> list[Fragment]:
            row = _fragment_set(conn, scope)
            if row is None:
                return []
            rows = conn.execute(
                "SELECT body FROM fragment_versions WHERE fset = ? AND fragment_id = ? "
                "ORDER BY version",
                (row[0], fragment_id),
            ).fetchall()
            return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]

        return await self._run(work)

    async def search_fragments(
        self, scope: FragmentScope, query: str, *, limit: int = 50
    ) -> list[Fragment]:
        """Full-text search over the set's current fragments (title, tags, content; CJK too)."""
        terms = _rows.search_terms(query)
        if not terms or limit <= 0:
            return []
        long_terms = [t for t in terms if len(t) >= 3]
        short_terms = [t for t in terms if len(t) < 3]

        def work(conn: sqlite3.Connection) -> list[Fragment]:
            row = _fragment_set(conn, scope)
            if row is None:
                return []
            args: list[object] = []
            if long_terms:
                _index_fragments(conn)
                match = " AND ".join('"' + t.replace('"', '""') + '"' for t in long_terms)
                sql = (
                    "SELECT f.body FROM fragment_texts JOIN fragments f "
                    "ON f.id = fragment_texts.rowid WHERE fragment_texts MATCH ? AND f.fset = ?"
                )
                args += [match, row[0]]
            else:
                sql = "SELECT f.body FROM fragments f WHERE f.fset = ?"
                args.append(row[0])
            sql += " AND f.removed = 0"
            for term in short_terms:
                sql += " AND f.text LIKE ? ESCAPE '\\'"
                args.append(f"%{_rows.escape_like(term)}%")
            # The index's rowid is the fragment's: ordering by it lets FTS5 stop at the limit
            # instead of sorting every match (a frequent word at 10,000 fragments: ~60 -> 1.5 ms).
            order = " ORDER BY fragment_texts.rowid" if long_terms else " ORDER BY f.id"
            rows = conn.execute(sql + order + " LIMIT ?", (*args, limit)).fetchall()
            return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]

        return await self._run(work)

    async def aclose(self) -> None:
        """Close the database (an in-memory store loses its sessions)."""

        def work() -> None:
            with self._lock:
                self._closed = True
                self._sets.close()
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(work)


# ---------------------------------------------------------------------- helpers
Stamp = tuple[int, int, float]
"""A fragment set's row as the cache checks it: (row id, version, updated_at) — a set
purged and written again gets a new stamp even where its row id and version repeat."""


_Answer = tuple[tuple[int, int], tuple[FragmentScope, ...], list[tuple[int, list[Fragment]]]]
"""A generation, the scopes answered at it, and the answer (its lists `_SetCache.known`'s)."""


class _SetCache:
    """Fragment sets read before, kept with the stamp of the set's row they were read at.

    Two checks, both on the event loop, neither waiting for a lock:

    - **Nothing written since the last look** — the *generation*: ``PRAGMA data_version``
      on the store's own connection (SQLite moves it for every commit by *another*
      connection, any process, and never for this connection's own commits, so the
      session's per-round commits leave it alone) and `writes`, which temporary triggers on
      that connection bump for every row it writes to ``fragment_sets`` (a set's every
      change rewrites its row). At the generation of the last look, the answers then given
      (`known`, absent sets included) still hold: one statement and no probe (~2× cheaper
      than one row look-up, whose pages every commit evicts from the probe's cache). The
      generation is read under the store's lock (never mid-transaction of its own) and
      before the rows, so an answer is only ever recorded at a generation no newer than it.
    - **Else each set's row** (`Stamp`) through a read-only connection of its own: in WAL
      mode a reader never waits for a writer, so it cannot stall the loop behind the
      store's lock. A set at the stamp it was cached at is answered from the cache.

    The data version itself costs a read transaction (~14 µs right after a commit: SQLite
    takes and moves a read mark in the wal-index with file-lock calls). So `clean` keeps the
    version with the **wal-index header** it was read at (`header`: 48 bytes of the ``-shm``
    file, mapped, `_wal_index`; SQLite rewrites them at every commit of any connection, and
    every connection of the file, in any process, maps that same shared file — it is how
    SQLite itself tells that the database changed). While the header is the same,
    nothing committed and the version is the one kept. The header is read before the
    version, so a commit between the two moves the header away from what was kept (read
    again next time), never hides behind it. The store's own round commits keep `clean`
    current (`committed`): inside the write transaction no one else can commit, and the
    header's change counter (``iChange``, +1 per commit) tells whether anyone committed
    between that commit and the header read after it. Any other commit of its own moves the
    header, and the version is read again.

    The answer repeated most (`last`: the same scopes, same generation) is given without
    any lock: `last`, `clean` and `writes` are read first, the header last — a commit after
    those reads moves the header, and an own fragment write under way has already counted
    in `writes` (its triggers run before it commits), so either one is seen.

    A scope with no row has no fragments. At most ``MAX_SETS`` sets are kept, the least
    recently used dropped. Keys are full scopes (user, agent, session or project), so one
    process serving many users never mixes them. An in-memory store (``sqlite://``) has no
    second connection: it reads in the worker.
    """

    MAX_SETS: Final = 4096

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.probe: sqlite3.Connection | None = None
        self.lock = threading.Lock()
        """Guards the probe and the cached sets (the event loop never waits for it)."""
        self.fragments: OrderedDict[FragmentScope, tuple[Stamp, list[Fragment]]] = OrderedDict()
        self.writes = 0
        """Rows of ``fragment_sets`` the store's connection wrote (its temporary triggers)."""
        self.generation: tuple[int, int] | None = None
        """(data version, writes) when `known` was answered."""
        self.known: dict[FragmentScope, tuple[int, list[Fragment]]] = {}
        """What each scope was answered at `generation`."""
        self.last: _Answer | None = None
        """The last answer from `known` (one value: the event loop reads it without a lock)."""
        self.shm: mmap.mmap | None = None
        """The file's wal-index header, mapped (`_wal_index`; ``None``: none to read)."""
        self.clean: tuple[bytes, int] | None = None
        """(wal-index header, the connection's data version) read in that order."""

    def header(self) -> bytes | None:
        """Return the wal-index header (moves with every commit), or ``None``."""
        if self.shm is None:
            return None
        try:
            return self.shm[:_WAL_HEADER]
        except ValueError:
            return None

    def committed(self, before: bytes | None) -> None:
        """Carry `clean` over the store's own commit (its lock held, right after it).

        ``before`` is the header read inside the committed write transaction. The version is
        still the one kept when nothing committed before that transaction (``before`` is the
        kept header) and the commit alone moved the counter after it. The caller's commit
        must have written (a round's always rewrites the session row's version): a commit
        that wrote nothing leaves the counter, and another connection's commit would then
        pass for it.
        """
        clean, after = self.clean, self.header()
        if (
            clean is None
            or before is None
            or after is None
            or clean[0] != before
            or _changes(after) != (_changes(before) + 1) & 0xFFFFFFFF
        ):
            self.clean = None
        else:
            self.clean = (after, clean[1])

    def watch(self, conn: sqlite3.Connection) -> None:
        """Count ``conn``'s own writes to ``fragment_sets``.

        Temporary triggers: they live in this connection only, nothing is added to the
        file, so other programs that write it need nothing.
        """
        conn.create_function("harness_fragment_sets_written", 0, self._written)
        for op in ("INSERT", "UPDATE", "DELETE"):
            conn.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS harness_fragment_sets_{op.lower()} "
                f"AFTER {op} ON main.fragment_sets "
                "BEGIN SELECT harness_fragment_sets_written(); END"
            )

    def _written(self) -> None:
        self.writes += 1  # the store's connection, under its lock

    def answer(
        self,
        scopes: tuple[FragmentScope, ...],
        main: sqlite3.Connection | None,
        main_lock: threading.Lock,
    ) -> list[tuple[int, list[Fragment]]] | None:
        """Return every scope's set from the cache (event loop), or ``None`` to read them.

        ``main`` is the store's connection (``main_lock`` its lock): the probe opens only
        after it did (and migrated).
        """
        if self.path is None or main is None:
            return None
        repeated = self.repeated(scopes)
        if repeated is not None:
            return [(version, list(found)) for version, found in repeated]
        generation = _generation(main, main_lock, self)
        if not self.lock.acquire(blocking=False):
            return None
        try:
            if generation is not None and generation == self.generation:
                out = self._known(scopes)
                if out is not None:
                    self.last = (generation, scopes, out)
                    return [(version, list(found)) for version, found in out]
            out = self._probe(self.path, scopes)
            if out is not None and generation is not None:
                if generation != self.generation:
                    self.generation, self.known = generation, {}
                if len(self.known) + len(scopes) > self.MAX_SETS:
                    self.known.clear()
                for scope, found in zip(scopes, out, strict=True):
                    self.known[scope] = (found[0], list(found[1]))
            return out
        except sqlite3.Error:
            return None  # busy, locked, …: the worker's read reports what is wrong
        finally:
            self.lock.release()

    def repeated(
        self, scopes: tuple[FragmentScope, ...]
    ) -> list[tuple[int, list[Fragment]]] | None:
        """Return the last answer when it is for ``scopes`` and still current, else ``None``.

        No lock (`last`, `clean` and `writes` read first, the header last) and no copy: the
        lists are `known`'s, to read only.
        """
        last, clean, shm = self.last, self.clean, self.shm
        if (
            last is not None
            and clean is not None
            and shm is not None
            and last[1] == scopes
            and last[0][0] == clean[1]
            and last[0][1] == self.writes
            and shm[:_WAL_HEADER] == clean[0]  # nothing committed since `clean`
        ):
            return last[2]
        return None

    def _known(self, scopes: tuple[FragmentScope, ...]) -> list[tuple[int, list[Fragment]]] | None:
        out: list[tuple[int, list[Fragment]]] = []
        for scope in scopes:
            found = self.known.get(scope)
            if found is None:
                return None
            out.append(found)
        return out

    def _probe(
        self, path: Path, scopes: tuple[FragmentScope, ...]
    ) -> list[tuple[int, list[Fragment]]] | None:
        """Look each set's row up through the probe (lock held); ``None``: one must be read."""
        if self.probe is None:
            self.probe = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            self.probe.execute("PRAGMA query_only = ON")
        out: list[tuple[int, list[Fragment]]] = []
        for scope in scopes:
            stamp = _stamp(self.probe, scope)
            if stamp is None:
                out.append((0, []))
                continue
            cached = self.fragments.get(scope)
            if cached is None or cached[0] != stamp:
                return None
            self.fragments.move_to_end(scope)
            out.append((stamp[1], list(cached[1])))
        return out

    def read(
        self, conn: sqlite3.Connection, scopes: tuple[FragmentScope, ...]
    ) -> list[tuple[int, list[Fragment]]]:
        """Read the sets in one read transaction and cache them (worker thread, lock held)."""
        conn.execute("BEGIN")
        try:
            out: list[tuple[int, list[Fragment]]] = []
            for scope in scopes:
                stamp = _stamp(conn, scope)
                if stamp is None:
                    out.append((0, []))
                    continue
                with self.lock:
                    cached = self.fragments.get(scope)
                if cached is None or cached[0] != stamp:
                    cached = (stamp, _set_fragments(conn, stamp[0]))
                if self.path is not None:
                    with self.lock:
                        self.fragments[scope] = cached
                        self.fragments.move_to_end(scope)
                        while len(self.fragments) > self.MAX_SETS:
                            self.fragments.popitem(last=False)
                out.append((stamp[1], list(cached[1])))
        finally:
            conn.commit()
        return out

    def wrote(
        self, scope: FragmentScope, old: Stamp | None, new: Stamp, written: list[Fragment]
    ) -> None:
        """Bring a cached set up to this store's own write (worker thread, after the commit).

        A write changes a few fragments of a set that may hold thousands: the next read then
        finds the new stamp cached instead of reading and decoding the whole set again. A
        fragment new to the set has the highest row id, so it goes last, as a read orders it.
        """
        with self.lock:
            cached = self.fragments.get(scope)
            if cached is None or cached[0] != old:
                return
            fragments = list(cached[1])
            where = {f.id: i for i, f in enumerate(fragments)}
            for fragment in written:
                at = where.get(fragment.id)
                if at is None:
                    where[fragment.id] = len(fragments)
                    fragments.append(fragment)
                else:
                    fragments[at] = fragment
            self.fragments[scope] = (new, fragments)

    def close(self) -> None:
        """Close the probe connection and forget the sets."""
        with self.lock:
            if self.probe is not None:
                self.probe.close()
                self.probe = None
            self.fragments.clear()
            self.generation, self.known, self.last = None, {}, None
            self.clean, self.shm = None, None  # the descriptor stays open: `_wal_index`


def _generation(
    main: sqlite3.Connection, main_lock: threading.Lock, sets: _SetCache
) -> tuple[int, int] | None:
    """Return (data version, own fragment-set writes) of the store's connection.

    The version is `_SetCache.clean`'s while the wal-index header is the one it was read at.
    ``None`` while a worker holds the connection: the answer then comes from the rows.
    """
    if not main_lock.acquire(blocking=False):
        return None
    try:
        header, clean = sets.header(), sets.clean
        if header is not None and clean is not None and header == clean[0]:
            return clean[1], sets.writes
        version = int(main.execute("PRAGMA data_version").fetchone()[0])
        sets.clean = None if header is None else (header, version)
        return version, sets.writes
    except sqlite3.Error:
        return None
    finally:
        main_lock.release()


_WAL_HEADER: Final = 48
"""Bytes of the wal-index header (SQLite's file format: ``WalIndexHdr`` at the start of
``-shm``, machine byte order); its change counter ``iChange`` is the u32 at offset 8."""

_WAL_INDEXES: dict[tuple[int, int], tuple[int, mmap.mmap | None]] = {}
"""``-shm`` file (device, inode) → a descriptor and its header mapped, kept for the process."""
_WAL_INDEXES_LOCK = threading.Lock()
_MAX_WAL_INDEXES: Final = 64
"""Files beyond this many read the data version every time (descriptors stay bounded)."""


def _changes(header: bytes) -> int:
    return int.from_bytes(header[8:12], sys.byteorder)


def _wal_index(path: Path) -> mmap.mmap | None:
    """Return ``path``'s wal-index header mapped read-only, or ``None`` where there is none.

    Called once the store's connection is open in WAL mode: the ``-shm`` file then exists
    and stays the same file, at least its first page long, while that connection is open
    (SQLite, which maps the same page itself, replaces or truncates it only when no
    connection has it open), so reading the mapping can fault only where SQLite's own
    reads would. The header is only read while the connection is open. A read is a copy of
    48 bytes: no system call (``pread`` cost 1–3 µs right after a commit).

    Descriptor and mapping are **never closed**: SQLite locks the file with POSIX locks,
    which closing any descriptor of it in the process would release for every connection
    of the process. So one of each per file and process, kept (an inode in use is never
    reused, so the key stays unique), at most `_MAX_WAL_INDEXES` files.
    """
    if os.name != "posix":
        return None  # elsewhere: the data version every time
    name = f"{path}-shm"
    try:
        found = os.stat(name)
    except OSError:
        return None
    key = (found.st_dev, found.st_ino)
    with _WAL_INDEXES_LOCK:
        kept = _WAL_INDEXES.get(key)
        if kept is not None:
            return kept[1]
        if len(_WAL_INDEXES) >= _MAX_WAL_INDEXES or found.st_size < _WAL_HEADER:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        opened = os.fstat(fd)
        mapped: mmap.mmap | None = None
        with contextlib.suppress(OSError, ValueError):
            mapped = mmap.mmap(fd, _WAL_HEADER, access=mmap.ACCESS_READ)
        _WAL_INDEXES[(opened.st_dev, opened.st_ino)] = (fd, mapped)  # fd kept open, even so
        return mapped if (opened.st_dev, opened.st_ino) == key else None


def _stamp(conn: sqlite3.Connection, scope: FragmentScope) -> Stamp | None:
    rows = conn.execute(
        "SELECT id, version, updated_at FROM fragment_sets "
        "WHERE user_id = ? AND agent_id = ? AND scope = ? AND name = ?",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    ).fetchall()  # fetchall: the statement ends, so the probe holds no read snapshot
    return None if not rows else (int(rows[0][0]), int(rows[0][1]), float(rows[0][2]))


def _set_fragments(conn: sqlite3.Connection, fset: int) -> list[Fragment]:
    rows = conn.execute("SELECT body FROM fragments WHERE fset = ? ORDER BY id", (fset,))
    return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]


def _parse(url: str) -> tuple[Path | None, str]:
    """Return the database file (``None`` in memory) and the ``synchronous`` setting."""
    if not isinstance(url, str) or not url.lower().startswith("sqlite://"):
        raise ConfigurationError(
            f"a SQLite session store URL is 'sqlite:///path/to/sessions.db' or 'sqlite://' "
            f"(in memory), got {url!r}"
        )
    rest = url[len("sqlite://") :]
    if "#" in rest:
        raise ConfigurationError(
            f"a SQLite session store URL takes no fragment, got {url!r}; "
            "write 'sqlite:///path/to/sessions.db'"
        )
    rest, _, query = rest.partition("?")
    synchronous = "normal"
    for option in query.split("&") if query else ():
        name, _, value = option.partition("=")
        if name.lower() != "synchronous" or value.lower() not in SYNCHRONOUS:
            raise ConfigurationError(
                f"a SQLite session store URL takes one option, synchronous=normal (the "
                f"default) or synchronous=full, got {option!r} in {url!r}; write e.g. "
                "'sqlite:///path/to/sessions.db?synchronous=full'"
            )
        synchronous = value.lower()
    if rest in ("", "/:memory:", ":memory:"):
        return None, synchronous
    if not rest.startswith("/"):
        raise ConfigurationError(
            f"a SQLite session store URL needs an absolute path after 'sqlite://' "
            f"(three slashes: 'sqlite:///path/to/sessions.db'), got {url!r}"
        )
    return Path(rest), synchronous


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise WorkspaceError(
            f"the session database path {path} is a folder; give the path of a file inside it, "
            f"e.g. sqlite://{path / 'sessions.db'}",
            path=str(path),
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WorkspaceError(
            f"cannot create the folder for the session database {path}: {error.strerror or error}",
            path=str(path),
        ) from error
    if path.exists():
        try:
            with path.open("rb") as file:
                file.read(16)
        except OSError as error:
            raise WorkspaceError(
                f"cannot read the session database {path}: {error.strerror or error}. "
                "Check its permissions.",
                path=str(path),
            ) from error


def _migrate(conn: sqlite3.Connection, target: str) -> None:
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise ConfigurationError(
            f"the session database {target} has schema version {found}, newer than this "
            f"context-harness understands ({SCHEMA_VERSION}); upgrade context-harness "
            "or use another database",
            path=target,
        )
    if found == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        if current < SCHEMA_VERSION:
            steps = [script for version, script in _UPGRADES if current < version]
            for statement in _statements("\n".join((_SCHEMA, *steps))):
                if not _has_column(conn, statement):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def _has_column(conn: sqlite3.Connection, statement: str) -> bool:
    """Whether ``statement`` adds a column the table has already (an upgrade run again)."""
    words = statement.split()
    if [w.upper() for w in words[:2]] + [w.upper() for w in words[3:5]] != [
        "ALTER", "TABLE", "ADD", "COLUMN",
    ]:  # fmt: skip
        return False
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({words[2]})")}
    return words[5] in columns


def _statements(script: str) -> list[str]:
    """Split the schema script into statements (triggers contain ``;`` before ``END``)."""
    out: list[str] = []
    current = ""
    for line in script.strip().splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out


def _session_id(conn: sqlite3.Connection, key: SessionKey) -> int | None:
    row = conn.execute(
        "SELECT id FROM sessions WHERE user_id = ? AND agent_id = ? AND session_id = ?",
        (key.user_id, key.agent_id, key.session_id),
    ).fetchone()
    return None if row is None else int(row[0])


def _messages(conn: sqlite3.Connection, session: int, ids: Sequence[str]) -> dict[str, Message]:
    """Return the logged messages with these ids (the latest event wins for a repeated id)."""
    found: dict[str, Message] = {}
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), _IN_CHUNK):
        chunk = unique[start : start + _IN_CHUNK]
        rows = conn.execute(
            f"SELECT body FROM events WHERE session = ? AND message_id IN "
            f"({', '.join('?' * len(chunk))}) ORDER BY seq",
            (session, *chunk),
        ).fetchall()
        for (body,) in rows:
            message = _rows.carried_message(_rows.EVENT_DECODER.decode(body))
            if message is not None:
                found[message.id] = message
    return {i: found[i] for i in ids if i in found}


def _fragment_set(conn: sqlite3.Connection, scope: FragmentScope) -> tuple[int, int] | None:
    row = conn.execute(
        "SELECT id, version FROM fragment_sets "
        "WHERE user_id = ? AND agent_id = ? AND scope = ? AND name = ?",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _session_for_log(
    conn: sqlite3.Connection, key: SessionKey, now: float, n_events: int
) -> tuple[int, int]:
    """Return the session row to log ``n_events`` in (created empty when new) and the first seq."""
    row = conn.execute(
        "SELECT id, n_events FROM sessions WHERE user_id = ? AND agent_id = ? AND session_id = ?",
        (key.user_id, key.agent_id, key.session_id),
    ).fetchone()
    if row is None:
        cursor = conn.execute(
            "INSERT INTO sessions (user_id, agent_id, session_id, state, version, title, "
            "created_at, updated_at, n_events, n_messages) VALUES (?, ?, ?, ?, 0, '', ?, ?, ?, 0)",
            (key.user_id, key.agent_id, key.session_id, _rows.empty_state(), now, now, n_events),
        )
        return int(cursor.lastrowid or 0), 1
    conn.execute(
        "UPDATE sessions SET n_events = n_events + ?, updated_at = ? WHERE id = ?",
        (n_events, now, row[0]),
    )
    return int(row[0]), int(row[1]) + 1


def _delete(conn: sqlite3.Connection, session: int) -> None:
    conn.execute(
        "DELETE FROM fragment_sets WHERE id IN (SELECT f.id FROM fragment_sets f JOIN sessions s "
        "ON f.user_id = s.user_id AND f.agent_id = s.agent_id AND f.scope = 'session' "
        "AND f.name = s.session_id WHERE s.id = ?)",
        (session,),
    )
    conn.execute("DELETE FROM events WHERE session = ?", (session,))
    conn.execute("DELETE FROM working WHERE session = ?", (session,))
    conn.execute("DELETE FROM sessions WHERE id = ?", (session,))
    # A rowid above every remaining row may be handed out again: keep the marks at or below
    # the highest remaining rowid so that a reused rowid is indexed (the texts_delete trigger
    # has already removed the indexed texts of the deleted events, fragments by theirs).
    conn.execute(
        "UPDATE fts_marks SET upto = min(upto, coalesce((SELECT max(id) FROM events), 0)) "
        "WHERE name = 'events'"
    )
    conn.execute(
        "UPDATE fts_marks SET upto = min(upto, "
        "coalesce((SELECT max(rowid) FROM fragment_versions), 0)) WHERE name = 'fragments'"
    )


def _index_events(conn: sqlite3.Connection) -> None:
    """Bring the events' full-text index up to date (one transaction; nothing when it is)."""
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'events'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()
    if top <= mark:
        return
    conn.execute("BEGIN IMMEDIATE")
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'events'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()
    if top > mark:
        conn.execute(
            "INSERT INTO texts (rowid, text) SELECT id, text FROM events "
            "WHERE id > ? AND id <= ? AND text IS NOT NULL ORDER BY id",
            (mark, top),
        )
        conn.execute("UPDATE fts_marks SET upto = ? WHERE name = 'events'", (top,))
    conn.commit()


def _index_fragments(conn: sqlite3.Connection) -> None:
    """Re-index the fragments written since the mark (one transaction; nothing when none were).

    Every fragment write adds a `fragment_versions` row, so the rows past the mark name the
    fragments whose indexed text is stale; ``fragment_texts`` keeps its own copy of the text,
    so the stale entry is deleted by rowid.
    """
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'fragments'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM fragment_versions").fetchone()
    if top <= mark:
        return
    conn.execute("BEGIN IMMEDIATE")
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'fragments'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM fragment_versions").fetchone()
    if top > mark:
        changed = (
            "SELECT f.id FROM fragments f JOIN fragment_versions v "
            "ON v.fset = f.fset AND v.fragment_id = f.fragment_id "
            "WHERE v.rowid > ? AND v.rowid <= ?"
        )
        conn.execute(f"DELETE FROM fragment_texts WHERE rowid IN ({changed})", (mark, top))
        conn.execute(
            f"INSERT INTO fragment_texts (rowid, text) SELECT id, text FROM fragments "
            f"WHERE id IN ({changed}) ORDER BY id",
            (mark, top),
        )
        conn.execute("UPDATE fts_marks SET upto = ? WHERE name = 'fragments'", (top,))
    conn.commit()


def _stored(state: StoredState, version: int, *, with_ids: bool) -> StoredState:
    """The state as its blob stores it: with its working ids, or without (rows of ``working``)."""
    ids = tuple(state.working_ids) if with_ids else ()
    return msgspec.structs.replace(state, working_ids=ids, version=version, unchanged=0)


def _checkpointed(conn: sqlite3.Connection, version: int) -> int:
    """Copy the WAL into the database after a commit (passive: never waits for readers)."""
    with contextlib.suppress(sqlite3.Error):  # the commit stands; the next one checkpoints
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return version


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.rollback()
