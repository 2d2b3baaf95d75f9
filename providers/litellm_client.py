"""`LiteLLMClient`: the `ModelClient` for every provider litellm reaches.

It is the innermost handler of the chain: it renders a prepared `ModelRequest` into
OpenAI-shaped messages, sends it through ``litellm.acompletion`` and turns the answer back
into a `ModelResponse` — text, tool calls, ``reasoning_content`` kept verbatim (thinking
models such as DeepSeek's reject a multi-turn request whose assistant turns lack it), usage
with cached tokens, finish reason and latency. Streaming assembles the same response from
text, reasoning and tool-call deltas and hands it over on the last chunk.

Every failure leaves as a typed `ProviderError` (`providers.errors`), including an
overflow that arrives as a *successful* answer (a ``model_context_window_exceeded`` stop
reason, or ``length`` with nothing generated), so `OverflowRetry` sees one error class;
the SDK's exception is always its ``__cause__``. Two checks run before anything is sent,
and fail with ``status=None`` and a message naming the fix: the model name must route to
a provider (``provider/model``), and every string of the request must encode as UTF-8 (a
lone surrogate names the message and the part that holds it).

Rate limits and transient 5xx answers are retried here (`providers.retry`): by default up
to 3 times, waiting what ``retry-after-ms`` / ``retry-after`` asks for, at most 30 s per
wait (``max_retries``, ``max_retry_wait``, ``retry_base_delay``). Each retry is recorded as
a `ProviderRetry`: on a successful response in ``response.retries`` (also `retries_of`), on the error that ends the attempts in ``error.provider_retries``.

litellm is imported on first use, never at module import: it takes seconds to import and,
unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set, fetches its model map from the network.
We set that variable before importing, so nothing leaves the machine but the requests.
litellm's own retries stay off (``num_retries=0``, ``max_retries=0``): a hidden SDK
back-off would retry an overflow, ignore our bounds and leave no record.
litellm runs on asyncio only, so this client does too (not on trio).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from functools import cache
from typing import Any

import anyio
import msgspec

from harness.errors import (
    ConfigurationError,
    ProviderBadRequest,
    ProviderError,
    ProviderUnavailable,
)
from harness.messages import Message, ToolCall, new_id
from harness.request import ModelRequest, ModelResponse, ProviderRetry, Usage
from providers.base import StreamChunk
from providers.errors import overflow_from_finish, provider_errors, unknown_model_error
from providers.retry import RetryDecision, RetryPolicy

__all__ = ["LiteLLMClient", "load_litellm", "retries_of"]


_RESERVED = frozenset({"model", "messages", "tools", "stream", "api_key", "api_base"})
"""Keys the client sets itself; settings may not override them."""


@cache
def load_litellm() -> Any:
    """Import litellm once, offline and quiet, and return the module.

    Sets ``LITELLM_LOCAL_MODEL_COST_MAP`` (use the model map litellm ships instead of
    fetching one) unless the caller chose otherwise, and turns off litellm's
    "Give Feedback / Get Help" banner that it prints on every exception.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


@cache
def _provider_of(
    model: str, api_base: str | None = None, custom_llm_provider: str | None = None
) -> str | None:
    """Return litellm's provider name for ``model`` (``openai``, ``anthropic`` …).

    Returns ``None`` when litellm cannot route the name (no ``provider/`` prefix and not
    a model it knows), which is what ``litellm.acompletion`` would refuse too.
    """
    try:
        routed = load_litellm().get_llm_provider(
            model, custom_llm_provider=custom_llm_provider, api_base=api_base
        )
    except Exception:  # litellm raises a bare BadRequestError for names it cannot route
        return None
    return str(routed[1])


def retries_of(response: ModelResponse) -> tuple[ProviderRetry, ...]:
    """Return the retries the client made before ``response`` came (``()`` for none)."""
    return response.retries


