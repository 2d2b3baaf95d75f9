"""Translate provider and transport exceptions into context-harness's typed errors.

This is the one boundary where a failure of litellm, the OpenAI SDK, httpx or aiohttp
becomes a `ProviderError` subclass (``harness.errors``), so nothing above ``providers/``
ever catches an SDK exception. The decision that matters most is *is this a context
overflow?*: `OverflowRetry` compacts and retries only on `ContextOverflowError`, so a
missed overflow fails a run that could have gone on, and a false one compacts for nothing.

Providers word overflow differently, sometimes with a status that suggests something else
(a 429 or a 500 carrying "maximum context length" text), and litellm recognises only some
of the wordings. So we decide by the provider's own text first, against a table of
wordings seen from real providers (``tests/data/overflow_bodies.json`` holds one body of
each, with the class it must map to), and by status and exception class after that:

1. per-minute / quota wording ("Request too large … tokens per min (TPM)") → rate limited;
   it is *not* an overflow even though it says the request is too large;
2. litellm's ``ContextWindowExceededError``, or any overflow wording, or HTTP 413 →
   `ContextOverflowError`, whatever the status;
3. otherwise the exception class and status: 401/403 → auth, 429/402 → rate limited,
   timeouts, connection failures and 5xx → unavailable, other 4xx → bad request.

A successful answer can also say the input did not fit (`overflow_from_finish`): a
``model_context_window_exceeded`` stop reason, or ``length`` with nothing generated.

Some failures happen *before any request was made*: litellm cannot route a model name
without a ``provider/`` prefix, the SDK finds no API key, or the request's text cannot be
encoded as UTF-8 (a lone surrogate). litellm reports them with a made-up HTTP status (400,
500); we report them with ``status=None`` and ``sent=False`` in the context, a message that
says nothing was sent and what to change, and a class that is never retried.

Only exceptions that come from a provider SDK or the network are translated; a bug in our
own code (a ``TypeError``) propagates unchanged, and cancellation is never caught.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from harness.errors import (
    ContextOverflowError,
    HarnessError,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from providers.windows import window_from_text

__all__ = [
    "classify",
    "is_lasting_limit_text",
    "is_overflow_text",
    "is_quota_text",
    "overflow_from_finish",
    "provider_errors",
    "retry_after_of",
    "suspected_overflow",
    "translate_error",
    "unknown_model_error",
]

_OVERFLOW_PATTERNS: tuple[str, ...] = (
    r"context_length_exceeded",  # OpenAI, Azure, Groq, Cerebras: the error code
    r"context[_ ]window[_ ]exceeded",  # Anthropic stop reason, some gateways
    r"max(imum)? context length",  # OpenAI, DeepSeek, vLLM, OpenRouter, Mistral, Ollama
    r"exceeds? the context window",  # OpenAI Responses-style wording
    r"context window (of|limit)",  # "exceeds the context window of this model"
    r"prompt (is )?too long",  # Anthropic, Bedrock, Ollama
    r"input (is )?too long",  # Bedrock, Vertex
    r"exceeds? (the )?(model'?s? )?context (limit|size|length)",  # Anthropic max_tokens, Ollama
    r"context size has been exceeded",  # llama.cpp (sent as a 500)
    r"exceeds the available context size",  # llama.cpp
    r"exceed_context_size_error",  # llama.cpp error type
    r"tokens when context the overflows",  # LM Studio ("Trying to keep the first N tokens …")
    r"is too long and exceeds (the )?limit of",  # vLLM ("Input prompt (N tokens) is too long …")
    r"input token count.{0,40}exceeds the maximum",  # Gemini
    r"exceeds the maximum number of tokens allowed",  # Gemini
    r"input token count is \d+ but (the )?model only supports up to",  # Vertex AI
    r"`?inputs`? tokens \+ `?max_new_tokens`? must be <=",  # Hugging Face TGI (422)
    r"`?inputs`? must have less than \d+ tokens",  # Hugging Face TGI (422)
    r"longer than the (maximum model length|model'?s? (maximum )?context length)",  # vLLM, Together
    r"maximum (prompt|input) length is",  # xAI, TGI
    r"prompt exceeds max length",  # Zhipu GLM (code 1261)
    r"exceeded model token limit",  # Moonshot / Kimi
    r"range of input length should be",  # Alibaba DashScope / Qwen
    r"current length is \d+ while limit is \d+",  # Cerebras
    r"reduce the length of the messages",  # OpenAI family closing sentence
    r"too many (input )?tokens",  # Cohere ("too many tokens: total number of tokens")
    r"request_too_large",  # Anthropic 413 error type
)
_OVERFLOW = re.compile("|".join(f"(?:{p})" for p in _OVERFLOW_PATTERNS), re.IGNORECASE)

_QUOTA_PATTERNS: tuple[str, ...] = (
    r"per (min(ute)?|second|hour|day)\b",  # "tokens per min (TPM)", "requests per day"
    r"\b[TR]P[MD]\b",  # TPM, RPM, TPD, RPD
    r"rate[ _-]?limit",  # rate limit / rate_limit_exceeded / rate_limit_error
    r"insufficient_quota|exceeded your (current )?quota",
    r"too many requests",
    r"please wait before trying again",  # Bedrock ThrottlingException
    r"extra usage is required",  # Anthropic plan limit for long context
)
_QUOTA = re.compile("|".join(f"(?:{p})" for p in _QUOTA_PATTERNS), re.IGNORECASE)

_NOT_OVERFLOW_PATTERNS: tuple[str, ...] = (
    # OpenAI's limit on one string's size (10 MB): a malformed request, not the token
    # window. litellm raises ContextWindowExceededError for it; compaction would not help.
    r"string_above_max_length",
    r"string too long\. expected a string with maximum length",
)
_NOT_OVERFLOW = re.compile("|".join(f"(?:{p})" for p in _NOT_OVERFLOW_PATTERNS), re.IGNORECASE)

_SDK_NAMES = re.compile(r"\b(?:litellm\.)?[A-Z][A-Za-z]*(?:Error|Exception)\b:?(?:\s+-)?")

_PROVIDER_MODULES = ("litellm", "openai", "httpx", "httpcore", "aiohttp", "anthropic", "google")
_AUTH_CLASSES = frozenset({"AuthenticationError", "PermissionDeniedError"})
_RATE_CLASSES = frozenset({"RateLimitError"})
_TIMEOUT_CLASSES = frozenset(
    {"Timeout", "APITimeoutError", "TimeoutException", "ServerTimeoutError"}
)
_NO_ANSWER_CLASSES = frozenset({"APIConnectionError", "ConnectError", "ClientConnectionError"})
_UNAVAILABLE_CLASSES = (
    _TIMEOUT_CLASSES
    | _NO_ANSWER_CLASSES
    | frozenset(
        {
            "TransportError",
            "ServiceUnavailableError",
            "InternalServerError",
            "BadGatewayError",
            "MidStreamFallbackError",
        }
    )
)
_DETAIL_LIMIT = 600
_MISSING_KEY = re.compile(
    r"missing credentials|api[_ ]key (?:must be set|is (?:missing|required|not set))"
    r"|no api key|set the `?\w*API_KEY`? environment variable"
    r"|missing \w+ api key|no key is set",
    re.IGNORECASE,
)
_UNROUTABLE = re.compile(r"LLM Provider NOT provided", re.IGNORECASE)
"""litellm's words when a model name does not say which provider serves it."""
_PLACEHOLDER_HOST = "litellm.ai"
"""The host of the placeholder request litellm attaches when no HTTP answer exists."""

