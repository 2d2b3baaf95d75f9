"""The composer: fold a list of middleware around a handler, once."""

from __future__ import annotations

from collections.abc import Sequence

from harness.errors import ConfigurationError
from harness.request import ModelRequest, ModelResponse
from harness.types import Handler, Middleware


def compose(stack: Sequence[Middleware], handler: Handler) -> Handler:
    """Return one handler that runs ``stack`` around ``handler``.

    The first middleware in the list is the outermost: it sees the request first and the
    response last. The result is built once and can be awaited many times concurrently.

    Raises:
        ConfigurationError: when an element of ``stack`` is not callable.
    """
    for position, middleware in enumerate(stack):
        if not callable(middleware):
            raise ConfigurationError(
                f"stack[{position}] is {middleware!r}, which is not a middleware: pass an "
                "object with 'async __call__(request, call_next)' or such an async function"
            )
    composed = handler
    for middleware in reversed(stack):
        composed = _bind(middleware, composed)
    return composed


def _bind(middleware: Middleware, call_next: Handler) -> Handler:
    # A factory, so each closure captures its own middleware and next handler.
    async def layer(request: ModelRequest) -> ModelResponse:
        return await middleware(request, call_next)

    layer.__qualname__ = f"layer[{_name(middleware)}]"
    return layer


def _name(middleware: object) -> str:
    return getattr(middleware, "__name__", type(middleware).__name__)
