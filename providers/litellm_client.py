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

from harness.accounting import observe_usage
from harness.errors import (
    ConfigurationError,
    ContextOverflowError,
    ProviderError,
)
from harness.policy import requested_output
from harness.request import ModelRequest, ModelResponse, ProviderRetry, Usage
from harness.types import StreamChunk, TokenPrices
from providers._encoding import check_encodable, check_settings
from providers._response import (
    first_choice,
    message_from,
    native_finish,
    provider_edits,
    raise_on_overflow,
    str_or_none,
    usage_from,
)
from providers._stream import Assembly
from providers.cache_breakpoints import place_breakpoints, wants_breakpoints
from providers.errors import provider_errors, suspected_overflow, unknown_model_error
from providers.retry import RetryDecision, RetryPolicy
from providers.windows import (
    DISCOVERY_TIMEOUT_S,
    KnownWindow,
    discover_window,
    forget_window,
    known_window,
    remember_window,
)

__all__ = ["LiteLLMClient", "PreparedCall", "load_litellm", "response_from", "retries_of"]


@cache
def load_litellm() -> Any:
    """Import litellm once, offline and quiet, and return the module.

    Sets ``LITELLM_LOCAL_MODEL_COST_MAP`` (use the model map litellm ships instead of
    fetching one), ``LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS`` and ``LITELLM_OFFLINE_MODE``
    (the bundled beta-header table and catalogs, not a fetch from GitHub on the first
    Anthropic request) unless the caller chose otherwise, and turns off litellm's
    "Give Feedback / Get Help" banner that it prints on every exception.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "True")
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


def _served_name(model: str, api_base: str | None) -> str:
    """The name the server knows ``model`` by: without litellm's ``provider/`` prefix."""
    try:
        routed = load_litellm().get_llm_provider(model, api_base=api_base)
    except Exception:  # litellm raises a bare BadRequestError for names it cannot route
        return model.split("/", 1)[-1]
    return str(routed[0])


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


