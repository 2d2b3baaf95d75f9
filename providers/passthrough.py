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
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from harness.request import ModelRequest, ModelResponse, ProviderRetry
from providers._encoding import check_encodable
from providers._response import (
    first_choice,
    message_from,
    native_finish,
    raise_on_overflow,
    str_or_none,
    usage_from,
)
from providers.litellm_client import LiteLLMClient, load_litellm

__all__ = ["PassthroughClient"]


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
        self.tool_dicts: dict[str, Mapping[str, Any]] = dict(tool_dicts or {})

    async def send(self, request: ModelRequest, stream: bool = False) -> tuple[Any, ModelResponse]:
        """Send ``request``; return litellm's answer (or opened stream) and our response.

        For a stream, our response is a placeholder (an empty assistant message, no usage):
        the answer is only known once the caller has read the stream.

        Raises:
            ContextOverflowError: the provider says the input is too long.
            ProviderError: any other provider failure, as a typed subclass.
        """
        model = request.model or self.model
        kwargs = self._kwargs(request, model, stream=stream)
        if kwargs.get("tools") and self.tool_dicts:
            kwargs["tools"] = [
                dict(self.tool_dicts.get(t.name, t.to_openai())) for t in request.tools
            ]
        provider = self._route(model, kwargs)
        check_encodable(kwargs, provider=provider, model=model)
        litellm = load_litellm()
        started = time.perf_counter()
        retries: list[ProviderRetry] = []
        raw = await self._call(litellm, kwargs, provider, model, retries)
        latency = time.perf_counter() - started
        if stream:
            placeholder = ModelResponse(
                message=message_from(None), model=model, latency_s=latency, retries=tuple(retries)
            )
            return raw, placeholder
        choice = first_choice(raw, provider=provider, model=model)
        message = message_from(getattr(choice, "message", None))
        usage = usage_from(getattr(raw, "usage", None))
        finish = str_or_none(getattr(choice, "finish_reason", None))
        raise_on_overflow(finish, native_finish(choice), usage, message, provider, model)
        response = ModelResponse(
            message=message,
            usage=usage,
            finish_reason=finish,
            model=str(getattr(raw, "model", None) or model),
            latency_s=latency,
            retries=tuple(retries),
        )
        return raw, response
