"""The PostgreSQL store's search: messages newest first, fragments in row order, ``ILIKE`` per term.

Each term matches as a case-insensitive substring (any script, CJK included). Messages are
listed newest first: the query walks the events newest-first and stops at the limit, which is
fast for a frequent term; a rare term (the walk outlasts `SEARCH_WALK_MS`) is answered from the
GIN ``pg_trgm`` index instead. Ranking every match by similarity cost 1–6 s for a frequent
word or a two-character CJK term over 36,000 events.

Listing and searching are scoped by user id, or to one session (``within``): the scope of a
session without a user id, which shares nothing with other anonymous sessions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from harness.fragments.model import Fragment
from harness.sessions import _rows
from harness.sessions.store import SearchHit, SessionInfo, SessionKey

if TYPE_CHECKING:
    import psycopg

SEARCH_WALK_MS: Final = 50
"""How long a newest-first walk may take before search falls back to the trigram index."""


async def list_sessions(
    conn: psycopg.AsyncConnection[Any],
    user_id: str,
    agent_id: str | None,
    within: SessionKey | None,
) -> list[SessionInfo]:
    """Return the user's sessions (or ``within`` alone), most recently active first."""
    if within is not None and within.user_id != user_id:
        return []
    one = within is not None
    cursor = await conn.execute(
        "SELECT agent_id, session_id, title, n_messages, n_events, created_at, "
        "updated_at FROM harness_sessions "
        "WHERE user_id = %s AND (%s::text IS NULL OR agent_id = %s) "
        "AND (NOT %s OR (agent_id = %s AND session_id = %s)) "
        "ORDER BY updated_at DESC, id DESC",
        (
            user_id,
            agent_id,
            agent_id,
            one,
            within.agent_id if within else "",
            within.session_id if within else "",
        ),
    )
    return _rows.session_infos(await cursor.fetchall())


async def find_messages(
    conn: psycopg.AsyncConnection[Any],
    user_id: str,
    terms: list[str],
    limit: int,
    within: SessionKey | None = None,
) -> list[SearchHit]:
    """Return the user's messages holding every term, newest first (one transaction).

    ``within``: only that session's messages.
    """
    from psycopg.errors import QueryCanceled  # installed: the store checked when it was made

    if within is not None and within.user_id != user_id:
        return []
    patterns = [f"%{_rows.escape_like(term)}%" for term in terms]
    # One ILIKE per term (not ILIKE ALL (array)): the GIN trigram index serves each.
    matches = " AND e.text ILIKE %s" * len(patterns)
    one = " AND s.agent_id = %s AND s.session_id = %s" if within is not None else ""
    sql = (
        "SELECT s.agent_id, s.session_id, e.seq, e.message_id, e.role, e.text, e.at "
        "FROM harness_events e JOIN harness_sessions s ON s.id = e.session "
        f"WHERE s.user_id = %s{one} AND e.text IS NOT NULL{matches} "
        "ORDER BY e.at DESC LIMIT %s"
    )
    scope = (within.agent_id, within.session_id) if within is not None else ()
    args = (user_id, *scope, *patterns, limit)
    # A term under three characters has no trigram: the index cannot help, so walk.
    indexable = all(len(term) >= 3 for term in terms)
    async with conn.transaction():
        try:
            async with conn.transaction():  # a savepoint: a cancelled walk undoes only itself
                if indexable:
                    await conn.execute(f"SET LOCAL statement_timeout = {SEARCH_WALK_MS}")
                rows = await (await conn.execute(sql, args)).fetchall()
        except QueryCanceled:
            await conn.execute("SET LOCAL enable_indexscan = off")  # the GIN bitmap path
            rows = await (await conn.execute(sql, args)).fetchall()
    return _rows.search_hits(rows, terms)


async def find_fragments(
    conn: psycopg.AsyncConnection[Any], fset: int, terms: list[str], limit: int
) -> list[Fragment]:
    """Return the set's current fragments holding every term, in row order."""
    patterns = [f"%{_rows.escape_like(term)}%" for term in terms]
    matches = " AND f.text ILIKE %s" * len(patterns)
    cursor = await conn.execute(
        "SELECT f.body::text FROM harness_fragments f "
        f"WHERE f.fset = %s AND NOT f.removed{matches} ORDER BY f.id LIMIT %s",
        (fset, *patterns, limit),
    )
    return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in await cursor.fetchall()]
