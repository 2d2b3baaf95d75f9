"""Messages, tool calls and tool schemas, with lossless OpenAI/litellm dict conversion.

A `Message` is what the agent keeps in its history. It is frozen: a middleware that
rewrites one (a trimmed tool output, a truncated argument) builds a new one with
`message.replace(...)`. The `id` is stable for the life of the message and is what
token caches, manifests and idempotence markers key on; a rewrite that changes what the
model sees must give the new message a new id (`message.revise(...)` does this).

Provider keys we do not model (``refusal``, ``annotations``, ``audio`` …) are kept in
`extra` so that a dict → Message → dict round trip is lossless.

Messages are checked where they enter (msgspec does not check a Struct built in Python):
`checked` refuses a message whose fields have the wrong types, `history_message` adds the
rules of a stored history (no system messages: System text comes from the agent's
``system_prompt`` and instructions), and `agent_input` turns what a caller passes to
``agent.call`` into one message or raises `InvalidInputError` before anything is stored.

Text and lone surrogates: text entering the agent (input, tool results, replies) is cleaned
once, by `clean_text` — a surrogate pair stored as two code points becomes the character it
encodes, every other surrogate becomes U+FFFD — so everything stored and offloaded is valid
UTF-8 and byte-exact with the history. Identifiers (ids, names, call ids) are not text: one
that is not valid Unicode is refused.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from harness.errors import InvalidInputError

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))


_IDS = random.Random()  # seeded from the OS; our own, so an app's random.seed() cannot repeat ids
os.register_at_fork(after_in_child=_IDS.seed)  # a forked child must not repeat its parent's


def new_id() -> str:
    """Return a short random id for a message or a request (16 hex characters).

    Ids name things, they guard nothing, so they come from a generator seeded from the OS
    rather than from ``os.urandom`` per id: that system call releases the GIL, and on a busy
    proxy loop each release let a worker thread in first (70 µs an id, 5 ids a request).
    """
    return f"{_IDS.getrandbits(64):016x}"


class ContentPart(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One part of a multi-part content list (text, image, audio …)."""

    type: str
    """The part type as the provider names it (``text``, ``image_url`` …)."""
    text: str | None = None
    """The text of a ``text`` part."""
    data: dict[str, Any] | None = None
    """Every other key of the part, kept verbatim."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool call requested by the assistant."""

    id: str
    """The provider's call id; results refer to it with ``tool_call_id``."""
    name: str
    """The tool's name."""
    arguments: str = "{}"
    """The arguments as JSON text, exactly as the model produced them."""
    type: str = "function"
    """The call type; OpenAI-style providers only use ``function``."""
    extra: dict[str, Any] | None = None
    """Provider keys we do not model, kept for a lossless round trip."""

    def to_openai(self) -> dict[str, Any]:
        """Return the OpenAI chat-completions dict for this call."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if self.extra:
            out.update(self.extra)
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolCall:
        """Build a call from an OpenAI chat-completions dict.

        Raises:
            InvalidInputError: when ``id`` or ``function.name`` is missing.
        """
        function = data.get("function")
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidInputError(
                "a tool call needs a 'function' object with a 'name'; got "
                f"{sorted(data)!r}. Pass calls in OpenAI form: "
                "{'id': ..., 'type': 'function', 'function': {'name': ..., 'arguments': '{}'}}"
            )
        call_id = data.get("id")
        if not isinstance(call_id, str):
            raise InvalidInputError("a tool call needs a string 'id'; give every call an id")
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = msgspec.json.encode(arguments).decode()
        extra = {k: v for k, v in data.items() if k not in ("id", "type", "function")}
        return cls(
            id=call_id,
            name=function["name"],
            arguments=arguments,
            type=str(data.get("type", "function")),
            extra=extra or None,
        )


Content = str | tuple[ContentPart, ...] | None


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One chat message: system, user, assistant or tool."""

    role: Role
    """Who speaks: ``system``, ``user``, ``assistant`` or ``tool``."""
    content: Content = None
    """Plain text, a tuple of content parts, or ``None`` (an assistant turn of only calls)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls requested by an assistant message."""
    tool_call_id: str | None = None
    """On a tool message: the id of the call this is the result of."""
    name: str | None = None
    """The tool name on a tool message, or a participant name."""
    reasoning_content: str | None = None
    """A thinking-mode model's reasoning, kept verbatim: some providers reject a
    multi-turn request whose assistant turns lack it."""
    id: str = msgspec.field(default_factory=new_id)
    """A stable id for this version of the message (never sent to the provider)."""
    metadata: dict[str, Any] | None = None
    """Our own markers (offloaded, trimmed, summary …); never sent to the provider."""
    extra: dict[str, Any] | None = None
    """Provider keys we do not model, kept for a lossless round trip."""

    # ----------------------------------------------------------------- builders
    @classmethod
    def system(cls, text: str) -> Message:
        """Return a system message."""
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str, **kw: Any) -> Message:
        """Return a user message."""
        return cls(role="user", content=text, **kw)

    @classmethod
    def assistant(
        cls, text: str | None = None, *, tool_calls: Iterable[ToolCall] = (), **kw: Any
    ) -> Message:
        """Return an assistant message, optionally with tool calls."""
        return cls(role="assistant", content=text, tool_calls=tuple(tool_calls), **kw)

    @classmethod
    def tool(cls, call_id: str, text: str, *, name: str | None = None, **kw: Any) -> Message:
        """Return the result of tool call ``call_id``."""
        return cls(role="tool", content=text, tool_call_id=call_id, name=name, **kw)

    # ---------------------------------------------------------------- accessors
    @property
    def text(self) -> str:
        """The text of the message: the string content or its text parts joined."""
        content = self.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "".join(part.text or "" for part in content if part.text is not None)

    def meta(self, key: str, default: Any = None) -> Any:
        """Return one metadata value, or ``default``."""
        return default if self.metadata is None else self.metadata.get(key, default)

    def replace(self, **changes: Any) -> Message:
        """Return a copy with ``changes`` applied (same id: use `revise` for new content)."""
        return msgspec.structs.replace(self, **changes)

    def revise(
        self, tag: str, *, metadata: Mapping[str, Any] | None = None, **changes: Any
    ) -> Message:
        """Return a rewritten copy with a derived id and merged metadata.

        Args:
            tag: a short name for the rewrite (``trim``, ``offload`` …), appended to the id.
            metadata: markers merged into the existing metadata.
            **changes: fields to change.
        """
        merged = dict(self.metadata or {})
        merged.setdefault("origin_id", self.id)  # harness.markers.ORIGIN_ID
        if metadata:
            merged.update(metadata)
        return msgspec.structs.replace(self, id=f"{self.id}~{tag}", metadata=merged, **changes)

    def checked(self) -> Message:
        """Return this message with its text cleaned, after checking every field's type.

        Raises:
            InvalidInputError: a field has the wrong type (a role that is not one of the
                four, content that is not text, parts or ``None`` …), an identifier is not
                valid Unicode, or ``extra``/``metadata`` cannot be stored as JSON.
        """
        return checked(self)

    # -------------------------------------------------------------- conversion
    def to_openai(self) -> dict[str, Any]:
        """Return the OpenAI/litellm chat-message dict (ids and metadata are not sent)."""
        content: Any = self.content
        if isinstance(content, tuple):
            content = [_part_to_openai(p) for p in content]
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        if self.extra:
            out.update(self.extra)
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any], *, id: str | None = None) -> Message:
        """Build a message from an OpenAI/litellm chat-message dict.

        Raises:
            InvalidInputError: when the role is unknown or a field has the wrong type.
        """
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"a message must be a dict, got {type(data).__name__}")
        role = data.get("role")
        if role not in ROLES:
            raise InvalidInputError(
                f"unknown message role {role!r}; use one of system, user, assistant, tool"
            )
        raw = data.get("content")
        content: Content
        if raw is None or isinstance(raw, str):
            content = raw
        elif isinstance(raw, list):
            content = tuple(_part_from_openai(p) for p in raw)
        else:
            raise InvalidInputError(
                f"message content must be a string, a list of parts or null, got {type(raw).__name__}"
            )
        raw_calls = data.get("tool_calls") or ()
        if not isinstance(raw_calls, list | tuple):
            raise InvalidInputError("'tool_calls' must be a list of OpenAI tool-call dicts")
        known = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")
        extra = {k: v for k, v in data.items() if k not in known}
        if "tool_calls" in data and not raw_calls:
            extra["tool_calls"] = data["tool_calls"]  # keep an explicit empty list verbatim
        return cls(
            role=role,
            content=content,
            tool_calls=tuple(ToolCall.from_openai(c) for c in raw_calls),
            tool_call_id=_opt_str(data, "tool_call_id"),
            name=_opt_str(data, "name"),
            reasoning_content=_opt_str(data, "reasoning_content"),
            id=id or new_id(),
            extra=extra or None,
        ).checked()


