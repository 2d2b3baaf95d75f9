"""The SQLite store's fragment rows: a set's row, one fragment, its versions, a change written.

A fragment change is one ``BEGIN IMMEDIATE`` transaction that checks the set's version,
writes each fragment's current row and its version row, and may log the change into a
session; the store's set cache (`SetCache`) is brought up to the write after it commits.
Reading the sets themselves, cached, is `harness.sessions.sqlite._set_cache`'s concern.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from harness.fragments.model import Fragment, FragmentChange, FragmentScope
from harness.sessions import _rows
from harness.sessions._rows import Stamp
from harness.sessions.sqlite._rows import insert_events, session_for_log
from harness.sessions.store import Event, SessionKey

if TYPE_CHECKING:
    from harness.sessions.sqlite._set_cache import SetCache


def set_stamp(conn: sqlite3.Connection, scope: FragmentScope) -> Stamp | None:
    """Return the row of ``scope``'s set as the cache checks it, or ``None`` when it has none."""
    rows = conn.execute(
        "SELECT id, version, updated_at FROM fragment_sets "
        "WHERE user_id = ? AND agent_id = ? AND scope = ? AND name = ?",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    ).fetchall()  # fetchall: the statement ends, so the probe holds no read snapshot
    return None if not rows else (int(rows[0][0]), int(rows[0][1]), float(rows[0][2]))


def fragment_set(conn: sqlite3.Connection, scope: FragmentScope) -> tuple[int, int] | None:
    """Return the row id and version of ``scope``'s set, or ``None`` when it was never written."""
    row = conn.execute(
        "SELECT id, version FROM fragment_sets "
        "WHERE user_id = ? AND agent_id = ? AND scope = ? AND name = ?",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def fragments_of_set(conn: sqlite3.Connection, fset: int) -> list[Fragment]:
    """Return the current fragments of the set with row id ``fset``, in row order."""
    rows = conn.execute("SELECT body FROM fragments WHERE fset = ? ORDER BY id", (fset,))
    return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]


def read_fragment(
    conn: sqlite3.Connection, scope: FragmentScope, fragment_id: str
) -> tuple[int, Fragment | None]:
    """Return the set's version and one fragment's current version (one read snapshot)."""
    conn.execute("BEGIN")
    try:
        row = fragment_set(conn, scope)
        if row is None:
            return 0, None
        found = conn.execute(
            "SELECT body FROM fragments WHERE fset = ? AND fragment_id = ?",
            (row[0], fragment_id),
        ).fetchall()
    finally:
        conn.commit()
    return row[1], _rows.FRAGMENT_DECODER.decode(found[0][0]) if found else None


def fragment_history(
    conn: sqlite3.Connection, scope: FragmentScope, fragment_id: str
) -> list[Fragment]:
    """Return every stored version of one fragment, oldest first."""
    row = fragment_set(conn, scope)
    if row is None:
        return []
    rows = conn.execute(
        "SELECT body FROM fragment_versions WHERE fset = ? AND fragment_id = ? ORDER BY version",
        (row[0], fragment_id),
    ).fetchall()
    return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]


def write_fragments(
    conn: sqlite3.Connection,
    sets: SetCache,
    scope: FragmentScope,
    *,
    expected_version: int,
    batch: list[FragmentChange],
    events: list[Event],
    log: SessionKey | None,
) -> int:
    """Write new fragment versions in one transaction; return the set's new version.

    Raises:
        StateConflict: the set's version is not ``expected_version`` (nothing written).
    """
    new_version = expected_version + 1
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    row = set_stamp(conn, scope)
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
        session, first = session_for_log(conn, log, now, len(events))
        insert_events(conn, session, _rows.event_rows(events, first))
    conn.commit()
    sets.wrote(scope, row, (fset, new_version, now), [c.fragment for c in batch])
    return new_version
