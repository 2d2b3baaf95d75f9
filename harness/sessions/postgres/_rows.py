"""The PostgreSQL store's row helpers: the statements its transactions share.

Each takes a connection of the store's pool and runs inside the caller's transaction (or in
autocommit, where the caller opened none): finding a session's row and version, reading
logged messages by id, appending events (a round's, or a fragment change's into a session
created for the log, or a usage record after its round: `append_usage`). Text columns cannot hold NUL (`text`); the JSON bodies keep the exact
text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.errors import WorkspaceError
from harness.messages import Message
from harness.sessions import _rows
from harness.sessions.store import SessionKey, UsageEvent

if TYPE_CHECKING:
    import psycopg


def text(value: str) -> str:
    """PostgreSQL text cannot hold NUL; the JSON body keeps the exact text."""
    return value.replace("\x00", "\ufffd")


async def session_row(conn: psycopg.AsyncConnection[Any], key: SessionKey) -> int | None:
    """Return the row id of the session ``key``, or ``None`` when it was never stored."""
    cursor = await conn.execute(
        "SELECT id FROM harness_sessions WHERE user_id = %s AND agent_id = %s AND session_id = %s",
        (key.user_id, key.agent_id, key.session_id),
    )
    row = await cursor.fetchone()
    return None if row is None else int(row[0])


async def version(conn: psycopg.AsyncConnection[Any], key: SessionKey) -> int:
    """Return the stored version of the session ``key`` (0 when it was never stored)."""
    cursor = await conn.execute(
        "SELECT version FROM harness_sessions "
        "WHERE user_id = %s AND agent_id = %s AND session_id = %s",
        (key.user_id, key.agent_id, key.session_id),
    )
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


async def logged_messages(
    conn: psycopg.AsyncConnection[Any], session: int, ids: Sequence[str]
) -> dict[str, Message]:
    """Return the logged messages with these ids (the latest event wins for a repeated id)."""
    cursor = await conn.execute(
        "SELECT body::text FROM harness_events "
        "WHERE session = %s AND message_id = ANY(%s::text[]) ORDER BY seq",
        (session, [i for i in dict.fromkeys(ids) if "\x00" not in i]),  # no text holds NUL
    )
    return _rows.latest_messages((body for (body,) in await cursor.fetchall()), ids)


async def insert_events(
    conn: psycopg.AsyncConnection[Any], session: int, rows: list[_rows.EventRow]
) -> None:
    """Append the encoded events to the session's log (searchable texts without NUL)."""
    async with conn.cursor() as insert:
        await insert.executemany(
            "INSERT INTO harness_events "
            "(session, seq, tag, body, at, message_id, role, text, turn_id) "
            "VALUES (%s, %s, %s, %s::json, %s, %s, %s, %s, %s)",
            [
                (
                    session,
                    r.seq,
                    r.tag,
                    r.body.decode(),
                    r.at,
                    r.message_id,
                    r.role,
                    None if r.text is None else text(r.text),
                    None if r.turn_id is None else text(r.turn_id),
                )
                for r in rows
            ],
        )
        usage = [(session, r.seq, r.at, *r.usage) for r in rows if r.usage is not None]
        if usage:
            await insert.executemany(
                f"INSERT INTO harness_usage (session, seq, at, {_rows.USAGE_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [(*u[:3], *(text(v) if isinstance(v, str) else v for v in u[3:])) for u in usage],
            )


async def append_usage(
    conn: psycopg.AsyncConnection[Any], key: SessionKey, event: UsageEvent
) -> bool:
    """Log ``event`` in the existing session ``key`` in one transaction; return whether it did.

    The session's row is locked (``FOR UPDATE``, as a round's commit locks it, so the two
    take turns on the log's seqs); only the log, ``harness_usage`` and the session's event
    count and activity time are written — never its state or version. Nothing is written
    when the session does not exist or holds usage of the call id.
    """
    async with conn.transaction():
        cursor = await conn.execute(
            "SELECT id, n_events FROM harness_sessions "
            "WHERE user_id = %s AND agent_id = %s AND session_id = %s FOR UPDATE",
            (key.user_id, key.agent_id, key.session_id),
        )
        row = await cursor.fetchone()
        if row is None:
            return False
        cursor = await conn.execute(
            "SELECT 1 FROM harness_usage WHERE session = %s AND call_id = %s LIMIT 1",
            (row[0], text(event.call_id)),
        )
        if await cursor.fetchone() is not None:
            return False
        session, first = int(row[0]), int(row[1]) + 1
        await conn.execute(
            "UPDATE harness_sessions SET n_events = n_events + 1, updated_at = %s WHERE id = %s",
            (time.time(), session),
        )
        await insert_events(conn, session, _rows.event_rows([event], first))
    return True


async def stored_turns(
    conn: psycopg.AsyncConnection[Any], session: int, turns: Sequence[str]
) -> list[str]:
    """Return which of these turn ids the session's log holds."""
    cursor = await conn.execute(
        "SELECT turn_id FROM harness_events WHERE session = %s AND turn_id = ANY(%s)",
        (session, [text(t) for t in turns]),
    )
    return [row[0] for row in await cursor.fetchall()]


async def session_for_log(
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
