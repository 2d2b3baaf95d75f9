"""A session's stored state in PostgreSQL: its row, its working ids as rows, a round written.

The state JSON holds everything but the working ids when a commit says how many of them are
unchanged (`StoredState.unchanged`, schema +3's ``harness_working`` table): then only the ids
that changed are written, one row each, instead of the whole list in the state. Ids a text
column cannot hold (NUL) keep the state form. A round is one transaction that locks the
session row (``SELECT … FOR UPDATE``; a new session is created with ``INSERT … ON CONFLICT DO
NOTHING``), so two writers on one session serialize and the stale one gets `StateConflict`
with nothing written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.messages import Message
from harness.sessions import _rows
from harness.sessions.postgres._rows import (
    insert_events,
    logged_messages,
    stored_turns,
    text,
    version,
)
from harness.sessions.store import Event, SessionKey, StoredState

if TYPE_CHECKING:
    import psycopg


async def read_state(
    conn: psycopg.AsyncConnection[Any], key: SessionKey
) -> tuple[StoredState, dict[str, Message]] | None:
    """Return the state and its working messages by id, or ``None`` for a new session."""
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
    return state, await logged_messages(conn, row[0], state.working_ids)


async def write_round(
    conn: psycopg.AsyncConnection[Any],
    key: SessionKey,
    expected_version: int,
    events: Sequence[Event],
    state: StoredState,
) -> int:
    """Write a round (`PostgresStore.commit`) under the session row's lock; return its version.

    The row is locked with ``SELECT … FOR UPDATE`` or created; the working ids become rows
    when a hint says how many are unchanged and none of the new ones holds NUL.

    A caller's turn the session's log holds already is refused (`DuplicateTurn`): checked
    under the row lock, guaranteed by the unique ``harness_events_by_turn`` index.

    Raises:
        StateConflict: the session is not at ``expected_version`` (nothing written).
        DuplicateTurn: a turn of the round is logged already (nothing written).
    """
    batch = list(events)
    turns = _rows.turn_ids(batch)
    new_version = expected_version + 1
    ids = tuple(state.working_ids)
    unchanged = min(state.unchanged, len(ids))
    # A hint: the ids go to rows, as changes (text rows cannot hold NUL; the state can).
    rows = unchanged > 0 and "\x00" not in "".join(ids[unchanged:])
    messages = _rows.count_messages(batch)
    async with conn.transaction():
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
        if row is not None and turns:
            stored_already = await stored_turns(conn, row[0], turns)
            if stored_already:
                raise _rows.duplicate_turn(key, stored_already)
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
                    text(state.title),
                    now,
                    now,
                    len(batch),
                    messages,
                    count,
                ),
            )
            created = await cursor.fetchone()
            if created is None:  # another writer created it since our SELECT
                raise _rows.conflict(key, expected_version, await version(conn, key))
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
                    text(state.title),
                    now,
                    len(batch),
                    messages,
                    count,
                    session,
                ),
            )
        await _write_working(conn, session, ids if rows else (), state.unchanged, held)
        if batch:
            await insert_events(conn, session, _rows.event_rows(batch, first))
    return new_version


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
