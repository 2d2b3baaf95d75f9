"""The SQLite session store (the embedded default).

The names of `harness.sessions.sqlite.store`, at the path they had before the wing was a package.
"""

from __future__ import annotations

from harness.sessions.sqlite.store import (
    BUSY_TIMEOUT_MS,
    CHECKPOINT_EVERY,
    SCHEMA_VERSION,
    SIDE_BY_SIDE_S,
    SYNCHRONOUS,
    SqliteStore,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CHECKPOINT_EVERY",
    "SCHEMA_VERSION",
    "SIDE_BY_SIDE_S",
    "SYNCHRONOUS",
    "SqliteStore",
]
