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
from collections.abc import AsyncGenerator, Mapping
from functools import cache
from typing import Any

import anyio
import msgspec

from harness.errors import (
    ConfigurationError,
    ProviderError,
)
from harness.request import ModelRequest, ModelResponse, ProviderRetry
from harness.types import StreamChunk
from providers._encoding import check_encodable, check_settings
from providers._response import (
    first_choice,
    message_from,
    native_finish,
    raise_on_overflow,
    str_or_none,
    usage_from,
)
from providers._stream import Assembly
from providers.errors import provider_errors, unknown_model_error
from providers.retry import RetryDecision, RetryPolicy

__all__ = ["LiteLLMClient", "PreparedCall", "load_litellm", "response_from", "retries_of"]


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


@cache
def _max_output_of(model: str) -> int | None:
    try:
        info = load_litellm().get_model_info(model)
    except Exception:  # litellm raises a plain Exception for a model it does not know
        return None
    value = info.get("max_output_tokens") if isinstance(info, Mapping) else None
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
        check_settings(settings, where="LiteLLMClient(**settings)")
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

    def max_output_tokens(self, model: str | None = None) -> int | None:
        """Return the most output tokens the model answers with (litellm's model map), or ``None``.

        Uses ``max_output_tokens`` (`harness.types.OutputLimited`). Never raises.
        """
        return _max_output_of(model or self.model)

    def provider_name(self, model: str) -> str | None:
        """Return litellm's name for the provider serving ``model`` (for traces), or ``None``."""
        return _provider_of(model, self.api_base)

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
        prepared = self.prepare(request, stream=False)
        started = time.perf_counter()
        raw = await self.send_prepared(prepared)
        return response_from(raw, prepared, latency_s=time.perf_counter() - started)

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
        prepared = self.prepare(request, stream=True)
        provider, model = prepared.provider, prepared.model
        started = time.perf_counter()
        assembly = Assembly()
        raw_stream = await self.send_prepared(prepared)
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
        native = str_or_none(getattr(raw_stream, "received_finish_reason", None))
        if native and native != assembly.finish:
            assembly.native_finish = assembly.native_finish or native
        latency = time.perf_counter() - started
        message = assembly.message()
        raise_on_overflow(
            assembly.finish, assembly.native_finish, assembly.usage, message, provider, model
        )
        response = ModelResponse(
            message=message,
            usage=assembly.usage,
            finish_reason=assembly.finish,
            model=assembly.model or model,
            latency_s=latency,
            retries=tuple(prepared.retries),
        )
        yield StreamChunk(usage=assembly.usage, response=response)

    # ------------------------------------------------------- the call, step by step
    def prepare(self, request: ModelRequest, *, stream: bool = False) -> PreparedCall:
        """Return ``request`` as a checked, routed litellm call; nothing is sent.

        `complete` and `stream` are `prepare` + `send_prepared` (+ `response_from`);
        a subclass that needs litellm's own answer object (the drop-in ``acompletion``)
        uses the same three steps.

        Raises:
            ProviderBadRequest: with ``status=None``: the model name does not route to a
                provider, or a string of the request does not encode as UTF-8.
            ConfigurationError: a setting names a key the client sets itself.
        """
        model = request.model or self.model
        if request.settings:
            check_settings(request.settings, where="ModelRequest.settings")
        kwargs: dict[str, Any] = {
            "timeout": self.timeout,
            **self.settings,
            **(request.settings or {}),
        }
        kwargs["model"] = model
        kwargs["messages"] = [m.to_openai() for m in request.render()]
        kwargs["tools"] = self.tool_dicts(request) or None
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        if stream:
            kwargs["stream"] = True
            kwargs.setdefault("stream_options", {"include_usage": True})
        custom = kwargs.get("custom_llm_provider")
        provider = _provider_of(model, self.api_base, custom if isinstance(custom, str) else None)
        if provider is None:
            raise unknown_model_error(model)
        check_encodable(kwargs, provider=provider, model=model)
        return PreparedCall(kwargs=kwargs, provider=provider, model=model)

    def tool_dicts(self, request: ModelRequest) -> list[dict[str, Any]]:
        """Return the OpenAI tool dicts to send for ``request`` (a subclass may send its own)."""
        return [t.to_openai() for t in request.tools]

    async def send_prepared(self, prepared: PreparedCall) -> Any:
        """Call ``litellm.acompletion`` with ``prepared``, retrying as `RetryPolicy` decides.

        Returns litellm's answer (its stream, opened, when ``prepared`` streams); each
        retry made is appended to ``prepared.retries``.

        Raises:
            ContextOverflowError: the provider says the input is too long.
            ProviderError: the last attempt's error, as a typed subclass, its message and
                context extended with the retries made (its ``__cause__`` stays the SDK's).
        """
        litellm = load_litellm()
        retries = prepared.retries
        while True:
            try:
                with provider_errors(provider=prepared.provider, model=prepared.model):
                    return await litellm.acompletion(**prepared.kwargs)
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


class PreparedCall(msgspec.Struct, kw_only=True):
    """One request ready for ``litellm.acompletion`` (`LiteLLMClient.prepare`)."""

    kwargs: dict[str, Any]
    """The keyword arguments for ``litellm.acompletion`` (a caller may adjust them)."""
    provider: str
    """litellm's provider name for the model (``openai``, ``anthropic`` …)."""
    model: str
    """The model name sent."""
    retries: list[ProviderRetry] = msgspec.field(default_factory=list)
    """The retries `LiteLLMClient.send_prepared` made, in order."""


def response_from(raw: Any, prepared: PreparedCall, *, latency_s: float) -> ModelResponse:
    """Return our `ModelResponse` for litellm's (non-streamed) answer ``raw`` to ``prepared``.

    Raises:
        ContextOverflowError: the answer is an overflow in disguise (a context-window
            stop reason, or ``length`` with nothing generated).
        ProviderUnavailable: the answer has no choice.
    """
    provider, model = prepared.provider, prepared.model
    choice = first_choice(raw, provider=provider, model=model)
    message = message_from(getattr(choice, "message", None))
    usage = usage_from(getattr(raw, "usage", None))
    finish = str_or_none(getattr(choice, "finish_reason", None))
    raise_on_overflow(finish, native_finish(choice), usage, message, provider, model)
    return ModelResponse(
        message=message,
        usage=usage,
        finish_reason=finish,
        model=str(getattr(raw, "model", None) or model),
        latency_s=latency_s,
        retries=tuple(prepared.retries),
    )


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
