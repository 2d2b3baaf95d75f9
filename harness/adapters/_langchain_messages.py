"""Between LangChain messages and the OpenAI dicts the stack takes, keeping LangChain's fields.

Used by `harness.adapters.langchain` only. Going in, a LangChain message becomes the dict
``convert_to_openai_messages`` makes of it, plus the calls LangChain could not parse
(``invalid_tool_calls``, e.g. truncated JSON): they are calls the model made, and LangChain
answers each with an error result, so they travel as calls and keep their pairs. Coming back,
every message the stack sends is matched to what it was made from by its id (the chain hash
the conversion gives each history message): one the stack left alone is the very object
LangChain gave; one it rewrote (a trimmed result, shortened arguments, a fragment edit) is a
copy of its original with the new content, so ``id``, ``artifact``, ``status``, metadata and
``additional_kwargs`` stay; a summary carries LangChain's ``lc_source="summarization"``
marker, as LangChain's own ``SummarizationMiddleware`` sets it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    InvalidToolCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
    convert_to_openai_messages,
)

from harness.markers import INTERRUPTED, ORIGIN_ID, is_summary
from harness.messages import Message

__all__ = [
    "INTERRUPTED_CALL_TEXT",
    "SUMMARY_SOURCE",
    "back_to_langchain",
    "system_back",
    "to_openai",
    "with_interrupted_results",
]

INTERRUPTED_CALL_TEXT = (
    "no result: interrupted — the run stopped before tool call {name} (id {id}) returned, "
    "and the conversation went on; call it again if its result is still needed."
)
"""The default content of the result a call left without one gets (``{name}``, ``{id}``)."""

SUMMARY_SOURCE = "summarization"
"""LangChain's ``additional_kwargs["lc_source"]`` on a summary message."""


def to_openai(messages: Sequence[AnyMessage]) -> list[dict[str, Any]]:
    """Return one OpenAI dict per message, with ``invalid_tool_calls`` as calls."""
    dicts: list[dict[str, Any]] = convert_to_openai_messages(list(messages))
    for message, data in zip(messages, dicts, strict=True):
        if isinstance(message, AIMessage) and message.invalid_tool_calls:
            calls = [c for c in message.invalid_tool_calls if c.get("id")]
            if calls:
                data["tool_calls"] = [*data.get("tool_calls", ()), *map(_invalid_as_openai, calls)]
    return dicts


def _invalid_as_openai(call: InvalidToolCall) -> dict[str, Any]:
    return {
        "id": call["id"],
        "type": "function",
        "function": {"name": call.get("name") or "", "arguments": call.get("args") or ""},
    }


def with_interrupted_results(messages: list[AnyMessage], text: str) -> list[AnyMessage]:
    """Return ``messages`` with a result for every call that never got one.

    A run interrupted after the model called a tool, then continued with a new user turn,
    leaves a call without its result; providers refuse such a request. The made-up result
    (``status="error"``, ``text`` as content, its ``{name}`` and ``{id}`` filled in) goes
    right after the call's other results, before the next turn. ``messages`` itself is returned when nothing is missing.
    """
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    if not any(_unanswered(m, answered) for m in messages if isinstance(m, AIMessage)):
        return messages
    out: list[AnyMessage] = []
    pending: list[ToolMessage] = []
    for message in messages:
        if pending and not isinstance(message, ToolMessage):
            out += pending
            pending = []
        out.append(message)
        if isinstance(message, AIMessage):
            pending += [
                ToolMessage(
                    text.replace("{name}", name or "?").replace("{id}", call_id),
                    tool_call_id=call_id,
                    name=name,
                    status="error",
                    id=f"interrupted-{call_id}",
                )
                for call_id, name in _unanswered(message, answered)
            ]
    return out + pending


def _unanswered(message: AIMessage, answered: set[str]) -> list[tuple[str, str | None]]:
    calls = [*message.tool_calls, *message.invalid_tool_calls]
    return [
        (call_id, c.get("name"))
        for c in calls
        if (call_id := c.get("id")) is not None and call_id and call_id not in answered
    ]


