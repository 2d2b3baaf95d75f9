"""The ReAct loop: prepare a request through the stack, call the model, run tools, repeat.

The stack runs before **every** model request, not once per call. The agent's own
innermost handler turns the prepared request into a manifest (emitted to the policy's
observer and the event stream) and sends it; once the chain returned, the history the round
keeps (`harness.request.ModelResponse.kept`) becomes the session's working history, so
offload, trimming and compaction are done once, not every round.

**Running tool calls belong to their writer.** A round whose reply calls tools records, in
the committed state (``agent/running_tool_calls``), which writer started them
(`HarnessAgent.writer_id`: host, process id and start time, agent). Until their results are
committed the session waits for them, and a call that finds them waiting answers them as
interrupted only when their writer provably stopped running them: it is this process and
none of its calls runs them now (a cancelled or failed call); or it is another process of
this machine that no longer exists (killed, crashed — a reused pid is told apart by its
start time); or it is on another machine and the calls are older than ``abandon_after_s``
(the one case decided by time, as nothing on this machine can see that process). Otherwise
the call raises `SessionBusy` (a `StateConflict`, HTTP 409 through the proxy) and stores
nothing; try again once the owner answered.

`HarnessAgent.stream_events` runs each model request in a task of its own, so the events
the chain emits (the ``context_build`` manifest, streamed text) reach the consumer while
the request is in flight; `HarnessAgent.call` needs no events early and runs it inline.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, MutableMapping, Sequence
from contextlib import aclosing
from typing import Any, cast

import anyio
import msgspec

from harness.accounting import answered, build_manifest, failed_manifest, report_manifest
from harness.agent._outbox import _no_outbox, _Outbox, _start_detached, _streamed
from harness.agent._watches import _NO_WATCH, WatchesCalls, _Watches
from harness.agent.permissions import Approver, ToolPermissions, permission_denial
from harness.chain import compose
from harness.compaction_request import request_compaction
from harness.errors import (
    ConfigurationError,
    HarnessError,
    MaxRoundsExceeded,
    ProviderError,
    SessionBusy,
    StateConflict,
)
from harness.events import AgentEvent
from harness.manifest import ContextManifest, Transform
from harness.markers import interrupted_result
from harness.messages import ContentPart, Message, ToolCall, agent_input, new_id, waiting_calls
from harness.policy import ContextPolicy, discovered_input_limit, requested_output
from harness.request import ModelRequest, ModelResponse, RequestIds, RunScope, SystemPart
from harness.sessions import open_store
from harness.sessions.recorder import SessionRecorder
from harness.sessions.store import MessageEvent, SessionKey, SessionStore
from harness.state import AgentState, StateKey
from harness.tokens import TokenEstimator
from harness.tokens.calibration import CalibratedEstimator, updated_factor
from harness.tools import Tool, ToolContext, as_tool, run_tool
from harness.types import Middleware, ModelClient, ProvidesTools, StreamingClient
from harness.workspace import Workspace


class RuntimeContext(msgspec.Struct, frozen=True, kw_only=True):
    """Who is calling: user, session and agent ids. Never sent to the model by itself."""

    user_id: str = ""
    """The end user's id."""
    session_id: str = "default"
    """The conversation's id; the same id continues the same state."""
    agent_id: str | None = None
    """Overrides the agent's id for this call."""
    attributes: dict[str, Any] | None = None
    """Application data for sources and tools (never rendered into the prompt)."""
    turn_id: str | None = None
    """The id of the caller's turn (it becomes the input message's id). A session logs a turn
    once: a call retried with the same turn id — after `StateConflict`, or from another process
    after a lost answer — goes on from the stored turn instead of appending it again. Default:
    a new id per turn, kept for a retry of the same input after a call that failed."""


