"""Where an agent call's events wait for its consumer, and how a request runs beside the loop.

`_Outbox` queues the events a request emits (stamped with the round, noted for the session
log) until the loop hands them on; `_start_detached` runs a request in a task of its own,
outside any task group (what `HarnessAgent.stream_events` needs: it is an async generator);
`_streamed` reads a streaming client's chunks into text and reasoning deltas.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from harness.errors import ProviderUnavailable
from harness.events import AgentEvent
from harness.request import ModelRequest, ModelResponse
from harness.sessions.recorder import SessionRecorder
from harness.types import StreamingClient


class _Outbox:
    """Where one agent call's events wait for its consumer.

    Events emitted while a request runs (by middleware, the summariser, the client's
    stream) are stamped with the round, noted for the session log and queued. In a live
    call (`HarnessAgent.stream_events`) the loop takes them while the request is in flight,
    and `delivered` lets the request wait until the consumer has taken what was emitted so
    far; otherwise the loop drains them once the request ended.
    """

    __slots__ = (
        "_arrived",
        "_done",
        "_emitted",
        "_progress",
        "_queue",
        "_recorder",
        "_taken",
        "live",
        "round",
    )

    def __init__(self, recorder: SessionRecorder, *, live: bool) -> None:
        self.live = live
        self.round = 0
        self._recorder = recorder
        self._queue: deque[AgentEvent] = deque()
        self._emitted = 0
        self._taken = 0
        self._done = True
        if live:  # only a live call waits on these (creating one looks up the backend)
            self._arrived = anyio.Event()
            self._progress = anyio.Event()

    def emit(self, event: AgentEvent) -> None:
        """Queue ``event`` (the call's `RunScope.emit`)."""
        if event.round != self.round:
            event = msgspec.structs.replace(event, round=self.round)
        self._recorder.note(event)
        self._queue.append(event)
        self._emitted += 1
        if self.live and not self._done:
            self._arrived.set()

    def start(self) -> None:
        """A request begins."""
        self._done = False

    def finish(self) -> None:
        """The request ended, with a response or an error."""
        self._done = True
        if self.live:
            self._arrived.set()

    @property
    def ended(self) -> bool:
        """Whether no request is in flight."""
        return self._done

    async def end(self) -> None:
        """Wait until the request in flight ended."""
        while not self._done:
            await self._arrived.wait()
            self._arrived = anyio.Event()

    async def next(self) -> AgentEvent | None:
        """Return the next event of the request in flight; ``None`` once it ended."""
        while not self._queue:
            if self._done:
                return None
            await self._arrived.wait()
            self._arrived = anyio.Event()
        return self._queue.popleft()

    def took_one(self) -> None:
        """The consumer asked for the event after the one it was given."""
        self._taken += 1
        self._progress.set()
        self._progress = anyio.Event()

    def drain(self) -> list[AgentEvent]:
        """Return every queued event, as taken."""
        events = list(self._queue)
        self._queue.clear()
        self._taken += len(events)
        return events

    async def delivered(self) -> None:
        """Wait until the consumer has taken every event emitted so far."""
        target = self._emitted
        while self._taken < target:
            await self._progress.wait()


def _no_outbox() -> _Outbox | None:
    return None


_DETACHED: set[asyncio.Task[None]] = set()
"""The asyncio tasks `_start_detached` started (the loop keeps only weak references)."""


def _start_detached(fn: Callable[..., Awaitable[None]], *args: Any) -> anyio.CancelScope:
    """Start ``fn(*args)`` in a task of its own, outside any task group; return its scope.

    Why not a task group: `HarnessAgent.stream_events` is an async generator, and a task
    group held open across its ``yield`` breaks when a consumer leaves the loop without
    closing the generator — Python closes it later, from another task, and the group's
    cancel scope can be neither cancelled nor exited safely from there. The loop cancels
    the returned scope instead (from any task) and waits for the task to end.
    """
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await fn(*args)

    context = contextvars.copy_context()  # the caller's context, as a task group would
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio, the other backend anyio runs on
        import trio

        trio.lowlevel.spawn_system_task(run, context=context)
    else:
        task = loop.create_task(run(), context=context)
        _DETACHED.add(task)
        task.add_done_callback(_DETACHED.discard)
    return scope


async def _streamed(
    client: StreamingClient, request: ModelRequest, outbox: _Outbox
) -> ModelResponse:
    """Return the response ``client`` streams for ``request``, its text emitted as deltas.

    A thinking model's reasoning is emitted as ``reasoning_delta`` events as it comes.

    Raises:
        ProviderUnavailable: the stream ended without its final response.
        ProviderError: as the client raised it; when text had been streamed, a
            ``stream_discarded`` warning is emitted first (see `HarnessAgent.stream_events`).
    """
    response: ModelResponse | None = None
    streamed = 0
    chunks = client.stream(request)
    try:
        async for chunk in chunks:
            reasoning: str = getattr(chunk, "reasoning", "")  # optional in `ResponseChunk`
            if reasoning:
                streamed += len(reasoning)
                outbox.emit(AgentEvent(kind="reasoning_delta", round=outbox.round, text=reasoning))
            if chunk.text:
                streamed += len(chunk.text)
                outbox.emit(AgentEvent(kind="text_delta", round=outbox.round, text=chunk.text))
            if chunk.response is not None:
                response = chunk.response
    except Exception as exc:
        if streamed:
            outbox.emit(
                AgentEvent(
                    kind="warning",
                    code="stream_discarded",
                    text=f"the {streamed} characters streamed for request {request.ids.call_id} "
                    f"are void ({type(exc).__name__}); drop this round's text and reasoning "
                    "deltas shown so far",
                )
            )
        raise
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    if response is None:
        raise ProviderUnavailable(
            f"the stream for {request.model} ended without its final response; retry the "
            "call, or check that the client's stream() yields the response on its last chunk",
            model=request.model,
        )
    return response
