"""The SQLite store's row helpers: the statements its transactions share.

Each takes the store's connection, already locked by the caller, and runs inside the
caller's transaction (or, for `checkpointed` and `rollback`, right after it): finding a
session's row, reading logged messages by id, appending events (a round's, or a fragment
change's into a session created for the log), deleting a session with everything it owns.
`append_usage` is the one that runs its own transaction: a usage record after the round.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Final

from harness.messages import Message
from harness.sessions import _rows
from harness.sessions.store import SessionKey, UsageEvent

if TYPE_CHECKING:
    from harness.sessions.sqlite._set_cache import SetCache

IN_CHUNK: Final = 500
"""Ids per ``IN (…)`` query (SQLite's variable limit is 32766, but short queries plan better)."""


def session_row(conn: sqlite3.Connection, key: SessionKey) -> int | None:
    """Return the row id of the session ``key``, or ``None`` when it was never stored."""
    row = conn.execute(
        "SELECT id FROM sessions WHERE user_id = ? AND agent_id = ? AND session_id = ?",
        (key.user_id, key.agent_id, key.session_id),
    ).fetchone()
    return None if row is None else int(row[0])


def logged_messages(
    conn: sqlite3.Connection, session: int, ids: Sequence[str]
) -> dict[str, Message]:
    """Return the logged messages with these ids (the latest event wins for a repeated id)."""
    return _rows.latest_messages(_bodies(conn, session, list(dict.fromkeys(ids))), ids)


def _bodies(conn: sqlite3.Connection, session: int, unique: list[str]) -> Iterator[bytes]:
    """Yield the bodies of the session's events carrying these message ids, by seq per chunk."""
    for start in range(0, len(unique), IN_CHUNK):
        chunk = unique[start : start + IN_CHUNK]
        rows = conn.execute(
            f"SELECT body FROM events WHERE session = ? AND message_id IN "
            f"({', '.join('?' * len(chunk))}) ORDER BY seq",
            (session, *chunk),
        ).fetchall()
        for (body,) in rows:
            yield body


def insert_events(conn: sqlite3.Connection, session: int, rows: list[_rows.EventRow]) -> None:
    """Append the encoded events to the session's log."""
    conn.executemany(
        "INSERT INTO events (session, seq, tag, body, at, message_id, role, text, turn_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (session, r.seq, r.tag, r.body, r.at, r.message_id, r.role, r.text, r.turn_id)
            for r in rows
        ],
    )
    usage = [(session, r.seq, r.at, *r.usage) for r in rows if r.usage is not None]
    if usage:
        conn.executemany(
            f"INSERT INTO usage (session, seq, at, {_rows.USAGE_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            usage,
        )


def append_usage(
    conn: sqlite3.Connection, sets: SetCache, key: SessionKey, event: UsageEvent
) -> bool:
    """Log ``event`` in the existing session ``key`` in one transaction; return whether it did.

    Only the log, the ``usage`` table and the session's event count and activity time are
    written — never its state or version, so the session's next round commits as it would
    have. Nothing is written when the session does not exist or holds usage of the call id.
    """
    conn.execute("BEGIN IMMEDIATE")
    row = conn.execute(
        "SELECT id, n_events FROM sessions WHERE user_id = ? AND agent_id = ? AND session_id = ?",
        (key.user_id, key.agent_id, key.session_id),
    ).fetchone()
    if row is None or _billed(conn, int(row[0]), event.call_id):
        conn.rollback()
        return False
    session, first = int(row[0]), int(row[1]) + 1
    conn.execute(
        "UPDATE sessions SET n_events = n_events + 1, updated_at = ? WHERE id = ?",
        (time.time(), session),
    )
    insert_events(conn, session, _rows.event_rows([event], first))
    before = sets.header()  # the write lock is held: no one else commits now
    conn.commit()
    sets.committed(before)
    return True


def _billed(conn: sqlite3.Connection, session: int, call_id: str) -> bool:
    """Whether the session's usage holds a record of ``call_id``."""
    found = conn.execute(
        "SELECT 1 FROM usage WHERE session = ? AND call_id = ? LIMIT 1", (session, call_id)
    ).fetchone()
    return found is not None


def stored_turns(conn: sqlite3.Connection, session: int, turns: Sequence[str]) -> list[str]:
    """Return which of these turn ids the session's log holds (one indexed look-up each)."""
    found: list[str] = []
    for start in range(0, len(turns), IN_CHUNK):
        chunk = list(turns[start : start + IN_CHUNK])
        found.extend(
            t
            for (t,) in conn.execute(
                f"SELECT turn_id FROM events WHERE session = ? AND turn_id IN "
                f"({', '.join('?' * len(chunk))})",
                (session, *chunk),
            )
        )
    return found


def session_for_log(
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


def delete_session(conn: sqlite3.Connection, session: int) -> None:
    """Delete a session's row, events, working ids and session fragments (caller's transaction)."""
    conn.execute(
        "DELETE FROM fragment_sets WHERE id IN (SELECT f.id FROM fragment_sets f JOIN sessions s "
        "ON f.user_id = s.user_id AND f.agent_id = s.agent_id AND f.scope = 'session' "
        "AND f.name = s.session_id WHERE s.id = ?)",
        (session,),
    )
    conn.execute("DELETE FROM events WHERE session = ?", (session,))
    conn.execute("DELETE FROM working WHERE session = ?", (session,))
    conn.execute("DELETE FROM usage WHERE session = ?", (session,))
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


def checkpointed(conn: sqlite3.Connection, version: int) -> int:
    """Copy the WAL into the database after a commit (passive: never waits for readers)."""
    with contextlib.suppress(sqlite3.Error):  # the commit stands; the next one checkpoints
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return version


def rollback(conn: sqlite3.Connection) -> None:
    """End a transaction left open by a failure (nothing when none is)."""
    if conn.in_transaction:
        conn.rollback()