class HarnessAgent:
    """An agent whose every model request is prepared by a middleware stack.

    Args:
        model: the model client (`providers.LiteLLMClient`, `providers.ScriptedModel` …).
        system_prompt: the agent's own stable instructions (first part of System). The
            attribute of that name can be set later: the next request uses the new text.
        tools: functions or `Tool` objects the model may call.
        stack: the middleware list, outermost first (default: `middleware.default_stack()`).
        policy: budget, estimator and observer (default: `ContextPolicy()`).
        workspace: a folder (``str`` or `pathlib.Path`) or fsspec URL for AGENTS.md, MEMORY.md, memory, knowledge and
            offloads (default: a private in-memory workspace of this agent alone,
            `Workspace.private`; long-term memory is then not recorded).
        agent_id: the agent's id, passed to sources and recorded in manifests.
        max_rounds: the most model requests one call may make.
        settings: provider settings passed with every request (temperature …).
        store: where sessions live durably: a `harness.sessions.SessionStore` or its URL
            (``sqlite:///path.db``, ``postgresql://…``). Default: ``.harness/sessions.db`` in
            a local workspace folder, a private in-memory database otherwise. Each round's
            messages, manifests, rewrites and state are committed in one transaction; a new
            process with the same store resumes a session where it stopped.
        permissions: which tool calls may run (`harness.permissions.ToolPermissions`);
            default: every call.
        approve: asked about calls the permissions mark ``ask`` (sync or async, returns
            whether to run it; an approval holds for that tool for the rest of the session);
            without it, ``ask`` means deny.
        keep_full_history: keep every message of a session in RAM
            (``AgentState.full_history``) after it is committed. Off by default: RAM holds
            the working history only, and `history` reads the full record from the store
            (``AgentState.full_history`` then holds only what the next commit will log).
        states: the in-process session states (the RAM cache of the store), keyed by
            `SessionKey` (user, agent, session): two users never share a state.
        abandon_after_s: how old the tool calls of a writer on another machine must be
            before this agent takes them as abandoned and answers them as interrupted
            (``None``: never; see `harness.agent.loop` on running tool calls).

    Raises:
        ConfigurationError: ``system_prompt`` is not a ``str`` (or another argument is invalid).
        WorkspaceError: when ``workspace`` is a file, or its folder cannot be created.
    """

    def __init__(
        self,
        *,
        model: ModelClient,
        system_prompt: str = "",
        tools: Iterable[Tool | Callable[..., Any]] = (),
        stack: Sequence[Middleware] | None = None,
        policy: ContextPolicy | None = None,
        workspace: Workspace | str | os.PathLike[str] | None = None,
        agent_id: str = "agent",
        max_rounds: int = 25,
        settings: dict[str, Any] | None = None,
        store: SessionStore | str | None = None,
        permissions: ToolPermissions | None = None,
        approve: Approver | None = None,
        keep_full_history: bool = False,
        states: MutableMapping[SessionKey, AgentState] | None = None,
        abandon_after_s: float | None = 3_600.0,
    ) -> None:
        if not isinstance(max_rounds, int) or max_rounds < 1:
            raise ConfigurationError(f"max_rounds must be a positive int, got {max_rounds!r}")
        if abandon_after_s is not None and not (
            isinstance(abandon_after_s, int | float) and abandon_after_s > 0
        ):
            raise ConfigurationError(
                f"abandon_after_s must be a positive number of seconds or None, got "
                f"{abandon_after_s!r}"
            )
        self.abandon_after_s = abandon_after_s
        self.writer_id = f"{_HOST}:{os.getpid()}:{new_id()}"
        """Who this agent is as a writer of sessions (recorded on the tool calls it runs)."""
        if stack is None:
            from middleware import default_stack

            stack = default_stack()
        self.client = model
        self.model = model.model
        self.system_prompt = system_prompt  # checked, and System built (the property)
        self.stack: list[Middleware] = list(stack)
        self.workspace: Workspace = (
            Workspace(workspace)
            if isinstance(workspace, str | os.PathLike)
            else workspace or Workspace.private()
        )
        self.agent_id = agent_id
        self.max_rounds = max_rounds
        self.settings = settings
        self.states: MutableMapping[SessionKey, AgentState] = states if states is not None else {}
        self.store: SessionStore = _store_for(store, self.workspace)
        self.keep_full_history = keep_full_history
        self.permissions = permissions or ToolPermissions()
        self.approve = approve
        self._recorders: dict[SessionKey, SessionRecorder] = {}
        self._failed_turns: OrderedDict[SessionKey, tuple[bytes, str]] = OrderedDict()
        """Per session, the input and turn id of the last call that failed (for its retry)."""
        self.tools: dict[str, Tool] = {}
        for item in [*tools, *self._middleware_tools()]:
            t = as_tool(item)
            if t.name in self.tools:
                raise ConfigurationError(
                    f"two tools are named {t.name!r}; tool names must be unique"
                )
            self.tools[t.name] = t
        self.policy = (policy or ContextPolicy()).resolve(self.model)
        self.input_limit = self.policy.input_limit(
            model.context_window(self.model), max_output=requested_output(settings)
        )
        self._limit_transforms: tuple[Transform, ...] = ()
        """What the input limit's origin adds to each request's record (a guessed window)."""
        self._schemas = tuple(t.schema for t in self.tools.values())
        self._streaming = model if isinstance(model, StreamingClient) else None
        """The client when it streams (checked once: a runtime-Protocol check is slow)."""
        self._watchers = [cast(WatchesCalls, m) for m in self.stack if _has(m, "watch_call")]
        self._handler = compose(self.stack, self._send)

    @property
    def system_prompt(self) -> str:
        """The agent's own instructions: the first part of System in every request.

        Setting it changes the requests prepared from then on (the next round of a call in
        progress, and every later call); the session and its history stay as they are.

        Raises:
            ConfigurationError: (on setting) the value is not a ``str``.
        """
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, text: str) -> None:
        if not isinstance(text, str):
            raise ConfigurationError(
                f"system_prompt must be a str (the agent's instructions), got {type(text).__name__}"
            )
        self._system_prompt = text
        self._system = (SystemPart(name="prompt", text=text),) if text else ()

    def _middleware_tools(self) -> list[Tool]:
        found: list[Tool] = []
        for middleware in self.stack:
            if _has(middleware, "tools"):
                found.extend(cast(ProvidesTools, middleware).tools())
        return found

    # ---------------------------------------------------------------- public
    def key(self, ctx: RuntimeContext | None = None) -> SessionKey:
        """Return whose session ``ctx`` names: its user, this agent (or its override), its id."""
        ctx = ctx or RuntimeContext()
        return SessionKey(ctx.user_id, ctx.agent_id or self.agent_id, ctx.session_id)

    async def load(self, ctx: RuntimeContext | None = None) -> AgentState:
        """Return the state of ``ctx``'s session, resumed from the store when not in memory."""
        key = self.key(ctx)
        state = self.states.get(key)
        recorder = self._recorders.get(key)
        if state is not None and recorder is not None:
            return state
        if state is None:
            recorder, state = await SessionRecorder.load(
                self.store, key, keep_full_history=self.keep_full_history
            )
            self.states[key] = state
        else:  # seeded in memory (states=...): recorded from here on
            recorder = SessionRecorder(self.store, key, keep_full_history=self.keep_full_history)
            recorder.seeded(state)
        self._recorders[key] = recorder
        return state

    async def history(self, ctx: RuntimeContext | None = None) -> list[Message]:
        """Return the session's full record of messages, read from the store, in order."""
        key = self.key(ctx)
        recorder = self._recorders.get(key)
        if recorder is not None and key in self.states:
            await recorder.commit(self.states[key])
        events = await self.store.events(key, limit=10**9, kinds=("message",))
        return [e.event.message for e in events if isinstance(e.event, MessageEvent)]

    async def compact(self, ctx: RuntimeContext | None = None, *, focus: str | None = None) -> str:
        """Ask for the session's history to be compacted before its next request.

        The request is committed with the session (`harness.compaction_request`), so the
        process that serves the next round honours it — here or another one on the same
        store; the summary then says what it was asked to ``focus`` on. Needs `Compaction`
        in the stack. Returns the request's token (the summary message carries it).

        Raises:
            StateConflict: another writer committed the session since it was loaded here.
        """
        key = self.key(ctx)
        state = await self.load(ctx)
        token = request_compaction(state, focus)
        await self._commit(key, state)
        return token

    def state(self, ctx: RuntimeContext | None = None) -> AgentState:
        """Return the in-memory state of ``ctx``'s session, creating it when new.

        A session of an earlier process is resumed by `load` (which `call` does first).
        """
        key = self.key(ctx)
        state = self.states.get(key)
        if state is None:
            state = AgentState(session_id=key.session_id)
            self.states[key] = state
        return state

    async def call(
        self, input: str | Message | Mapping[str, Any], ctx: RuntimeContext | None = None
    ) -> Message:
        """Run the loop until the model replies without tool calls; return that reply.

        Args:
            input: the user's turn: a ``str``, a `Message` or an OpenAI-format message dict
                (``{"role": "user", "content": ...}``). A tool message answering a call the
                last assistant turn left unanswered is accepted too. System text belongs in
                ``system_prompt`` or instructions, never in the input. Lone surrogates in
                the text are replaced (`harness.messages.clean_text`).
            ctx: who is calling (user, session, agent ids).

        Raises:
            InvalidInputError: the input is of another type, malformed, a system or
                assistant message, or a tool result answering no waiting call. Nothing is
                stored, and the session stays usable.
            ContextBuildError: a request could not be prepared (budget, pairs, sources …).
            ProviderError: the provider failed (after OverflowRetry, if in the stack).
            MaxRoundsExceeded: ``max_rounds`` requests were made without a final reply.
        """
        final: Message | None = None
        async with aclosing(self._events(input, ctx, live=False)) as events:
            async for event in events:
                if event.kind == "final":
                    final = event.message
        if final is None:  # pragma: no cover - stream_events always ends in final or raises
            raise MaxRoundsExceeded(f"no final reply after {self.max_rounds} rounds")
        return final

    async def stream_events(
        self, input: str | Message | Mapping[str, Any], ctx: RuntimeContext | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run the loop and yield its events as they happen.

        Each round yields ``context_build`` (the manifest) *before* the model is called —
        the request waits until the consumer has taken it —, then ``text_delta`` events as
        the model streams its answer (through the client's ``stream`` when it has one,
        otherwise the whole text as one delta; a thinking model's reasoning comes first, as
        ``reasoning_delta`` events), then ``text`` with the round's whole text,
        then a ``tool_call`` and a ``tool_result`` per call; ``final`` ends the call.
        Summary requests and warnings come as they happen, stamped with their round.

        Deltas are provisional, ``text`` is what the round said: a request that fails after
        some of its text was streamed (the stream broke, or the provider reported an
        overflow at its end) is followed by a ``warning`` with code ``stream_discarded`` —
        drop that round's deltas shown so far; OverflowRetry's retry then streams its answer
        anew, and a ``text`` event only ever follows the deltas of the answer kept.

        Iterate it in one task, and close it (``contextlib.aclosing``) to stop early: the
        request in flight is then cancelled. ``input`` is what `call` takes; it is checked
        before anything is stored.

        Raises:
            InvalidInputError: as in `call`, before the first event.
        """
        async with aclosing(self._events(input, ctx, live=True)) as events:
            async for event in events:
                yield event

    async def _events(
        self, input: str | Message | Mapping[str, Any], ctx: RuntimeContext | None, *, live: bool
    ) -> AsyncGenerator[AgentEvent, None]:
        ctx = ctx or RuntimeContext()
        key = self.key(ctx)
        state = await self.load(ctx)
        message = agent_input(input, state.working_history)  # nothing is stored before this
        message, retried = self._turn(key, ctx, message)
        recorder = self._recorders[key]
        outbox = _Outbox(recorder, live=live)
        run = RunScope(
            emit=outbox.emit,
            client=self.client,
            workspace=self.workspace,
            store=self.store,
            key=key,
            session=state.scratch,
        )
        run.slot(self, lambda: outbox)  # how `_ask` finds the call's consumer
        watch = self._watch(run, ctx)
        error: BaseException | None = None
        try:
            async with aclosing(
                self._rounds(message, retried, state, run, ctx, outbox, watch)
            ) as rounds:
                async for event in rounds:
                    yield event
            self._failed_turns.pop(key, None)
        except BaseException as exc:
            error = exc
            if isinstance(exc, SessionBusy):  # another writer is on it: read it anew next time
                self.states.pop(key, None)
                self._recorders.pop(key, None)
            if isinstance(exc, Exception) and not isinstance(exc, StateConflict):
                # The caller needs the original error more than a second one from the store
                # (a conflict drops the RAM copy).
                with anyio.CancelScope(shield=True), contextlib.suppress(HarnessError):
                    if run.slot(_Prepared, _Prepared).sent:
                        recorder.note_error(exc)  # the request was sent: record the round
                        await self._commit(key, state)
                    else:  # the stack refused it: the history stays as last committed
                        await self._refuse(key, state, exc)
            raise
        finally:
            _RUNNING.difference_update(run.slot(_Running, _Running).calls)
            watch.end(error if isinstance(error, Exception) else None)

    async def _commit(self, key: SessionKey, state: AgentState) -> None:
        """Commit the round to the store; on a conflict, forget the session's RAM copy."""
        recorder = self._recorders[key]
        try:
            await recorder.commit(state)
        except StateConflict:
            self.states.pop(key, None)
            self._recorders.pop(key, None)
            raise

    def _turn(self, key: SessionKey, ctx: RuntimeContext, message: Message) -> tuple[Message, bool]:
        """Return the input with its turn id, and whether the call may retry a stored turn.

        The turn id is ``ctx.turn_id``, else that of the session's last failed call when
        this input equals its input (a retry), else the message's own new id.
        """
        what = msgspec.json.encode((message.role, message.content, message.tool_call_id))
        failed = self._failed_turns.get(key)
        turn_id = ctx.turn_id or (failed[1] if failed is not None and failed[0] == what else None)
        self._failed_turns[key] = (what, turn_id or message.id)  # popped when the call ends well
        self._failed_turns.move_to_end(key)
        while len(self._failed_turns) > MAX_FAILED_TURNS:
            self._failed_turns.popitem(last=False)
        if turn_id is None:
            return message, False
        return message.replace(id=turn_id), True

    def _owner(self, calls: Sequence[ToolCall]) -> dict[str, Any]:
        """Return the record of this writer starting ``calls`` (kept in the session's state)."""
        return {
            "writer": self.writer_id,
            "host": _HOST,
            "pid": os.getpid(),
            "started": _own_start(),
            "calls": [c.id for c in calls],
            "at": time.time(),
        }

    def _check_running(self, key: SessionKey, state: AgentState, answered: str | None) -> None:
        """Refuse to answer, as interrupted, tool calls another writer is still running.

        Raises:
            SessionBusy: the session waits for calls whose writer is alive (see the module).
        """
        waiting = [c for c in waiting_calls(state.working_history) if c != answered]
        if not waiting:
            return
        owner = state.get(RUNNING_KEY)
        if owner is None or not set(waiting) & set(owner.get("calls", ())):
            return  # no writer known (a session stored before owners were): abandoned
        if not self._abandoned(key, owner, waiting):
            raise SessionBusy(
                f"session {key.session_id!r} waits for tool call(s) {', '.join(waiting)} that "
                f"writer {owner.get('writer')} started and is still running; try again once it "
                "has answered them (or, if that writer is gone for good on another machine, "
                f"after abandon_after_s={self.abandon_after_s})",
                call_ids=tuple(waiting),
                writer=str(owner.get("writer")),
                session_id=key.session_id,
            )

    def _abandoned(self, key: SessionKey, owner: dict[str, Any], waiting: list[str]) -> bool:
        """Return whether the writer of ``owner`` has provably stopped running ``waiting``."""
        if owner.get("host") == _HOST:
            pid = owner.get("pid")
            if pid == os.getpid():  # this process: it runs them only if it says so
                return not any((key, c) in _RUNNING for c in waiting)
            return not isinstance(pid, int) or not _alive(pid, owner.get("started"))
        at = owner.get("at")
        if self.abandon_after_s is None or not isinstance(at, int | float):
            return False
        return time.time() - at > self.abandon_after_s

    async def _stored_turn(self, key: SessionKey, state: AgentState, message: Message) -> bool:
        """Return whether the session holds the turn ``message`` already (in RAM or logged)."""
        if any(m.id == message.id for m in state.working_history):
            return True
        return bool(await self.store.messages(key, [message.id]))

    async def _refuse(self, key: SessionKey, state: AgentState, error: Exception) -> None:
        """Put the session back to its last commit and log the refused request."""
        recorder = self._recorders[key]
        try:
            await recorder.refuse(state, error)
        except StateConflict:
            self.states.pop(key, None)
            self._recorders.pop(key, None)
            raise

    async def _rounds(
        self,
        message: Message,
        retried: bool,
        state: AgentState,
        run: RunScope,
        ctx: RuntimeContext,
        outbox: _Outbox,
        watch: _Watches,
    ) -> AsyncGenerator[AgentEvent, None]:
        key = self.key(ctx)
        recorder = self._recorders[key]
        # A retried turn that was stored (a conflict or a lost answer after its commit) is
        # not appended again: the call goes on from the stored session.
        new = not (retried and await self._stored_turn(key, state, message))
        answered = message.tool_call_id if new and message.role == "tool" else None
        self._check_running(key, state, answered)
        if new and message.role == "tool":
            state.append(message)  # answers a waiting call; the others are interrupted
            recorder.mark_turn(message)
        interrupted = interrupted_results(state.working_history)
        if interrupted:
            state.append(*interrupted)
        if new and message.role == "user":
            state.append(message)
            recorder.mark_turn(message)
        # The window may be known better now (a server's metadata, an overflow's words).
        self.input_limit, self._limit_transforms = await discovered_input_limit(
            self.policy, self.client, self.model, max_output=requested_output(self.settings)
        )
        for round_no in range(self.max_rounds):
            outbox.round = round_no
            request = self._prepare(state, run, ctx)
            outcome: list[ModelResponse | Exception] = []
            outbox.start()
            if outbox.live:
                # The request runs in its own task; its events are yielded as they come.
                with watch.active():  # the task inherits the call's context (its span)
                    flight = _start_detached(self._answer, request, outbox, outcome)
                try:
                    while (event := await outbox.next()) is not None:
                        yield event
                        outbox.took_one()
                finally:
                    if not outbox.ended:  # the consumer stopped or was cancelled
                        flight.cancel()
                        with anyio.CancelScope(shield=True):
                            await outbox.end()
            else:
                with watch.active():
                    await self._answer(request, outbox, outcome)
            (answer,) = outcome
            if isinstance(answer, Exception):
                if not isinstance(answer, ProviderError):  # a provider error passed building
                    report_manifest(failed_manifest(request, answer), request)
                for event in outbox.drain():
                    yield event
                raise answer
            for event in outbox.drain():
                yield event
            watch.answered(answer)
            reply = answer.message
            if reply.role != "assistant":
                reply = reply.replace(role="assistant")
            state.append(reply)
            if reply.tool_calls:  # this writer runs them: only it may answer them as interrupted
                calls = run.slot(_Running, _Running).calls
                calls.update((key, c.id) for c in reply.tool_calls)
                _RUNNING.update(calls)
                state.set(RUNNING_KEY, self._owner(reply.tool_calls))
            if reply.text:
                yield AgentEvent(kind="text", round=round_no, text=reply.text)
            # One commit per round, once the model answered: the reply, the last round's
            # tool results, the manifests. A process killed while tools run resumes with
            # the calls unanswered, and the next call answers them as interrupted.
            await self._commit(key, state)
            if not reply.tool_calls:
                yield AgentEvent(kind="final", round=round_no, message=reply)
                return
            for call in reply.tool_calls:
                yield AgentEvent(kind="tool_call", round=round_no, tool_call=call)
                with watch.active():
                    result = await self._run_tool(call, state, run, ctx, watch)
                state.append(result)
                _RUNNING.discard((key, call.id))
                yield AgentEvent(kind="tool_result", round=round_no, message=result)
                for event in outbox.drain():  # what the tool emitted
                    yield event
        raise MaxRoundsExceeded(
            f"the agent made {self.max_rounds} model requests without a final reply; raise "
            "max_rounds or check that the tools give the model what it needs to finish",
            max_rounds=self.max_rounds,
        )

    # --------------------------------------------------------------- private
    async def _answer(
        self, request: ModelRequest, outbox: _Outbox, outcome: list[ModelResponse | Exception]
    ) -> None:
        """Run the chain for ``request``; put its response, or the error it raised, in ``outcome``.

        Once the chain returned, the history the round keeps (`ModelResponse.kept`) becomes
        the working history — unless the state changed since the request was prepared.
        """
        try:
            response = await self._handler(request)
            state, kept = request.state, response.kept
            if state is not None and kept is not None and state.version == request.state_version:
                prepared = request.run.slot(_Prepared, _Prepared) if request.run else None
                # The very tuple the round was prepared from, the state unchanged since: the
                # working history holds these messages already (no O(history) copy).
                if prepared is None or kept is not prepared.history:
                    state.commit_working(kept)
            outcome.append(response)
        except Exception as exc:  # raised again by the loop, in the consumer's task
            outcome.append(exc)
        finally:
            outbox.finish()

    def _watch(self, run: RunScope, ctx: RuntimeContext) -> _Watches:
        """Return the watches of this call by the stack's watching middleware (`Tracing`)."""
        if not self._watchers:
            return _NO_WATCH
        ids = RequestIds(
            agent_id=ctx.agent_id or self.agent_id,
            user_id=ctx.user_id,
            session_id=ctx.session_id,
            run_id=run.run_id,
            call_id=run.run_id,
        )
        return _Watches([w.watch_call(ids, self.client) for w in self._watchers])

    def _prepare(self, state: AgentState, run: RunScope, ctx: RuntimeContext) -> ModelRequest:
        policy = self.policy
        if policy.calibrate and policy.estimator is not None:
            held = state.scratch.slot(_Calibrated, _Calibrated)  # checks its base itself
            estimator = held.estimator(policy.estimator, state.calibration.get(self.model, 1.0))
            policy = policy.replace(estimator=estimator)
        ids = RequestIds(
            agent_id=ctx.agent_id or self.agent_id,
            user_id=ctx.user_id,
            session_id=ctx.session_id,
            run_id=run.run_id,
            call_id=new_id(),
        )
        history = tuple(state.working_history)
        prepared = run.slot(_Prepared, _Prepared)
        prepared.history = history  # what `_send` may leave as it is
        prepared.sent = False
        return ModelRequest(
            model=self.model,
            ids=ids,
            system=self._system,
            history=history,
            tools=self._schemas,
            settings=self.settings,
            policy=policy,
            input_limit=self.input_limit,
            transforms=self._limit_transforms,
            state=state,
            state_version=state.version,
            run=run,
        )

    async def _send(self, request: ModelRequest) -> ModelResponse:
        """The innermost handler: manifest and send (`_answer` commits what the round keeps)."""
        manifest = build_manifest(request)
        report_manifest(manifest, request)
        started = time.perf_counter()
        if request.run is not None and request.ids.purpose == "agent":
            request.run.slot(_Prepared, _Prepared).sent = True  # the stack accepted it
        response = await self._ask(request)
        if response.retries and request.run is not None and request.run.emit is not None:
            for retry in response.retries:  # waited-out rate limits and 5xx, made visible
                request.run.emit(
                    AgentEvent(kind="warning", code="provider_retry", text=retry.label)
                )
        state = request.state
        usage = response.usage
        calibrate = self.policy.calibrate and request.ids.purpose == "agent"
        if calibrate and state is not None and usage is not None:
            self._calibrate(state, request, manifest, usage.prompt_tokens)
        if usage is not None:
            manifest = answered(manifest, usage)
            if request.run is not None and request.run.emit is not None:
                ids = request.ids
                model = response.model or request.model
                request.run.emit(
                    AgentEvent(
                        kind="usage", usage=usage, call_id=ids.call_id, purpose=ids.purpose,
                        model=model,
                    )
                )  # fmt: skip
        return response.replace(
            manifest=manifest, latency_s=response.latency_s or time.perf_counter() - started
        )

    async def _ask(self, request: ModelRequest) -> ModelResponse:
        """Send ``request``; in a `stream_events` call, stream its text to the consumer."""
        outbox = request.run.slot(self, _no_outbox) if request.run is not None else None
        if outbox is None or not outbox.live:
            return await self.client.complete(request)
        await outbox.delivered()  # the consumer has the manifest before the model is called
        if self._streaming is not None:
            return await _streamed(self._streaming, request, outbox)
        response = await self.client.complete(request)
        message, round_no = response.message, outbox.round
        if message.reasoning_content:
            outbox.emit(
                AgentEvent(kind="reasoning_delta", round=round_no, text=message.reasoning_content)
            )
        if message.text:
            outbox.emit(AgentEvent(kind="text_delta", round=round_no, text=message.text))
        return response

    def _calibrate(
        self, state: AgentState, request: ModelRequest, manifest: ContextManifest, reported: int
    ) -> None:
        factor = manifest.calibration
        raw = round(manifest.estimated_input_tokens / factor)
        state.calibration[request.model] = updated_factor(factor, estimated=raw, reported=reported)

    async def _run_tool(
        self, call: ToolCall, state: AgentState, run: RunScope, ctx: RuntimeContext, watch: _Watches
    ) -> Message:
        with watch.tool(call) as tool_watches:
            content, denied = await self._tool_content(call, state, run, ctx)
            error = isinstance(content, str) and content.startswith("Error:")
            for tool_watch in tool_watches:
                tool_watch.outcome(error=error, denied=denied)
        return Message(role="tool", content=content, tool_call_id=call.id, name=call.name)

    async def _tool_content(
        self, call: ToolCall, state: AgentState, run: RunScope, ctx: RuntimeContext
    ) -> tuple[str | tuple[ContentPart, ...], bool]:
        """Return the result of ``call`` (text or parts), and whether the permissions denied it."""
        started = time.perf_counter()
        tool = self.tools.get(call.name)
        denial = await permission_denial(self.permissions, self.approve, call, state)
        text: str | tuple[ContentPart, ...]
        if denial is not None:
            text = denial
        elif tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            text = f"Error: there is no tool named {call.name!r}. Available tools: {known}."
        else:
            context = ToolContext(
                state=state,
                call=call,
                workspace=self.workspace,
                run=run,
                user_id=ctx.user_id,
                session_id=ctx.session_id,
            )
            text = await run_tool(tool, call.arguments, context)
        recorder = self._recorders.get(self.key(ctx))
        if recorder is not None:
            recorder.note_tool_run(
                call.name,
                call.id,
                time.perf_counter() - started,
                error=isinstance(text, str) and text.startswith("Error:"),
                denied=denial is not None,
            )
        return text, denial is not None


class _Prepared:
    """The working history a call's current round was prepared from (a `RunScope` slot)."""

    __slots__ = ("history", "sent")

    def __init__(self) -> None:
        self.history: tuple[Message, ...] | None = None
        self.sent = False
        """Whether the round's request passed the stack and went to the model: until then,
        what the round added is not committed as history (`SessionRecorder.refuse`)."""


class _Running:
    """The tool calls a call's rounds started and have not answered yet (a `RunScope` slot)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: set[tuple[SessionKey, str]] = set()


RUNNING_KEY: StateKey[dict[str, Any]] = StateKey(
    "agent/running_tool_calls", dict, former=("agent.running_tool_calls",)
)
"""The state naming the writer that started the last round's tool calls."""
_RUNNING: set[tuple[SessionKey, str]] = set()
"""The tool calls this process is running now, by session."""
_HOST = socket.gethostname()


def _process_start(pid: int) -> str | None:
    """Return when process ``pid`` started (Linux ``/proc``; ``None`` elsewhere or when gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else fields[19].decode()  # a zombie has ended


_STARTS: dict[int, str | None] = {}


def _own_start() -> str | None:
    """Return when this process started (read once per pid: a fork has its own)."""
    pid = os.getpid()
    if pid not in _STARTS:
        _STARTS[pid] = _process_start(pid)
    return _STARTS[pid]


def _alive(pid: int, started: object) -> bool:
    """Return whether process ``pid`` of this machine still runs (the one started then)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid exists
        pass
    now = _process_start(pid)
    if now is None:
        return not os.path.exists("/proc/self/stat")  # no /proc: trust the pid alone
    return started is None or now == started  # another start: the pid was reused


class _Calibrated:
    """The calibrated estimator a session counts with, kept while its factor stays put.

    Running totals are kept per estimator object (`harness.accounting`), so a new
    `CalibratedEstimator` every round would recount the whole history every round. The
    factor in use is the learned one rounded *up* to a step of 1/`STEPS` (never counting
    less than learned): a settled factor keeps its estimator, and its totals, across rounds
    and calls.
    """

    STEPS = 256

    __slots__ = ("_base", "_held")

    def __init__(self) -> None:
        self._base: object = None
        self._held: CalibratedEstimator | None = None

    def estimator(self, base: TokenEstimator, factor: float) -> CalibratedEstimator:
        """Return the estimator for ``base`` corrected by ``factor`` (rounded up to a step)."""
        stepped = math.ceil(factor * self.STEPS - 1e-9) / self.STEPS
        held = self._held
        if held is None or self._base is not base or held.factor != stepped:
            held = self._held = CalibratedEstimator(base, stepped)
            self._base = base
        return held


def interrupted_results(history: Sequence[Message]) -> list[Message]:
    """Return results for calls a cancelled call left unanswered at the end of the history.

    A call cancelled while its tools ran leaves an assistant message whose calls have no
    results; providers reject such a history, so the next call answers them first.
    """
    waiting = set(waiting_calls(history))
    if not waiting:
        return []
    last = next(m for m in reversed(history) if m.role == "assistant" and m.tool_calls)
    return [interrupted_result(c) for c in last.tool_calls if c.id in waiting]


def _has(middleware: object, method: str) -> bool:
    """Return whether ``middleware`` has ``method`` (is a one-method runtime Protocol's kind).

    That is what ``isinstance`` against such a Protocol checks, without its cost (~170 µs a
    check on Python 3.11, paid per middleware by every agent a server builds per request).
    """
    return getattr(middleware, method, None) is not None


def _store_for(store: SessionStore | str | None, workspace: Workspace) -> SessionStore:
    """Return the agent's store: the one given, opened from its URL, or the default."""
    if store is None:
        if workspace.local and not workspace.is_private:
            return open_store("sqlite:///" + f"{workspace.root}/{DEFAULT_STORE_PATH}".lstrip("/"))
        return open_store("sqlite://")
    if isinstance(store, str):
        return open_store(store)
    if not isinstance(store, SessionStore):
        raise ConfigurationError(
            f"store must be a SessionStore or its URL ('sqlite:///path.db', "
            f"'postgresql://…'), got {store!r}"
        )
    return store


MAX_FAILED_TURNS = 1_024
"""How many sessions' last failed turn an agent keeps for a retry (the oldest go first)."""

DEFAULT_STORE_PATH = ".harness/sessions.db"
"""Where an agent with a local workspace keeps its sessions, inside that workspace."""
