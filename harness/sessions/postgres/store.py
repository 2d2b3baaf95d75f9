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

**Where the parts live.** This module holds `PostgresStore`: the URL, the pool and its
connections (a driver error becomes `WorkspaceError`), and the session API. Beside it: the
tables and their upgrades (``_postgres_schema``), the statements the store's transactions
share (``_postgres_rows``), a session's state and working-id rows (``_postgres_state``),
fragment rows and the fragment-set cache (``_postgres_fragments``), and search
(``_postgres_search``). None of them imports psycopg at import time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

import anyio

from harness.errors import ConfigurationError, WorkspaceError
from harness.fragments.model import Fragment, FragmentChange, FragmentScope
from harness.messages import Message
from harness.sessions import _rows
from harness.sessions.postgres._fragments import (
    MAX_SETS,
    SetCache,
    fragment_history,
    fragment_set,
    read_fragment,
    write_fragments,
)
from harness.sessions.postgres._rows import append_usage, logged_messages, session_row, text
from harness.sessions.postgres._schema import SCHEMA_VERSION, upgrade
from harness.sessions.postgres._search import (
    SEARCH_WALK_MS,
    find_fragments,
    find_messages,
    list_sessions,
)
from harness.sessions.postgres._state import read_state, write_round
from harness.sessions.store import (
    Event,
    LoggedEvent,
    SearchHit,
    SessionInfo,
    SessionKey,
    SessionUsage,
    StoredState,
    UsageEvent,
)
from harness.tokens.calibration import LEARN_MARGIN, LEARN_MAX, LearnedRow

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_SETS",
    "POOL_SIZE",
    "SCHEMA_VERSION",
    "SEARCH_WALK_MS",
    "PostgresStore",
]

CONNECT_TIMEOUT_S: Final = 10
"""How long opening a connection may take before the server counts as unreachable."""

