"""The shared session store: PostgreSQL, for several application instances or machines.

``postgresql://user@host:port/db`` connects with psycopg 3 (async) through a
`psycopg_pool.AsyncConnectionPool`, opened on first use (after one direct connection that
creates the schema and turns an unreachable server into a clear error) and closed by `aclose`.
Tables are prefixed ``harness_`` so the store can share a database with the application.

A commit is one transaction that locks the session row (``SELECT … FOR UPDATE``; a new session
is created with ``INSERT … ON CONFLICT DO NOTHING``), so two writers on one session serialize and
the stale one gets `StateConflict` with nothing written. Search matches ``ILIKE`` per term (any
script, CJK included) and lists the newest matches first: it walks the events newest-first and
stops at the limit, which is fast for a frequent term; a rare term (the walk outlasts
`SEARCH_WALK_MS`) is answered from the GIN ``pg_trgm`` index instead. Ranking every match by
similarity cost 1–6 s for a frequent word or a two-character CJK term over 36,000 events.

psycopg is imported here only, when a PostgreSQL store is opened, so importing `harness` stays
fast; without it the store raises `ConfigurationError` naming the ``postgres`` extra.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

import anyio

from harness.errors import ConfigurationError, WorkspaceError
from harness.fragments import Fragment, FragmentChange, FragmentScope
from harness.messages import Message
from harness.sessions import _rows
from harness.sessions._rows import Stamp
from harness.sessions.store import (
    Event,
    LoggedEvent,
    SearchHit,
    SessionInfo,
    SessionKey,
    StoredState,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

CONNECT_TIMEOUT_S: Final = 10
"""How long opening a connection may take before the server counts as unreachable."""

POOL_SIZE: Final = 10
"""Connections per store at most."""

MAX_SETS: Final = 4096
"""Fragment sets a store keeps decoded (`PostgresStore.fragment_sets`)."""

SCHEMA_VERSION: Final = _rows.SCHEMA_VERSION + 3
"""The PostgreSQL layout: the shared tables (`_rows.SCHEMA_VERSION`) plus the events' recency
index that newest-first search walks (+1), ``harness_fragments_by_set`` (+2: a set is read,
and searched up to a limit, in row order without a sort) and ``harness_working`` (+3: a
session's working ids one row each, so a round's commit writes only the ids that changed
instead of the whole list in the state). Every statement is ``IF NOT EXISTS``: upgraded in
place; a session stored before +3 keeps its ids in its state until its next commit."""

SEARCH_WALK_MS: Final = 50
"""How long a newest-first walk may take before search falls back to the trigram index."""

_LOCK_ID: Final = 0x6861726E  # "harn": serializes schema creation across processes

_SCHEMA: Final = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE TABLE IF NOT EXISTS harness_schema (version integer NOT NULL)",
    """CREATE TABLE IF NOT EXISTS harness_sessions (
        id bigserial PRIMARY KEY,
        user_id text NOT NULL,
        agent_id text NOT NULL,
        session_id text NOT NULL,
        state json NOT NULL,
        version bigint NOT NULL,
        title text NOT NULL DEFAULT '',
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        n_events bigint NOT NULL DEFAULT 0,
        n_messages bigint NOT NULL DEFAULT 0,
        UNIQUE (user_id, agent_id, session_id)
    )""",
    "CREATE INDEX IF NOT EXISTS harness_sessions_by_user ON harness_sessions (user_id, updated_at)",
    "CREATE INDEX IF NOT EXISTS harness_sessions_by_activity ON harness_sessions (updated_at)",
    """CREATE TABLE IF NOT EXISTS harness_events (
        session bigint NOT NULL REFERENCES harness_sessions (id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        tag text NOT NULL,
        body json NOT NULL,
        at double precision NOT NULL,
        message_id text,
        role text,
        text text,
        PRIMARY KEY (session, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS harness_events_by_message "
    "ON harness_events (session, message_id) WHERE message_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS harness_events_by_tag ON harness_events (session, tag, seq)",
    "CREATE INDEX IF NOT EXISTS harness_events_text "
    "ON harness_events USING gin (text gin_trgm_ops) WHERE text IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS harness_events_recent ON harness_events (at)",
    """CREATE TABLE IF NOT EXISTS harness_fragment_sets (
        id bigserial PRIMARY KEY,
        user_id text NOT NULL,
        agent_id text NOT NULL,
        scope text NOT NULL,
        name text NOT NULL,
        version bigint NOT NULL,
        updated_at double precision NOT NULL,
        UNIQUE (user_id, agent_id, scope, name)
    )""",
    """CREATE TABLE IF NOT EXISTS harness_fragments (
        id bigserial PRIMARY KEY,
        fset bigint NOT NULL REFERENCES harness_fragment_sets (id) ON DELETE CASCADE,
        fragment_id text NOT NULL,
        version bigint NOT NULL,
        body json NOT NULL,
        text text NOT NULL,
        removed boolean NOT NULL,
        UNIQUE (fset, fragment_id)
    )""",
    """CREATE TABLE IF NOT EXISTS harness_fragment_versions (
        fset bigint NOT NULL REFERENCES harness_fragment_sets (id) ON DELETE CASCADE,
        fragment_id text NOT NULL,
        version bigint NOT NULL,
        op text NOT NULL,
        at double precision NOT NULL,
        body json NOT NULL,
        PRIMARY KEY (fset, fragment_id, version)
    )""",
    "CREATE INDEX IF NOT EXISTS harness_fragments_text "
    "ON harness_fragments USING gin (text gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS harness_fragments_by_set ON harness_fragments (fset, id)",
    """CREATE TABLE IF NOT EXISTS harness_working (
        session bigint NOT NULL REFERENCES harness_sessions (id) ON DELETE CASCADE,
        pos integer NOT NULL,
        message_id text NOT NULL,
        PRIMARY KEY (session, pos)
    )""",
    # NULL: the ids are in the state (written whole, or stored before harness_working).
    "ALTER TABLE harness_sessions ADD COLUMN IF NOT EXISTS working_n integer",
)


class PostgresStore:
    """A `SessionStore` in a PostgreSQL database."""

    def __init__(self, url: str) -> None:
        """Check ``url`` and the driver; the server is contacted on first use.

        Raises:
            ConfigurationError: a malformed URL, or psycopg / psycopg_pool not installed.
        """
        try:
            import psycopg
            import psycopg_pool
        except ImportError as error:
            raise ConfigurationError(
                f"a PostgreSQL session store needs psycopg 3 and psycopg_pool ({error.name} is "
                "missing); install them with: pip install 'context-harness[postgres]'"
            ) from error
        self._psycopg = psycopg
        self._pool_module = psycopg_pool
        self.url = _masked(url)
        try:
            params = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as error:
            raise ConfigurationError(
                f"{self.url} is not a valid PostgreSQL URL ({_first_line(error)}); write "
                "postgresql://user:password@host:port/database"
            ) from error
        self._conninfo = url
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            self._kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening: anyio.Lock | None = None
        self._closed = False
        self._sets: OrderedDict[FragmentScope, tuple[Stamp, list[Fragment]]] = OrderedDict()
        """Fragment sets read before, with the stamp they were read at."""

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    # ------------------------------------------------------------------ plumbing
    async def _ready(self) -> AsyncConnectionPool[Any]:
        if self._closed:
            raise ConfigurationError(f"the session store {self.url} is closed; open a new one")
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self._pool is None:
                await self._migrate()
                pool: AsyncConnectionPool[Any] = self._pool_module.AsyncConnectionPool(
                    self._conninfo,
                    min_size=1,
                    max_size=POOL_SIZE,
                    kwargs=self._kwargs,
                    open=False,
                    check=self._pool_module.AsyncConnectionPool.check_connection,
                    name="harness-sessions",
                )
                await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
                self._pool = pool
            return self._pool

    async def _migrate(self) -> None:
        psycopg = self._psycopg
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs)
        except psycopg.Error as error:
            raise ConfigurationError(
                f"cannot connect to the session store {self.url}: {_first_line(error)}. Check "
                "that the server is running and reachable and that the user, password and "
                "database in the URL are right.",
                url=self.url,
            ) from error
        try:
            async with conn:
                found = await _schema_version(conn)
                if found == SCHEMA_VERSION:
                    return
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
                    found = await _schema_version(conn)
                    if found < SCHEMA_VERSION:
                        for statement in _SCHEMA:
                            await conn.execute(statement.encode())
                        await conn.execute("DELETE FROM harness_schema")
                        await conn.execute(
                            "INSERT INTO harness_schema (version) VALUES (%s)",
                            (SCHEMA_VERSION,),
                        )
                if found > SCHEMA_VERSION:
                    raise ConfigurationError(
                        f"the session store {self.url} has schema version {found}, newer than "
                        f"this context-harness understands ({SCHEMA_VERSION}); upgrade "
                        "context-harness or use another database",
                        url=self.url,
                    )
        except psycopg.Error as error:
            raise ConfigurationError(
                f"cannot set up the session tables in {self.url}: {_first_line(error)}. The "
                "user needs CREATE rights on the database, and the pg_trgm extension must be "
                "available (an administrator can run CREATE EXTENSION pg_trgm).",
                url=self.url,
            ) from error

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = await self._ready()
        try:
            async with pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
                yield conn
        except self._psycopg.Error as error:
            raise WorkspaceError(
                f"the session store {self.url} failed: {_first_line(error)}. Check that the "
                "server is up and reachable; the operation was not completed.",
                url=self.url,
            ) from error

    # ------------------------------------------------------------------ the API
    async def load(self, key: SessionKey) -> tuple[StoredState, dict[str, Message]] | None:
        """Return the state and its working messages by id, or ``None`` for a new session."""
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT id, state::text, version, working_n FROM harness_sessions "
                "WHERE user_id = %s AND agent_id = %s AND session_id = %s",
                (key.user_id, key.agent_id, key.session_id),
            )
            row = await cursor.fetchone()
            if row is None:
                return None
            state = _rows.STATE_DECODER.decode(row[1])
            state.version = row[2]
            if row[3] is not None:  # the ids are rows of harness_working
                cursor = await conn.execute(
                    "SELECT message_id FROM harness_working WHERE session = %s ORDER BY pos",
                    (row[0],),
                )
                state.working_ids = tuple(r[0] for r in await cursor.fetchall())
            return state, await _messages(conn, row[0], state.working_ids)

    async def commit(
        self, key: SessionKey, *, expected_version: int, events: Sequence[Event], state: StoredState
    ) -> int:
        """Append ``events`` and replace the state in one transaction; return the new version.

        With ``state.unchanged`` the working ids are written as changes to the
        ``harness_working`` rows (a round that appended writes its new ids, not the whole
        history's); without it they go whole into the state.

        Raises:
            StateConflict: the stored version is not ``expected_version`` (nothing written).
        """
        batch = list(events)
        new_version = expected_version + 1
        ids = tuple(state.working_ids)
        unchanged = min(state.unchanged, len(ids))
        # A hint: the ids go to rows, as changes (text rows cannot hold NUL; the state can).
        rows = unchanged > 0 and "\x00" not in "".join(ids[unchanged:])
        messages = _rows.count_messages(batch)
        async with self._connection() as conn, conn.transaction():
            now = time.time()
            cursor = await conn.execute(
                "SELECT id, version, n_events, working_n FROM harness_sessions "
                "WHERE user_id = %s AND agent_id = %s AND session_id = %s FOR UPDATE",
                (key.user_id, key.agent_id, key.session_id),
            )
            row = await cursor.fetchone()
            actual = 0 if row is None else row[1]
            if actual != expected_version:
                raise _rows.conflict(key, expected_version, actual)
            held = 0 if row is None else row[3] or 0
            if rows and held < unchanged and "\x00" in "".join(ids[:unchanged]):
                rows = False  # the unchanged ids were never written as rows, and cannot be
            stored = _rows.stored_state(state, new_version, with_ids=not rows)
            body = _rows.ENCODER.encode(stored).decode()
            count = len(ids) if rows else None
            if row is None:
                cursor = await conn.execute(
                    "INSERT INTO harness_sessions (user_id, agent_id, session_id, state, "
                    "version, title, created_at, updated_at, n_events, n_messages, working_n) "
                    "VALUES (%s, %s, %s, %s::json, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (user_id, agent_id, session_id) DO NOTHING RETURNING id",
                    (
                        key.user_id,
                        key.agent_id,
                        key.session_id,
                        body,
                        new_version,
                        _text(state.title),
                        now,
                        now,
                        len(batch),
                        messages,
                        count,
                    ),
                )
                created = await cursor.fetchone()
                if created is None:  # another writer created it since our SELECT
                    raise _rows.conflict(key, expected_version, await _version(conn, key))
                session, first = created[0], 1
            else:
                session, first = row[0], row[2] + 1
                await conn.execute(
                    "UPDATE harness_sessions SET state = %s::json, version = %s, title = %s, "
                    "updated_at = %s, n_events = n_events + %s, n_messages = n_messages + %s, "
                    "working_n = %s WHERE id = %s",
                    (
                        body,
                        new_version,
                        _text(state.title),
                        now,
                        len(batch),
                        messages,
                        count,
                        session,
                    ),
                )
            await _write_working(conn, session, ids if rows else (), state.unchanged, held)
            if batch:
                async with conn.cursor() as insert:
                    await insert.executemany(
                        "INSERT INTO harness_events "
                        "(session, seq, tag, body, at, message_id, role, text) "
                        "VALUES (%s, %s, %s, %s::json, %s, %s, %s, %s)",
                        [
                            (
                                session,
                                r.seq,
                                r.tag,
                                r.body.decode(),
                                r.at,
                                r.message_id,
                                r.role,
                                None if r.text is None else _text(r.text),
                            )
                            for r in _rows.event_rows(batch, first)
                        ],
                    )
        return new_version

    async def events(
        self, key: SessionKey, *, offset: int = 0, limit: int = 100, kinds: Sequence[str] = ()
    ) -> list[LoggedEvent]:
        """Return a page of the log, oldest first (``kinds`` filters by event tag)."""
        tags = list(kinds)
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT e.seq, e.body::text FROM harness_events e "
                "JOIN harness_sessions s ON s.id = e.session "
                "WHERE s.user_id = %s AND s.agent_id = %s AND s.session_id = %s "
                "AND (cardinality(%s::text[]) = 0 OR e.tag = ANY(%s::text[])) "
                "ORDER BY e.seq LIMIT %s OFFSET %s",
                (
                    key.user_id,
                    key.agent_id,
                    key.session_id,
                    tags,
                    tags,
                    max(0, limit),
                    max(0, offset),
                ),
            )
            rows = await cursor.fetchall()
        return _rows.logged_events(rows)

    async def messages(self, key: SessionKey, ids: Sequence[str]) -> dict[str, Message]:
        """Return the messages of the log with these ids (originals, copies and summaries)."""
        if not ids:
            return {}
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT id FROM harness_sessions "
                "WHERE user_id = %s AND agent_id = %s AND session_id = %s",
                (key.user_id, key.agent_id, key.session_id),
            )
            row = await cursor.fetchone()
            return {} if row is None else await _messages(conn, row[0], ids)

    async def sessions(self, user_id: str, agent_id: str | None = None) -> list[SessionInfo]:
        """Return the user's sessions, most recently active first."""
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT agent_id, session_id, title, n_messages, n_events, created_at, "
                "updated_at FROM harness_sessions "
                "WHERE user_id = %s AND (%s::text IS NULL OR agent_id = %s) "
                "ORDER BY updated_at DESC, id DESC",
                (user_id, agent_id, agent_id),
            )
            rows = await cursor.fetchall()
        return _rows.session_infos(rows)

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Full-text search over the messages of the user's sessions (CJK included)."""
        terms = [_text(t) for t in _rows.search_terms(query)]
        if not terms or limit <= 0:
            return []
        patterns = [f"%{_rows.escape_like(term)}%" for term in terms]
        # One ILIKE per term (not ILIKE ALL (array)): the GIN trigram index serves each.
        matches = " AND e.text ILIKE %s" * len(patterns)
        sql = (
            "SELECT s.agent_id, s.session_id, e.seq, e.message_id, e.role, e.text, e.at "
            "FROM harness_events e JOIN harness_sessions s ON s.id = e.session "
            f"WHERE s.user_id = %s AND e.text IS NOT NULL{matches} "
            "ORDER BY e.at DESC LIMIT %s"
        )
        args = (user_id, *patterns, limit)
        # A term under three characters has no trigram: the index cannot help, so walk.
        indexable = all(len(term) >= 3 for term in terms)
        psycopg = self._psycopg
        async with self._connection() as conn, conn.transaction():
            try:
                async with conn.transaction():  # a savepoint: a cancelled walk undoes only itself
                    if indexable:
                        await conn.execute(f"SET LOCAL statement_timeout = {SEARCH_WALK_MS}")
                    rows = await (await conn.execute(sql, args)).fetchall()
            except psycopg.errors.QueryCanceled:
                await conn.execute("SET LOCAL enable_indexscan = off")  # the GIN bitmap path
                rows = await (await conn.execute(sql, args)).fetchall()
        return _rows.search_hits(rows, terms)

    # ------------------------------------------------------------ fragments
    async def fragments(self, scope: FragmentScope) -> tuple[int, list[Fragment]]:
        """Return the set's version (0 when never written) and its fragments' current versions."""
        (found,) = await self.fragment_sets((scope,))
        return found

    async def fragment_sets(
        self, scopes: Sequence[FragmentScope]
    ) -> list[tuple[int, list[Fragment]]]:
        """Return `fragments` of each scope: one query when no set changed since it was read.

        FragmentEditor reads the session's and the project's set before every request
        (`harness.fragments.ReadsFragmentSets`). The sets' rows (`Stamp`: id, version,
        updated_at) are looked up first; a set cached at its current stamp is not read again,
        so an unchanged set of 10,000 fragments costs one small query, and a change by any
        process — a new stamp — reaches the next read. At most ``MAX_SETS`` sets are kept
        (least recently used dropped), keyed by the full scope.
        """
        out: list[tuple[int, list[Fragment]]] = []
        async with self._connection() as conn, conn.transaction():
            for scope in scopes:
                stamp = await _stamp(conn, scope)
                if stamp is None:
                    out.append((0, []))
                    continue
                cached = self._sets.get(scope)
                if cached is None or cached[0] != stamp:
                    cursor = await conn.execute(
                        "SELECT body::text FROM harness_fragments WHERE fset = %s ORDER BY id",
                        (stamp[0],),
                    )
                    rows = await cursor.fetchall()
                    cached = (stamp, [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows])
                self._sets[scope] = cached
                self._sets.move_to_end(scope)
                while len(self._sets) > MAX_SETS:
                    self._sets.popitem(last=False)
                out.append((stamp[1], list(cached[1])))
        return out

    async def fragment(self, scope: FragmentScope, fragment_id: str) -> tuple[int, Fragment | None]:
        """Return the set's version and one fragment's current version, in one query.

        A write checks the set version and changes one fragment: it need not read the set
        (`harness.fragments.ReadsOneFragment`).
        """
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT s.version, f.body::text FROM harness_fragment_sets s "
                "LEFT JOIN harness_fragments f ON f.fset = s.id AND f.fragment_id = %s "
                "WHERE s.user_id = %s AND s.agent_id = %s AND s.scope = %s AND s.name = %s",
                (fragment_id, scope.user_id, scope.agent_id, scope.scope, scope.name),
            )
            row = await cursor.fetchone()
        if row is None:
            return 0, None
        body = row[1]
        return int(row[0]), None if body is None else _rows.FRAGMENT_DECODER.decode(body)

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
        async with self._connection() as conn, conn.transaction():
            now = time.time()
            await conn.execute(
                "INSERT INTO harness_fragment_sets (user_id, agent_id, scope, name, version, "
                "updated_at) VALUES (%s, %s, %s, %s, 0, %s) "
                "ON CONFLICT (user_id, agent_id, scope, name) DO NOTHING",
                (scope.user_id, scope.agent_id, scope.scope, scope.name, now),
            )
            cursor = await conn.execute(
                "SELECT id, version FROM harness_fragment_sets WHERE user_id = %s AND "
                "agent_id = %s AND scope = %s AND name = %s FOR UPDATE",
                (scope.user_id, scope.agent_id, scope.scope, scope.name),
            )
            row = await cursor.fetchone()
            if row is None or row[1] != expected_version:
                raise _rows.fragment_conflict(scope, expected_version, 0 if row is None else row[1])
            fset = row[0]
            await conn.execute(
                "UPDATE harness_fragment_sets SET version = %s, updated_at = %s WHERE id = %s",
                (new_version, now, fset),
            )
            for change in batch:
                fragment = change.fragment
                body = _rows.ENCODER.encode(fragment).decode()
                await conn.execute(
                    "INSERT INTO harness_fragments (fset, fragment_id, version, body, text, "
                    "removed) VALUES (%s, %s, %s, %s::json, %s, %s) "
                    "ON CONFLICT (fset, fragment_id) DO UPDATE SET version = excluded.version, "
                    "body = excluded.body, text = excluded.text, removed = excluded.removed",
                    (
                        fset,
                        fragment.id,
                        fragment.version,
                        body,
                        _text(_rows.fragment_text(fragment)),
                        fragment.removed,
                    ),
                )
                await conn.execute(
                    "INSERT INTO harness_fragment_versions (fset, fragment_id, version, op, at, "
                    "body) VALUES (%s, %s, %s, %s, %s, %s::json)",
                    (fset, fragment.id, fragment.version, change.op, now, body),
                )
            if log is not None and events:
                session, first = await _session_for_log(conn, log, now, len(events))
                async with conn.cursor() as insert:
                    await insert.executemany(
                        "INSERT INTO harness_events "
                        "(session, seq, tag, body, at, message_id, role, text) "
                        "VALUES (%s, %s, %s, %s::json, %s, %s, %s, %s)",
                        [
                            (session, r.seq, r.tag, r.body.decode(), r.at, None, None, None)
                            for r in _rows.event_rows(events, first)
                        ],
                    )
        return new_version

    async def fragment_versions(self, scope: FragmentScope, fragment_id: str) -> list[Fragment]:
        """Return every stored version of one fragment, oldest first."""
        async with self._connection() as conn:
            row = await _fragment_set(conn, scope)
            if row is None:
                return []
            cursor = await conn.execute(
                "SELECT body::text FROM harness_fragment_versions "
                "WHERE fset = %s AND fragment_id = %s ORDER BY version",
                (row[0], fragment_id),
            )
            rows = await cursor.fetchall()
        return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]

    async def search_fragments(
        self, scope: FragmentScope, query: str, *, limit: int = 50
    ) -> list[Fragment]:
        """Full-text search over the set's current fragments (title, tags, content; CJK too)."""
        terms = [_text(t) for t in _rows.search_terms(query)]
        if not terms or limit <= 0:
            return []
        patterns = [f"%{_rows.escape_like(term)}%" for term in terms]
        matches = " AND f.text ILIKE %s" * len(patterns)
        async with self._connection() as conn:
            row = await _fragment_set(conn, scope)
            if row is None:
                return []
            cursor = await conn.execute(
                "SELECT f.body::text FROM harness_fragments f "
                f"WHERE f.fset = %s AND NOT f.removed{matches} ORDER BY f.id LIMIT %s",
                (row[0], *patterns, limit),
            )
            rows = await cursor.fetchall()
        return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]

    async def purge(self, key: SessionKey) -> bool:
        """Delete one session entirely; return whether it existed."""
        async with self._connection() as conn:
            await conn.execute(
                "DELETE FROM harness_fragment_sets WHERE user_id = %s AND agent_id = %s "
                "AND scope = 'session' AND name = %s",
                (key.user_id, key.agent_id, key.session_id),
            )
            cursor = await conn.execute(
                "DELETE FROM harness_sessions "
                "WHERE user_id = %s AND agent_id = %s AND session_id = %s RETURNING id",
                (key.user_id, key.agent_id, key.session_id),
            )
            return await cursor.fetchone() is not None

    async def purge_older_than(self, seconds: float) -> list[SessionKey]:
        """Delete every session whose last activity is older; return their keys."""
        async with self._connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM harness_sessions WHERE updated_at < %s "
                "RETURNING user_id, agent_id, session_id",
                (time.time() - seconds,),
            )
            rows = await cursor.fetchall()
            for r in rows:
                await conn.execute(
                    "DELETE FROM harness_fragment_sets WHERE user_id = %s AND agent_id = %s "
                    "AND scope = 'session' AND name = %s",
                    (r[0], r[1], r[2]),
                )
        return [SessionKey(r[0], r[1], r[2]) for r in rows]

    async def aclose(self) -> None:
        """Close the pool's connections."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


# ---------------------------------------------------------------------- helpers
async def _schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    cursor = await conn.execute("SELECT to_regclass('harness_schema') IS NOT NULL")
    exists = await cursor.fetchone()
    if not exists or not exists[0]:
        return 0
    cursor = await conn.execute("SELECT max(version) FROM harness_schema")
    row = await cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


async def _stamp(conn: psycopg.AsyncConnection[Any], scope: FragmentScope) -> Stamp | None:
    cursor = await conn.execute(
        "SELECT id, version, updated_at FROM harness_fragment_sets "
        "WHERE user_id = %s AND agent_id = %s AND scope = %s AND name = %s",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    )
    row = await cursor.fetchone()
    return None if row is None else (int(row[0]), int(row[1]), float(row[2]))


async def _fragment_set(
    conn: psycopg.AsyncConnection[Any], scope: FragmentScope
) -> tuple[int, int] | None:
    cursor = await conn.execute(
        "SELECT id, version FROM harness_fragment_sets "
        "WHERE user_id = %s AND agent_id = %s AND scope = %s AND name = %s",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    )
    row = await cursor.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


async def _session_for_log(
    conn: psycopg.AsyncConnection[Any], key: SessionKey, now: float, n_events: int
) -> tuple[int, int]:
    """Return the session row to log ``n_events`` in (created empty when new) and the first seq."""
    await conn.execute(
        "INSERT INTO harness_sessions (user_id, agent_id, session_id, state, version, title, "
        "created_at, updated_at, n_events, n_messages) "
        "VALUES (%s, %s, %s, %s::json, 0, '', %s, %s, 0, 0) "
        "ON CONFLICT (user_id, agent_id, session_id) DO NOTHING",
        (key.user_id, key.agent_id, key.session_id, _rows.empty_state().decode(), now, now),
    )
    cursor = await conn.execute(
        "UPDATE harness_sessions SET n_events = n_events + %s, updated_at = %s "
        "WHERE user_id = %s AND agent_id = %s AND session_id = %s RETURNING id, n_events",
        (n_events, now, key.user_id, key.agent_id, key.session_id),
    )
    row = await cursor.fetchone()
    if row is None:  # pragma: no cover - the row was just made
        raise WorkspaceError(f"the session {key.session_id!r} vanished while logging")
    return int(row[0]), int(row[1]) - n_events + 1


async def _write_working(
    conn: psycopg.AsyncConnection[Any],
    session: int,
    ids: tuple[str, ...],
    unchanged: int,
    held: int,
) -> None:
    """Make the ``harness_working`` rows of ``session`` hold ``ids`` (none: the state has them).

    The first ``unchanged`` ids equal the stored ones (of which there are ``held``): those rows
    stay, the rest are written anew.
    """
    kept = min(unchanged, held, len(ids))
    if held > kept:
        await conn.execute(
            "DELETE FROM harness_working WHERE session = %s AND pos >= %s", (session, kept)
        )
    if len(ids) > kept:
        async with conn.cursor() as insert:
            await insert.executemany(
                "INSERT INTO harness_working (session, pos, message_id) VALUES (%s, %s, %s)",
                [(session, pos, ids[pos]) for pos in range(kept, len(ids))],
            )


async def _version(conn: psycopg.AsyncConnection[Any], key: SessionKey) -> int:
    cursor = await conn.execute(
        "SELECT version FROM harness_sessions "
        "WHERE user_id = %s AND agent_id = %s AND session_id = %s",
        (key.user_id, key.agent_id, key.session_id),
    )
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


async def _messages(
    conn: psycopg.AsyncConnection[Any], session: int, ids: Sequence[str]
) -> dict[str, Message]:
    """Return the logged messages with these ids (the latest event wins for a repeated id)."""
    cursor = await conn.execute(
        "SELECT body::text FROM harness_events "
        "WHERE session = %s AND message_id = ANY(%s::text[]) ORDER BY seq",
        (session, [i for i in dict.fromkeys(ids) if "\x00" not in i]),  # no text holds NUL
    )
    return _rows.latest_messages((body for (body,) in await cursor.fetchall()), ids)


def _text(value: str) -> str:
    """PostgreSQL text cannot hold NUL; the JSON body keeps the exact text."""
    return value.replace("\x00", "\ufffd")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _masked(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return "postgresql://…"
