"""Messages, tool calls and tool schemas, with lossless OpenAI/litellm dict conversion.

A `Message` is what the agent keeps in its history. It is frozen: a middleware that
rewrites one (a trimmed tool output, a truncated argument) builds a new one with
`message.replace(...)`. The `id` is stable for the life of the message and is what
token caches, manifests and idempotence markers key on; a rewrite that changes what the
model sees must give the new message a new id (`message.revise(...)` does this).

Provider keys we do not model (``refusal``, ``annotations``, ``audio`` …) are kept in
`extra` so that a dict → Message → dict round trip is lossless.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from harness.errors import InvalidInputError

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))


def new_id() -> str:
    """Return a short random id for a message or a request (16 hex characters)."""
    return os.urandom(8).hex()


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
        merged.setdefault("origin_id", self.id)
        if metadata:
            merged.update(metadata)
        return msgspec.structs.replace(self, id=f"{self.id}~{tag}", metadata=merged, **changes)

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
        )


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