_LASTING_LIMIT_PATTERNS: tuple[str, ...] = (
    r"insufficient_quota|exceeded your (current )?quota",  # the account has no credit left
    r"billing|payment required|credit balance",
    r"extra usage is required",  # Anthropic plan limit for long context
    r"request too large",  # one request over the per-minute token limit on its own
)
_LASTING_LIMIT = re.compile("|".join(f"(?:{p})" for p in _LASTING_LIMIT_PATTERNS), re.IGNORECASE)


def is_overflow_text(text: str) -> bool:
    """Return whether ``text`` says the input exceeds the model's context window.

    Per-minute and quota wordings are never an overflow, even when they also say the
    request is too large (OpenAI's "Request too large … tokens per min (TPM)").
    """
    text = _scrub(text)
    if _QUOTA.search(text) or _NOT_OVERFLOW.search(text):
        return False
    return bool(_OVERFLOW.search(text))


def is_quota_text(text: str) -> bool:
    """Return whether ``text`` talks about a rate, a per-period limit or a quota."""
    return bool(_QUOTA.search(_scrub(text)))


def is_lasting_limit_text(text: str) -> bool:
    """Return whether a rate-limit ``text`` describes a limit that waiting will not lift.

    An exhausted quota or billing limit, or one request larger than the per-minute token
    limit on its own: retrying the same request after a pause fails the same way.
    """
    return bool(_LASTING_LIMIT.search(_scrub(text)))


