"""`ResponsesClient`: a `LiteLLMClient` that speaks OpenAI's Responses API (``/v1/responses``).

What OpenAI's Responses API offers for long sessions (looked up in OpenAI's compaction and
context-management guides and in the litellm 1.110 source this project locks):

- **Server-side compaction.** ``context_management=[{"type": "compaction",
  "compact_threshold": N}]`` on ``POST /responses``: once the rendered input passes ``N``
  tokens (at least 1,000), the server compacts it before the model reads it and returns an
  opaque, encrypted ``{"type": "compaction", "id": …, "encrypted_content": …}`` item among the
  answer's ``output`` items, before the reply. On the next request that item is sent in
  ``input`` in place of everything it stands for (the guide: items before the newest
  compaction item may be dropped), followed by the items that came after it. Only the
  provider that made an item can read it; with ``store=false`` it works statelessly.
- **Standalone compaction.** ``POST /responses/compact`` with ``model`` and ``input``
  returns a ``response.compaction`` object whose ``output`` holds the compaction item (and
  any user messages kept verbatim) — the same item, asked for explicitly.
- **What litellm passes.** ``litellm.aresponses`` takes ``context_management`` (typed
  ``ContextManagementEntry``) and sends it unchanged to an ``openai/…`` model, with
  ``api_base`` too; the answer is a ``ResponsesAPIResponse`` whose ``output`` holds a
  ``ResponseCompactionItem``, function calls and messages, and whose ``usage`` has
  ``input_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens`` and
  ``output_tokens_details.reasoning_tokens``. Compaction items given back in ``input`` are
  forwarded as they are. ``litellm.acompact_responses`` calls ``/responses/compact``.
  (For providers litellm bridges to chat completions it drops the field.)

This client renders our `ModelRequest` as Responses input items (System → ``instructions``;
user and assistant text; ``function_call`` and ``function_call_output`` items for tool calls
and results; a message carrying a Responses item in ``extra["responses_item"]`` — a
compaction item — as that item), sends it through ``litellm.aresponses`` with the same
checks, retries and error mapping as `LiteLLMClient`, and turns the answer back into a
`ModelResponse`. A compaction item in the answer comes back in `ModelResponse.provider_edits`
(``{"type": "compaction", "id", "encrypted_content"}``), where `ProviderCompaction` picks it
up. Streaming is not incremental here: `stream` sends the request whole and yields the text
and the response in one go.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Final

from harness.errors import ProviderUnavailable
from harness.messages import Message, ToolCall, new_id
from harness.request import ModelRequest, ModelResponse, Usage
from harness.types import StreamChunk
from providers._response import as_int, field, raise_on_overflow, str_or_none
from providers.litellm_client import LiteLLMClient, PreparedCall, _report_usage, priced

__all__ = ["RESPONSES_ITEM", "ResponsesClient", "responses_input"]

RESPONSES_ITEM: Final = "responses_item"
"""The key in `Message.extra` of a message that is sent as this Responses input item."""

_NATIVE: Final = frozenset({"openai", "azure"})
"""litellm providers whose Responses endpoint compacts on the server."""


class ResponsesClient(LiteLLMClient):
    """A `LiteLLMClient` that sends requests to the Responses API (``litellm.aresponses``).

    Takes the same arguments as `LiteLLMClient`. ``max_tokens`` in settings is sent as
    ``max_output_tokens``, ``reasoning_effort`` as ``reasoning.effort``; every other setting is passed to ``litellm.aresponses`` as is
    (``context_management``, ``store``, ``reasoning`` …). By default ``store=False``: the
    request carries the whole input, nothing is kept on OpenAI's side.
    """

    def __repr__(self) -> str:
        return super().__repr__().replace("LiteLLMClient(", "ResponsesClient(", 1)

    def native_compaction(self, model: str | None = None) -> bool:
        """Return whether the server compacts requests for ``model`` (`harness.types.CompactsNatively`)."""
        return self.provider_name(model or self.model) in _NATIVE

    def prepare(self, request: ModelRequest, *, stream: bool = False) -> PreparedCall:
        """Return ``request`` as a checked ``litellm.aresponses`` call; nothing is sent.

        Raises:
            ProviderBadRequest: with ``status=None`` (see `LiteLLMClient.prepare`).
            ConfigurationError: a setting names a key the client sets itself.
        """
        prepared = super().prepare(request, stream=False)
        kwargs = prepared.kwargs
        instructions, items = responses_input(kwargs.pop("messages"))
        kwargs["input"] = items
        if instructions:
            kwargs["instructions"] = instructions
        tools = kwargs.pop("tools", None)
        if tools:
            kwargs["tools"] = [_tool(t) for t in tools]
        for name in ("max_tokens", "max_completion_tokens"):
            if name in kwargs:
                kwargs.setdefault("max_output_tokens", kwargs.pop(name))
        effort = kwargs.pop("reasoning_effort", None)
        if effort is not None:
            kwargs.setdefault("reasoning", {"effort": effort})
        kwargs.setdefault("store", False)
        return prepared

    async def call_litellm(self, litellm: Any, kwargs: dict[str, Any]) -> Any:
        """Make one attempt through ``litellm.aresponses``."""
        return await litellm.aresponses(**kwargs)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to the Responses API and return the whole response.

        Raises:
            ContextOverflowError: the provider says the input is too long.
            ProviderError: any other provider failure, as a typed subclass.
        """
        prepared = self.prepare(request)
        started = time.perf_counter()
        raw = await self.send_prepared(prepared)
        return responses_answer(raw, prepared, latency_s=time.perf_counter() - started)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Send ``request`` whole and yield its text, then the response (not incremental)."""
        response = await self.complete(request)
        if response.message.text:
            yield StreamChunk(text=response.message.text)
        for call in response.message.tool_calls:
            yield StreamChunk(tool_call=call)
        yield StreamChunk(usage=response.usage, response=response)


def responses_input(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Return chat-completions ``messages`` as Responses ``(instructions, input items)``."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        item = message.get(RESPONSES_ITEM)
        if isinstance(item, Mapping):
            items.append(dict(item))
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "system":
            instructions.append(_text(content))
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id") or ""),
                    "output": _text(content),
                }
            )
        elif role == "assistant":
            if content:
                items.append({"role": "assistant", "content": _text(content)})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": str(call.get("id") or ""),
                        "name": str(function.get("name") or ""),
                        "arguments": str(function.get("arguments") or "{}"),
                    }
                )
        else:
            items.append({"role": str(role or "user"), "content": _user_content(content)})
    return "\n\n".join(t for t in instructions if t), items


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "") for p in content if isinstance(p, Mapping) and "text" in p
        )
    return str(content)


def _user_content(content: Any) -> Any:
    """A user message's content: a string, or ``input_text`` / ``input_image`` parts."""
    if not isinstance(content, list):
        return _text(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            parts.append({"type": "input_image", "image_url": str(url or "")})
        elif "text" in part:
            parts.append({"type": "input_text", "text": str(part.get("text") or "")})
    return parts


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-completions tool dict as a Responses ``function`` tool."""
    function = tool.get("function")
    if not isinstance(function, Mapping):
        return dict(tool)
    out: dict[str, Any] = {"type": "function", "name": function.get("name")}
    if function.get("description"):
        out["description"] = function["description"]
    out["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    return out


def _plain(item: Any) -> dict[str, Any]:
    """An output item (a pydantic object or a dict) as a plain dict."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    return dict(dump(exclude_none=True)) if callable(dump) else {}


def responses_usage(raw: Any) -> Usage | None:
    """Return the Responses API's usage as our `Usage` (``None`` when not reported)."""
    if raw is None:
        return None
    prompt, completion = as_int(field(raw, "input_tokens")), as_int(field(raw, "output_tokens"))
    details = field(raw, "input_tokens_details")
    cached = field(details, "cached_tokens") if details is not None else None
    written = field(details, "cache_write_tokens") if details is not None else None
    output_details = field(raw, "output_tokens_details")
    reasoning = field(output_details, "reasoning_tokens") if output_details is not None else None
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=as_int(field(raw, "total_tokens")) or prompt + completion,
        cached_tokens=as_int(cached),
        cache_write_tokens=as_int(written),
        reasoning_tokens=as_int(reasoning),
        cache_reported=cached is not None,
    )