@cache
def token_prices(
    model: str, provider: str | None = None, *, cached: bool = True
) -> TokenPrices | None:
    """Return ``model``'s prices from litellm's price table, or ``None`` when it lacks them.

    ``cached``: whether requests are served from the provider's prompt cache at all (a
    provider that caches only marked prefixes, sent without marks, is not); when not, or
    when the table has no cached price, cached input and cache writes cost the input price.
    A model without an input or output price (or priced at zero: a local model) is unknown.
    """
    litellm = load_litellm()
    try:
        info = litellm.get_model_info(model, custom_llm_provider=provider)
    except Exception:  # litellm raises a plain Exception for a model it does not know
        return None

    def price(key: str) -> float | None:
        value = info.get(key) if isinstance(info, Mapping) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value) if math.isfinite(value) else None
        return None

    fresh, output = price("input_cost_per_token"), price("output_cost_per_token")
    if fresh is None or output is None:
        return None
    read = price("cache_read_input_token_cost") if cached else None
    write = price("cache_creation_input_token_cost") if read is not None else None
    return TokenPrices(
        input=fresh,
        cached_input=read if read is not None else fresh,
        cache_write=write if write is not None else fresh,
        output=output,
    )


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
        context_window: the model's window in tokens, when you know it better than
            litellm's map and the server (``None``: find it, see `providers.windows`).
        discover_window: ask the server at ``api_base`` for the window of a model
            litellm's map does not list (vLLM, llama.cpp, Ollama, LM Studio metadata);
            once per (api_base, model) and process, off the event loop.
        discovery_timeout: seconds each metadata request may take.
        cache_breakpoints: mark the ends of the request's stable pieces with
            ``cache_control`` (`providers.cache_breakpoints`): ``None`` (the default) where
            the provider caches only marked prefixes (Anthropic, and Claude on Bedrock and
            Vertex AI), ``True`` always (litellm passes the marks to Gemini's context
            caching too), ``False`` never. The caller's own marks are always kept.
        **settings: provider settings sent with every request (``temperature``,
            ``max_tokens`` …); a request's own settings override them.

    Raises:
        ConfigurationError: when the model name is empty, the timeout or a retry bound is
            out of range, the window is not a positive int, or a setting names a key the
            client sets itself.
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
        context_window: int | None = None,
        discover_window: bool = True,
        discovery_timeout: float = DISCOVERY_TIMEOUT_S,
        cache_breakpoints: bool | None = None,
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
        if context_window is not None and (
            not isinstance(context_window, int)
            or isinstance(context_window, bool)
            or context_window <= 0
        ):
            raise ConfigurationError(
                f"context_window must be a positive int of tokens or None, got {context_window!r}"
            )
        if not (
            isinstance(discovery_timeout, int | float)
            and math.isfinite(discovery_timeout)
            and discovery_timeout > 0
        ):
            raise ConfigurationError(
                f"discovery_timeout must be a positive number of seconds, got {discovery_timeout!r}"
            )
        check_settings(settings, where="LiteLLMClient(**settings)")
        if cache_breakpoints is not None and not isinstance(cache_breakpoints, bool):
            raise ConfigurationError(
                f"cache_breakpoints must be True, False or None (auto), got {cache_breakpoints!r}"
            )
        self.cache_breakpoints = cache_breakpoints
        self.model = model
        self.window = context_window
        """The window given to the constructor (``None``: litellm's map or the server's)."""
        self.discover = bool(discover_window)
        self.discovery_timeout = float(discovery_timeout)
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
        """Return the model's window in tokens, or ``None`` when unknown; never does I/O.

        In order: the ``context_window`` given to the constructor (for its model); a window
        an overflow error of this server stated; what the server's metadata said
        (`discover_context_window`); litellm's model map (``max_input_tokens``, else
        ``max_tokens``). Never raises.
        """
        found = self.window_info(model)
        return found.tokens if found is not None else None

    def window_info(self, model: str | None = None) -> KnownWindow | None:
        """Return the window `context_window` reports and where it came from, or ``None``."""
        name = model or self.model
        if self.window is not None and name == self.model:
            return KnownWindow(tokens=self.window, source="configured")
        learned = known_window(name, self.api_base)
        if learned is not None:
            return learned
        mapped = _window_of(name)
        return KnownWindow(tokens=mapped, source="litellm") if mapped is not None else None

    async def discover_context_window(self, model: str | None = None) -> int | None:
        """Return the model's window, asking the server's metadata when nothing else knows it.

        The server at ``api_base`` is asked once per (api_base, model) and process, in a
        worker thread with ``discovery_timeout`` per request (`providers.windows`); a
        client without ``api_base`` (a hosted provider) or with ``discover_window=False``
        asks nothing. Never raises.
        """
        name = model or self.model
        window = self.context_window(name)
        if window is not None or not self.discover or not self.api_base:
            return window
        found = await discover_window(
            name,
            self.api_base,
            served_name=_served_name(name, self.api_base),
            api_key=self._api_key,
            request_timeout_s=self.discovery_timeout,
        )
        return found.tokens if found is not None else None

    def max_output_tokens(self, model: str | None = None) -> int | None:
        """Return the most output tokens the model answers with (litellm's model map), or ``None``.

        Uses ``max_output_tokens`` (`harness.types.OutputLimited`). Never raises.
        """
        return _max_output_of(model or self.model)

    def token_prices(self, model: str | None = None) -> TokenPrices | None:
        """Return the model's prices as this client's requests are billed (litellm's table).

        For a provider that caches only marked prefixes (`providers.cache_breakpoints`),
        cached input is priced as such only when this client places marks
        (``cache_breakpoints`` on, or left to the default where the provider takes them).
        ``None`` for a model the table does not price (`harness.types.KnowsPrices`).
        """
        name = model or self.model
        provider = _provider_of(name, self.api_base)
        explicit = provider is not None and wants_breakpoints(provider, name)
        return token_prices(
            name, provider, cached=not explicit or self.cache_breakpoints is not False
        )

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
        _report_usage(prepared, assembly.usage)
        usage = priced(assembly.usage, prepared.model, prepared.provider)
        response = ModelResponse(
            message=message,
            usage=usage,
            finish_reason=assembly.finish,
            model=assembly.model or model,
            latency_s=latency,
            retries=tuple(prepared.retries),
        )
        yield StreamChunk(usage=usage, response=response)

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
        rendered = request.render()
        kwargs["messages"] = [m.to_openai() for m in rendered]
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
        marks: tuple[str, ...] = ()
        wanted = self.cache_breakpoints
        if wanted or (wanted is None and wants_breakpoints(provider, model)):
            marks = place_breakpoints(rendered, kwargs["messages"], kwargs["tools"])
        return PreparedCall(
            kwargs=kwargs, provider=provider, model=model, request=request, breakpoints=marks
        )

    def _suspected_overflow(
        self, error: ProviderError, prepared: PreparedCall
    ) -> ContextOverflowError | None:
        """Return ``error`` as an overflow when it is an unexplained 400 of a nearly full request."""
        request = prepared.request
        if request is None or request.input_limit <= 0:
            return None
        from harness.accounting import estimate_request

        if request.policy.estimator is None:
            request = request.replace(policy=request.policy.resolve(request.model))
        output = requested_output(prepared.kwargs) or 0
        window = self.context_window(prepared.model)
        room = window if window is not None else request.input_limit + output
        return suspected_overflow(error, needed=estimate_request(request) + output, room=room)

    def tool_dicts(self, request: ModelRequest) -> list[dict[str, Any]]:
        """Return the OpenAI tool dicts to send for ``request`` (a subclass may send its own)."""
        return [t.to_openai() for t in request.tools]

    async def call_litellm(self, litellm: Any, kwargs: dict[str, Any]) -> Any:
        """Make one attempt: ``litellm.acompletion`` (a subclass calls another endpoint)."""
        return await litellm.acompletion(**kwargs)

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
        await self.discover_context_window(prepared.model)
        while True:
            try:
                with provider_errors(provider=prepared.provider, model=prepared.model):
                    return await self.call_litellm(litellm, prepared.kwargs)
            except ContextOverflowError as error:
                if error.window is not None:
                    remember_window(
                        prepared.model, self.api_base, error.window, source="overflow_error"
                    )
                else:  # what the server said about its window was not what it enforces
                    forget_window(prepared.model, self.api_base)
                raise
            except ProviderError as error:
                overflow = self._suspected_overflow(error, prepared)
                if overflow is not None:
                    raise overflow from error.__cause__
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
    request: ModelRequest | None = None
    """The request this call was prepared from (to judge an unexplained 400 by its size)."""
    breakpoints: tuple[str, ...] = ()
    """Where `LiteLLMClient.prepare` placed prompt-cache marks (``history``, ``system`` …)."""