def classify(
    status: int | None, text: str, *, classes: frozenset[str] = frozenset()
) -> type[ProviderError]:
    """Return the error class for a provider failure.

    Args:
        status: the HTTP status, or ``None`` when there was no answer.
        text: the provider's error text (the body, the SDK's message, or both).
        classes: the names of the exception's classes (its MRO), when there is one.

    Returns:
        The `ProviderError` subclass to raise.
    """
    unavailable = bool(classes & _UNAVAILABLE_CLASSES)
    server_side = status is not None and status >= 500
    if is_quota_text(text) and not unavailable and not server_side:
        return ProviderRateLimited
    litellm_says_overflow = "ContextWindowExceededError" in classes
    if (
        is_overflow_text(text)
        or status == 413
        or (litellm_says_overflow and not _NOT_OVERFLOW.search(text))
    ):
        return ContextOverflowError
    if classes & _AUTH_CLASSES or status in (401, 403) or _MISSING_KEY.search(text):
        return ProviderAuthError
    if classes & _RATE_CLASSES or status in (402, 429):
        return ProviderRateLimited
    if unavailable or status is None or status == 408 or server_side:
        return ProviderUnavailable
    return ProviderBadRequest


def translate_error(exc: BaseException, *, provider: str = "", model: str = "") -> ProviderError:
    """Return the typed error for a provider or transport exception.

    Args:
        exc: what litellm, an SDK or the network raised.
        provider: the provider to name when the exception does not say.
        model: the model the request was for.

    Returns:
        A `ProviderError` subclass instance whose message says what to do next and whose
        ``status``, ``provider``, ``model`` and ``detail`` attributes keep the facts.
    """
    if isinstance(exc, ProviderError):
        return exc
    text = _text_of(exc)
    provider = str(getattr(exc, "llm_provider", "") or provider or "")
    unsent = _never_sent(exc, text, provider=provider, model=model)
    if unsent is not None:
        return unsent
    classes = _class_names(exc)
    status = _status_of(exc, classes)
    kind = classify(status, text, classes=classes)
    if isinstance(exc, TimeoutError | ConnectionError) and kind is ProviderBadRequest:
        kind = ProviderUnavailable
    detail = _detail(text, exc)
    extra: dict[str, Any] = {}
    if kind is ContextOverflowError:
        extra["window"] = window_from_text(text)
    return kind(
        _message(kind, provider=provider, model=model, status=status, detail=detail),
        provider=provider,
        status=status,
        model=model,
        detail=detail,
        cause=type(exc).__name__,
        retry_after=retry_after_of(exc),
        **extra,
    )


def unknown_model_error(model: str, *, detail: str = "") -> ProviderBadRequest:
    """Return the error for a model name litellm cannot route to a provider.

    Nothing was sent, so the error has no HTTP status; the message shows the
    ``provider/model`` form litellm needs.
    """
    name = model.rsplit("/", 1)[-1] or "<name>"
    return ProviderBadRequest(
        f"litellm cannot tell which provider serves model {model!r}, so nothing was sent — "
        f"name the model as 'provider/model': 'openai/{name}' for an OpenAI-compatible "
        "server (with api_base=), 'anthropic/claude-sonnet-4-5', 'gemini/gemini-2.5-pro', "
        f"'deepseek/deepseek-chat', 'ollama/{name}' … (https://docs.litellm.ai/docs/providers).",
        provider="",
        status=None,
        model=model,
        detail=detail,
        cause="unknown_model",
        sent=False,
    )