POOL_SIZE: Final = 10
"""Connections per store at most."""


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
        self._sets = SetCache()
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
                await upgrade(conn, self.url)
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
            return await read_state(conn, key)

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
        async with self._connection() as conn:
            return await write_round(conn, key, expected_version, events, state)

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
            session = await session_row(conn, key)
            return {} if session is None else await logged_messages(conn, session, ids)

    async def sessions(
        self, user_id: str, agent_id: str | None = None, *, within: SessionKey | None = None
    ) -> list[SessionInfo]:
        """Return the user's sessions, most recently active first (``within``: that one)."""
        async with self._connection() as conn:
            return await list_sessions(conn, user_id, agent_id, within)

    async def search(
        self, user_id: str, query: str, *, limit: int = 20, within: SessionKey | None = None
    ) -> list[SearchHit]:
        """Full-text search over the messages of the user's sessions (CJK included)."""
        terms = [text(t) for t in _rows.search_terms(query)]
        if not terms or limit <= 0:
            return []
        async with self._connection() as conn:
            return await find_messages(conn, user_id, terms, limit, within)

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
        async with self._connection() as conn, conn.transaction():
            return await self._sets.read(conn, scopes)

    async def fragment(self, scope: FragmentScope, fragment_id: str) -> tuple[int, Fragment | None]:
        """Return the set's version and one fragment's current version, in one query.

        A write checks the set version and changes one fragment: it need not read the set
        (`harness.fragments.ReadsOneFragment`).
        """
        async with self._connection() as conn:
            return await read_fragment(conn, scope, fragment_id)

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
        events = _rows.fragment_events(scope, batch, expected_version + 1)
        async with self._connection() as conn:
            return await write_fragments(conn, scope, expected_version, batch, events, log)

    async def fragment_versions(self, scope: FragmentScope, fragment_id: str) -> list[Fragment]:
        """Return every stored version of one fragment, oldest first."""
        async with self._connection() as conn:
            return await fragment_history(conn, scope, fragment_id)

    async def search_fragments(
        self, scope: FragmentScope, query: str, *, limit: int = 50
    ) -> list[Fragment]:
        """Full-text search over the set's current fragments (title, tags, content; CJK too)."""
        terms = [text(t) for t in _rows.search_terms(query)]
        if not terms or limit <= 0:
            return []
        async with self._connection() as conn:
            row = await fragment_set(conn, scope)
            return [] if row is None else await find_fragments(conn, row[0], terms, limit)

    async def usage(self, key: SessionKey) -> SessionUsage:
        """Return the session's usage per answered request and in total (empty when unknown)."""
        async with self._connection() as conn:
            cursor = await conn.execute(
                f"SELECT u.seq, u.at, {_prefixed(_rows.USAGE_COLUMNS)} FROM harness_usage u "
                "JOIN harness_sessions s ON s.id = u.session "
                "WHERE s.user_id = %s AND s.agent_id = %s AND s.session_id = %s ORDER BY u.seq",
                (key.user_id, key.agent_id, key.session_id),
            )
            rows = await cursor.fetchall()
        return _rows.session_usage(rows)

    async def append_usage(self, key: SessionKey, event: UsageEvent) -> bool:
        """Append ``event`` to the log of an existing session (and to its usage); return whether.

        One transaction that locks the session's row and leaves its state and version as they
        are (`harness.sessions.UsageStore`); ``False``: nothing written, the session does not
        exist or holds usage of ``event.call_id`` already.

        Raises:
            InvalidInputError: ``event`` is not a valid `UsageEvent` (`_rows.checked_usage`).
        """
        checked = _rows.checked_usage(event)
        async with self._connection() as conn:
            return await append_usage(conn, key, checked)

    async def learned(self) -> list[LearnedRow]:
        """Return the calibration learned from usage, per (model, api_base)."""
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT model, api_base, worst, factor, observations FROM harness_learned"
            )
            rows = await cursor.fetchall()
        return [
            LearnedRow(m, b, worst=float(w), factor=float(f), observations=int(n))
            for m, b, w, f, n in rows
        ]

    async def learn(self, rows: Sequence[LearnedRow]) -> None:
        """Fold in what this process learned (the worst ratio kept, the factor never below it)."""
        if not rows:
            return
        now = time.time()
        async with self._connection() as conn, conn.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO harness_learned "
                "(model, api_base, worst, factor, observations, updated_at) "
                "VALUES (%(model)s, %(base)s, %(worst)s, %(factor)s, %(n)s, %(now)s) "
                "ON CONFLICT (model, api_base) DO UPDATE SET "
                "worst = GREATEST(harness_learned.worst, excluded.worst), "
                "factor = LEAST(%(cap)s, GREATEST(LEAST(harness_learned.factor, excluded.factor), "
                "GREATEST(harness_learned.worst, excluded.worst) * %(margin)s)), "
                "observations = harness_learned.observations + excluded.observations, "
                "updated_at = excluded.updated_at",
                [
                    {
                        "model": text(r.model),
                        "base": text(r.api_base),
                        "worst": r.worst,
                        "factor": r.factor,
                        "n": r.observations,
                        "now": now,
                        "cap": LEARN_MAX,
                        "margin": LEARN_MARGIN,
                    }
                    for r in rows
                ],
            )

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
            # One statement: the sessions and their session-scoped fragment sets go together.
            cursor = await conn.execute(
                "WITH gone AS (DELETE FROM harness_sessions WHERE updated_at < %s "
                "RETURNING user_id, agent_id, session_id), "
                "sets AS (DELETE FROM harness_fragment_sets f USING gone g "
                "WHERE f.user_id = g.user_id AND f.agent_id = g.agent_id "
                "AND f.scope = 'session' AND f.name = g.session_id) "
                "SELECT user_id, agent_id, session_id FROM gone",
                (time.time() - seconds,),
            )
            rows = await cursor.fetchall()
        return [SessionKey(r[0], r[1], r[2]) for r in rows]

    async def aclose(self) -> None:
        """Close the pool's connections."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


def _first_line(error: BaseException) -> str:
    """Return the first line of a driver error's message (its name when it has none)."""
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


def _prefixed(columns: str) -> str:
    """Return a column list with each name qualified by the ``u`` alias."""
    return ", ".join(f"u.{c.strip()}" for c in columns.split(","))
