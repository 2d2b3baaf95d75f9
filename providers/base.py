"""The model-client protocol every provider implements.

``providers/`` never imports ``middleware/``; the harness core never imports a provider SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

import msgspec

from harness.messages import ToolCall
from harness.request import ModelRequest, ModelResponse, Usage


class StreamChunk(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of a streamed answer; the last chunk carries the full response."""

    text: str = ""
    """New assistant text in this chunk."""
    reasoning: str = ""
    """New reasoning text in this chunk (thinking-mode models)."""
    tool_call: ToolCall | None = None
    """A completed tool call, when one finished in this chunk."""
    usage: Usage | None = None
    """Usage, on the chunk where the provider reports it."""
    response: ModelResponse | None = None
    """The assembled response, on the final chunk only."""


@runtime_checkable
class ModelClient(Protocol):
    """A provider-agnostic model client."""

    model: str
    """The model name requests are sent to."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and return the whole response.

        Raises:
            ContextOverflowError: the provider says the input is too long.
            ProviderError: any other provider failure, as a typed subclass.
        """
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Send ``request`` and yield chunks; the last one carries the full response."""
        ...

    def context_window(self, model: str | None = None) -> int | None:
        """Return the model's input window in tokens, or ``None`` when unknown."""
        ...
