"""Watching agent calls: the protocols a watching middleware implements, and their fan-out.

A middleware with ``watch_call`` (`WatchesCalls`, e.g. `middleware.Tracing`) is told of each
agent call the loop makes and each tool run in it; the agent enters the watches only around
the steps it runs itself (`CallWatch`). `_Watches` holds one call's watches, of every
watching middleware of the stack, as one. The protocols are the agent's, not the chain's:
a middleware implements them structurally and needs no import of this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.messages import ToolCall
    from harness.request import ModelResponse, RequestIds
    from harness.types import ModelClient


class ToolRunWatch(Protocol):
    """What a `CallWatch` is told about one tool run once it ended."""

    def outcome(self, *, error: bool, denied: bool) -> None:
        """Record whether the run gave an error result, or was denied by the permissions."""
        ...


class CallWatch(Protocol):
    """One watched agent call: entered around each step of it, never across a ``yield``.

    The agent's loop is an async generator; a context kept across its ``yield`` would leak
    into the consumer's code, so the agent enters `active` only around the steps it runs
    itself (a model request, a tool run).
    """

    def active(self) -> AbstractContextManager[object]:
        """Return a context in which the call is the current one (its span the parent)."""
        ...

    def tool(self, call: ToolCall) -> AbstractContextManager[ToolRunWatch]:
        """Return the context one tool run happens in."""
        ...

    def answered(self, response: ModelResponse) -> None:
        """Take the response to one of the call's model requests (its usage adds up)."""
        ...

    def end(self, error: BaseException | None) -> None:
        """End the call, with the error it ended with (``None``: a reply, or stopped early)."""
        ...


@runtime_checkable
class WatchesCalls(Protocol):
    """A middleware that also watches whole agent calls and their tool runs (`Tracing`)."""

    def watch_call(self, ids: RequestIds, client: ModelClient) -> CallWatch:
        """Start watching the agent call ``ids`` names, whose requests go to ``client``."""
        ...


class _Watches:
    """The watches of one agent call by the stack's watching middleware, as one."""

    __slots__ = ("watches",)

    def __init__(self, watches: list[CallWatch]) -> None:
        self.watches = watches

    def active(self) -> contextlib.AbstractContextManager[object]:
        """Return the context in which every watch has the call current."""
        if not self.watches:
            return contextlib.nullcontext()
        return self._all(w.active() for w in self.watches)

    def tool(self, call: ToolCall) -> contextlib.AbstractContextManager[list[ToolRunWatch]]:
        """Return the context one tool runs in: every watch's, giving their tool watches."""
        if not self.watches:
            return contextlib.nullcontext([])
        return self._tools(call)

    @contextlib.contextmanager
    def _tools(self, call: ToolCall) -> Iterator[list[ToolRunWatch]]:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(w.tool(call)) for w in self.watches]

    def answered(self, response: ModelResponse) -> None:
        """Give every watch the response to one of the call's requests."""
        for watch in self.watches:
            watch.answered(response)

    def end(self, error: BaseException | None) -> None:
        """End every watch."""
        for watch in self.watches:
            watch.end(error)

    @staticmethod
    @contextlib.contextmanager
    def _all(contexts: Iterable[contextlib.AbstractContextManager[object]]) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for context in contexts:
                stack.enter_context(context)
            yield


_NO_WATCH = _Watches([])
