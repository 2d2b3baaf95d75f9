"""The SQLite store's layout and its upgrades, run once when the store opens its database.

`migrate` brings a database of any older version to `SCHEMA_VERSION` in one ``BEGIN
IMMEDIATE`` transaction (every statement ``IF NOT EXISTS``, a column added only where it is
missing), and refuses a newer one. Kept apart from `harness.sessions.sqlite.store` because the
tables change by versioned steps, while the store's queries only read the current layout.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from harness.errors import ConfigurationError

SCHEMA_VERSION: Final = 7
"""The SQLite layout: `_rows.SCHEMA_VERSION` (2, the tables both backends share) plus the
deferred full-text index of version 3 (``fts_marks``, no insert triggers, ``fragment_texts``
with its own copy of the texts), version 4's ``fragments_by_set`` index (a set is read in
row order without sorting its bodies in a temporary tree) and version 5's ``working`` table
(the working ids one row each, so a commit writes only those that changed; rewriting them in
the state blob cost ~1.2 ms a commit at 10,000 ids) and version 6's ``events.turn_id`` with its unique ``events_by_turn`` index
(a caller's turn is logged at most once per session; older rows have none, so a stored
session loads as before) and version 7's ``usage`` table (each answered request's reported
usage and cost, summed per session without decoding the log) and ``learned`` table (the
estimate-to-usage factors per model and api_base, shared by every process on the file).
A database with a newer version
is refused, so an older context-harness (whose triggers would index rows a second time)
cannot open a version-3 file. Each upgrade step runs once, in order."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    state BLOB NOT NULL,
    version INTEGER NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    n_events INTEGER NOT NULL DEFAULT 0,
    n_messages INTEGER NOT NULL DEFAULT 0,
    UNIQUE (user_id, agent_id, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions (user_id, updated_at);
CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions (updated_at);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    session INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    tag TEXT NOT NULL,
    body BLOB NOT NULL,
    at REAL NOT NULL,
    message_id TEXT,
    role TEXT,
    text TEXT,
    UNIQUE (session, seq)
);
CREATE INDEX IF NOT EXISTS events_by_message ON events (session, message_id)
    WHERE message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_by_tag ON events (session, tag, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5 (
    text, content='events', content_rowid='id', tokenize='trigram'
);
CREATE TABLE IF NOT EXISTS fragment_sets (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (user_id, agent_id, scope, name)
);
CREATE TABLE IF NOT EXISTS fragments (
    id INTEGER PRIMARY KEY,
    fset INTEGER NOT NULL REFERENCES fragment_sets (id) ON DELETE CASCADE,
    fragment_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    body BLOB NOT NULL,
    text TEXT NOT NULL,
    removed INTEGER NOT NULL,
    UNIQUE (fset, fragment_id)
);
CREATE TABLE IF NOT EXISTS fragment_versions (
    fset INTEGER NOT NULL REFERENCES fragment_sets (id) ON DELETE CASCADE,
    fragment_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    op TEXT NOT NULL,
    at REAL NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (fset, fragment_id, version)
);
"""

_UPGRADE_3: Final = """
DROP TRIGGER IF EXISTS texts_insert;
DROP TRIGGER IF EXISTS texts_delete;
DROP TRIGGER IF EXISTS fragment_texts_insert;
DROP TRIGGER IF EXISTS fragment_texts_delete;
DROP TRIGGER IF EXISTS fragment_texts_update;
DROP TABLE IF EXISTS fragment_texts;
CREATE TABLE IF NOT EXISTS fts_marks (name TEXT PRIMARY KEY, upto INTEGER NOT NULL);
INSERT OR IGNORE INTO fts_marks (name, upto)
    VALUES ('events', coalesce((SELECT max(id) FROM events), 0));
INSERT OR IGNORE INTO fts_marks (name, upto) VALUES ('fragments', 0);
CREATE TRIGGER texts_delete AFTER DELETE ON events
WHEN old.text IS NOT NULL AND old.id <= (SELECT upto FROM fts_marks WHERE name = 'events')
BEGIN
    INSERT INTO texts (texts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE VIRTUAL TABLE fragment_texts USING fts5 (text, tokenize='trigram');
CREATE TRIGGER fragment_texts_delete AFTER DELETE ON fragments
BEGIN
    DELETE FROM fragment_texts WHERE rowid = old.id;
END;
"""

_UPGRADE_4: Final = """
CREATE INDEX IF NOT EXISTS fragments_by_set ON fragments (fset);
"""

_UPGRADE_5: Final = """
CREATE TABLE IF NOT EXISTS working (
    session INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    pos INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    PRIMARY KEY (session, pos)
) WITHOUT ROWID;
ALTER TABLE sessions ADD COLUMN working_n INTEGER;
"""
"""A session's working ids as rows (``working_n`` of them), written as changes when a commit
says how many are unchanged (`StoredState.unchanged`: the agent's recorder does). ``working_n``
NULL: the ids are in the state blob (a commit without that hint, one written before version 5,
or a session only a fragment change created)."""

_UPGRADE_6: Final = """
ALTER TABLE events ADD COLUMN turn_id TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS events_by_turn ON events (session, turn_id)
    WHERE turn_id IS NOT NULL;
"""
"""A caller's turn id on its message event (`MessageEvent.turn_id`), unique per session: a
retried turn cannot be logged twice. NULL on every other event and on rows logged before."""

_UPGRADE_7: Final = """
CREATE TABLE IF NOT EXISTS usage (
    session INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    call_id TEXT NOT NULL,
    purpose TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    reasoning_tokens INTEGER NOT NULL,
    cost_usd REAL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS learned (
    model TEXT NOT NULL,
    api_base TEXT NOT NULL,
    worst REAL NOT NULL,
    factor REAL NOT NULL,
    observations INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (model, api_base)
) WITHOUT ROWID;
"""
"""Each `UsageEvent` also as a row of ``usage`` (written in the round's transaction; rows
logged before have none: their sessions' totals start at this version), and the learned
calibration (`harness.tokens.calibration`) per (model, api_base), kept at its worst ratio."""

_UPGRADES: Final = (
    (3, _UPGRADE_3), (4, _UPGRADE_4), (5, _UPGRADE_5), (6, _UPGRADE_6), (7, _UPGRADE_7),
)  # fmt: skip
"""The steps after the shared tables, by the version each brings a database to."""


def migrate(conn: sqlite3.Connection, target: str) -> None:
    """Create the tables, or upgrade them in order; refuse a database newer than this code."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise ConfigurationError(
            f"the session database {target} has schema version {found}, newer than this "
            f"context-harness understands ({SCHEMA_VERSION}); upgrade context-harness "
            "or use another database",
            path=target,
        )
    if found == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        if current < SCHEMA_VERSION:
            steps = [script for version, script in _UPGRADES if current < version]
            for statement in _statements("\n".join((_SCHEMA, *steps))):
                if not _has_column(conn, statement):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def _has_column(conn: sqlite3.Connection, statement: str) -> bool:
    """Whether ``statement`` adds a column the table has already (an upgrade run again)."""
    words = statement.split()
    if [w.upper() for w in words[:2]] + [w.upper() for w in words[3:5]] != [
        "ALTER", "TABLE", "ADD", "COLUMN",
    ]:  # fmt: skip
        return False
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({words[2]})")}
    return words[5] in columns


def _statements(script: str) -> list[str]:
    """Split the schema script into statements (triggers contain ``;`` before ``END``)."""
    out: list[str] = []
    current = ""
    for line in script.strip().splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out