def back_to_langchain(
    prepared: Sequence[Message], originals: Mapping[str, AnyMessage]
) -> list[AnyMessage]:
    """Return the history messages the stack sends as LangChain messages.

    Args:
        prepared: the rendered request without its System message.
        originals: LangChain's messages by the id the conversion gave them.
    """
    out: list[AnyMessage] = []
    for message in prepared:
        same = originals.get(message.id)
        if same is not None:
            out.append(same)
            continue
        origin = originals.get(str(message.meta(ORIGIN_ID, "")))
        out.append(_rewritten(origin, message) if origin is not None else _new(message))
    return out


def system_back(text: str, original: SystemMessage | None) -> SystemMessage | None:
    """Return the System message to send for the stack's System ``text``.

    The original object when the stack left its text as it was; else a copy with the new
    text, whose content blocks (``cache_control`` …) are kept when the original's text is
    still part of it, and whose ``additional_kwargs`` are the original's.
    """
    if not text:
        return None
    if original is None:
        return SystemMessage(content=text)
    if text == original.text:
        return original
    before, found, after = text.partition(original.text)
    if not found or isinstance(original.content, str) or not original.text:
        return original.model_copy(update={"content": text})
    blocks: list[str | dict[Any, Any]] = list(original.content)
    if before:
        blocks.insert(0, {"type": "text", "text": before})
    if after:
        blocks.append({"type": "text", "text": after})
    return original.model_copy(update={"content": blocks})


def _content(message: Message) -> Any:
    content = message.to_openai()["content"]
    return "" if content is None else content


def _rewritten(original: AnyMessage, message: Message) -> AnyMessage:
    """A copy of ``original`` with what the stack changed (content, call arguments)."""
    update: dict[str, Any] = {"content": _content(message)}
    if isinstance(original, AIMessage) and message.tool_calls:
        arguments = {c.id: c.arguments for c in message.tool_calls}
        update["tool_calls"] = [
            {**c, "args": _args(arguments.get(str(c["id"])), c["args"])}
            for c in original.tool_calls
        ]
        update["invalid_tool_calls"] = [
            {**c, "args": arguments.get(str(c["id"]), c.get("args"))}
            for c in original.invalid_tool_calls
        ]
    return original.model_copy(update=update)


def _args(arguments: str | None, before: dict[str, Any]) -> dict[str, Any]:
    if arguments is None:
        return before
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return before
    return parsed if isinstance(parsed, dict) else before


def _new(message: Message) -> AnyMessage:
    """A LangChain message for one the stack made (a summary, a made-up result, blocks)."""
    content = _content(message)
    if message.role == "tool":
        status: Literal["success", "error"] = "error" if message.meta(INTERRUPTED) else "success"
        return ToolMessage(
            content, tool_call_id=message.tool_call_id or "", name=message.name, status=status
        )
    if message.role == "assistant":
        valid: list[ToolCall] = []
        invalid: list[InvalidToolCall] = []
        for call in message.tool_calls:
            try:
                args = json.loads(call.arguments)
            except ValueError:
                args = None
            if isinstance(args, dict):
                valid.append(ToolCall(id=call.id, name=call.name, args=args, type="tool_call"))
            else:
                invalid.append(
                    InvalidToolCall(
                        id=call.id,
                        name=call.name,
                        args=call.arguments,
                        error=None,
                        type="invalid_tool_call",
                    )
                )
        kwargs = (
            {"reasoning_content": message.reasoning_content}
            if message.reasoning_content is not None
            else {}
        )
        return AIMessage(
            content, tool_calls=valid, invalid_tool_calls=invalid, additional_kwargs=kwargs
        )
    if message.role == "system":
        return SystemMessage(content)
    kwargs = {"lc_source": SUMMARY_SOURCE} if is_summary(message) else {}
    return HumanMessage(content, additional_kwargs=kwargs)
