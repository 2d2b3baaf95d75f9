"""Converting the drop-in call's input: OpenAI-format dicts into the request's parts.

`split_messages` turns the caller's message dicts into System parts and checked history
messages (one `_Conversion` per message, remembered by content in `_CONVERSIONS`, so a
call that resends a grown conversation converts only its new messages);
`tools_from_openai` turns OpenAI tool dicts into `ToolSchema`s; `chain_hashes` is the hash
chain over the caller's messages that keys the prefix cache and names recorded messages
(their content digests, which match a resend to the record, are `content_digests`).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import anyio.to_thread
import msgspec

from harness.adapters._record_match import content_digests
from harness.errors import InvalidInputError
from harness.messages import ContentPart, Message, ToolSchema, history_message
from harness.request import SystemPart


def split_messages(
    messages: Sequence[Any], *, scope: str = ""
) -> tuple[tuple[SystemPart, ...], list[Message]]:
    """Return the System parts and the history messages of an OpenAI message list.

    System and ``developer`` messages become System parts (``system/<position>``) in
    order; the rest become checked history messages with ids derived from the
    conversation up to them (`chain_hashes`), so the same conversation gets the same ids.
    ``messages`` is not changed. ``scope`` (e.g. the user and agent) keeps the kept
    conversions of one caller apart from another's.

    Raises:
        InvalidInputError: ``messages`` is not a list of message dicts, or one is malformed.
    """
    system, history, _, _ = _split(messages, scope=scope)
    return system, history


OFF_LOOP_MESSAGES: Final = 48
"""A call with this many messages not converted before converts them in a worker thread
(`asplit`): the first call over a long conversation costs milliseconds of CPU."""


async def asplit(
    messages: Sequence[Any], *, scope: str
) -> tuple[tuple[SystemPart, ...], list[Message], list[str], list[str]]:
    """`_split` for async callers: off the event loop when many messages are new."""
    if _CONVERSIONS.unconverted(messages, scope) < OFF_LOOP_MESSAGES:
        return _split(messages, scope=scope)
    return await anyio.to_thread.run_sync(lambda: _split(messages, scope=scope))


def _split(
    messages: Sequence[Any], *, scope: str
) -> tuple[tuple[SystemPart, ...], list[Message], list[str], list[str]]:
    """`split_messages`, plus each history message's chain hash and content digest.

    A caller resends its whole conversation with every request, so the conversion of the
    part it sent before is taken from the last conversion of that conversation
    (`_Conversion`) when the raw dicts are equal, and only the rest is converted and hashed.
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidInputError(
            f"messages must be a list of OpenAI message dicts, got {type(messages).__name__}"
        )
    messages = list(messages)  # pointers: one list to slice and compare
    key, before = _CONVERSIONS.find(messages, scope)
    kept = before.shared(messages) if before is not None else 0
    done = before.cut(kept) if before is not None else _Conversion()
    system = list(done.system)
    history: list[Message] = []
    for position in range(kept, len(messages)):
        data = _as_dict(messages[position], position)
        if data.get("role") in ("system", "developer"):
            system.append(_system_part(data, position))
            done.system_at.append(len(system))
            done.history_at.append(len(done.history) + len(history))
            continue
        try:
            history.append(history_message(Message.from_openai(data), check=False))
        except InvalidInputError as exc:
            raise InvalidInputError(f"messages[{position}]: {exc}", position=position) from exc
        done.system_at.append(len(system))
        done.history_at.append(len(done.history) + len(history))
    hashes = chain_hashes(history, start=done.hashes[-1] if done.hashes else "")
    done.system = system
    done.history.extend(m.replace(id=h[:16]) for m, h in zip(history, hashes, strict=True))
    done.hashes.extend(hashes)
    done.digests.extend(content_digests(history))
    if key is not None and done.keep(messages, kept):
        _CONVERSIONS.put(key, done)
    return tuple(system), list(done.history), list(done.hashes), list(done.digests)


