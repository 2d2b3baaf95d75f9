"""A session's stored state in SQLite: its row, its working ids as rows, a round written.

The state blob holds everything but the working ids when a commit says how many of them are
unchanged (`StoredState.unchanged`, schema 5's ``working`` table): then only the ids that
changed are written, one row each (rewriting them in the blob cost ~1.2 ms a commit at
10,000 ids). A round is encoded (`encode_round`) before the store's lock is taken, and
written (`write_round`) in one ``BEGIN IMMEDIATE`` transaction on the locked connection.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

import msgspec

from harness.messages import Message
from harness.sessions import _rows
from harness.sessions.sqlite._rows import insert_events, logged_messages, stored_turns
from harness.sessions.store import Event, SessionKey, StoredState

if TYPE_CHECKING:
    from harness.sessions.sqlite._set_cache import SetCache


class Round(msgspec.Struct, frozen=True, kw_only=True):
    """A round's commit, encoded before the store's lock is taken."""

    batch: list[Event]
    state: StoredState
    ids: tuple[str, ...]
    """The state's working ids."""
    rows: bool
    """Whether the ids go to ``working`` as changes (a hint was given), else whole into the blob."""
    body: bytes
    """The encoded state blob, at the new version."""
    count: int | None
    """``working_n``: how many ids are rows, ``None`` when the blob holds them."""
    messages: int
    """How many events are messages joining the full history."""
    turns: list[str]
    """The callers' turn ids the events log (each at most once per session)."""


def encode_round(events: list[Event], state: StoredState, new_version: int) -> Round:
    """Encode a round's state and count its messages (on the caller's thread, no lock).

    Raises:
        DuplicateTurn: two events log one turn id.
    """
    ids = tuple(state.working_ids)
    # With a hint the ids go to ``working`` as changes; without, whole into the blob.
    rows = min(state.unchanged, len(ids)) > 0
    return Round(
        batch=events,
        state=state,
        ids=ids,
        rows=rows,
        body=_rows.ENCODER.encode(_rows.stored_state(state, new_version, with_ids=not rows)),
        count=len(ids) if rows else None,
        messages=_rows.count_messages(events),
        turns=_rows.turn_ids(events),
    )


def read_state(
    conn: sqlite3.Connection, key: SessionKey
) -> tuple[StoredState, dict[str, Message]] | None:
    """Return the state and its working messages by id, or ``None`` for a new session."""
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
    return state, logged_messages(conn, row[0], state.working_ids)


def write_round(
    conn: sqlite3.Connection,
    sets: SetCache,
    key: SessionKey,
    expected_version: int,
    prepared: Round,
) -> int:
    """Append the round's events and replace the state in one transaction; return the version.

    With a hint (`Round.rows`) the working ids are written as changes to the ``working`` rows
    (a round that appended writes its new ids, not the whole history's). The set cache is
    carried over the commit (`SetCache.committed`).

    A caller's turn the session's log holds already is refused (`DuplicateTurn`), checked in
    the transaction and guaranteed by the unique ``events_by_turn`` index.

    Raises:
        StateConflict: the stored version is not ``expected_version`` (nothing written).
        DuplicateTurn: a turn of the round is logged already (nothing written).
    """
    new_version = expected_version + 1
    ids = prepared.ids
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
    if row is not None and prepared.turns:
        stored_already = stored_turns(conn, row[0], prepared.turns)
        if stored_already:
            raise _rows.duplicate_turn(key, stored_already)
    if row is None:
        cursor = conn.execute(
            "INSERT INTO sessions (user_id, agent_id, session_id, state, version, title, "
            "created_at, updated_at, n_events, n_messages, working_n) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key.user_id,
                key.agent_id,
                key.session_id,
                prepared.body,
                new_version,
                prepared.state.title,
                now,
                now,
                len(prepared.batch),
                prepared.messages,
                prepared.count,
            ),
        )
        session, first, stored = int(cursor.lastrowid or 0), 1, 0
    else:
        session, first, stored = row[0], row[2] + 1, row[3] or 0
        conn.execute(
            "UPDATE sessions SET state = ?, version = ?, title = ?, updated_at = ?, "
            "n_events = n_events + ?, n_messages = n_messages + ?, working_n = ? "
            "WHERE id = ?",
            (
                prepared.body,
                new_version,
                prepared.state.title,
                now,
                len(prepared.batch),
                prepared.messages,
                prepared.count,
                session,
            ),
        )
    # The rows the stored state shares with this one stay; the rest are written anew.
    kept = min(prepared.state.unchanged, stored, len(ids)) if prepared.rows else 0
    if stored > kept:
        conn.execute("DELETE FROM working WHERE session = ? AND pos >= ?", (session, kept))
    if prepared.rows and len(ids) > kept:
        conn.executemany(
            "INSERT INTO working (session, pos, message_id) VALUES (?, ?, ?)",
            [(session, pos, ids[pos]) for pos in range(kept, len(ids))],
        )
    insert_events(conn, session, _rows.event_rows(prepared.batch, first))
    before = sets.header()  # the write lock is held: no one else commits now
    conn.commit()
    sets.committed(before)
    return new_version
