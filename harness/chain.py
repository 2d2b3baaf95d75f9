"""The composer: fold a list of middleware around a handler, once.

A stack whose order cannot work is refused here, when it is built: each middleware may state
its `Concern`s and the concerns that must run before it (`harness.types.Ordered`); the
composer checks those statements and knows no middleware by name. The innermost handler
receives the request without the blocks its history supersedes
(`ModelRequest.without_superseded_blocks`) and only once it passed the pre-send check
(`harness.presend.checked`: pairs, ``max_tokens`` within the run's client's output limit,
prompt + ``max_tokens`` within its window and the input limit), so both rules hold for
every stack, inside the agent or not, with PairValidation or without. Its response carries
the history as sent (`ModelResponse.kept`): what the round keeps for the next one, unless a
layer that changed the history for this round only mends it on the way out.

Each layer runs inside a *layer watcher* when one is set for the request in flight
(`LAYER_WATCHER`, a context manager factory given the middleware's name) — an outer
middleware sets it for the requests it wants to watch (Tracing opens a span per layer
this way). Without one, a layer costs one context-variable lookup and nothing else: it hands
back the middleware's own coroutine instead of awaiting it in one of its own, calling a
class's ``__call__`` as the method bound when the stack was built (`_caller`).
Requests sent outside the stack (summaries) go through `send_watched`, which runs them
inside the *request watcher* (`REQUEST_WATCHER`) the same way; their sender runs the same
pre-send check on them first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import FunctionType, MethodType
from weakref import WeakSet

from harness.errors import ConfigurationError
from harness.presend import checked
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler, Middleware, ModelClient


def compose(stack: Sequence[Middleware], handler: Handler) -> Handler:
    """Return one handler that runs ``stack`` around ``handler``.

    The first middleware in the list is the outermost: it sees the request first and the
    response last. The result is built once and can be awaited many times concurrently.

    The innermost handler sends only what passes `harness.presend.checked` (broken pairs
    raise `InvalidToolPairs`, a request over budget `ContextBudgetExceeded`); a stack that
    should repair pairs instead holds ``PairValidation(mode="repair")``.

    Raises:
        ConfigurationError: when an element of ``stack`` is not callable, or the order
            breaks a middleware's stated constraint (see `check_order`).
    """
    for position, middleware in enumerate(stack):
        if not callable(middleware):
            raise ConfigurationError(
                f"stack[{position}] is {middleware!r}, which is not a middleware: pass an "
                "object with 'async __call__(request, call_next)' or such an async function"
            )
    check_order(stack)

    async def innermost(request: ModelRequest) -> ModelResponse:
        request = request.without_superseded_blocks()
        client = request.run.client if request.run is not None else None
        sent = checked(request, client, owner=innermost)
        response = await handler(sent)
        # What the round keeps: the history as sent, unless a layer mends it on the way out.
        return response if response.kept is sent.history else response.replace(kept=sent.history)

    _CHECKED.add(innermost)
    composed: Handler = innermost
    for middleware in reversed(stack):
        composed = _bind(middleware, composed)
        _CHECKED.add(composed)
    return composed


_CHECKED: WeakSet[Handler] = WeakSet()
"""Every handler `compose` made: what each passes on meets the pre-send check inside."""


def checks_before_sending(handler: Handler) -> bool:
    """Return whether ``handler`` is part of a composed chain, so the pre-send check runs inside.

    A middleware that states how the check treats a request (PairValidation's pair mode,
    `ModelRequest.pairs`) leaves the check to the chain's innermost handler when this is
    true, and runs it itself when it is called with a bare handler.
    """
    return handler in _CHECKED


def check_order(stack: Sequence[Middleware]) -> None:
    """Refuse an order in which a middleware stands before one that must run before it.

    A middleware states its order as `harness.types.Ordered` describes (``concerns`` and
    ``after``); the statements are read as attributes, which is what ``isinstance(m,
    Ordered)`` checks too, without its cost (a runtime-Protocol check recomputes the
    protocol's members every time on Python 3.11: ~2.6 ms for the default stack).

    Raises:
        ConfigurationError: naming both middleware, the concern and what to do.
    """
    stated = [_statement(middleware) for middleware in stack]
    for position, (middleware, statement) in enumerate(zip(stack, stated, strict=True)):
        if statement is None:
            continue
        for later, later_statement in zip(
            stack[position + 1 :], stated[position + 1 :], strict=True
        ):
            if later_statement is None:
                continue
            concerns = later_statement[0]
            clash = sorted(c.name for c in statement[1] & concerns)
            if clash:
                concern = next(c for c in concerns if c.name == clash[0])
                raise ConfigurationError(
                    f"{_name(middleware)} stands before {_name(later)} in the stack, but it "
                    f"must come after every middleware that {concern.value} "
                    f"({concern.name}); move {_name(middleware)} after {_name(later)}"
                )


def _statement(middleware: object) -> tuple[frozenset[Concern], frozenset[Concern]] | None:
    """Return ``middleware``'s (concerns, after) when it states both (`Ordered`), else None."""
    concerns = getattr(middleware, "concerns", None)
    after = getattr(middleware, "after", None)
    if concerns is None or after is None:
        return None
    return frozenset(concerns), frozenset(after)


LayerWatcher = Callable[[str], AbstractContextManager[object]]
"""Given a middleware's name, returns the context manager its layer runs in."""

LAYER_WATCHER: ContextVar[LayerWatcher | None] = ContextVar("harness_layer_watcher", default=None)
"""The watcher of the request in flight, or ``None`` (layers run bare)."""


RequestWatcher = Callable[[ModelRequest, ModelClient], Awaitable[ModelResponse]]
"""Sends a request to a client while watching it (Tracing traces it as a child span)."""

REQUEST_WATCHER: ContextVar[RequestWatcher | None] = ContextVar(
    "harness_request_watcher", default=None
)
"""The watcher of requests sent outside the stack during the request in flight, or ``None``."""


async def send_watched(client: ModelClient, request: ModelRequest) -> ModelResponse:
    """Send ``request`` straight to ``client``, inside the request watcher when one is set.

    For requests that do not pass through the stack (Compaction's summaries), so that an
    outer middleware still sees them; without a watcher it is ``client.complete(request)``.
    """
    watcher = REQUEST_WATCHER.get()
    if watcher is None:
        return await client.complete(request)
    return await watcher(request, client)


def _bind(middleware: Middleware, call_next: Handler) -> Handler:
    # A factory, so each closure captures its own middleware and next handler. The layer is
    # a plain function that returns the middleware's coroutine: unwatched, a layer adds no
    # coroutine of its own (one frame and one await less per layer), only the lookup.
    name = _name(middleware)
    watcher_of = LAYER_WATCHER.get
    run = _caller(middleware)

    def layer(request: ModelRequest) -> Awaitable[ModelResponse]:
        watcher = watcher_of()
        if watcher is None:
            return run(request, call_next)
        return _watched(watcher, name, middleware, request, call_next)

    layer.__qualname__ = f"layer[{name}]"
    return layer


async def _watched(
    watcher: LayerWatcher,
    name: str,
    middleware: Middleware,
    request: ModelRequest,
    call_next: Handler,
) -> ModelResponse:
    """Run one layer inside the context manager its watcher gives for ``name``."""
    with watcher(name):
        return await middleware(request, call_next)


def _caller(middleware: Middleware) -> Callable[[ModelRequest, Handler], Awaitable[ModelResponse]]:
    """Return what calling ``middleware`` runs, bound once: its class's ``__call__``.

    Calling an instance goes through the type's call slot, which looks the method up, binds
    it and packs the arguments into a tuple on every call (~0.3 µs a layer); the bound method
    is called directly. A function (or any other callable) is called as it is.
    """
    if isinstance(middleware, FunctionType):
        return middleware
    method = next(
        (vars(c)["__call__"] for c in type(middleware).__mro__ if "__call__" in vars(c)), None
    )
    if isinstance(method, FunctionType):  # a plain method (not static, class, or C-level)
        bound: Callable[[ModelRequest, Handler], Awaitable[ModelResponse]] = MethodType(
            method, middleware
        )
        return bound
    return middleware


def _name(middleware: object) -> str:
    return getattr(middleware, "__name__", type(middleware).__name__)
