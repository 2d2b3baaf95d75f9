"""The session store's interface and the values it keeps.

Per (user, agent, session) a store keeps:

- an **append-only event log** — every message as it joined the full history, every
  ``context_build`` manifest, compactions (which message ids a summary replaced), rewrites
  (a trimmed, offloaded or truncated copy and the id of its original), tool runs, state
  changes, warnings, errors, refusals (a request the stack refused, with the messages it
  carried: they never join the history) and removals (messages a caller took out of the
  working history: an Agents SDK session's ``pop_item`` / ``clear_session``). Nothing is ever
  deleted from it except by `purge`.
- the **state** — the working history as message ids (every id resolves to a message of
  the log: an original from a `MessageEvent`, a rewritten copy or a summary from a
  `RewriteEvent` / `CompactionEvent`), the typed middleware state, calibration, a title and
  a version.

A round's events and its new state are written in one transaction by `commit`; a commit
from a stale version raises `StateConflict` and writes nothing. Every read takes the
caller's `SessionKey` (or user id): another user's session is indistinguishable from one
that does not exist.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from harness.events import CompactionReport
from harness.manifest import ContextManifest, Usage
from harness.messages import Message
from harness.state import SessionKey as SessionKey
from harness.tokens.calibration import LearnedRow

if TYPE_CHECKING:
    from harness.fragments.model import Fragment, FragmentChange, FragmentScope


def reader_scope(key: SessionKey) -> SessionKey | None:
    """Return the ``within`` a session's own reads of the store use: ``None`` for a user's.

    A user's session may read all of that user's sessions; a session without a user id
    only itself — nothing says two anonymous sessions belong to one person, so the empty
    user id is not a shared scope.
    """
    return None if key.user_id else key


def _now() -> float:
    return time.time()


class MessageEvent(msgspec.Struct, frozen=True, kw_only=True, tag="message"):
    """A message joined the full history."""

    message: Message
    at: float = msgspec.field(default_factory=_now)
    turn_id: str | None = None
    """Set on a caller's turn (the user message, or a tool result given to the agent): a store
    logs each turn id at most once per session, so a retried turn cannot be stored twice
    (`harness.errors.DuplicateTurn`)."""


class ManifestEvent(msgspec.Struct, frozen=True, kw_only=True, tag="manifest"):
    """A model request was prepared (a ``context_build`` manifest, success or failure)."""

    manifest: ContextManifest
    at: float = msgspec.field(default_factory=_now)
    base: str | None = None
    """Stored as a delta: ``manifest.items`` follow the first `shared` items of the manifest
    of call ``base``, stored earlier in the session (`harness.sessions.manifest_log.resolve`
    gives the whole manifest back)."""
    shared: int = 0
    """How many leading items come from the ``base`` manifest."""


class CompactionEvent(msgspec.Struct, frozen=True, kw_only=True, tag="compaction"):
    """A summary replaced earlier messages of the working history."""

    summary: Message
    """The summary message (its id appears in the working history)."""
    replaced: tuple[str, ...]
    """The ids of the messages it replaced (originals resolve through the log)."""
    at: float = msgspec.field(default_factory=_now)


class RewriteEvent(msgspec.Struct, frozen=True, kw_only=True, tag="rewrite"):
    """A message of the working history was replaced by a rewritten copy."""

    message: Message
    """The rewritten copy (trimmed, offloaded, truncated …)."""
    original_id: str
    """The id of the message it was made from."""
    how: str
    """``trim``, ``offload``, ``truncate``, ``repair`` …"""
    at: float = msgspec.field(default_factory=_now)


class ToolRunEvent(msgspec.Struct, frozen=True, kw_only=True, tag="tool_run"):
    """A tool ran (or was denied)."""

    name: str
    call_id: str
    duration_s: float
    error: bool = False
    denied: bool = False
    at: float = msgspec.field(default_factory=_now)


class StateEvent(msgspec.Struct, frozen=True, kw_only=True, tag="state"):
    """Structured state changed (todos, plan mode, permissions …): which keys."""

    keys: tuple[str, ...]
    at: float = msgspec.field(default_factory=_now)


class WarningEvent(msgspec.Struct, frozen=True, kw_only=True, tag="warning"):
    """Something degraded but the call went on (``summary_failed``, ``provider_retry`` …)."""

    code: str
    text: str
    at: float = msgspec.field(default_factory=_now)


class ErrorEvent(msgspec.Struct, frozen=True, kw_only=True, tag="error"):
    """A call ended with an error."""

    error: str
    """The error's class name."""
    text: str
    at: float = msgspec.field(default_factory=_now)