class ToolSchema(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the model sees it: name, description and JSON-schema parameters."""

    name: str
    """The tool's name, unique within a request."""
    description: str = ""
    """What the tool does, for the model."""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    """The JSON schema of the arguments object."""

    def to_openai(self) -> dict[str, Any]:
        """Return the OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolSchema:
        """Build a schema from an OpenAI ``tools`` entry (or its bare ``function`` object).

        Keys we do not model (``strict``, ``cache_control`` …) are accepted and not kept:
        the schema is what the model sees of the tool, and its name, description and
        parameters are what the budget counts.

        Raises:
            InvalidInputError: when the entry has no string ``name`` or its parameters are
                not a JSON-schema object (a dict).
        """
        if not isinstance(data, Mapping):
            raise InvalidInputError(
                f"a tool must be an OpenAI tools dict, got {type(data).__name__}; pass "
                "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}"
            )
        function = data.get("function", data)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidInputError(
                f"a tool needs a 'function' object with a string 'name'; got keys "
                f"{sorted(data)!r}. Pass {{'type': 'function', 'function': {{'name': ..., "
                "'description': ..., 'parameters': {...}}}"
            )
        description = function.get("description") or ""
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(description, str) or not isinstance(parameters, Mapping):
            raise InvalidInputError(
                f"tool {function['name']!r}: 'description' must be a string and "
                "'parameters' a JSON-schema object (a dict)"
            )
        return cls(name=function["name"], description=description, parameters=dict(parameters))


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    raise InvalidInputError(f"message field {key!r} must be a string or null, got {value!r}")


def _part_to_openai(part: ContentPart) -> dict[str, Any]:
    out: dict[str, Any] = {"type": part.type}
    if part.text is not None:
        out["text"] = part.text
    if part.data:
        out.update(part.data)
    return out


def _part_from_openai(raw: Any) -> ContentPart:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
        raise InvalidInputError("each content part must be a dict with a string 'type'")
    text = raw.get("text")
    if text is not None and not isinstance(text, str):
        raise InvalidInputError("a content part's 'text' must be a string")
    data = {k: v for k, v in raw.items() if k not in ("type", "text")}
    return ContentPart(type=raw["type"], text=text, data=data or None)


def messages_from_openai(items: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert a list of OpenAI chat-message dicts to messages."""
    return [Message.from_openai(item) for item in items]


# ------------------------------------------------------------------ validation

_SURROGATES = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Return ``text`` as valid Unicode: the one rule for lone surrogates.

    A surrogate pair stored as two code points (text decoded one UTF-16 unit at a time)
    becomes the character it encodes; every other surrogate becomes U+FFFD. Text without
    surrogates is returned as is (the same object).
    """
    if text.isascii() or not _SURROGATES.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def checked(message: Message) -> Message:
    """Return ``message`` with its text cleaned, after checking every field's type.

    Text (content, text parts, reasoning, tool-call arguments) goes through `clean_text`;
    the message keeps its id. Any role is allowed here (see `history_message`).

    Raises:
        InvalidInputError: a field has the wrong type, an identifier is not valid Unicode,
            or ``extra``/``metadata`` cannot be stored as JSON.
    """
    if not isinstance(message, Message):
        raise InvalidInputError(
            f"expected a Message, got {type(message).__name__}; build one with "
            "Message.user(...) or Message.from_openai({...})"
        )
    role: object = message.role
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidInputError(
            f"unknown message role {role!r}; use one of system, user, assistant, tool",
            field="role",
        )
    changes: dict[str, Any] = {}
    content: object = message.content
    if isinstance(content, str):
        if (cleaned := clean_text(content)) is not content:
            changes["content"] = cleaned
    elif isinstance(content, tuple | list):
        parts = tuple(_checked_part(part) for part in content)
        if isinstance(content, list) or any(
            a is not b for a, b in zip(parts, content, strict=True)
        ):
            changes["content"] = parts
    elif content is not None:
        raise InvalidInputError(
            f"message content must be a str, a tuple of ContentPart or None, got "
            f"{type(content).__name__}; convert it to text first",
            field="content",
        )
    calls: object = message.tool_calls
    if not isinstance(calls, tuple | list):
        raise InvalidInputError(
            f"tool_calls must be a tuple of ToolCall, got {type(calls).__name__}",
            field="tool_calls",
        )
    checked_calls = tuple(_checked_call(call) for call in calls)
    if isinstance(calls, list) or any(
        a is not b for a, b in zip(checked_calls, calls, strict=True)
    ):
        changes["tool_calls"] = checked_calls
    if not isinstance(message.id, str) or not message.id:
        raise InvalidInputError(f"a message id must be a non-empty str, got {message.id!r}")
    _identifier(message.id, "id")
    for key in ("tool_call_id", "name"):
        value = getattr(message, key)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidInputError(
                    f"message field {key!r} must be a str or None, got {value!r}", field=key
                )
            _identifier(value, key)
    reasoning = message.reasoning_content
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise InvalidInputError(
                f"reasoning_content must be a str or None, got {type(reasoning).__name__}",
                field="reasoning_content",
            )
        if (cleaned := clean_text(reasoning)) is not reasoning:
            changes["reasoning_content"] = cleaned
    _json_dict(message.extra, "extra")
    _json_dict(message.metadata, "metadata")
    return msgspec.structs.replace(message, **changes) if changes else message


def history_message(message: Message, *, check: bool = True) -> Message:
    """Return ``message`` checked for a stored history (`checked`, then the history rules).

    The rules: no system messages (System text is built from the agent's ``system_prompt``
    and instructions before every request); user and tool messages have content; a tool
    message names the call it answers; only assistant messages carry tool calls.
    ``check=False`` skips `checked` for a message that just passed it (`Message.from_openai`
    checks what it builds; checking again was a third of converting 10,000 messages).

    Raises:
        InvalidInputError: the message breaks a rule; the message says which.
    """
    if check:
        message = checked(message)
    role = message.role
    if role == "system":
        raise InvalidInputError(
            "a system message cannot be stored in the history: System text comes from "
            "HarnessAgent(system_prompt=...) and instructions, which are merged before every "
            "request; put the text there, or send it as a user message",
            field="role",
        )
    if role in ("user", "tool") and message.content is None:
        raise InvalidInputError(
            f"a {role} message needs content (a str or content parts), got None; "
            "send '' if there is really nothing to say",
            field="content",
        )
    if role == "tool" and message.tool_call_id is None:
        raise InvalidInputError(
            "a tool message needs the tool_call_id of the call it answers; build it with "
            "Message.tool(call_id, text)",
            field="tool_call_id",
        )
    if role != "tool" and message.tool_call_id is not None:
        raise InvalidInputError(
            f"only tool messages carry a tool_call_id, this one is a {role} message; "
            "drop the tool_call_id or send a tool message",
            field="tool_call_id",
        )
    if role != "assistant" and message.tool_calls:
        raise InvalidInputError(
            f"only assistant messages carry tool calls, this one is a {role} message",
            field="tool_calls",
        )
    return message


def agent_input(value: object, history: Sequence[Message] = ()) -> Message:
    """Turn what a caller passes to ``agent.call`` into the message to store.

    Accepted: a ``str`` (the user's turn), a `Message`, or an OpenAI-format message dict
    (``{"role": "user", "content": "..."}``). The message must be a user message, or a
    tool result answering a call the last assistant turn of ``history`` left unanswered
    (a call interrupted by a cancellation can be answered this way). Text is cleaned
    with `clean_text`.

    Args:
        value: the input.
        history: the session's working history, to check a tool result against.

    Raises:
        InvalidInputError: the input is of another type, malformed, a system or assistant
            message, or a tool result that answers no waiting call. Nothing was stored.
    """
    if isinstance(value, str):
        message = Message.user(value)
    elif isinstance(value, Message):
        message = value
    elif isinstance(value, Mapping):
        message = Message.from_openai(value)
    else:
        hint = "decode the bytes to str first; " if isinstance(value, bytes | bytearray) else ""
        raise InvalidInputError(
            f"agent input must be a str, a Message or an OpenAI-format message dict such as "
            f"{{'role': 'user', 'content': '...'}}, got {type(value).__name__}; {hint}to add "
            "several earlier turns, append them with agent.state(ctx).append(...) first",
            type=type(value).__name__,
        )
    if message.role == "system":
        raise InvalidInputError(
            "a system message cannot be agent input: System text comes from "
            "HarnessAgent(system_prompt=...) and instructions (WorkspaceMaterials); put it "
            "there and pass the user's turn to call()",
            field="role",
        )
    if message.role == "assistant":
        raise InvalidInputError(
            "an assistant message cannot be agent input: call() takes the user's turn (or a "
            "result for a waiting tool call); to seed earlier turns, append them with "
            "agent.state(ctx).append(...) first",
            field="role",
        )
    message = history_message(message)
    if message.role == "tool":
        waiting = waiting_calls(history)
        if message.tool_call_id not in waiting:
            listed = ", ".join(repr(c) for c in waiting) or "none"
            raise InvalidInputError(
                f"the tool result for call {message.tool_call_id!r} answers no waiting call "
                f"(calls waiting for a result: {listed}); a tool result may only answer an "
                "unanswered call of the last assistant turn — send the user's turn instead",
                field="tool_call_id",
            )
    return message


def waiting_calls(history: Sequence[Message]) -> tuple[str, ...]:
    """Return the ids of the calls of the last assistant turn that have no result yet."""
    answered: set[str] = set()
    for message in reversed(history):
        if message.role == "tool" and message.tool_call_id is not None:
            answered.add(message.tool_call_id)
            continue
        if message.role == "assistant" and message.tool_calls:
            return tuple(c.id for c in message.tool_calls if c.id not in answered)
        return ()
    return ()


def _identifier(value: str, field: str) -> None:
    if _SURROGATES.search(value):
        raise InvalidInputError(
            f"message field {field!r} is not valid Unicode (it holds a lone surrogate): "
            f"{value!r}; identifiers must be exact, so fix the value where it is produced",
            field=field,
        )


def _json_dict(value: object, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise InvalidInputError(
            f"message field {field!r} must be a dict or None, got {type(value).__name__}",
            field=field,
        )
    if not value:
        return
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        raise InvalidInputError(
            f"message field {field!r} cannot be stored as JSON ({type(exc).__name__}: {exc}); "
            "keep only str, numbers, bools, None, lists and dicts there",
            field=field,
        ) from exc


def checked_parts(parts: Iterable[object]) -> tuple[ContentPart, ...]:
    """Return ``parts`` as a tuple of checked content parts, their text cleaned.

    For content built outside a message (a tool that returns an image part).

    Raises:
        InvalidInputError: an item is not a `ContentPart`, or one of its fields has the
            wrong type or cannot be stored as JSON.
    """
    return tuple(_checked_part(part) for part in parts)


def _checked_part(part: object) -> ContentPart:
    if not isinstance(part, ContentPart):
        raise InvalidInputError(
            f"each content part must be a ContentPart, got {type(part).__name__}; build "
            "parts with ContentPart(type='text', text=...) or pass an OpenAI dict",
            field="content",
        )
    if not isinstance(part.type, str) or not part.type:
        raise InvalidInputError(
            f"a content part needs a non-empty str type, got {part.type!r}", field="content"
        )
    text = part.text
    if text is not None and not isinstance(text, str):
        raise InvalidInputError(
            f"a content part's text must be a str or None, got {type(text).__name__}",
            field="content",
        )
    _json_dict(part.data, "content")
    if text is not None and (cleaned := clean_text(text)) is not text:
        return msgspec.structs.replace(part, text=cleaned)
    return part


def _checked_call(call: object) -> ToolCall:
    if not isinstance(call, ToolCall):
        raise InvalidInputError(
            f"each tool call must be a ToolCall, got {type(call).__name__}",
            field="tool_calls",
        )
    for key in ("id", "name", "type"):
        value = getattr(call, key)
        if not isinstance(value, str) or not value:
            raise InvalidInputError(
                f"a tool call's {key} must be a non-empty str, got {value!r}", field="tool_calls"
            )
        _identifier(value, f"tool_calls.{key}")
    if not isinstance(call.arguments, str):
        raise InvalidInputError(
            "a tool call's arguments must be JSON text (a str), got "
            f"{type(call.arguments).__name__}",
            field="tool_calls",
        )
    _json_dict(call.extra, "tool_calls.extra")
    if (cleaned := clean_text(call.arguments)) is not call.arguments:
        return msgspec.structs.replace(call, arguments=cleaned)
    return call
