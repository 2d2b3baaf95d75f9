"""The SQLite store's deferred full-text index: brought up to date by the search that needs it.

An FTS5 index with the ``trigram`` tokenizer (any script, CJK included); terms shorter than
three characters fall back to ``LIKE``. The index is not maintained in the commit transaction
(indexing a round's texts cost several times the rest of the commit): ``fts_marks`` holds the
highest ``events`` rowid indexed (and, for fragments, the highest ``fragment_versions``
rowid), and a search first indexes whatever was committed past the mark, in one transaction
on the locked connection, then queries — so a search sees every commit that returned before
it, and the first search after many rounds pays for indexing them.

Listing and searching are scoped by user id, or to one session (``within``): the scope of a
session without a user id, which shares nothing with other anonymous sessions.
"""

from __future__ import annotations

import sqlite3

from harness.fragments.model import Fragment
from harness.sessions import _rows
from harness.sessions.store import SearchHit, SessionInfo, SessionKey


def list_sessions(
    conn: sqlite3.Connection, user_id: str, agent_id: str | None, within: SessionKey | None
) -> list[SessionInfo]:
    """Return the user's sessions (or ``within`` alone), most recently active first."""
    if within is not None and within.user_id != user_id:
        return []
    sql = (
        "SELECT agent_id, session_id, title, n_messages, n_events, created_at, "
        "updated_at FROM sessions WHERE user_id = ?"
    )
    args: tuple[str, ...] = (user_id,)
    if agent_id is not None:
        sql += " AND agent_id = ?"
        args += (agent_id,)
    if within is not None:
        sql += " AND agent_id = ? AND session_id = ?"
        args += (within.agent_id, within.session_id)
    rows = conn.execute(sql + " ORDER BY updated_at DESC, id DESC", args).fetchall()
    return _rows.session_infos(rows)


def index_events(conn: sqlite3.Connection) -> None:
    """Bring the events' full-text index up to date (one transaction; nothing when it is)."""
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'events'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()
    if top <= mark:
        return
    conn.execute("BEGIN IMMEDIATE")
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'events'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()
    if top > mark:
        conn.execute(
            "INSERT INTO texts (rowid, text) SELECT id, text FROM events "
            "WHERE id > ? AND id <= ? AND text IS NOT NULL ORDER BY id",
            (mark, top),
        )
        conn.execute("UPDATE fts_marks SET upto = ? WHERE name = 'events'", (top,))
    conn.commit()


def index_fragments(conn: sqlite3.Connection) -> None:
    """Re-index the fragments written since the mark (one transaction; nothing when none were).

    Every fragment write adds a `fragment_versions` row, so the rows past the mark name the
    fragments whose indexed text is stale; ``fragment_texts`` keeps its own copy of the text,
    so the stale entry is deleted by rowid.
    """
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'fragments'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM fragment_versions").fetchone()
    if top <= mark:
        return
    conn.execute("BEGIN IMMEDIATE")
    (mark,) = conn.execute("SELECT upto FROM fts_marks WHERE name = 'fragments'").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM fragment_versions").fetchone()
    if top > mark:
        changed = (
            "SELECT f.id FROM fragments f JOIN fragment_versions v "
            "ON v.fset = f.fset AND v.fragment_id = f.fragment_id "
            "WHERE v.rowid > ? AND v.rowid <= ?"
        )
        conn.execute(f"DELETE FROM fragment_texts WHERE rowid IN ({changed})", (mark, top))
        conn.execute(
            f"INSERT INTO fragment_texts (rowid, text) SELECT id, text FROM fragments "
            f"WHERE id IN ({changed}) ORDER BY id",
            (mark, top),
        )
        conn.execute("UPDATE fts_marks SET upto = ? WHERE name = 'fragments'", (top,))
    conn.commit()


def find_messages(
    conn: sqlite3.Connection,
    user_id: str,
    terms: list[str],
    limit: int,
    within: SessionKey | None = None,
) -> list[SearchHit]:
    """Return the user's messages holding every term, best match first (indexes what is new).

    ``within``: only that session's messages.
    """
    if within is not None and within.user_id != user_id:
        return []
    long_terms, short_terms = _by_length(terms)
    args: list[object] = []
    if long_terms:
        index_events(conn)
        sql = (
            "SELECT s.agent_id, s.session_id, e.seq, e.message_id, e.role, e.text, e.at "
            "FROM texts JOIN events e ON e.id = texts.rowid "
            "JOIN sessions s ON s.id = e.session "
            "WHERE texts MATCH ? AND s.user_id = ?"
        )
        args += [_phrases(long_terms), user_id]
        order = " ORDER BY texts.rank, e.at DESC"
    else:
        sql = (
            "SELECT s.agent_id, s.session_id, e.seq, e.message_id, e.role, e.text, e.at "
            "FROM events e JOIN sessions s ON s.id = e.session "
            "WHERE s.user_id = ? AND e.text IS NOT NULL"
        )
        args.append(user_id)
        order = " ORDER BY e.at DESC"
    if within is not None:
        sql += " AND s.agent_id = ? AND s.session_id = ?"
        args += [within.agent_id, within.session_id]
    likes, patterns = _likes("e.text", short_terms)
    rows = conn.execute(sql + likes + order + " LIMIT ?", (*args, *patterns, limit)).fetchall()
    return _rows.search_hits(rows, terms)


def find_fragments(
    conn: sqlite3.Connection, fset: int, terms: list[str], limit: int
) -> list[Fragment]:
    """Return the set's current fragments holding every term, in row order (indexes first)."""
    long_terms, short_terms = _by_length(terms)
    args: list[object] = []
    if long_terms:
        index_fragments(conn)
        sql = (
            "SELECT f.body FROM fragment_texts JOIN fragments f "
            "ON f.id = fragment_texts.rowid WHERE fragment_texts MATCH ? AND f.fset = ?"
        )
        args += [_phrases(long_terms), fset]
    else:
        sql = "SELECT f.body FROM fragments f WHERE f.fset = ?"
        args.append(fset)
    likes, patterns = _likes("f.text", short_terms)
    sql += " AND f.removed = 0" + likes
    # The index's rowid is the fragment's: ordering by it lets FTS5 stop at the limit
    # instead of sorting every match (a frequent word at 10,000 fragments: ~60 -> 1.5 ms).
    order = " ORDER BY fragment_texts.rowid" if long_terms else " ORDER BY f.id"
    rows = conn.execute(sql + order + " LIMIT ?", (*args, *patterns, limit)).fetchall()
    return [_rows.FRAGMENT_DECODER.decode(body) for (body,) in rows]


def _by_length(terms: list[str]) -> tuple[list[str], list[str]]:
    """Split terms into those the trigram index serves (three characters or more) and the rest."""
    return [t for t in terms if len(t) >= 3], [t for t in terms if len(t) < 3]


def _phrases(terms: list[str]) -> str:
    """Return an FTS5 query requiring every term, each a quoted phrase.

    A trigram phrase matches as a substring.
    """
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _likes(column: str, terms: list[str]) -> tuple[str, list[str]]:
    """Return a ``LIKE`` condition on ``column`` per term too short for the index, and its args."""
    sql = "".join(f" AND {column} LIKE ? ESCAPE '\\'" for _ in terms)
    return sql, [f"%{_rows.escape_like(term)}%" for term in terms]