class _Conversion:
    """One conversation as last converted: copies of its raw dicts and what they became.

    ``system_at[i]`` and ``history_at[i]`` are how many System parts and history messages
    the first ``i`` raw messages made. The raw dicts are copies (a caller may change its
    own afterwards); a conversion depends on the dicts alone, so an equal dict converts
    alike for any caller.
    """

    __slots__ = ("digests", "hashes", "history", "history_at", "raw", "system", "system_at")

    def __init__(self) -> None:
        self.raw: list[Any] = []
        self.system: list[SystemPart] = []
        self.history: list[Message] = []
        self.hashes: list[str] = []
        self.digests: list[str] = []
        """Each history message's content digest (`content_digests`)."""
        self.system_at: list[int] = [0]
        self.history_at: list[int] = [0]

    def shared(self, messages: list[Any]) -> int:
        """Return how many leading raw messages of ``messages`` equal those converted here."""
        raw, n = self.raw, min(len(self.raw), len(messages))
        if raw[:n] == messages[:n]:  # the usual case: the conversation grew (a C-speed compare)
            return n
        low, high = 0, n  # raw[:low] equal, raw[:high] not
        while high - low > 1:
            middle = (low + high) // 2
            if raw[:middle] == messages[:middle]:
                low = middle
            else:
                high = middle
        return low

    def cut(self, kept: int) -> _Conversion:
        """Return a new conversion of the first ``kept`` raw messages only."""
        out = _Conversion()
        out.raw = self.raw[:kept]
        out.system = self.system[: self.system_at[kept]]
        out.history = self.history[: self.history_at[kept]]
        out.hashes = self.hashes[: self.history_at[kept]]
        out.digests = self.digests[: self.history_at[kept]]
        out.system_at = self.system_at[: kept + 1]
        out.history_at = self.history_at[: kept + 1]
        return out

    def keep(self, messages: list[Any], kept: int) -> bool:
        """Take copies of ``messages[kept:]``; return whether they could be copied."""
        try:
            copies = msgspec.json.decode(msgspec.json.encode(messages[kept:]))
        except (TypeError, ValueError, msgspec.MsgspecError):
            return False
        self.raw.extend(copies)
        return True


class _Conversions:
    """The last conversion of recent conversations, by caller and opening messages (bounded).

    Keyed by a hash of the caller's scope (user and agent) and the first two raw messages:
    one caller's conversations that open alike share an entry (each then finds the other's
    conversion and keeps what is equal); another caller's never meet them.
    Holds at most `MAX_CONVERSATIONS` conversations and `MAX_MESSAGES` messages in all:
    about twice their text (the raw copies and the messages).
    """

    MAX_CONVERSATIONS: Final = 256
    MAX_MESSAGES: Final = 100_000

    def __init__(self) -> None:
        self._by_opening: OrderedDict[bytes, _Conversion] = OrderedDict()
        self._messages = 0
        self._lock = threading.Lock()  # proxies may prepare in worker threads

    def find(self, messages: list[Any], scope: str) -> tuple[bytes | None, _Conversion | None]:
        """Return the key of ``messages``' conversation in ``scope`` and its last conversion."""
        if not messages or not all(type(m) is dict for m in messages):
            return None, None
        try:
            opening = msgspec.json.encode(messages[:2])
        except (TypeError, ValueError, msgspec.MsgspecError):
            return None, None
        key = hashlib.blake2b(scope.encode() + b"\0" + opening, digest_size=16).digest()
        with self._lock:
            found = self._by_opening.get(key)
            if found is not None:
                self._by_opening.move_to_end(key)
        return key, found

    def unconverted(self, messages: Sequence[Any], scope: str) -> int:
        """Return how many of ``messages`` the last conversion of their conversation lacks."""
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            return 0
        listed = list(messages)
        _, before = self.find(listed, scope)
        return len(listed) - (before.shared(listed) if before is not None else 0)

    def put(self, key: bytes, conversion: _Conversion) -> None:
        """Keep ``conversion`` as the last of its conversation; drop the oldest beyond bounds."""
        if len(conversion.raw) > self.MAX_MESSAGES:
            return
        with self._lock:
            old = self._by_opening.pop(key, None)
            if old is not None:
                self._messages -= len(old.raw)
            self._by_opening[key] = conversion
            self._messages += len(conversion.raw)
            while (
                len(self._by_opening) > self.MAX_CONVERSATIONS or self._messages > self.MAX_MESSAGES
            ):
                _, dropped = self._by_opening.popitem(last=False)
                self._messages -= len(dropped.raw)

    def clear(self) -> None:
        """Forget every conversion."""
        with self._lock:
            self._by_opening.clear()
            self._messages = 0