class RefusalEvent(msgspec.Struct, frozen=True, kw_only=True, tag="refusal"):
    """The stack refused a request: what it carried beyond the stored history was not committed.

    The caller's new turns (and, in a later round, the tool results since the last commit)
    are kept here for the record only: they are not messages of the history, so a load, a
    search or `SessionStore.messages` never finds them, and the next valid request starts
    from the history as it was before the refused one.
    """

    error: str
    """The error's class name (``InvalidToolPairs``, ``ContextBudgetExceeded`` …)."""
    text: str
    messages: tuple[Message, ...] = ()
    """The messages the refused request added (redacted like every stored message)."""
    turn_id: str | None = None
    """The refused turn's id, when the refused request carried a caller's turn."""
    at: float = msgspec.field(default_factory=_now)


class FragmentEvent(msgspec.Struct, frozen=True, kw_only=True, tag="fragment"):
    """A context fragment changed (`harness.fragments.editing`): which, how, from and to which version."""

    fragment_id: str
    op: str
    """``add``, ``edit``, ``remove``, ``disable``, ``enable``, ``move`` or ``revert``."""
    old_version: int
    """The fragment's version before (0: new, or a history message never changed)."""
    new_version: int
    scope: str = "session"
    """``session``, or ``project:<name>`` for a project fragment changed from this session."""
    set_version: int = 0
    """The version of the fragment set after the change."""
    at: float = msgspec.field(default_factory=_now)


class RemovalEvent(msgspec.Struct, frozen=True, kw_only=True, tag="removal"):
    """Messages left the working history at the caller's request; the log still holds them.

    Not a compaction (nothing replaces them) nor a rewrite: a host that owns its history
    took them out (`harness.adapters.agents_sdk.HarnessSession.pop_item` and
    ``clear_session``). Their `MessageEvent` stays in the log, so the full record is kept.
    """

    message_ids: tuple[str, ...]
    """The ids of the messages that left the working history, in their order there."""
    how: str
    """``pop_item``, ``clear_session`` …"""
    at: float = msgspec.field(default_factory=_now)


class UsageEvent(msgspec.Struct, frozen=True, kw_only=True, tag="usage"):
    """A provider answered a request: what it reported (tokens, cache, cost).

    One per answered request, agent and summary requests alike; its ``call_id`` is the
    request's manifest's (the stored manifest carries the same `Usage`).
    """

    call_id: str
    purpose: str
    """``agent`` or ``summary``."""
    model: str
    usage: Usage
    at: float = msgspec.field(default_factory=_now)


class CompactionRunEvent(CompactionReport, frozen=True, kw_only=True, tag="compaction_run"):
    """A compaction started or finished: `harness.events.CompactionReport` as stored.

    The `CompactionEvent` says which ids a summary replaced; this says why it ran and what it
    did. It extends the report (stored flat, so the stored format is the report's fields plus
    these two) rather than repeating it.
    """

    phase: str
    """``started`` or ``finished``."""
    at: float = msgspec.field(default_factory=_now)


Event = (
    MessageEvent
    | ManifestEvent
    | CompactionEvent
    | RewriteEvent
    | ToolRunEvent
    | StateEvent
    | WarningEvent
    | ErrorEvent
    | RefusalEvent
    | FragmentEvent
    | RemovalEvent
    | UsageEvent
    | CompactionRunEvent
)
"""One entry of a session's log (a tagged union: encoded with its ``type`` tag)."""


class LoggedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event as stored: its position in the session's log."""

    seq: int
    """1-based, gap-free, in commit order within the session."""
    event: Event


class StoredState(msgspec.Struct, kw_only=True):
    """The durable part of `harness.state.AgentState`, without the messages themselves."""

    working_ids: tuple[str, ...] = ()
    """The working history as message ids, in order (each resolves through the log)."""
    extensions: dict[str, Any] = {}
    """Middleware state by key, as JSON-ready builtins (see `harness.sessions.codec`)."""
    calibration: dict[str, float] = {}
    """Per-model correction factors."""
    title: str = ""
    """A short title (the first user message, cut), for listings."""
    version: int = 0
    """Bumped by every commit; a commit must name the version it read."""
    unchanged: int = 0
    """A hint to `SessionStore.commit`, not stored: the first this-many ``working_ids`` are
    those of the state at ``expected_version``, so a store may write only the rest (0: write
    them all)."""


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One session in a listing (scoped to its user)."""

    agent_id: str
    session_id: str
    title: str
    messages: int
    """Messages in the full history."""
    events: int
    created_at: float
    updated_at: float


class RequestUsage(msgspec.Struct, frozen=True, kw_only=True):
    """One answered request's usage, as `SessionStore.usage` lists it."""

    seq: int
    """The seq of its `UsageEvent` in the log."""
    call_id: str
    purpose: str
    model: str
    usage: Usage
    at: float


