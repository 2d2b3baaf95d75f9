"""Type aliases and protocols of the chain, in one place.

A *handler* turns a request into a response. A *middleware* wraps the next handler: it is
called with the request and ``call_next`` and may change the request before, the response
after, or call ``call_next`` again. A bare ``async def mw(request, call_next)`` is one too.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

import msgspec

from harness.messages import ToolCall
from harness.request import ModelRequest, ModelResponse, Usage

if TYPE_CHECKING:
    from harness.tools import Tool

Handler = Callable[["ModelRequest"], Awaitable["ModelResponse"]]
"""An async function from request to response: the client, or the rest of the chain."""


@runtime_checkable
class Middleware(Protocol):
    """One context concern, wrapped around the next handler."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Handle ``request``, usually by calling ``call_next`` with a changed request."""
        ...


@runtime_checkable
class ProvidesTools(Protocol):
    """A middleware that also gives the agent tools (``todo_write``, ``read_file`` …)."""

    def tools(self) -> list[Tool]:
        """Return the tools this middleware contributes to the agent."""
        ...


class Concern(enum.Enum):
    """What a middleware does to a request, as far as the order of a stack is concerned."""

    ADDS_CONTEXT = "adds System parts or context blocks"
    SHRINKS_TOOL_RESULTS = "shrinks large tool results"
    FITS_BUDGET = "fits the blocks into the input budget"
    COMPACTS = "compacts the history (and honours force_compaction)"
    RETRIES_OVERFLOW = "retries a round after a provider overflow"
    VALIDATES = "checks the request exactly as it will be sent"


@runtime_checkable
class Ordered(Protocol):
    """A middleware that states its concerns, and which concerns must run before it.

    `harness.chain.compose` refuses a stack in which a middleware stands before (outside)
    one whose concern it lists in ``after``; any other order and any subset is accepted.
    A middleware that does not state its concerns is accepted anywhere.
    """

    concerns: ClassVar[frozenset[Concern]]
    """What this middleware does."""
    after: ClassVar[frozenset[Concern]]
    """Concerns that, when some middleware of the stack has them, must come before this one."""


@runtime_checkable
class ModelClient(Protocol):
    """A provider-agnostic model client: what the chain, the agent and the adapters call.

    The one client contract. A client may also stream (`StreamingClient`), name a model's
    provider (`NamesProvider`) or its output limit (`OutputLimited`); each is asked for only
    where it is used.
    """

    model: str
    """The model name requests are sent to."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and return the whole response.

        Raises:
            ContextOverflowError: the provider says the input is too long.
            ProviderError: any other provider failure, as a typed subclass.
        """
        ...

    def context_window(self, model: str | None = None) -> int | None:
        """Return the model's input window in tokens, or ``None`` when unknown."""
        ...


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


class ResponseChunk(Protocol):
    """One piece of a streamed answer as the agent reads it (`StreamChunk` is one).

    A chunk may also carry ``reasoning`` (new reasoning text of a thinking model): the agent
    emits it as ``reasoning_delta`` events when present.
    """

    @property
    def text(self) -> str:
        """New assistant text in this chunk."""
        ...

    @property
    def response(self) -> ModelResponse | None:
        """The assembled response, on the last chunk only."""
        ...


@runtime_checkable
class StreamingClient(Protocol):
    """A model client that can stream its answer; `HarnessAgent.stream_events` uses it.

    Both built-in clients (`providers.LiteLLMClient`, `providers.ScriptedModel`) stream
    `StreamChunk`s.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponseChunk]:
        """Send ``request`` and yield chunks; the last one carries the whole response."""
        ...


@runtime_checkable
class NamesProvider(Protocol):
    """A model client that can say which provider serves a model (for traces)."""

    def provider_name(self, model: str) -> str | None:
        """Return the provider's name (``openai``, ``anthropic`` …), or ``None`` if unknown."""
        ...


class TokenPrices(msgspec.Struct, frozen=True, kw_only=True):
    """A model's prices in US dollars per token, as this client's requests are billed.

    Where a request is not cached (a provider that caches only marked prefixes, sent
    without marks) ``cached_input`` and ``cache_write`` are the input price.
    """

    input: float
    """An input token not read from the prompt cache."""
    cached_input: float
    """An input token read from the prompt cache."""
    cache_write: float
    """An input token written to the prompt cache (Anthropic: 1.25× the input price); the
    input price where writing costs nothing extra (OpenAI's automatic cache)."""
    output: float
    """An output token (reasoning included)."""


@runtime_checkable
class KnowsPrices(Protocol):
    """A model client that can say what its requests cost (the cost-aware compaction trigger)."""

    def token_prices(self, model: str | None = None) -> TokenPrices | None:
        """Return the model's prices, or ``None`` when unknown."""
        ...


@runtime_checkable
class OutputLimited(Protocol):
    """A model client that can say how many output tokens a model answers with at most.

    The pre-send check (`harness.presend`) keeps ``max_tokens`` within it; a client without
    it is trusted with any ``max_tokens`` that fits the window.
    """

    def max_output_tokens(self, model: str | None = None) -> int | None:
        """Return the model's output limit in tokens, or ``None`` when unknown."""
        ...


@runtime_checkable
class DiscoversWindow(Protocol):
    """A model client that can look a model's window up (a server's metadata) before use.

    The ways in await it once before computing the input budget
    (`harness.policy.discovered_input_limit`); afterwards ``context_window`` answers from
    what it found. A client without it is asked ``context_window`` only.
    """

    async def discover_context_window(self, model: str | None = None) -> int | None:
        """Return the model's window in tokens, or ``None`` when it stays unknown."""
        ...


@runtime_checkable
class CompactsNatively(Protocol):
    """A model client whose server compacts long inputs itself (OpenAI's Responses API).

    `middleware.ProviderCompaction` asks for the server's compaction only through such a
    client, and sends the compaction item it returned instead of the history it stands for.
    """

    def native_compaction(self, model: str | None = None) -> bool:
        """Return whether requests for ``model`` can ask the server to compact."""
        ...
