"""The PostgreSQL store's fragment rows: sets read through a cache, one fragment, a change written.

FragmentEditor reads the session's and the project's set before every request
(`harness.fragments.ReadsFragmentSets`). `SetCache` looks up the sets' rows first (`Stamp`:
id, version, updated_at); a set cached at its current stamp is not read again, so an
unchanged set of 10,000 fragments costs one small query, and a change by any process — a new
stamp — reaches the next read. A fragment change is one transaction that locks the set's row,
checks its version, writes each fragment's current row and its version row, and may log the
change into a session.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from harness.fragments.model import Fragment, FragmentChange, FragmentScope
from harness.sessions import _rows
from harness.sessions._rows import Stamp
from harness.sessions.postgres._rows import insert_events, session_for_log, text
from harness.sessions.store import Event, SessionKey

if TYPE_CHECKING:
    import psycopg

MAX_SETS: Final = 4096
"""Fragment sets a store keeps decoded (`PostgresStore.fragment_sets`)."""


class SetCache:
    """Fragment sets read before, with the stamp they were read at, keyed by the full scope."""

    def __init__(self) -> None:
        """Start empty."""
        self._sets: OrderedDict[FragmentScope, tuple[Stamp, list[Fragment]]] = OrderedDict()

    async def read(
        self, conn: psycopg.AsyncConnection[Any], scopes: Sequence[FragmentScope]
    ) -> list[tuple[int, list[Fragment]]]:
        """Return each scope's version (0 when never written) and its fragments.

        Runs in the caller's transaction; a set is read again only when its stamp changed. At
        most ``MAX_SETS`` sets are kept (least recently used dropped).
        """
        out: list[tuple[int, list[Fragment]]] = []
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


async def fragment_set(
    conn: psycopg.AsyncConnection[Any], scope: FragmentScope
) -> tuple[int, int] | None:
    """Return the set's row id and version, or ``None`` when it was never written."""
    cursor = await conn.execute(
        "SELECT id, version FROM harness_fragment_sets "
        "WHERE user_id = %s AND agent_id = %s AND scope = %s AND name = %s",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    )
    row = await cursor.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


async def read_fragment(
    conn: psycopg.AsyncConnection[Any], scope: FragmentScope, fragment_id: str
) -> tuple[int, Fragment | None]:
    """Return the set's version and one fragment's current version, in one query."""
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


async def write_fragments(
    conn: psycopg.AsyncConnection[Any],
    scope: FragmentScope,
    expected_version: int,
    changes: list[FragmentChange],
    events: list[Event],
    log: SessionKey | None,
) -> int:
    """Lock the set's row (made at version 0 when new), write ``changes``; return its version.

    Each change writes the fragment's current row and a version row; ``events`` go to the
    log of ``log``'s session when one is given. All in one transaction.

    Raises:
        StateConflict: the set is not at ``expected_version`` (nothing written).
    """
    new_version = expected_version + 1
    async with conn.transaction():
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
        for change in changes:
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
                    text(_rows.fragment_text(fragment)),
                    fragment.removed,
                ),
            )
            await conn.execute(
                "INSERT INTO harness_fragment_versions (fset, fragment_id, version, op, at, "
                "body) VALUES (%s, %s, %s, %s, %s, %s::json)",
                (fset, fragment.id, fragment.version, change.op, now, body),
            )
        if log is not None and events:
            session, first = await session_for_log(conn, log, now, len(events))
            await insert_events(conn, session, _rows.event_rows(events, first))
    return new_version


async def fragment_history(
    conn: psycopg.AsyncConnection[Any], scope: FragmentScope, fragment_id: str
) -> list[Fragment]:
    """Return every stored version of one fragment, oldest first."""
    row = await fragment_set(conn, scope)
    if row is None:
        return []
    cursor = await conn.execute(
        "SELECT body::text FROM harness_fragment_versions "
        "WHERE fset = %s AND fragment_id = %s ORDER BY version",
        (row[0], fragment_id),
    )
    return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in await cursor.fetchall()]


async def _stamp(conn: psycopg.AsyncConnection[Any], scope: FragmentScope) -> Stamp | None:
    """Return the set's row as the cache checks it, or ``None`` when it was never written."""
    cursor = await conn.execute(
        "SELECT id, version, updated_at FROM harness_fragment_sets "
        "WHERE user_id = %s AND agent_id = %s AND scope = %s AND name = %s",
        (scope.user_id, scope.agent_id, scope.scope, scope.name),
    )
    row = await cursor.fetchone()
    return None if row is None else (int(row[0]), int(row[1]), float(row[2]))
