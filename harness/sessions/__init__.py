"""Durable sessions: an append-only event log and the working state, per (user, agent, session).

`open_store(url)` picks the backend from the URL: ``sqlite:///path/to/sessions.db`` (the
embedded default, nothing to start) or ``postgresql://…`` (several application instances
or machines serving the same sessions). Both implement `SessionStore`.
"""

from harness.sessions.store import (
    CompactionEvent,
    ErrorEvent,
    Event,
    FragmentEvent,
    FragmentStore,
    LoggedEvent,
    ManifestEvent,
    MessageEvent,
    RefusalEvent,
    RewriteEvent,
    SearchHit,
    SessionInfo,
    SessionKey,
    SessionStore,
    StateEvent,
    StoredState,
    ToolRunEvent,
    WarningEvent,
    open_store,
)

__all__ = [
    "CompactionEvent",
    "ErrorEvent",
    "Event",
    "FragmentEvent",
    "FragmentStore",
    "LoggedEvent",
    "ManifestEvent",
    "MessageEvent",
    "RefusalEvent",
    "RewriteEvent",
    "SearchHit",
    "SessionInfo",
    "SessionKey",
    "SessionStore",
    "StateEvent",
    "StoredState",
    "ToolRunEvent",
    "WarningEvent",
    "open_store",
]
