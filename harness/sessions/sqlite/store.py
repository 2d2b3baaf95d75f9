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
- Reported, never acknowledged: a commit after the database file (or its WAL) was deleted or
  replaced under the store raises `harness.errors.StoreFileLost` (``_sqlite_file``); the
  store never opens the file outside SQLite, whose POSIX locks another descriptor's close
  would release (``_sqlite_url.check_file``).
- Not guaranteed: after a *power loss or an operating-system crash*, the last commits before
  it (those since the last checkpoint's fsync) may be missing — rolled back as whole rounds,
  never half-written.

``sqlite:///path/to/sessions.db?synchronous=full`` fsyncs the WAL on every commit, so a
returned commit survives a power loss too, at the price of one fsync per round (0.5–5 ms
depending on the disk). ``synchronous`` is the URL's only option.

**Search.** An FTS5 ``trigram`` index (any script, CJK included) that `search` and
`search_fragments` bring up to date before they query, instead of every commit maintaining it
(`harness.sessions.sqlite._search`). `purge` removes a session's indexed texts in its own
transaction.

**Where the parts live.** This module holds `SqliteStore`: the connection, its lock, when a
commit runs on the event loop, and the session API. Beside it: the URL and file checks
(``_sqlite_url``), the check that the file is still the one opened (``_sqlite_file``), the
tables and their upgrades (``_sqlite_schema``), the statements the store's transactions
share (``_sqlite_rows``), fragment rows (``_sqlite_fragments``), the
fragment-set cache (``_sqlite_set_cache``) with its lock-free check through the wal-index
header (``_sqlite_wal_index``), and the deferred search index (``_sqlite_search``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

import anyio.to_thread

from harness.errors import ConfigurationError, WorkspaceError
from harness.fragments.model import Fragment, FragmentChange, FragmentScope, SetsFound
from harness.messages import Message
from harness.sessions import _rows
from harness.sessions.sqlite._file import OpenedFile, identity
from harness.sessions.sqlite._fragments import (
    fragment_history,
    fragment_set,
    read_fragment,
    write_fragments,
)
from harness.sessions.sqlite._rows import (
    append_usage,
    checkpointed,
    delete_session,
    logged_messages,
    rollback,
    session_row,
)
from harness.sessions.sqlite._schema import SCHEMA_VERSION, migrate
from harness.sessions.sqlite._search import find_fragments, find_messages, list_sessions
from harness.sessions.sqlite._set_cache import SetCache
from harness.sessions.sqlite._state import encode_round, read_state, write_round
from harness.sessions.sqlite._url import SYNCHRONOUS, check_file, parse
from harness.sessions.sqlite._wal_index import wal_index
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

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CHECKPOINT_EVERY",
    "SCHEMA_VERSION",
    "SIDE_BY_SIDE_S",
    "SYNCHRONOUS",
    "SqliteStore",
]

T = TypeVar("T")

BUSY_TIMEOUT_MS: Final = 30_000
"""How long a writer waits for another process's transaction before giving up."""

SIDE_BY_SIDE_S: Final = 0.05
"""Commits of two sessions this close together mean they run side by side: a commit then goes
to a worker thread, where it overlaps with the other sessions' work on the event loop."""
CHECKPOINT_EVERY: Final = 256
"""Commits between the WAL checkpoints the store runs in a worker thread. SQLite's automatic
checkpoint is off on the store's connection: it would run inside whichever commit crossed
the WAL's size, and a commit may run on the event loop (`SqliteStore.commit`)."""


class SqliteStore:
    """A `SessionStore` in one SQLite file, or in memory for ``sqlite://``."""

    def __init__(self, url: str) -> None:
        """Parse ``url``; the database is opened on first use.

        Raises:
            ConfigurationError: the URL is not ``sqlite://`` or ``sqlite:///path``.
        """
        self.url = url
        self.path, self.synchronous = parse(url)
        """The database file, or ``None`` for a private in-memory database."""
        self._conn: sqlite3.Connection | None = None
        self._file: OpenedFile | None = None
        """The database file and WAL the connection opened (``None`` in memory)."""
        self._lock = threading.Lock()
        self._closed = False
        self._sets = SetCache(self.path)
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
            self._still_there(done=False)
            try:
                done = work(conn)
            except sqlite3.Error as error:
                rollback(conn)
                raise self._failure(error) from error
            except BaseException:
                rollback(conn)
                raise
            self._still_there()
            return done

    def _still_there(self, *, done: bool = True) -> None:
        """Raise `StoreFileLost` when the database file is no longer the one opened.

        Before every piece of work on the connection (its lock held; ``done=False``: the
        database only), so nothing is written to a file that was deleted or replaced, and
        after it, so a commit that landed in one (or in a lost WAL) meanwhile is reported,
        not acknowledged (`OpenedFile`; three ``stat`` calls in all, 1–5 µs each).
        """
        if self._file is not None:
            self._file.check(wal_too=done)

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
        before = None
        if self.path is not None:
            check_file(self.path)
            before = identity(self.path)
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
            migrate(conn, target)
            if self.path is not None:
                self._sets.watch(conn)
                (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
                if str(mode).lower() == "wal":  # else a leftover -shm file says nothing
                    self._sets.shm = wal_index(self.path)
                self._file = OpenedFile(self.path, before=before)
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
        return await self._run(lambda conn: read_state(conn, key))

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
        prepared = encode_round(list(events), state, expected_version + 1)

        def work(conn: sqlite3.Connection) -> int:
            return write_round(conn, self._sets, key, expected_version, prepared)

        alone = not self._side_by_side(key)
        if self._unchecked < CHECKPOINT_EVERY:
            self._unchecked += 1
            done = self._commit_here(work) if alone else None
            if done is not None:
                return done
            return await self._run(work)  # a checkpoint only every CHECKPOINT_EVERY commits
        self._unchecked = 0
        return await self._run(lambda conn: checkpointed(conn, work(conn)))

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
            self._still_there(done=False)
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                done = work(conn)
                self._still_there()
                return done
            except sqlite3.OperationalError as error:
                rollback(conn)
                if error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                    return None  # another process writes: wait for it in a worker thread
                raise self._failure(error) from error
            except sqlite3.Error as error:
                rollback(conn)
                raise self._failure(error) from error
            except BaseException:
                rollback(conn)
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
            session = session_row(conn, key)
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
            return _rows.logged_events(rows)

        return await self._run(work)

    async def messages(self, key: SessionKey, ids: Sequence[str]) -> dict[str, Message]:
        """Return the messages of the log with these ids (originals, copies and summaries)."""
        wanted = tuple(dict.fromkeys(ids))

        def work(conn: sqlite3.Connection) -> dict[str, Message]:
            session = session_row(conn, key)
            return {} if session is None else logged_messages(conn, session, wanted)

        return await self._run(work)

    async def sessions(
        self, user_id: str, agent_id: str | None = None, *, within: SessionKey | None = None
    ) -> list[SessionInfo]:
        """Return the user's sessions, most recently active first (``within``: that one)."""
        return await self._run(lambda conn: list_sessions(conn, user_id, agent_id, within))

    async def search(
        self, user_id: str, query: str, *, limit: int = 20, within: SessionKey | None = None
    ) -> list[SearchHit]:
        """Full-text search over the messages of the user's sessions (CJK included)."""
        terms = _rows.search_terms(query)
        if not terms or limit <= 0:
            return []
        return await self._run(lambda conn: find_messages(conn, user_id, terms, limit, within))

    async def usage(self, key: SessionKey) -> SessionUsage:
        """Return the session's usage per answered request and in total (empty when unknown)."""

        def work(conn: sqlite3.Connection) -> SessionUsage:
            session = session_row(conn, key)
            if session is None:
                return SessionUsage()
            rows = conn.execute(
                f"SELECT seq, at, {_rows.USAGE_COLUMNS} FROM usage WHERE session = ? ORDER BY seq",
                (session,),
            ).fetchall()
            return _rows.session_usage(rows)

        return await self._run(work)

    async def append_usage(self, key: SessionKey, event: UsageEvent) -> bool:
        """Append ``event`` to the log of an existing session (and to its usage); return whether.

        One ``BEGIN IMMEDIATE`` transaction in a worker thread that leaves the session's state
        and version as they are (`harness.sessions.UsageStore`); ``False``: nothing written,
        the session does not exist or holds usage of ``event.call_id`` already.

        Raises:
            InvalidInputError: ``event`` is not a valid `UsageEvent` (`_rows.checked_usage`).
        """
        checked = _rows.checked_usage(event)
        return await self._run(lambda conn: append_usage(conn, self._sets, key, checked))

    async def learned(self) -> list[LearnedRow]:
        """Return the calibration learned from usage, per (model, api_base)."""

        def work(conn: sqlite3.Connection) -> list[LearnedRow]:
            rows = conn.execute(
                "SELECT model, api_base, worst, factor, observations FROM learned"
            ).fetchall()
            return [
                LearnedRow(m, b, worst=float(w), factor=float(f), observations=int(n))
                for m, b, w, f, n in rows
            ]

        return await self._run(work)

    async def learn(self, rows: Sequence[LearnedRow]) -> None:
        """Fold in what this process learned (the worst ratio kept, the factor never below it)."""
        if not rows:
            return
        now = time.time()
        values = [
            (r.model, r.api_base, r.worst, r.factor, r.observations, now, LEARN_MAX, LEARN_MARGIN)
            for r in rows
        ]

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO learned (model, api_base, worst, factor, observations, updated_at) "
                "SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE ?7 IS NOT NULL AND ?8 IS NOT NULL "
                "ON CONFLICT (model, api_base) DO UPDATE SET "
                "worst = max(worst, excluded.worst), "
                "factor = min(?7, max(min(factor, excluded.factor), "
                "max(worst, excluded.worst) * ?8)), "
                "observations = observations + excluded.observations, "
                "updated_at = excluded.updated_at",
                values,
            )
            conn.commit()

        await self._run(work)

    async def purge(self, key: SessionKey) -> bool:
        """Delete one session entirely; return whether it existed."""

        def work(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            session = session_row(conn, key)
            if session is not None:
                delete_session(conn, session)
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
                delete_session(conn, row[0])
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
        file, `SetCache` answers on the event loop: while no fragment set was written since
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
        own, read-only (`SetCache.repeated`).
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
        return await self._run(lambda conn: read_fragment(conn, scope, fragment_id))

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
        return await self._run(
            lambda conn: write_fragments(
                conn,
                self._sets,
                scope,
                expected_version=expected_version,
                batch=batch,
                events=events,
                log=log,
            )
        )

    async def fragment_versions(self, scope: FragmentScope, fragment_id: str) -> list[Fragment]:
        """Return every stored version of one fragment, oldest first."""
        return await self._run(lambda conn: fragment_history(conn, scope, fragment_id))

    async def search_fragments(
        self, scope: FragmentScope, query: str, *, limit: int = 50
    ) -> list[Fragment]:
        """Full-text search over the set's current fragments (title, tags, content; CJK too)."""
        terms = _rows.search_terms(query)
        if not terms or limit <= 0:
            return []

        def work(conn: sqlite3.Connection) -> list[Fragment]:
            row = fragment_set(conn, scope)
            return [] if row is None else find_fragments(conn, row[0], terms, limit)

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
