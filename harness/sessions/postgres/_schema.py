"""The PostgreSQL store's layout and its upgrades, run once when the store first connects.

`upgrade` brings a database of any older version to `SCHEMA_VERSION` in one transaction that
holds an advisory lock (so two processes opening the store at once do not race), and refuses a
newer one. Every statement is ``IF NOT EXISTS``, so an older database is upgraded in place.
Kept apart from `harness.sessions.postgres.store` because the tables change by versioned steps,
while the store's queries only read the current layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from harness.errors import ConfigurationError
from harness.sessions import _rows

if TYPE_CHECKING:
    import psycopg

SCHEMA_VERSION: Final = _rows.SCHEMA_VERSION + 5
"""The PostgreSQL layout: the shared tables (`_rows.SCHEMA_VERSION`) plus the events' recency
index that newest-first search walks (+1), ``harness_fragments_by_set`` (+2: a set is read,
and searched up to a limit, in row order without a sort) and ``harness_working`` (+3: a
session's working ids one row each, so a round's commit writes only the ids that changed
instead of the whole list in the state) and ``harness_events.turn_id`` with its unique
``harness_events_by_turn`` index (+4: a caller's turn is logged at most once per session;
rows logged before have none) and ``harness_usage`` and ``harness_learned`` (+5: each
answered request's usage and cost, summed per session without decoding the log; the learned
calibration per model and api_base, shared by every replica). Every statement is ``IF NOT EXISTS``: upgraded in place; a
session stored before +3 keeps its ids in its state until its next commit."""

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
    # NULL: not a caller's turn, or logged before +4.
    "ALTER TABLE harness_events ADD COLUMN IF NOT EXISTS turn_id text",
    "CREATE UNIQUE INDEX IF NOT EXISTS harness_events_by_turn "
    "ON harness_events (session, turn_id) WHERE turn_id IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS harness_usage (
        session bigint NOT NULL REFERENCES harness_sessions (id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        at double precision NOT NULL,
        call_id text NOT NULL,
        purpose text NOT NULL,
        model text NOT NULL,
        input_tokens bigint NOT NULL,
        cached_tokens bigint NOT NULL,
        cache_write_tokens bigint NOT NULL,
        output_tokens bigint NOT NULL,
        reasoning_tokens bigint NOT NULL,
        cost_usd double precision,
        PRIMARY KEY (session, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS harness_learned (
        model text NOT NULL,
        api_base text NOT NULL,
        worst double precision NOT NULL,
        factor double precision NOT NULL,
        observations bigint NOT NULL,
        updated_at double precision NOT NULL,
        PRIMARY KEY (model, api_base)
    )""",
)


async def upgrade(conn: psycopg.AsyncConnection[Any], url: str) -> None:
    """Create or upgrade the tables on ``conn`` (nothing when they are current).

    Raises:
        ConfigurationError: the database's schema is newer than `SCHEMA_VERSION`.
    """
    found = await schema_version(conn)
    if found == SCHEMA_VERSION:
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
        found = await schema_version(conn)
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
            f"the session store {url} has schema version {found}, newer than "
            f"this context-harness understands ({SCHEMA_VERSION}); upgrade "
            "context-harness or use another database",
            url=url,
        )


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """Return the database's schema version (0 when it has no ``harness_schema`` table)."""
    cursor = await conn.execute("SELECT to_regclass('harness_schema') IS NOT NULL")
    exists = await cursor.fetchone()
    if not exists or not exists[0]:
        return 0
    cursor = await conn.execute("SELECT max(version) FROM harness_schema")
    row = await cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0