def responses_answer(raw: Any, prepared: PreparedCall, *, latency_s: float) -> ModelResponse:
    """Return our `ModelResponse` for a Responses API answer ``raw`` to ``prepared``.

    Raises:
        ContextOverflowError: the answer is an overflow in disguise.
        ProviderUnavailable: the answer has no output at all.
    """
    provider, model = prepared.provider, prepared.model
    output = field(raw, "output")
    if output is None:
        raise ProviderUnavailable(
            f"{provider or 'the provider'} (model {model!r}) answered without output items; "
            "retry, and check that api_base points at a Responses endpoint",
            provider=provider,
            status=200,
            model=model,
        )
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    edits: list[dict[str, Any]] = []
    for raw_item in output:
        item = _plain(raw_item)
        kind = item.get("type")
        if kind == "message":
            texts.extend(
                str(p.get("text") or "")
                for p in item.get("content") or ()
                if isinstance(p, Mapping) and p.get("type") == "output_text"
            )
        elif kind == "function_call":
            calls.append(
                ToolCall(
                    id=str_or_none(item.get("call_id")) or f"call_{new_id()}",
                    name=str(item.get("name") or ""),
                    arguments=str_or_none(item.get("arguments")) or "{}",
                )
            )
        elif kind == "reasoning":
            reasoning.extend(
                str(p.get("text") or "")
                for p in item.get("summary") or ()
                if isinstance(p, Mapping)
            )
        elif kind == "compaction":
            edits.append(
                {
                    "type": "compaction",
                    "id": str(item.get("id") or ""),
                    "encrypted_content": str(item.get("encrypted_content") or ""),
                }
            )
    message = Message(
        role="assistant",
        content="".join(texts) or None,
        tool_calls=tuple(calls),
        reasoning_content="\n".join(reasoning) or None,
    )
    usage = responses_usage(field(raw, "usage"))
    _report_usage(prepared, usage)
    incomplete = field(field(raw, "incomplete_details"), "reason")
    if field(raw, "status") == "incomplete" and incomplete == "max_output_tokens":
        finish = "length"
    else:
        finish = "tool_calls" if calls else "stop"
    raise_on_overflow(finish, str_or_none(incomplete), usage, message, provider, model)
    return ModelResponse(
        message=message,
        usage=priced(usage, model, provider),
        finish_reason=finish,
        model=str(field(raw, "model") or model),
        latency_s=latency_s,
        retries=tuple(prepared.retries),
        provider_edits=tuple(edits),
    )
