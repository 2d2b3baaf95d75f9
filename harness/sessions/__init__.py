"""Durable sessions: an append-only event log and the working state, per (user, agent, session).

`open_store(url)` picks the backend from the URL: ``sqlite:///path/to/sessions.db`` (the
embedded default, nothing to start) or ``postgresql://…`` (several application instances
or machines serving the same sessions). Both implement `SessionStore`.
"""

from __future__ import annotations

from harness.errors import ConfigurationError
from harness.sessions.store import (
    CompactionEvent,
    CompactionRunEvent,
    ErrorEvent,
    Event,
    FragmentEvent,
    FragmentStore,
    LoggedEvent,
    ManifestEvent,
    MessageEvent,
    RefusalEvent,
    RemovalEvent,
    RequestUsage,
    RewriteEvent,
    SearchHit,
    SessionInfo,
    SessionStore,
    SessionUsage,
    StateEvent,
    StoredState,
    ToolRunEvent,
    UsageEvent,
    UsageStore,
    WarningEvent,
)
from harness.state import SessionKey


def open_store(url: str) -> SessionStore:
    """Return the store at ``url``.

    ``sqlite:///abs/path/sessions.db`` (an absolute path after ``sqlite://``; the file and its
    folders are created when missing), ``sqlite://`` (a private database in memory) or
    ``postgresql://user:password@host:port/db``. Nothing is opened until the first call.

    Raises:
        ConfigurationError: an unknown scheme, or a backend whose driver is not installed.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"a session store URL looks like 'sqlite:///path/to/sessions.db' or "
            f"'postgresql://user@host/db', got {url!r}"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        from harness.sessions.sqlite.store import SqliteStore

        return SqliteStore(url)
    if scheme in ("postgresql", "postgres"):
        from harness.sessions.postgres.store import PostgresStore

        return PostgresStore(url)
    raise ConfigurationError(
        f"unknown session store scheme {scheme!r} in {url!r}; use sqlite:/// or postgresql://"
    )


__all__ = [
    "CompactionEvent",
    "CompactionRunEvent",
    "ErrorEvent",
    "Event",
    "FragmentEvent",
    "FragmentStore",
    "LoggedEvent",
    "ManifestEvent",
    "MessageEvent",
    "RefusalEvent",
    "RemovalEvent",
    "RequestUsage",
    "RewriteEvent",
    "SearchHit",
    "SessionInfo",
    "SessionKey",
    "SessionStore",
    "SessionUsage",
    "StateEvent",
    "StoredState",
    "ToolRunEvent",
    "UsageEvent",
    "UsageStore",
    "WarningEvent",
    "open_store",
]
