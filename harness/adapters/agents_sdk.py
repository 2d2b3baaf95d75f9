"""An OpenAI Agents SDK ``Session`` on our session store: `HarnessSession`.

The Agents SDK keeps a conversation in a ``Session`` (``agents.memory.Session``): ``Runner``
reads ``get_items(limit)`` before a run, sends those items with the new input, and
``add_items`` the turn's input and output after it; ``pop_item`` takes back the last item
(a rewind), ``clear_session`` empties the conversation. `HarnessSession` implements that
protocol on a `SessionStore` (``sqlite:///…`` or ``postgresql://…``), so a conversation
resumes in another process or on another machine, and keeps our store's promises:

- **user-scoped**: the key is (``user_id``, ``agent_id``, ``session_id``); another user's
  session with the same id is another session, and a session without a user id is its own
  scope (the store's reads take the whole key);
- **secrets redacted before anything is stored**: every string of an item goes through
  `harness.sessions.redaction.redact` with the same patterns as the recorder (tool-call
  arguments value by value, so they stay JSON); the item the SDK reads back is the redacted
  one. Left as they are: the keys that give an item its shape (``type``, ``role``, ``id``,
  ``call_id``, ``status``), a reasoning item's ``encrypted_content`` (opaque, and the provider
  rejects a changed one) and inline ``data:`` payloads (base64 images and files);
- **the full record is append-only**: every item is a `MessageEvent` (a `Message` whose text
  mirrors the item, so ``harness sessions search`` finds it, with the item itself in its
  metadata under `ITEM`); the session's items are the state's working ids, in order.
  ``pop_item`` and ``clear_session`` take ids out of the working state and log a
  `RemovalEvent`: nothing is deleted from the log (``harness sessions purge`` deletes).

What it does not do: prepare requests. The Session hands the SDK the stored items, and the
SDK sends them to its model as they are. The preparation runs where the model call goes
through our stack: ``LitellmModel`` pointed at a litellm proxy that runs our pre-call hook
(``providers.proxy_hook``), or your own model calling `harness.acompletion` (README, "Use it
from an existing app").

Every operation reads the stored state (one `SessionStore.load`) and writes with
``expected_version``, so writers in other tasks, processes or machines never lose an item:
a `StateConflict` is retried on the new state (an append appends after the other writer's
items; a pop takes the newest item then).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from harness.errors import ConfigurationError, InvalidInputError, StateConflict
from harness.messages import Message, Role, ToolCall
from harness.sessions import open_store
from harness.sessions.recorder import TITLE_CHARS
from harness.sessions.redaction import DEFAULT_SECRETS, SecretPattern, redact, redact_message
from harness.sessions.store import (
    Event,
    MessageEvent,
    RemovalEvent,
    SessionKey,
    SessionStore,
    StoredState,
)

if TYPE_CHECKING:
    from types import TracebackType

    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

ITEM: Final = "agents_sdk/item"
"""The metadata key of a logged message that holds the SDK item it stands for."""

DEFAULT_AGENT: Final = "agents-sdk"
"""The agent id of a `HarnessSession` when none is given."""

CONFLICT_RETRIES: Final = 50
"""How often an operation is tried again after another writer committed in between."""

_SHAPE_KEYS: Final = frozenset({"type", "role", "id", "call_id", "status", "encrypted_content"})
"""Item keys whose string values are never redacted (see the module docstring)."""


class HarnessSession:
    """An Agents SDK ``Session`` whose items live in our session store.

    Pass it where the SDK takes a session: ``Runner.run(agent, "…", session=HarnessSession(…))``.
    A session opened from a URL owns its store (`aclose` closes it); one given a
    `SessionStore` borrows it, so many sessions can share one store.

    Args:
        session_id: the conversation's id (the SDK's ``session_id``).
        store: a `SessionStore`, or its URL (``sqlite:///abs/path.db``, ``postgresql://…``).
        user_id: the end user; ``""`` makes the session its own scope.
        agent_id: the agent the session belongs to (default `DEFAULT_AGENT`).
        secrets: what is redacted before anything is stored (``()``: nothing).
        session_settings: the SDK's settings; ``limit`` is the default of `get_items`.

    Raises:
        ConfigurationError: an empty session id, or a store that is neither a store nor a URL.
    """

    session_settings: SessionSettings | None
    """The SDK's per-session settings (``limit``: how many of the newest items a run reads)."""

    def __init__(
        self,
        session_id: str,
        *,
        store: SessionStore | str,
        user_id: str = "",
        agent_id: str = DEFAULT_AGENT,
        secrets: Sequence[SecretPattern] = DEFAULT_SECRETS,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ConfigurationError(f"session_id must be a non-empty string, got {session_id!r}")
        if not isinstance(user_id, str) or not isinstance(agent_id, str) or not agent_id:
            raise ConfigurationError(
                f"user_id must be a string and agent_id a non-empty string, got "
                f"{user_id!r} and {agent_id!r}"
            )
        if isinstance(store, str):
            self.store: SessionStore = open_store(store)
            self._owns_store = True
        elif isinstance(store, SessionStore):
            self.store = store
            self._owns_store = False
        else:
            raise ConfigurationError(
                f"store must be a SessionStore or a URL like 'sqlite:///path/to/sessions.db', "
                f"got {type(store).__name__}"
            )
        self.session_id = session_id
        self.key = SessionKey(user_id=user_id, agent_id=agent_id, session_id=session_id)
        """Where the items live: (user, agent, session)."""
        self.secrets = tuple(secrets)
        self.session_settings = session_settings

    # ------------------------------------------------------------------ the SDK's protocol
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the session's items, oldest first: all, or the newest ``limit`` of them.

        ``limit=None`` falls back to ``session_settings.limit``; a limit of 0 or less gives
        ``[]``. The items are copies: changing one changes nothing stored.
        """
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and limit <= 0:
            return []
        found = await self.store.load(self.key)
        if found is None:
            return []
        stored, messages = found
        ids = stored.working_ids if limit is None else stored.working_ids[-limit:]
        return [_item(messages[i]) for i in ids if i in messages]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (redacted) to the session, in order, in one commit.

        Raises:
            InvalidInputError: an item is not a JSON object (nothing is stored).
        """
        if not items:
            return
        messages = [_message(self._clean(item, position)) for position, item in enumerate(items)]
        events: list[Event] = [MessageEvent(message=m) for m in messages]
        new_ids = tuple(m.id for m in messages)
        first_user = next((m.text for m in messages if m.role == "user"), "")
        for _ in range(CONFLICT_RETRIES):
            found = await self.store.load(self.key)
            stored = found[0] if found is not None else StoredState()
            state = msgspec.structs.replace(
                stored,
                working_ids=(*stored.working_ids, *new_ids),
                unchanged=len(stored.working_ids),
                title=stored.title or first_user[:TITLE_CHARS],
            )
            if await self._commit(stored.version, events, state):
                return
        raise self._busy("add_items")

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item out of the session and return it (``None`` when empty).

        The item stays in the log; a `RemovalEvent` records that it left the session.
        """
        for _ in range(CONFLICT_RETRIES):
            found = await self.store.load(self.key)
            if found is None or not found[0].working_ids:
                return None
            stored, messages = found
            last = stored.working_ids[-1]
            rest = stored.working_ids[:-1]
            state = msgspec.structs.replace(stored, working_ids=rest, unchanged=len(rest))
            removal: list[Event] = [RemovalEvent(message_ids=(last,), how="pop_item")]
            if await self._commit(stored.version, removal, state):
                message = messages.get(last)
                return None if message is None else _item(message)
        raise self._busy("pop_item")

    async def clear_session(self) -> None:
        """Take every item out of the session; the log keeps them (`RemovalEvent`)."""
        for _ in range(CONFLICT_RETRIES):
            found = await self.store.load(self.key)
            if found is None or not found[0].working_ids:
                return
            stored = found[0]
            state = msgspec.structs.replace(stored, working_ids=(), unchanged=0)
            removal: list[Event] = [
                RemovalEvent(message_ids=tuple(stored.working_ids), how="clear_session")
            ]
            if await self._commit(stored.version, removal, state):
                return
        raise self._busy("clear_session")

    # ------------------------------------------------------------------ lifetime
    async def aclose(self) -> None:
        """Close the store when this session opened it (from a URL); else do nothing."""
        if self._owns_store:
            await self.store.aclose()

    async def __aenter__(self) -> HarnessSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        k = self.key
        return (
            f"HarnessSession({k.session_id!r}, user_id={k.user_id!r}, agent_id={k.agent_id!r}, "
            f"store={self.store.url!r})"
        )

    # ------------------------------------------------------------------ internals
    async def _commit(self, version: int, events: Sequence[Event], state: StoredState) -> bool:
        """Commit; return ``False`` when another writer committed since ``version`` was read."""
        try:
            await self.store.commit(self.key, expected_version=version, events=events, state=state)
        except StateConflict:
            return False
        return True

    def _busy(self, operation: str) -> StateConflict:
        return StateConflict(
            f"{operation} on session {self.session_id!r} lost to other writers "
            f"{CONFLICT_RETRIES} times in a row; try again when they have finished",
            session_id=self.session_id,
        )

    def _clean(self, item: object, position: int) -> dict[str, Any]:
        """Return a redacted JSON copy of ``item``."""
        if not isinstance(item, Mapping):
            raise InvalidInputError(
                f"items[{position}] must be a dict (an Agents SDK input item), "
                f"got {type(item).__name__}",
                position=position,
            )
        try:
            data = msgspec.json.decode(msgspec.json.encode(item))
        except (TypeError, msgspec.ValidationError) as exc:
            raise InvalidInputError(
                f"items[{position}] is not JSON-ready ({exc}); pass the SDK's dict items "
                "(`to_input_item()`), not model objects",
                position=position,
            ) from exc
        clean: dict[str, Any] = _redacted(data, self.secrets, None)
        return clean


# ---------------------------------------------------------------------- items and messages
def _redacted(value: Any, secrets: tuple[SecretPattern, ...], key: str | None) -> Any:
    if isinstance(value, str):
        if not secrets or key in _SHAPE_KEYS or value.startswith("data:"):
            return value
        if key == "arguments":
            return _clean_arguments(value, secrets)
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _redacted(v, secrets, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, secrets, key) for v in value]
    return value


def _clean_arguments(arguments: str, secrets: tuple[SecretPattern, ...]) -> str:
    """Redact tool-call arguments as the recorder does: value by value, still JSON."""
    call = ToolCall(id="", name="", arguments=arguments)
    clean = redact_message(Message(role="assistant", tool_calls=(call,)), secrets)
    return clean.tool_calls[0].arguments


def _text(value: Any) -> str:
    """Return the text of an item's content: a string, or its parts' texts joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = (_text(p) for p in value)
        return "\n".join(p for p in parts if p)
    if isinstance(value, dict):
        for key in ("text", "refusal", "output"):
            found = value.get(key)
            if isinstance(found, str):
                return found
    return ""


_ROLES: Final[Mapping[str, Role]] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}


def _message(item: dict[str, Any]) -> Message:
    """Return the logged message for a (redacted) item: its text mirrors the item's."""
    kind = item.get("type")
    meta = {ITEM: item}
    if kind == "function_call":
        arguments = item.get("arguments")
        call = ToolCall(
            id=str(item.get("call_id") or ""),
            name=str(item.get("name") or ""),
            arguments=arguments if isinstance(arguments, str) else "{}",
        )
        return Message(role="assistant", tool_calls=(call,), metadata=meta)
    if kind == "function_call_output":
        call_id = item.get("call_id")
        return Message(
            role="tool",
            content=_text(item.get("output")),
            tool_call_id=call_id if isinstance(call_id, str) else None,
            metadata=meta,
        )
    role = _ROLES.get(str(item.get("role")))
    if role is not None and kind in (None, "message"):
        return Message(role=role, content=_text(item.get("content")), metadata=meta)
    # reasoning, hosted tool calls and their outputs …: the model's side of the turn
    text = _text(item.get("content")) or _text(item.get("summary")) or _text(item.get("output"))
    return Message(role="assistant", content=text or None, metadata=meta)


def _item(message: Message) -> TResponseInputItem:
    """Return the SDK item a logged message stands for (a copy)."""
    item = message.meta(ITEM)
    if isinstance(item, dict):
        return cast("TResponseInputItem", copy.deepcopy(item))
    # not written by a HarnessSession (another way in shares the key): its plain form
    if message.role == "tool":
        plain: dict[str, Any] = {
            "type": "function_call_output",
            "call_id": message.tool_call_id or "",
            "output": message.text,
        }
    else:
        plain = {"role": message.role, "content": message.text}
    return cast("TResponseInputItem", plain)


__all__ = ["DEFAULT_AGENT", "ITEM", "HarnessSession"]
