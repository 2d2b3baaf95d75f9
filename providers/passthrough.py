"""`PassthroughClient`: a `LiteLLMClient` that also hands back litellm's own answer object.

The drop-in ``harness.acompletion`` must return exactly what ``litellm.acompletion``
returns — a litellm ``ModelResponse``, or litellm's stream when ``stream=True`` — while the
middleware stack still sees our `ModelResponse`. This client sends a prepared request like
`LiteLLMClient` does (same routing, encoding checks, typed errors and retries) and returns
both: the raw litellm object and our response built from it.

Two more things a drop-in needs: the caller's own tool dicts are sent as given (so keys we
do not model, such as ``strict``, reach the provider), and a stream is *opened* here — its
HTTP request sent and its first failure raised as a typed error, so `OverflowRetry` still
works — but not consumed: the caller reads it.

And the drop-in raises what litellm raises: `litellm_error` turns a typed error that left
the stack back into litellm's own exception — the one litellm raised, however deep in the
chain (an overflow that compaction could not fix is our error raised from our error raised
from litellm's), or, where litellm raised nothing (an overflow seen in a stop reason, a
model name it cannot route), a new exception of litellm's class for the failure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from harness.errors import (
    ContextOverflowError,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from harness.request import ModelRequest, ModelResponse
from providers._response import message_from
from providers.litellm_client import LiteLLMClient, load_litellm, response_from

__all__ = ["PassthroughClient", "litellm_error"]

NOTE_PREFIX = "context-harness: "
"""How the note that `litellm_error` adds to litellm's exception starts."""
MAX_CHAIN = 16
"""How many links of an exception's cause chain `litellm_error` looks through."""


class PassthroughClient(LiteLLMClient):
    """A `LiteLLMClient` whose `send` returns litellm's answer object beside ours.

    Args:
        model: the litellm model name.
        tool_dicts: the caller's OpenAI tool dicts by tool name; a request's tool whose
            name is here is sent as that dict, verbatim.
        **kwargs: what `LiteLLMClient` takes (``api_base``, ``api_key``, ``timeout`` …).
    """

    def __init__(
        self,
        model: str,
        *,
        tool_dicts: Mapping[str, Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.caller_tools: dict[str, Mapping[str, Any]] = dict(tool_dicts or {})

    def tool_dicts(self, request: ModelRequest) -> list[dict[str, Any]]:
        """Return the caller's own dict for each tool it gave, our rendering for the others."""
        return [dict(self.caller_tools.get(t.name) or t.to_openai()) for t in request.tools]

    async def send(self, request: ModelRequest, stream: bool = False) -> tuple[Any, ModelResponse]:
        """Send ``request``; return litellm's answer (or opened stream) and our response.

        For a stream, our response is a placeholder (an empty assistant message, no usage):
        the answer is only known once the caller has read the stream.

        Raises:
            ContextOverflowError: the provider says the input is too long.
            ProviderError: any other provider failure, as a typed subclass.
        """
        prepared = self.prepare(request, stream=stream)
        started = time.perf_counter()
        raw = await self.send_prepared(prepared)
        latency = time.perf_counter() - started
        if stream:
            placeholder = ModelResponse(
                message=message_from(None),
                model=prepared.model,
                latency_s=latency,
                retries=tuple(prepared.retries),
            )
            return raw, placeholder
        return raw, response_from(raw, prepared, latency_s=latency)


def litellm_error(error: ProviderError, *, model: str = "") -> Exception:
    """Return litellm's own exception for ``error``, with ``error`` as a note on it.

    The exception litellm raised when ``error`` (or an error it was raised from, at any
    depth) came from one; else a new one of the litellm class for ``error``'s kind
    (`ContextOverflowError`: ``ContextWindowExceededError``; auth, rate limit, bad
    request, unavailable: their litellm classes; a status-less or 5xx one:
    ``InternalServerError``; any other: ``APIError``) with ``error`` as its ``__cause__``.
    """
    note = f"{NOTE_PREFIX}{error}"
    native = _raised_by_litellm(error)
    if native is None:
        native = _made_for(error, model)
        native.__cause__ = error
    if note not in getattr(native, "__notes__", ()):
        native.add_note(note)
    return native


def _raised_by_litellm(error: BaseException) -> Exception | None:
    """The outermost exception litellm raised in ``error``'s chain (causes, then contexts)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < MAX_CHAIN:
        seen.add(id(current))
        if isinstance(current, Exception) and type(current).__module__.startswith("litellm"):
            return current
        current = current.__cause__ or current.__context__
    return None


def _made_for(error: ProviderError, model: str) -> Exception:
    """A new litellm exception of the class that matches ``error``."""
    exceptions = load_litellm().exceptions
    message, provider, model = error.message, error.provider, error.model or model
    status = error.status
    named = {"llm_provider": provider, "model": model}
    made: Exception
    if isinstance(error, ContextOverflowError):
        made = exceptions.ContextWindowExceededError(message, **named)
    elif isinstance(error, ProviderAuthError):
        made = exceptions.AuthenticationError(message, **named)
    elif isinstance(error, ProviderRateLimited):
        made = exceptions.RateLimitError(message, **named)
    elif isinstance(error, ProviderBadRequest):
        made = exceptions.BadRequestError(message, **named)
    elif isinstance(error, ProviderUnavailable) and status is None:
        made = exceptions.APIConnectionError(message, **named)
    elif isinstance(error, ProviderUnavailable) and status == 503:
        made = exceptions.ServiceUnavailableError(message, **named)
    elif status is None or status >= 500:
        made = exceptions.InternalServerError(message, **named)
    else:
        made = exceptions.APIError(status, message, **named)
    return made
