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

from harness.request import ModelRequest, ModelResponse
from providers._response import message_from
from providers.litellm_client import LiteLLMClient, response_from

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