def retry_after_of(exc: BaseException | None) -> float | None:
    """Return the seconds the provider asked the client to wait, or ``None`` when it did not.

    Reads ``retry-after-ms`` (milliseconds, OpenAI and Azure) first, then ``retry-after``
    (seconds, or an HTTP date) from the headers of the answer the exception carries.

    Args:
        exc: the SDK or transport exception (a `ProviderError`'s ``__cause__``).
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 16:
        seen.add(id(exc))
        for headers in _headers_of(exc):
            wait = _parse_retry_after(headers)
            if wait is not None:
                return wait
        exc = exc.__cause__ or exc.__context__
    return None


@contextmanager
def provider_errors(*, provider: str = "", model: str = "") -> Iterator[None]:
    """Translate provider exceptions raised inside the block into typed errors.

    Our own errors pass through unchanged; exceptions that do not come from a provider
    SDK or the network (a bug of ours) propagate unchanged; cancellation is never caught.

    Args:
        provider: the provider to name when the exception does not say.
        model: the model the request was for.

    Raises:
        ProviderError: the typed error, chained to the original exception.
    """
    try:
        yield
    except HarnessError:
        raise
    except Exception as exc:
        if not _is_provider_exception(exc):
            raise
        raise translate_error(exc, provider=provider, model=model) from exc


def overflow_from_finish(
    finish_reason: str | None,
    *,
    native_reason: str | None = None,
    completion_tokens: int | None = None,
    produced_output: bool = False,
    provider: str = "",
    model: str = "",
) -> ContextOverflowError | None:
    """Return an overflow error when a *successful* answer says the input did not fit.

    Args:
        finish_reason: the finish reason as litellm reports it (OpenAI vocabulary).
        native_reason: the provider's own stop reason when litellm mapped it to another.
        completion_tokens: the reported output tokens, when usage was reported.
        produced_output: whether the answer has any text, reasoning or tool call.
        provider: the provider, for the error.
        model: the model, for the error.

    Returns:
        The error to raise, or ``None`` when the answer is a normal one.
    """
    reasons = [r.lower() for r in (finish_reason, native_reason) if r]
    overflow = any(_OVERFLOW.search(r) for r in reasons)
    if not overflow and "length" in reasons:
        # "length" normally means max_tokens cut the output short; with nothing generated
        # it means no room was left after the input: the window is full.
        overflow = completion_tokens == 0 if completion_tokens is not None else not produced_output
    if not overflow:
        return None
    reason = native_reason or finish_reason
    detail = (
        f"the answer stopped with finish_reason={reason!r} after {completion_tokens} output tokens"
    )
    return ContextOverflowError(
        _message(ContextOverflowError, provider=provider, model=model, status=200, detail=detail),
        provider=provider,
        status=200,
        model=model,
        detail=detail,
        cause="finish_reason",
    )


# ----------------------------------------------------------------------------- helpers
def _never_sent(
    exc: BaseException, text: str, *, provider: str, model: str
) -> ProviderError | None:
    """Return the error for a failure that happened before any request was made, if it was.

    Three failures are recognised: text that cannot be encoded (a ``UnicodeError`` under
    the exception), a model name litellm cannot route, and a missing API key. The last two
    count only when nothing answered: litellm attached its placeholder request, or the
    SDK's own client-side ``OpenAIError`` is the root cause.
    """
    chain = _chain(exc)
    detail = _detail(text, exc)
    if any(isinstance(e, UnicodeError) for e in chain):
        return ProviderBadRequest(
            f"{_who(provider, model)}: the request could not be encoded as UTF-8, so nothing "
            f"was sent ({detail}). The text holds a lone surrogate or another character that "
            "cannot be encoded: replace it (e.g. text.encode('utf-8', 'replace').decode()) "
            "before sending; retrying will not help.",
            provider=provider,
            status=None,
            model=model,
            detail=detail,
            cause=type(exc).__name__,
            sent=False,
        )
    if not _nothing_answered(exc, chain):
        return None
    if _UNROUTABLE.search(text):
        return unknown_model_error(model or str(getattr(exc, "model", "") or ""), detail=detail)
    if _MISSING_KEY.search(text):
        return ProviderAuthError(
            f"{_who(provider, model)}: no API key was found, so nothing was sent ({detail}). "
            "Pass api_key= to LiteLLMClient or set the provider's key variable "
            "(e.g. OPENAI_API_KEY, ANTHROPIC_API_KEY); an OpenAI-compatible server that "
            "needs no key still wants one: pass any string.",
            provider=provider,
            status=None,
            model=model,
            detail=detail,
            cause=type(exc).__name__,
            sent=False,
        )
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first (bounded)."""
    out: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(out) < 16:
        seen.add(id(current))
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _nothing_answered(exc: BaseException, chain: list[BaseException]) -> bool:
    """Whether the exception shows that no provider answered (the request was never made)."""
    response = getattr(exc, "response", None)
    request = getattr(response, "request", None) if response is not None else None
    with suppress(Exception):
        if request is not None and request.url.host == _PLACEHOLDER_HOST:
            return True
    root = chain[-1]
    # The OpenAI SDK raises its base class itself for client-side problems (no key);
    # every answer from a server is a subclass (APIStatusError, APIConnectionError …).
    return type(root).__name__ == "OpenAIError" and type(root).__module__.startswith("openai")


