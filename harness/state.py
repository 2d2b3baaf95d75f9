"""The agent's persisted working state for one session.

`AgentState` keeps the session's histories: ``working_history`` is what the next request
starts from — after offload, trimming and compaction have been committed; ``full_history``
is the in-RAM part of the full record. By default (``HarnessAgent(keep_full_history=False)``)
RAM holds the working history only: ``full_history`` holds the messages added since the last
commit, and each commit moves them to the session store's log, where
`harness.agent.HarnessAgent.history` reads the whole record. With ``keep_full_history=True``
it keeps every message ever added. Either way it is never complete for a session resumed from
the store, so nothing may read it as the whole session. Middleware never mutate the state
while a request is prepared; the agent commits a prepared request's history only after it
passed validation, and ``version`` detects another writer in between.

`AgentState.append` is where messages enter a session, so it checks them
(`harness.messages.history_message`: field types, no system messages, content on user and
tool messages) and cleans their text of lone surrogates before anything is stored; a bad
message is refused with `InvalidInputError` and nothing of that append is stored. Whether a
tool result answers a call is checked where the agent takes input (`agent_input`) and, for
the whole history, by PairValidation before each request.

`SessionScratch` is the session's non-persisted scratch space: what middleware and the
accounting learned about the working history (running token totals, the last history whose
pairs were checked) outlives one agent call, so the first round of the next call costs only
its new messages. It lives on the state, so it is the session's alone and goes with it.

`StateKey` names one piece of structured state (``"<owner>/<what>"``) and its type; its
owner holds it, and `AgentState.get` and `AgentState.set` read and write the value. A value
loaded from the store comes back as builtins (`harness.sessions.codec`) and `get` turns it
into the key's type on first read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import msgspec

from harness.errors import InvalidInputError
from harness.manifest import dec_hook
from harness.messages import Message, history_message

T = TypeVar("T")


class SessionKey(msgspec.Struct, frozen=True):
    """Whose session: the end user, the agent and the conversation (`RunScope.key`)."""

    user_id: str
    agent_id: str
    session_id: str


class SessionScratch:
    """Values kept across one session's agent calls, per owner; never persisted.

    Like `harness.request.RunScope.slot`, keyed by the owner's identity (a middleware
    instance, or a class for shared machinery), but the owner is held: the state may outlive
    the agent whose middleware made a value, and a new object must not inherit it through a
    reused ``id``. A value must be safe to reuse after the history changed between calls
    (the owners compare histories, `harness.accounting.prefix.shared_prefix`). At most
    `MAX_SLOTS` owners: beyond that everything is dropped (values are caches, remade on use).
    """

    MAX_SLOTS = 32

    __slots__ = ("_slots",)

    def __init__(self) -> None:
        self._slots: dict[int, tuple[object, Any]] = {}

    def slot(self, owner: object, make: Callable[[], T]) -> T:
        """Return ``owner``'s value for this session, made by ``make()`` on first use."""
        key = id(owner)
        found = self._slots.get(key)
        if found is None or found[0] is not owner:
            if len(self._slots) >= self.MAX_SLOTS:
                self._slots.clear()
            found = self._slots[key] = (owner, make())
        value: T = found[1]
        return value

    def clear(self) -> None:
        """Drop every value (they are remade on use)."""
        self._slots.clear()

    def __len__(self) -> int:
        return len(self._slots)

    def __eq__(self, other: object) -> bool:
        """Scratch is no part of a state's value: two scratches are always equal."""
        return isinstance(other, SessionScratch)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SessionScratch({len(self._slots)} slots)"


class StateKey(Generic[T]):
    """The name and type of one piece of structured state in `AgentState.extensions`.

    Held by its owner (``TODOS_KEY`` in `middleware.task_state.state` …) and read and written
    with `AgentState.get` and `AgentState.set`. ``name`` follows ``"<owner>/<what>"``;
    ``former`` lists the names an older version stored the value under, read when ``name``
    is not there (a `set` stores under ``name`` and drops them), so no stored state is lost.
    ``type`` is a class: a msgspec struct or a builtin (``str``, ``dict`` …).
    """

    __slots__ = ("former", "name", "type")

    def __init__(self, name: str, type: type[T], *, former: tuple[str, ...] = ()) -> None:
        self.name = name
        """Where the value is kept in `AgentState.extensions` (and in the store)."""
        self.type = type
        """What `AgentState.get` returns."""
        self.former = former
        """Names the value was stored under before, read when ``name`` is missing."""

    def __repr__(self) -> str:
        return f"StateKey({self.name!r}, {self.type.__qualname__})"


class AgentState(msgspec.Struct, kw_only=True):
    """Histories and structured state of one session (mutable, owned by the agent)."""

    session_id: str = ""
    """The session this state belongs to."""
    full_history: list[Message] = []
    """Messages as they were added (never compacted), not yet logged by the store — or, when
    the agent keeps the full history, every message added in this process. Not the whole
    session: read that with `harness.agent.HarnessAgent.history`."""
    working_history: list[Message] = []
    """The history the next request starts from (compacted, trimmed, offloaded)."""
    version: int = 0
    """Bumped on every change; a prepared request carries the version it started from."""
    extensions: dict[str, Any] = {}
    """Structured state owned by middleware (todos, plan mode, task context …), by key."""
    calibration: dict[str, float] = {}
    """Per-model correction factors learned from provider usage."""
    scratch: SessionScratch = msgspec.field(default_factory=SessionScratch)
    """What this process learned about the session across calls (caches; never stored)."""

    def append(self, *messages: Message) -> None:
        """Add messages to both histories, checked and with their text cleaned.

        Raises:
            InvalidInputError: a message is malformed or may not stand in a history (a
                system message); none of ``messages`` is stored.
        """
        stored = [history_message(message) for message in messages]
        self.full_history.extend(stored)
        self.working_history.extend(stored)
        self.version += 1

    def commit_working(self, history: Iterable[Message]) -> None:
        """Replace the working history with a prepared request's history."""
        self.working_history = list(history)
        self.version += 1

    def touch(self) -> None:
        """Record a change to structured state made outside the histories."""
        self.version += 1

    def get(self, key: StateKey[T]) -> T | None:
        """Return the structured state stored under ``key`` (``None``: none is).

        A value loaded from the store is builtins until its first read, which turns it into
        ``key.type`` and keeps that.

        Raises:
            InvalidInputError: the stored value is not a ``key.type`` (say which key).
        """
        extensions = self.extensions
        name = key.name
        if name not in extensions:
            name = next((old for old in key.former if old in extensions), "")
            if not name:
                return None
        value = extensions[name]
        if isinstance(value, key.type):
            return value
        try:
            typed = msgspec.convert(value, key.type, dec_hook=dec_hook)
        except msgspec.ValidationError as exc:
            raise InvalidInputError(
                f"AgentState.extensions[{name!r}] holds a value that is not a "
                f"{key.type.__qualname__} ({exc}); set a new value with state.set(key, value) "
                "or remove the key"
            ) from None
        extensions[name] = typed
        return typed

    def set(self, key: StateKey[T], value: T) -> None:
        """Store ``value`` under ``key`` (dropping its former names) and bump the version."""
        extensions = self.extensions
        extensions[key.name] = value
        for old in key.former:
            extensions.pop(old, None)
        self.version += 1
