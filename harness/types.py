"""Type aliases and protocols of the chain, in one place.

A *handler* turns a request into a response. A *middleware* wraps the next handler: it is
called with the request and ``call_next`` and may change the request before, the response
after, or call ``call_next`` again. A bare ``async def mw(request, call_next)`` is one too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.request import ModelRequest, ModelResponse
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