@cache
def _window_of(model: str) -> int | None:
    try:
        info = load_litellm().get_model_info(model)
    except Exception:  # litellm raises a plain Exception for a model it does not know
        return None
    for key in ("max_input_tokens", "max_tokens"):
        value = info.get(key) if isinstance(info, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class LiteLLMClient:
    """A `ModelClient` that sends requests through litellm.

    Args:
        model: the litellm model name, e.g. ``gpt-4o``, ``anthropic/claude-sonnet-4-5`` or
            ``openai/<name>`` for any OpenAI-compatible server (with ``api_base``).
        api_base: the provider's base URL, for self-hosted or compatible servers.
        api_key: the API key; by default litellm reads the provider's usual variable.
        timeout: seconds the HTTP client waits for the provider (passed to litellm).
        max_retries: retries of a rate-limited (429) or transiently failed (500, 502, 503,
            504, 529) request; ``0`` turns retrying off.
        max_retry_wait: the longest wait before one retry, in seconds; a provider asking
            for longer (``retry-after``) is not retried.
        retry_base_delay: the first back-off when the provider gives no ``retry-after``;
            it doubles with each retry (with jitter).
        **settings: provider settings sent with every request (``temperature``,
            ``max_tokens`` …); a request's own settings override them.

    Raises:
        ConfigurationError: when the model name is empty, the timeout or a retry bound is
            out of range, or a setting names a key the client sets itself.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 120,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        retry_base_delay: float = 0.5,
        **settings: Any,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(
                "LiteLLMClient needs a model name, e.g. 'gpt-4o' or 'openai/<name>'"
            )
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ConfigurationError(
                f"timeout must be a positive number of seconds, got {timeout!r}"
            )
        _check_settings(settings, where="LiteLLMClient(**settings)")
        self.model = model
        self.api_base = api_base
        self.timeout = float(timeout)
        self.retry = RetryPolicy(
            max_retries=max_retries, max_wait=max_retry_wait, base_delay=retry_base_delay
        )
        self.settings: dict[str, Any] = {"num_retries": 0, "max_retries": 0, **settings}
        self._api_key = api_key

    def __repr__(self) -> str:
        base = f", api_base={self.api_base!r}" if self.api_base else ""
        return (
            f"LiteLLMClient({self.model!r}{base}, timeout={self.timeout}, "
            f"max_retries={self.retry.max_retries})"
        )

    # ------------------------------------------------------------------ ModelClient
    def context_window(self, model: str | None = None) -> int | None:
        """Return the model's input window from litellm's model map, or ``None`` when unknown.

        Uses ``max_input_tokens``, else ``max_tokens``. Never raises.
        """
        return _window_of(model or self.model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and return the whole response.

        Raises:
            ContextOverflowError: the provider says the input is too long (as an error or
                as a finish reason).
            ProviderBadRequest: with ``status=None``, nothing was sent: the model name
                does not route to a provider, or the request's text cannot be encoded.
            ProviderError: any other provider failure, as a typed subclass; after retries
                its ``provider_retries`` lists them.
        """
        model = request.model or self.model
        kwargs = self._kwargs(request, model, stream=False)
        provider = self._route(model, kwargs)
        _check_encodable(kwargs, provider=provider, model=model)
        litellm = load_litellm()
        started = time.perf_counter()
        retries: list[ProviderRetry] = []
        raw = await self._call(litellm, kwargs, provider, model, retries)
        latency = time.perf_counter() - started
        choice = _first_choice(raw, provider=provider, model=model)
        message = _message_from(getattr(choice, "message", None))
        usage = _usage_from(getattr(raw, "usage", None))
        finish = _str_or_none(getattr(choice, "finish_reason", None))
        _raise_on_overflow(finish, _native_finish(choice), usage, message, provider, model)
        return ModelResponse(
            message=message,
            usage=usage,
            finish_reason=finish,
            model=str(getattr(raw, "model", None) or model),
            latency_s=latency,
            retries=tuple(retries),
        )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Send ``request`` with streaming and yield chunks; the last one carries the response.

        Text and reasoning arrive as they come; each tool call is yielded once complete;
        the last chunk has the usage and the assembled `ModelResponse`.

        Only opening the stream is retried (rate limits, transient 5xx): once chunks have
        been yielded, a failure ends the stream.

        Raises:
            ContextOverflowError: the provider says the input is too long.
            ProviderError: any other provider failure, as a typed subclass (see
                `complete`).
        """
        model = request.model or self.model
        kwargs = self._kwargs(request, model, stream=True)
        provider = self._route(model, kwargs)
        _check_encodable(kwargs, provider=provider, model=model)
        litellm = load_litellm()
        started = time.perf_counter()
        assembly = _Assembly()
        retries: list[ProviderRetry] = []
        raw_stream = await self._call(litellm, kwargs, provider, model, retries)
        try:
            chunks = aiter(raw_stream)
            while True:
                with provider_errors(provider=provider, model=model):
                    try:
                        raw = await anext(chunks)
                    except StopAsyncIteration:
                        break
                for piece in assembly.add(raw):
                    yield piece
        finally:
            # Release the HTTP connection even when the consumer stops early.
            close = getattr(raw_stream, "aclose", None)
            if close is not None:
                await close()
        for call in assembly.flush_calls():
            yield StreamChunk(tool_call=call)
        # litellm maps stop reasons to OpenAI's words in stream chunks too, and keeps the
        # provider's own (e.g. Anthropic's model_context_window_exceeded) only here.
        native = _str_or_none(getattr(raw_stream, "received_finish_reason", None))
        if native and native != assembly.finish:
            assembly.native_finish = assembly.native_finish or native
        latency = time.perf_counter() - started
        message = assembly.message()
        _raise_on_overflow(
            assembly.finish, assembly.native_finish, assembly.usage, message, provider, model
        )
        response = ModelResponse(
            message=message,
            usage=assembly.usage,
            finish_reason=assembly.finish,
            model=assembly.model or model,
            latency_s=latency,
            retries=tuple(retries),
        )
        yield StreamChunk(usage=assembly.usage, response=response)

    # -------------------------------------------------------------------- helpers
    def _route(self, model: str, kwargs: Mapping[str, Any]) -> str:
        """Return the provider serving ``model``; refuse a name litellm cannot route.

        Raises:
            ProviderBadRequest: with ``status=None`` and the ``provider/model`` form.
        """
        custom = kwargs.get("custom_llm_provider")
        provider = _provider_of(model, self.api_base, custom if isinstance(custom, str) else None)
        if provider is None:
            raise unknown_model_error(model)
        return provider

    async def _call(
        self,
        litellm: Any,
        kwargs: dict[str, Any],
        provider: str,
        model: str,
        retries: list[ProviderRetry],
    ) -> Any:
        """Call ``litellm.acompletion``, retrying as `RetryPolicy` decides; record retries.

        Raises:
            ProviderError: the last attempt's error, its message and context extended
                with the retries made (its ``__cause__`` stays the SDK's exception).
        """
        while True:
            try:
                with provider_errors(provider=provider, model=model):
                    return await litellm.acompletion(**kwargs)
            except ProviderError as error:
                decision = self.retry.decide(error, attempt=len(retries) + 1)
                if decision.wait_s is None:
                    if not retries and not decision.reason:
                        raise
                    raise _gave_up(error, retries, decision) from error.__cause__
                retries.append(
                    ProviderRetry(
                        attempt=len(retries) + 1,
                        status=error.status,
                        error=type(error).__name__,
                        wait_s=round(decision.wait_s, 3),
                        retry_after_s=decision.retry_after_s,
                    )
                )
            await anyio.sleep(retries[-1].wait_s)

    def _kwargs(self, request: ModelRequest, model: str, *, stream: bool) -> dict[str, Any]:
        """Return the keyword arguments for ``litellm.acompletion``."""
        if request.settings:
            _check_settings(request.settings, where="ModelRequest.settings")
        kwargs: dict[str, Any] = {
            "timeout": self.timeout,
            **self.settings,
            **(request.settings or {}),
        }
        kwargs["model"] = model
        kwargs["messages"] = [m.to_openai() for m in request.render()]
        kwargs["tools"] = [t.to_openai() for t in request.tools] or None
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        if stream:
            kwargs["stream"] = True
            kwargs.setdefault("stream_options", {"include_usage": True})
        return kwargs


# ----------------------------------------------------------------- retries and checks
def _gave_up(
    error: ProviderError, retries: list[ProviderRetry], decision: RetryDecision
) -> ProviderError:
    """Return ``error`` again, its message and context saying what the retries were."""
    notes: list[str] = []
    if retries:
        waited = sum(r.wait_s for r in retries)
        notes.append(
            f"Gave up after {len(retries)} {'retry' if len(retries) == 1 else 'retries'} "
            f"(waited {waited:.2f} s in all; raise max_retries or max_retry_wait to wait longer)"
        )
    if decision.reason:
        notes.append(decision.reason[:1].upper() + decision.reason[1:])
    context = {
        **error.context,
        "provider_retries": tuple(retries),
        "retry_after": decision.retry_after_s,
    }
    message = error.message.rstrip(".") + ". " + ". ".join(notes) + "."
    return type(error)(message, **context)


def _check_encodable(kwargs: Mapping[str, Any], *, provider: str, model: str) -> None:
    """Refuse a request whose text cannot be encoded as UTF-8, before anything is sent.

    Raises:
        ProviderBadRequest: with ``status=None``, naming the message and part that holds
            the character, and what to do.
    """
    try:
        msgspec.json.encode((kwargs.get("messages"), kwargs.get("tools")))
    except UnicodeEncodeError as exc:
        where, char = _first_unencodable(kwargs)
        who = f"{provider or 'the provider'} (model {model!r})"
        raise ProviderBadRequest(
            f"{who}: {where} holds {char!r}, which cannot be encoded as UTF-8 (a lone "
            "surrogate, usually from bytes decoded with errors='surrogateescape' or a string "
            "cut inside a surrogate pair), so nothing was sent. Replace it before sending, "
            "e.g. text.encode('utf-8', 'replace').decode(); retrying will not help.",
            provider=provider,
            status=None,
            model=model,
            detail=where,
            cause=type(exc).__name__,
            sent=False,
        ) from exc
    except (TypeError, ValueError):
        return  # a value msgspec cannot encode: litellm serialises it its own way


def _first_unencodable(kwargs: Mapping[str, Any]) -> tuple[str, str]:
    """Return where the first string that cannot be encoded is, and the character."""
    messages = kwargs.get("messages") or []
    for index, message in enumerate(messages):
        for path, text in _strings(message, ""):
            char = _bad_char(text)
            if char is not None:
                role = message.get("role") if isinstance(message, Mapping) else None
                return f"message {index} of {len(messages)} (role {role!r}) at {path}", char
    for index, tool in enumerate(kwargs.get("tools") or []):
        for path, text in _strings(tool, ""):
            char = _bad_char(text)
            if char is not None:
                return f"tool schema {index} at {path}", char
    return "the request", "?"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Yield ``(path, string)`` for every key and string value in a JSON-like value."""
    if isinstance(value, str):
        yield path or "content", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if isinstance(key, str):
                yield f"{sub} (the key)", key
            yield from _strings(item, sub)
    elif isinstance(value, list | tuple):
        for position, item in enumerate(value):
            yield from _strings(item, f"{path}[{position}]")


def _bad_char(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


# ------------------------------------------------------------------------ conversion
def _check_settings(settings: Mapping[str, Any], *, where: str) -> None:
    clash = sorted(_RESERVED & set(settings))
    if clash:
        raise ConfigurationError(
            f"{where} may not set {', '.join(clash)}: the client sets these itself "
            "(give api_base/api_key to LiteLLMClient, tools to the request)"
        )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _get(obj: Any, key: str) -> Any:
    """Read ``key`` from a litellm object or a plain dict."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _first_choice(raw: Any, *, provider: str, model: str) -> Any:
    choices = _get(raw, "choices")
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


def _native_finish(choice: Any) -> str | None:
    fields = _get(choice, "provider_specific_fields")
    return _str_or_none(_get(fields, "native_finish_reason")) if fields else None


def _usage_from(raw: Any) -> Usage | None:
    if raw is None:
        return None
    prompt, completion = _int(_get(raw, "prompt_tokens")), _int(_get(raw, "completion_tokens"))
    details = _get(raw, "prompt_tokens_details")
    cached = _int(_get(details, "cached_tokens")) if details is not None else 0
    if not cached:
        cached = _int(_get(raw, "cache_read_input_tokens"))  # Anthropic's name, when unmapped
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=_int(_get(raw, "total_tokens")) or prompt + completion,
        cached_tokens=cached,
    )


def _tool_call_from(raw: Any) -> ToolCall:
    function = _get(raw, "function")
    arguments = _get(function, "arguments")
    return ToolCall(
        id=_str_or_none(_get(raw, "id")) or f"call_{new_id()}",
        name=str(_get(function, "name") or ""),
        arguments=arguments if isinstance(arguments, str) and arguments else "{}",
        type=_str_or_none(_get(raw, "type")) or "function",
    )


def _message_from(raw: Any) -> Message:
    """Build our assistant `Message` from litellm's response message."""
    content = _get(raw, "content")
    if content is not None and not isinstance(content, str):
        content = Message.from_openai({"role": "assistant", "content": content}).content
    extra: dict[str, Any] = {}
    thinking_blocks = _get(raw, "thinking_blocks")
    if thinking_blocks:
        # Anthropic-style signed thinking must be sent back unchanged with tool results.
        extra["thinking_blocks"] = list(thinking_blocks)
    return Message(
        role="assistant",
        content=content,
        tool_calls=tuple(_tool_call_from(c) for c in _get(raw, "tool_calls") or ()),
        reasoning_content=_str_or_none(_get(raw, "reasoning_content")),
        extra=extra or None,
    )


def _raise_on_overflow(
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


class _PartialCall:
    """A tool call being assembled from stream deltas."""

    __slots__ = ("arguments", "id", "name", "type")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.type = "function"
        self.arguments: list[str] = []

    def done(self) -> ToolCall:
        return ToolCall(
            id=self.id or f"call_{new_id()}",
            name=self.name,
            arguments="".join(self.arguments) or "{}",
            type=self.type,
        )


class _Assembly:
    """Collects stream deltas into the final assistant message, usage and finish reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.emitted: dict[int, ToolCall] = {}
        self.thinking_blocks: list[dict[str, Any]] = []
        self.thinking_text: list[str] = []
        self.finish: str | None = None
        self.native_finish: str | None = None
        self.usage: Usage | None = None
        self.model: str = ""

    def add(self, raw: Any) -> list[StreamChunk]:
        """Take one litellm chunk; return the stream chunks it produces."""
        out: list[StreamChunk] = []
        self.model = self.model or str(_get(raw, "model") or "")
        usage = _get(raw, "usage")
        if usage is not None:
            self.usage = _usage_from(usage)
        for choice in _get(raw, "choices") or ():
            if _int(_get(choice, "index")) != 0:
                continue  # n > 1 is not supported: the chain works with one answer
            delta = _get(choice, "delta")
            text = _str_or_none(_get(delta, "content"))
            reasoning = _str_or_none(_get(delta, "reasoning_content"))
            if text or reasoning:
                self.text.append(text or "")
                self.reasoning.append(reasoning or "")
                out.append(StreamChunk(text=text or "", reasoning=reasoning or ""))
            for block in _get(delta, "thinking_blocks") or ():
                self._add_thinking(block)
            for call_delta in _get(delta, "tool_calls") or ():
                index = _int(_get(call_delta, "index"))
                for finished in self._finish_before(index):
                    out.append(StreamChunk(tool_call=finished))
                self._merge(index, call_delta)
            finish = _str_or_none(_get(choice, "finish_reason"))
            if finish:
                self.finish = finish
                self.native_finish = _native_finish(choice) or self.native_finish
        return out

    def _add_thinking(self, fragment: Any) -> None:
        """Join streamed thinking fragments into whole blocks, as litellm's own builder does.

        Text fragments accumulate until the fragment carrying the signature closes the
        block; a redacted block arrives whole. Only signed blocks are kept: the provider
        rejects a thinking block it did not sign.
        """
        kind = _get(fragment, "type")
        if kind == "redacted_thinking":
            self.thinking_text.clear()
            if _get(fragment, "data"):
                self.thinking_blocks.append(
                    {"type": "redacted_thinking", "data": _get(fragment, "data")}
                )
            return
        text = _get(fragment, "thinking")
        if isinstance(text, str) and text:
            self.thinking_text.append(text)
        signature = _get(fragment, "signature")
        if isinstance(signature, str) and signature:
            thinking = "".join(self.thinking_text)
            self.thinking_blocks.append(
                {"type": "thinking", "thinking": thinking, "signature": signature}
            )
            self.thinking_text.clear()

    def _merge(self, index: int, delta: Any) -> None:
        call = self.calls.setdefault(index, _PartialCall())
        call.id = call.id or (_str_or_none(_get(delta, "id")) or "")
        call.type = _str_or_none(_get(delta, "type")) or call.type
        function = _get(delta, "function")
        name = _str_or_none(_get(function, "name"))
        if name and not call.name:
            call.name = name
        arguments = _get(function, "arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)

    def _finish_before(self, index: int) -> list[ToolCall]:
        """Calls with a lower index are complete once a later one starts."""
        done = [i for i in sorted(self.calls) if i < index and i not in self.emitted]
        for i in done:
            self.emitted[i] = self.calls[i].done()
        return [self.emitted[i] for i in done]

    def flush_calls(self) -> list[ToolCall]:
        """Return the calls not yet yielded (the stream has ended)."""
        return self._finish_before(max(self.calls, default=-1) + 1)

    def message(self) -> Message:
        """Return the assembled assistant message."""
        calls = tuple(
            self.emitted[i] if i in self.emitted else self.calls[i].done()
            for i in sorted(self.calls)
        )
        text = "".join(self.text)
        reasoning = "".join(self.reasoning)
        return Message(
            role="assistant",
            content=text or None,
            tool_calls=calls,
            reasoning_content=reasoning or None,
            extra={"thinking_blocks": self.thinking_blocks} if self.thinking_blocks else None,
        )