def _headers_of(exc: BaseException) -> list[Mapping[str, str]]:
    found: list[Mapping[str, str]] = []
    for source in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
        getattr(exc, "headers", None),
    ):
        if isinstance(source, Mapping):
            found.append(source)
    return found


def _parse_retry_after(headers: Mapping[str, str]) -> float | None:
    with suppress(Exception):
        millis = headers.get("retry-after-ms")
        if millis is not None:
            value = float(millis) / 1000
            if math.isfinite(value) and value >= 0:
                return value
    with suppress(Exception):
        raw = headers.get("retry-after")
        if raw is None:
            return None
        raw = str(raw).strip()
        try:
            value = float(raw)
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(raw)
            value = parsed.timestamp() - time.time()
            value = max(value, 0.0)
        if math.isfinite(value) and value >= 0:
            return value
    return None


def _who(provider: str, model: str) -> str:
    who = provider or "the provider"
    return f"{who} (model {model!r})" if model else who


def _scrub(text: str) -> str:
    """Drop SDK class names (``litellm.RateLimitError``) so only the provider's words count."""
    return _SDK_NAMES.sub(" ", text)


def _class_names(exc: BaseException) -> frozenset[str]:
    """The class names of ``exc`` and of the transport failures it was raised from.

    litellm re-raises a refused connection as an ``InternalServerError`` with status 500;
    the ``ConnectError`` underneath says what really happened, so the causes count too
    (only their transport classes: a cause's HTTP status does not override ours).
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    seen: set[int] = {id(exc)}
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen and len(seen) < 16:
        seen.add(id(cause))
        for cls in type(cause).__mro__:
            if cls.__name__ in _TIMEOUT_CLASSES | _NO_ANSWER_CLASSES:
                names.add(cls.__name__)
            elif cls in (TimeoutError, ConnectionError):
                names.add("Timeout" if cls is TimeoutError else "ConnectError")
        cause = cause.__cause__ or cause.__context__
    return frozenset(names)


def _is_provider_exception(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    return any(cls.__module__.split(".", 1)[0] in _PROVIDER_MODULES for cls in type(exc).__mro__)


def _status_of(exc: BaseException, classes: frozenset[str]) -> int | None:
    if classes & _TIMEOUT_CLASSES or isinstance(exc, TimeoutError):
        return 408
    if classes & _NO_ANSWER_CLASSES:
        return None  # litellm reports 500 for a refused connection; there was no answer
    upstream = getattr(exc, "provider_status_code", None)  # litellm reports a 529 as 500
    if isinstance(upstream, int) and not isinstance(upstream, bool):
        return upstream
    for source in (exc, getattr(exc, "response", None)):
        value = getattr(source, "status_code", None) if source is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _text_of(exc: BaseException) -> str:
    """Everything the exception says: its message, its body and the raw response text."""
    parts: list[str] = []
    for value in (str(exc), getattr(exc, "message", None), getattr(exc, "body", None)):
        if value is None:
            continue
        if not isinstance(value, str):
            try:
                value = json.dumps(value, default=str)
            except (TypeError, ValueError):
                value = str(value)
        parts.append(value)
    response = getattr(exc, "response", None)
    if response is not None:
        # An unread streaming body or a closed response has no text to add.
        with suppress(Exception):
            parts.append(str(response.text))
    unique: list[str] = []
    for part in parts:
        if part and part not in unique:
            unique.append(part)
    return "\n".join(unique)


def _detail(text: str, exc: BaseException | None = None) -> str:
    """The provider's own words, shortened.

    The first line of the text without SDK names; when that line says no more than
    "Error code: 422" (litellm found no ``error.message`` in the body, e.g. Hugging Face
    TGI's ``{"error": "…"}``), the message read from the answer's body instead.
    """
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = re.sub(r"^(?:(?:litellm\.)?\w+(?:Error|Exception)\b:?\s*-?\s*)+", "", first)
    if exc is not None and (not first or _BARE_CODE.fullmatch(first)):
        first = _body_message(exc) or first
    return first if len(first) <= _DETAIL_LIMIT else first[: _DETAIL_LIMIT - 1] + "…"


_BARE_CODE = re.compile(r"(?:Error code: ?)?\d{3}\.?", re.IGNORECASE)


def _body_message(exc: BaseException) -> str:
    """The message in the body of the answer ``exc`` carries, or ``""``."""
    body: object = getattr(exc, "body", None)
    if body is None:
        response = getattr(exc, "response", None)
        with suppress(Exception):
            body = json.loads(response.text) if response is not None else None
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, str):
        return body.strip().splitlines()[0] if body.strip() else ""
    for _ in range(3):
        if not isinstance(body, dict):
            break
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip().splitlines()[0]
        body = body.get("error")
    return ""


_NEXT_STEP: dict[type[ProviderError], str] = {
    ContextOverflowError: (
        "the input is longer than the model's context window. Let OverflowRetry compact and "
        "retry, or lower the input budget (ContextPolicy) or max_tokens so input and output fit"
    ),
    ProviderAuthError: (
        "the API key was missing or rejected. Pass api_key= (or set the provider's key "
        "variable) and check that the key may use this model"
    ),
    ProviderRateLimited: (
        "the provider refused the request for rate or quota reasons. Wait and retry, lower "
        "the request rate or size, or check the account's quota and billing"
    ),
    ProviderBadRequest: (
        "the provider rejected the request as malformed. Check the model name, the settings "
        "and the message shapes (tool call/result pairs, reasoning_content on assistant turns)"
    ),
    ProviderUnavailable: (
        "the provider timed out, could not be reached or failed on its side. Retry later, "
        "check api_base and the network, or raise the client's timeout"
    ),
}


def _message(
    kind: type[ProviderError], *, provider: str, model: str, status: int | None, detail: str
) -> str:
    who = _who(provider, model)
    code = f"HTTP {status}" if status is not None else "no HTTP answer"
    said = f": {detail}" if detail else ""
    return f"{who} failed with {code}{said} — {_NEXT_STEP[kind]}."


NEAR_WINDOW = 0.95
"""How full the window must be for an unclassified 400 to count as a likely overflow."""


def suspected_overflow(
    error: ProviderError, *, needed: int, room: int
) -> ContextOverflowError | None:
    """Return an overflow error for an unexplained 400 of a request that nearly fills the window.

    Some servers answer an over-long request with a 400 whose words we do not know (a new
    wording, a gateway's generic "Bad Request"). When the request needed at least
    `NEAR_WINDOW` of the room it had, an overflow is the likely cause, and `OverflowRetry`
    compacting once costs less than failing the run; a second failure ends it.

    Args:
        error: the classified error; only a `ProviderBadRequest` with status 400 that was
            sent qualifies.
        needed: the request's estimated input tokens plus its requested output.
        room: the model's window (or, when unknown, the input budget plus that output).

    Returns:
        The error to raise instead (``reason="suspected_overflow"``, the original as its
        context), or ``None`` when ``error`` stands.
    """
    if type(error) is not ProviderBadRequest or error.status != 400 or not error.sent:
        return None
    if room <= 0 or needed < NEAR_WINDOW * room:
        return None
    return ContextOverflowError(
        f"{error.message.rstrip('.')}. The request needed about {needed:,} of {room:,} "
        "tokens, so this unexplained 400 is treated as a context overflow (retried once "
        "with compaction); if it is not one, fix what the provider names.",
        provider=error.provider,
        status=error.status,
        model=error.model,
        detail=error.detail,
        reason="suspected_overflow",
    )