def _report_usage(prepared: PreparedCall, usage: Usage | None) -> None:
    """Hand the reported prompt tokens to the learned calibration (`observe_usage`)."""
    if usage is not None and prepared.request is not None:
        api_base = prepared.kwargs.get("api_base")
        observe_usage(
            prepared.request,
            api_base if isinstance(api_base, str) else None,
            usage.prompt_tokens,
        )


def priced(usage: Usage | None, model: str, provider: str) -> Usage | None:
    """Return ``usage`` with its cost by litellm's price table (``None`` for a model it lacks).

    Cache reads and writes are priced at their own rates (``cost_per_token``'s
    ``cache_read_input_tokens`` / ``cache_creation_input_tokens``); the table is litellm's
    local copy (`load_litellm` keeps it offline).
    """
    if usage is None or (usage.prompt_tokens == 0 and usage.completion_tokens == 0):
        return usage
    litellm = load_litellm()
    try:
        prompt_cost, output_cost = litellm.cost_per_token(
            model=model,
            custom_llm_provider=provider or None,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cache_read_input_tokens=usage.cached_tokens,
            cache_creation_input_tokens=usage.cache_write_tokens,
        )
    except Exception:
        return usage
    cost = float(prompt_cost) + float(output_cost)
    return msgspec.structs.replace(usage, cost_usd=cost) if math.isfinite(cost) else usage


def response_from(raw: Any, prepared: PreparedCall, *, latency_s: float) -> ModelResponse:
    """Return our `ModelResponse` for litellm's (non-streamed) answer ``raw`` to ``prepared``.

    Raises:
        ContextOverflowError: the answer is an overflow in disguise (a context-window
            stop reason, or ``length`` with nothing generated).
        ProviderUnavailable: the answer has no choice.
    """
    provider, model = prepared.provider, prepared.model
    choice = first_choice(raw, provider=provider, model=model)
    raw_message = getattr(choice, "message", None)
    message = message_from(raw_message)
    usage = usage_from(getattr(raw, "usage", None))
    _report_usage(prepared, usage)
    finish = str_or_none(getattr(choice, "finish_reason", None))
    raise_on_overflow(finish, native_finish(choice), usage, message, provider, model)
    return ModelResponse(
        message=message,
        usage=priced(usage, model, provider),
        finish_reason=finish,
        model=str(getattr(raw, "model", None) or model),
        latency_s=latency_s,
        retries=tuple(prepared.retries),
        provider_edits=provider_edits(raw_message),
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