_CONVERSIONS: Final = _Conversions()


def tools_from_openai(
    tools: Iterable[Mapping[str, Any] | ToolSchema],
) -> tuple[tuple[ToolSchema, ...], dict[str, Mapping[str, Any]]]:
    """Return the schemas of OpenAI tool dicts, and the dicts by tool name (to send as given).

    Raises:
        InvalidInputError: a tool is malformed, or two tools share a name.
    """
    schemas: list[ToolSchema] = []
    dicts: dict[str, Mapping[str, Any]] = {}
    for item in tools:
        schema = item if isinstance(item, ToolSchema) else ToolSchema.from_openai(item)
        if any(s.name == schema.name for s in schemas):
            raise InvalidInputError(f"two tools are named {schema.name!r}; names must be unique")
        schemas.append(schema)
        if isinstance(item, Mapping):
            dicts[schema.name] = (
                item if "function" in item else {"type": "function", "function": item}
            )
    return tuple(schemas), dicts


def _system_part(data: dict[str, Any], position: int) -> SystemPart:
    """Return the System part of a system (or ``developer``) dict, keeping its provider options.

    A list of content blocks is kept as the part's blocks (``cache_control`` and every other
    key of each block); a string content with a message-level ``cache_control`` becomes one
    text block with it. Either way the part is sent as those blocks while the stack leaves
    its text unchanged (`SystemPart.content_blocks`).

    Raises:
        InvalidInputError: the message is malformed.
    """
    try:
        message = Message.from_openai({**data, "role": "system"})
    except InvalidInputError as exc:
        raise InvalidInputError(f"messages[{position}]: {exc}", position=position) from exc
    blocks: tuple[ContentPart, ...] = ()
    if isinstance(message.content, tuple):
        blocks = message.content
    elif message.content and message.extra and "cache_control" in message.extra:
        options = {"cache_control": message.extra["cache_control"]}
        blocks = (ContentPart(type="text", text=message.content, data=options),)
    return SystemPart(name=f"system/{position}", text=message.text, blocks=blocks)


def _as_dict(item: Any, position: int) -> dict[str, Any]:
    """Return a message as a plain dict: a mapping, or a litellm/pydantic message object."""
    if isinstance(item, Mapping):
        data = dict(item)
    elif callable(getattr(item, "model_dump", None)):
        data = dict(item.model_dump())
    else:
        raise InvalidInputError(
            f"messages[{position}] must be a message dict such as "
            f"{{'role': 'user', 'content': '...'}}, got {type(item).__name__}",
            position=position,
        )
    # litellm's message objects carry empty keys (function_call=None …) the API never needs.
    return {k: v for k, v in data.items() if v is not None or k in ("role", "content")}


def chain_hashes(messages: Sequence[Message], *, start: str = "") -> list[str]:
    """Return, for each message, a hash of the conversation up to and including it.

    A message counts by its role, content, tool calls (id, name, arguments) and call id —
    not by its id, metadata or provider extras — so the dict a caller sends back hashes
    like the reply it came from.
    """
    out: list[str] = []
    digest = start.encode()
    for message in messages:
        content: Any = message.content
        if isinstance(content, tuple):
            content = [[p.type, p.text, p.data] for p in content]
        canonical = msgspec.json.encode(
            [
                message.role,
                content,
                [[c.id, c.name, c.arguments] for c in message.tool_calls],
                message.tool_call_id,
            ]
        )
        digest = hashlib.sha256(digest + b"\0" + canonical).hexdigest().encode()
        out.append(digest.decode())
    return out
