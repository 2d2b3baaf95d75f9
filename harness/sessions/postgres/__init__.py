"""The PostgreSQL session store (several app instances share sessions).

The names of `harness.sessions.postgres.store`, at the path they had before the wing was a package.
"""

from __future__ import annotations

from harness.sessions.postgres.store import (
    CONNECT_TIMEOUT_S,
    MAX_SETS,
    POOL_SIZE,
    SCHEMA_VERSION,
    SEARCH_WALK_MS,
    PostgresStore,
)

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_SETS",
    "POOL_SIZE",
    "SCHEMA_VERSION",
    "SEARCH_WALK_MS",
    "PostgresStore",
]
