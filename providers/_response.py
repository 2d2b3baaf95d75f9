"""Reading litellm's answer objects: choices, usage, tool calls and messages.

litellm returns pydantic objects or dicts depending on the provider and version; these
helpers read either shape and turn them into our values. An overflow that arrives as a
*successful* answer (a ``model_context_window_exceeded`` stop reason, or ``length`` with
nothing generated) is raised here as the `ContextOverflowError` it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.errors import ProviderUnavailable
from harness.messages import Message, ToolCall, new_id
from harness.request import Usage
from providers.errors import overflow_from_finish


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def field(obj: Any, key: str) -> Any:
    """Read ``key`` from a litellm object or a plain dict."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def first_choice(raw: Any, *, provider: str, model: str) -> Any:
    choices = field(raw, "choices")
    if not choices:
        # A 200 without choices is a broken answer, not a reply we can use.
        raise ProviderUnavailable(
            f"{provider or 'the provider'} (model {model!r}) answered without any choice; "
            "retry, and check that api_base points at a chat-completions endpoint",
            provider=provider,
            status=200,
            model=model,
        )
    return choices[0]


def native_finish(choice: Any) -> str | None:
    fields = field(choice, "provider_specific_fields")
    return str_or_none(field(fields, "native_finish_reason")) if fields else None


def usage_from(raw: Any) -> Usage | None:
    """Return the usage litellm reported (OpenAI's fields, Anthropic's where unmapped)."""
    if raw is None:
        return None
    prompt, completion = (
        as_int(field(raw, "prompt_tokens")),
        as_int(field(raw, "completion_tokens")),
    )
    details = field(raw, "prompt_tokens_details")
    openai_cached = field(details, "cached_tokens") if details is not None else None
    anthropic_cached = field(raw, "cache_read_input_tokens")  # Anthropic's name, when unmapped
    cached = as_int(openai_cached) or as_int(anthropic_cached)
    reported = openai_cached is not None or anthropic_cached is not None
    written = as_int(field(raw, "cache_creation_input_tokens"))
    if not written and details is not None:
        written = as_int(field(details, "cache_creation_tokens"))
    output_details = field(raw, "completion_tokens_details")
    reasoning = as_int(field(output_details, "reasoning_tokens")) if output_details else 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=as_int(field(raw, "total_tokens")) or prompt + completion,
        cached_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
        cache_reported=reported,
    )


def tool_call_from(raw: Any) -> ToolCall:
    function = field(raw, "function")
    arguments = field(function, "arguments")
    return ToolCall(
        id=str_or_none(field(raw, "id")) or f"call_{new_id()}",
        name=str(field(function, "name") or ""),
        arguments=arguments if isinstance(arguments, str) and arguments else "{}",
        type=str_or_none(field(raw, "type")) or "function",
    )


def message_from(raw: Any) -> Message:
    """Build our assistant `Message` from litellm's response message."""
    content = field(raw, "content")
    if content is not None and not isinstance(content, str):
        content = Message.from_openai({"role": "assistant", "content": content}).content
    extra: dict[str, Any] = {}
    thinking_blocks = field(raw, "thinking_blocks")
    if thinking_blocks:
        # Anthropic-style signed thinking must be sent back unchanged with tool results.
        extra["thinking_blocks"] = list(thinking_blocks)
    blocks = compaction_blocks(raw)
    if blocks:
        # Anthropic's compaction blocks go back at the start of this turn (litellm puts them
        # there), and the server reads nothing before them from then on.
        extra["provider_specific_fields"] = {"compaction_blocks": blocks}
    return Message(
        role="assistant",
        content=content,
        tool_calls=tuple(tool_call_from(c) for c in field(raw, "tool_calls") or ()),
        reasoning_content=str_or_none(field(raw, "reasoning_content")),
        extra=extra or None,
    )


def provider_edits(raw: Any) -> tuple[dict[str, Any], ...]:
    """Return the context edits the provider applied to the request, as it reported them.

    Anthropic's ``context_management.applied_edits``, which litellm passes in the message's
    ``provider_specific_fields``, and one ``{"type": "compaction", "summary_chars"}`` per
    compaction block the answer starts with.
    """
    fields = field(raw, "provider_specific_fields")
    managed = fields.get("context_management") if isinstance(fields, dict) else None
    edits = managed.get("applied_edits") if isinstance(managed, dict) else None
    applied = [dict(e) for e in edits if isinstance(e, dict)] if isinstance(edits, list) else []
    applied += [
        {"type": "compaction", "summary_chars": len(str(block.get("content") or ""))}
        for block in compaction_blocks(raw)
    ]
    return tuple(applied)


def compaction_blocks(raw: Any) -> list[dict[str, Any]]:
    """Return the compaction blocks of an Anthropic answer (``compact_20260112``).

    litellm passes them in the message's ``provider_specific_fields``.
    """
    fields = field(raw, "provider_specific_fields")
    blocks = fields.get("compaction_blocks") if isinstance(fields, dict) else None
    if not isinstance(blocks, list):
        return []
    return [dict(b) for b in blocks if isinstance(b, Mapping) and b.get("type") == "compaction"]


def raise_on_overflow(
    finish: str | None,
    native: str | None,
    usage: Usage | None,
    message: Message,
    provider: str,
    model: str,
) -> None:
    error = overflow_from_finish(
        finish,
        native_reason=native,
        completion_tokens=usage.completion_tokens if usage is not None else None,
        produced_output=bool(message.text or message.tool_calls or message.reasoning_content),
        provider=provider,
        model=model,
    )
    if error is not None:
        raise error