class SessionUsage(msgspec.Struct, frozen=True, kw_only=True):
    """A session's usage: every answered request, oldest first, and their total."""

    requests: tuple[RequestUsage, ...] = ()
    total: Usage = Usage()
    """The sum over ``requests`` (its cost ``None`` when no request had a known price)."""


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """A message that matched a search over the user's sessions."""

    agent_id: str
    session_id: str
    seq: int
    message_id: str
    role: str
    snippet: str
    """A short excerpt around the match."""
    at: float


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live. Every method is async and safe to call from many tasks."""

    url: str
    """The URL it was opened from, with any password masked."""

    async def load(self, key: SessionKey) -> tuple[StoredState, dict[str, Message]] | None:
        """Return the state and its working messages by id, or ``None`` for a new session."""
        ...

    async def commit(
        self, key: SessionKey, *, expected_version: int, events: Sequence[Event], state: StoredState
    ) -> int:
        """Append ``events`` and replace the state in one transaction; return the new version.

        ``expected_version`` is the version `load` returned (``0`` for a session that does not
        exist yet: the first commit creates it). The events get the next seqs of the log; the
        state is stored with the returned version (``expected_version + 1``); ``state`` itself
        is not changed.

        Raises:
            StateConflict: the stored version is not ``expected_version`` (nothing written).
        """
        ...

    async def events(
        self, key: SessionKey, *, offset: int = 0, limit: int = 100, kinds: Sequence[str] = ()
    ) -> list[LoggedEvent]:
        """Return a page of the log, oldest first (``kinds`` filters by event tag).

        ``offset`` and ``limit`` count the events that pass the filter; an unknown session
        (or another user's) gives ``[]``.
        """
        ...

    async def messages(self, key: SessionKey, ids: Sequence[str]) -> dict[str, Message]:
        """Return the messages of the log with these ids (originals, copies and summaries)."""
        ...

    async def sessions(
        self, user_id: str, agent_id: str | None = None, *, within: SessionKey | None = None
    ) -> list[SessionInfo]:
        """Return the user's sessions, most recently active first.

        ``within`` narrows the listing to that one session (``[]`` when it does not exist or
        is not ``user_id``'s): the scope of a session without a user id (`reader_scope`).
        """
        ...

    async def search(
        self, user_id: str, query: str, *, limit: int = 20, within: SessionKey | None = None
    ) -> list[SearchHit]:
        """Full-text search over the messages of the user's sessions (CJK included).

        Whitespace separates terms that must all occur, case-insensitively, as substrings of
        a logged message's text (originals, rewritten copies and summaries; tool calls count by
        name and arguments); a CJK phrase is one term. Order: SQLite ranks by relevance
        (bm25); PostgreSQL lists the newest matches first (ranking every match cost seconds).
        ``within`` searches that one session only (see `sessions`).
        """
        ...

    async def usage(self, key: SessionKey) -> SessionUsage:
        """Return the session's usage per answered request and in total (empty when unknown)."""
        ...

    async def learned(self) -> list[LearnedRow]:
        """Return the calibration learned from usage, per (model, api_base), by every process.

        Not scoped to a user: a ratio of token counts per model and server, no content.
        """
        ...

    async def learn(self, rows: Sequence[LearnedRow]) -> None:
        """Fold in what this process learned (`harness.tokens.calibration.UsageLearner.unsaved`).

        Per (model, api_base) the stored worst ratio becomes the higher of the two, the factor
        `harness.tokens.calibration.merged_factor` (never below the worst × margin), and the
        observations add up — so no process's bound falls below another's observation.
        """
        ...

    async def purge(self, key: SessionKey) -> bool:
        """Delete one session entirely; return whether it existed."""
        ...

    async def purge_older_than(self, seconds: float) -> list[SessionKey]:
        """Delete every session whose last activity is older; return their keys."""
        ...

    async def aclose(self) -> None:
        """Release connections and files."""
        ...


@runtime_checkable
class UsageStore(SessionStore, Protocol):
    """A session store that takes a request's usage after its round was committed.

    A host that sends the prepared request itself learns the provider's usage only after the
    round's commit (the litellm proxy hook: litellm reports it to a logging callback). The
    usage joins the session's log then, without a round: the state and its version stay as
    they are, so it can never conflict with the session's next commit.
    """

    async def append_usage(self, key: SessionKey, event: UsageEvent) -> bool:
        """Append ``event`` to the log of an existing session (and to its usage); return whether.

        Nothing is written (``False``) when the session does not exist (never stored, purged,
        or another user's) or its log holds a usage record of ``event.call_id`` already: a
        request is billed once, however often its host reports it.

        Raises:
            InvalidInputError: ``event`` is not a `UsageEvent`, or its call id, purpose or
                model is empty, or a count or the cost is negative or not finite.
        """
        ...


@runtime_checkable
class FragmentStore(SessionStore, Protocol):
    """A session store that also keeps context fragments (`harness.fragments.editing`).

    A fragment set is one scope (`harness.fragments.FragmentScope`): a user's session, or an
    agent's project (no user). It has a version bumped by every `commit_fragments`; every
    version of every fragment is kept.
    """

    async def fragments(self, scope: FragmentScope) -> tuple[int, list[Fragment]]:
        """Return the set's version (0 when never written) and its fragments' current versions."""
        ...

    async def commit_fragments(
        self,
        scope: FragmentScope,
        *,
        expected_version: int,
        changes: Sequence[FragmentChange],
        log: SessionKey | None = None,
    ) -> int:
        """Write new fragment versions in one transaction; return the set's new version.

        Each change's fragment becomes the current version and joins the version history; with
        ``log``, one `FragmentEvent` per change is appended to that session's log (the session
        is created, empty, when it does not exist yet).

        Raises:
            StateConflict: the set's version is not ``expected_version`` (nothing written).
        """
        ...

    async def fragment_versions(self, scope: FragmentScope, fragment_id: str) -> list[Fragment]:
        """Return every stored version of one fragment, oldest first."""
        ...

    async def search_fragments(
        self, scope: FragmentScope, query: str, *, limit: int = 50
    ) -> list[Fragment]:
        """Full-text search over the set's current fragments (title, tags, content; CJK too).

        Terms separated by whitespace must all occur, case-insensitively; removed fragments
        are not found.
        """
        ...
