"""Agent sessions for the context benchmarks, and how they are replayed through an agent.

Two sources; every benchmark names the one it used (`Session.label`):

- ``swe-agent-trajectories`` (real): the SWE-agent runs in ``../shared/data`` next to the
  project root, read by `benchmarks.trajectories`. A run's system message becomes the
  agent's system prompt (the first run's, for a replayed session), never history.
  To reach long sessions the runs are replayed **back to back**, every copy with **fresh
  message ids and fresh tool-call ids**, so caches keyed by id and pair checks see new
  messages, as in a real long session.
  Where a recording continues with a user message right after tool results, a one-line
  assistant reply is inserted (the agent loop always asks the model after tool results).
- ``synthetic``: when ``../shared`` is absent (a user's clone), runs generated from a fixed
  seed by `benchmarks.generators.synthetic_trajectories`: a task, then rounds of an
  assistant thought with a tool call and a realistic tool output — Python code, tracebacks,
  file listings, JSON, logs — and now and then a user follow-up.

`replay` drives a real `HarnessAgent` through a session: every user message of the session
starts an ``agent.call``, the model's replies are the session's own assistant messages
(`ReplayClient` wraps any model client — ``ScriptedModel`` or a real provider — and swaps
the reply for the recorded one after the request was sent), and the tool results come from
the recording (`replay_tools`). So each system in a benchmark sees the same messages at the
same points, and the agent's working history evolves as it would in production.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from benchmarks.generators import synthetic_trajectories
from benchmarks.trajectories import (
    NO_OUTPUT,
    SHARED,
    Trajectory,
    load_trajectories,
)
from harness.messages import Message
from harness.request import ModelRequest
from harness.tools import Tool, ToolContext
from harness.types import ProvidesTools
from providers.scripted import ScriptedModel

if TYPE_CHECKING:
    from harness.agent.loop import HarnessAgent, RuntimeContext
    from harness.request import ModelRequest, ModelResponse
    from harness.types import ModelClient

Source = Literal["auto", "real", "synthetic"]


BRIDGE = "Noted; continuing."
"""The assistant reply inserted where a recording has a user message right after tool results."""


def loop_ready(messages: Sequence[Message]) -> list[Message]:
    """Return ``messages`` in a shape the agent loop produces.

    After tool results the loop always asks the model, so where a recording goes on with a
    user message instead, a short assistant reply (`BRIDGE`) is inserted before it.
    """
    out: list[Message] = []
    for message in messages:
        if message.role == "user" and out and out[-1].role == "tool":
            out.append(Message.assistant(BRIDGE, id=f"{message.id}-bridge"))
        out.append(message)
    return out


# --------------------------------------------------------------------------- sessions
@dataclass(frozen=True)
class Session:
    """A long session: runs replayed back to back, with the system prompt split off."""

    name: str
    """``swe-agent-trajectories`` or ``synthetic``."""
    source: Literal["real", "synthetic"]
    description: str
    """How it was built (runs, copies, fresh ids)."""
    system_prompt: str
    messages: tuple[Message, ...]
    copies: int = 1
    """How many times the runs were replayed back to back (started, not necessarily finished)."""

    @property
    def label(self) -> str:
        """One line naming the workload for a benchmark's output."""
        return f"{self.name} ({self.source}): {self.description}; {len(self.messages):,} messages"

    @property
    def chars(self) -> int:
        """Characters of message text in the session."""
        return sum(len(m.text) + sum(len(c.arguments) for c in m.tool_calls) for m in self.messages)


def _fresh_call_id(call_id: str, copy: int) -> str:
    digest = hashlib.sha1(f"{copy}:{call_id}".encode()).hexdigest()[:24]
    return f"call_{digest}"


def fresh_copy(messages: Sequence[Message], copy: int) -> list[Message]:
    """Return ``messages`` with new message ids and new tool-call ids (consistently mapped)."""
    out: list[Message] = []
    for index, message in enumerate(messages):
        changes: dict[str, Any] = {"id": f"c{copy}m{index}"}
        if message.tool_calls:
            changes["tool_calls"] = tuple(
                msgspec.structs.replace(c, id=_fresh_call_id(c.id, copy))
                for c in message.tool_calls
            )
        if message.tool_call_id is not None:
            changes["tool_call_id"] = _fresh_call_id(message.tool_call_id, copy)
        out.append(message.replace(**changes))
    return out


def base_trajectories(
    source: Source = "auto", *, seed: int = 0, shared: Path = SHARED
) -> tuple[Literal["real", "synthetic"], list[Trajectory]]:
    """Return the runs to build sessions from: the real ones when present (``auto``)."""
    if source in ("auto", "real"):
        runs = load_trajectories(shared / "data" / "swe-agent-trajectories")
        if runs:
            return "real", runs
        if source == "real":
            raise FileNotFoundError(
                f"no SWE-agent trajectories under {shared / 'data'}; use source='synthetic' "
                "or place the shared data next to the project"
            )
    return "synthetic", synthetic_trajectories(seed=seed)


def make_session(
    min_messages: int, *, source: Source = "auto", seed: int = 0, shared: Path = SHARED
) -> Session:
    """Replay the runs back to back until the session has at least ``min_messages`` messages.

    Every copy gets fresh message ids and fresh tool-call ids.
    """
    kind, runs = base_trajectories(source, seed=seed, shared=shared)
    one_pass = loop_ready([m for run in runs for m in run.messages])
    if not one_pass:
        raise ValueError("the trajectories hold no messages")
    messages: list[Message] = []
    copies = 0
    while len(messages) < max(1, min_messages):
        messages.extend(fresh_copy(one_pass, copies))
        copies += 1
    messages = loop_ready(messages)  # the seams between copies
    name = "swe-agent-trajectories" if kind == "real" else "synthetic"
    what = (
        f"{len(runs)} SWE-agent runs"
        if kind == "real"
        else f"{len(runs)} generated runs (seed {seed})"
    )
    description = (
        f"{what} replayed back to back ×{copies} with fresh message and tool-call ids per copy"
        if copies > 1
        else f"{what}, once"
    )
    return Session(name, kind, description, runs[0].system, tuple(messages), copies)


def request_ready(messages: Sequence[Message], n: int) -> tuple[Message, ...]:
    """Return the longest prefix of at most ``n`` messages that a model request may follow.

    It ends with a user message, a complete tool-call group, or an assistant reply without
    calls — never in the middle of a tool-call group.
    """
    end = min(n, len(messages))
    while end > 0:
        last = messages[end - 1]
        if last.role == "assistant" and last.tool_calls:
            end -= 1
            continue
        if last.role == "tool":
            start = end - 1
            while start > 0 and messages[start - 1].role == "tool":
                start -= 1
            caller = messages[start - 1] if start > 0 else None
            answered = {m.tool_call_id for m in messages[start:end]}
            if caller is None or {c.id for c in caller.tool_calls} - answered:
                end = start - 1 if caller is not None else start
                continue
        break
    return tuple(messages[:end])


def history(n: int, *, source: Source = "auto", seed: int = 0, shared: Path = SHARED) -> Session:
    """Return a session of (about) ``n`` messages that ends where a model request is due."""
    session = make_session(n, source=source, seed=seed, shared=shared)
    cut = request_ready(session.messages, n)
    return Session(
        session.name,
        session.source,
        session.description,
        session.system_prompt,
        cut,
        session.copies,
    )


def tool_results(session: Session) -> list[Message]:
    """Return the session's tool results (or user observations when it has none), in order."""
    found = [m for m in session.messages if m.role == "tool" and m.text != NO_OUTPUT]
    return found or [m for m in session.messages if m.role == "user"]


def request_points(messages: Sequence[Message]) -> list[int]:
    """Return where the model is asked: before each assistant message, and at the end
    when the session ends with a user message or tool results (a request is due there)."""
    points = [i for i, m in enumerate(messages) if m.role == "assistant"]
    if messages and messages[-1].role in ("user", "tool"):
        points.append(len(messages))
    return points


def call_arguments(arguments: str) -> dict[str, Any]:
    """Return a tool call's arguments as a dict (``{"__raw__": text}`` when not a JSON object)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"__raw__": arguments}
    return value if isinstance(value, dict) else {"__value__": value}


# -------------------------------------------------------------------------- replaying
@dataclass
class ReplayClient:
    """A model client that sends every request to ``inner`` and answers from the recording.

    The request really reaches ``inner`` (a ``ScriptedModel`` or a real provider through
    ``LiteLLMClient``), which is what is measured; the reply the agent continues with is the
    session's next recorded assistant message, so the session unfolds as recorded whatever
    the provider answered. Summary requests (compaction) get ``inner``'s own answer.
    """

    inner: ModelClient
    messages: Sequence[Message]
    position: int = 0
    """Where the next recorded reply is: `replay` sets it when a call starts, each answered
    agent request moves it past the reply and its recorded results (kept here, not read from
    the agent's state: RAM need not hold the full history)."""
    responses: list[ModelResponse] = field(default_factory=list)
    """Every response ``inner`` gave to an agent request, in order."""
    log: list[dict[str, Any]] = field(default_factory=list)
    """One entry per agent request sent to ``inner``: call id, latency, usage or error."""
    model: str = field(init=False)
    """The inner client's model name."""

    def __post_init__(self) -> None:
        self.model = self.inner.model

    def context_window(self, model: str | None = None) -> int | None:
        """Return the inner client's window."""
        return self.inner.context_window(model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to ``inner``; answer agent requests with the recorded reply."""
        agent = request.ids.purpose == "agent" and request.state is not None
        started = time.perf_counter()
        try:
            response = await self.inner.complete(request)
        except Exception as exc:  # logged and passed on unchanged (OverflowRetry handles some)
            if agent:
                self.log.append(
                    {
                        "call_id": request.ids.call_id,
                        "error": type(exc).__name__,
                        "latency_s": time.perf_counter() - started,
                    }
                )
            raise
        if not agent or request.state is None:
            return response
        self.responses.append(response)
        usage = response.usage
        self.log.append(
            {
                "call_id": request.ids.call_id,
                "error": None,
                "latency_s": response.latency_s or time.perf_counter() - started,
                "prompt_tokens": usage.prompt_tokens if usage is not None else None,
            }
        )
        position = self.position
        reply = self.messages[position] if position < len(self.messages) else None
        if reply is None or reply.role != "assistant":
            self.position = len(self.messages)
            reply = Message.assistant("(end of the recorded session)")
        else:
            position += 1
            while position < len(self.messages) and self.messages[position].role == "tool":
                position += 1
            self.position = position
        return response.replace(message=reply)


class RecordedTool(Tool):
    """A tool that answers each call with the next recorded result of a call with its id.

    Recordings reuse call ids (SWE-agent runs do, within one run), so the results of one id
    are handed out in the order they were recorded. Its schema lists the argument names the
    recording used (all optional); the arguments themselves are not validated, since
    recorded calls may use names a Python function cannot declare (``replace-all``) or
    arguments the recorded tool rejected.
    """

    def __init__(
        self, name: str, keys: Sequence[str], results: dict[str | None, deque[str]]
    ) -> None:
        super().__init__(_signature(name, keys), name=name, description=f"Replayed tool {name}.")
        self.results = results

    async def run(self, arguments: str, context: ToolContext) -> str:
        """Return the next recorded result of ``context.call``'s id."""
        queue = self.results.get(context.call.id)
        return queue.popleft() if queue else NO_OUTPUT


def replay_tools(messages: Sequence[Message], *, skip: Sequence[str] = ()) -> list[Tool]:
    """Return one `RecordedTool` per tool name called in ``messages`` (except ``skip``)."""
    results: dict[str | None, deque[str]] = {}
    for m in messages:
        if m.role == "tool":
            results.setdefault(m.tool_call_id, deque()).append(m.text)
    fields: dict[str, set[str]] = {}
    for m in messages:
        for call in m.tool_calls:
            keys = fields.setdefault(call.name, set())
            keys.update(
                k for k in call_arguments(call.arguments) if k.isidentifier() and k != "context"
            )
    return [
        RecordedTool(name, sorted(keys), results)
        for name, keys in sorted(fields.items())
        if name not in skip
    ]


def stack_tool_names(stack: Sequence[object]) -> list[str]:
    """Return the names of the tools the middleware of ``stack`` give the agent (sorted).

    Replays skip these names: the stack's own tool (``read_file``, ``todo_write``) serves them.
    """
    return sorted({t.name for m in stack if isinstance(m, ProvidesTools) for t in m.tools()})


def _signature(name: str, keys: Sequence[str]) -> Callable[..., Any]:
    """Return a function whose signature declares ``keys`` (for the tool's schema only)."""

    async def recorded(**_: Any) -> str:
        return NO_OUTPUT

    params = [
        inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any)
        for k in keys
    ]
    recorded.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    recorded.__annotations__ = {**dict.fromkeys(keys, Any), "return": str}
    recorded.__name__ = name
    return recorded


@dataclass
class ReplayOutcome:
    """What happened while a session was replayed through an agent."""

    calls: int = 0
    """``agent.call`` invocations (one per user message that a reply follows)."""
    failures: list[str] = field(default_factory=list)
    """Errors that stopped a call (type and message); the replay went on after each."""


async def replay(
    agent: HarnessAgent,
    session: Session,
    ctx: RuntimeContext,
    client: ReplayClient,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayOutcome:
    """Feed ``session`` into ``agent`` call by call; the agent's client must be ``client``.

    A user message followed by an assistant message (or ending the session) starts an
    ``agent.call``; other messages (a user message followed by another, a leading assistant
    message) are appended to the state directly. After a failed call the rest of that
    call's recorded messages are appended directly, so the next call starts where the
    recording does.
    """
    from harness.errors import HarnessError

    state = agent.state(ctx)
    base = len(await agent.history(ctx))
    messages = session.messages
    outcome = ReplayOutcome()
    position = 0
    while position < len(messages):
        message = messages[position]
        follows = messages[position + 1] if position + 1 < len(messages) else None
        if message.role != "user" or (follows is not None and follows.role != "assistant"):
            state.append(message)
            position += 1
            continue
        outcome.calls += 1
        client.position = position + 1
        try:
            await agent.call(message, ctx)
        except HarnessError as exc:
            outcome.failures.append(f"{type(exc).__name__}: {exc}"[:300])
            end = position + 1
            while end < len(messages) and messages[end].role != "user":
                end += 1
            done = len(await agent.history(ctx)) - base  # what the session logged
            if done < end:
                state.append(*messages[max(done, position + 1) : end])
            client.position = end
        position = client.position
        if progress is not None:
            progress(position, len(messages))
    return outcome


FIXED_SUMMARY = (
    "## Session goal\nFix the reported bug in the repository and keep the test suite green.\n"
    "## Key conclusions\n"
    + "".join(
        f"- Step {i}: inspected the failing module, confirmed the cause and noted the fix.\n"
        for i in range(1, 13)
    )
    + "## Files and artefacts\n- src/module.py (edited), tests/test_module.py (added), "
    "reproduce.py (scratch)\n## Next steps\nRe-run the reproduction script and the tests, "
    "then submit."
)
"""The fixed-size summary every system's summariser returns in the benchmarks (~300 tokens)."""


def replay_turns(
    outputs: Sequence[Message], warm: int
) -> tuple[Callable[[ModelRequest], Message], Callable[[str], Awaitable[str]]]:
    """Return a scripted reply and its ``bash`` tool for ``warm`` replayed tool rounds.

    The reply asks for ``bash`` ``warm`` times, then answers ``Done.``; each ``bash`` call
    returns the next recorded output (cycling through ``outputs``).
    """
    served = {"rounds": 0}

    def reply(request: ModelRequest) -> Message:
        served["rounds"] += 1
        if served["rounds"] <= warm:
            return ScriptedModel.tool_call("bash", {"command": f"step {served['rounds']}"})
        return Message.assistant("Done.")

    async def bash(command: str) -> str:
        """Run a shell command (replayed output).

        Args:
            command: the command line.
        """
        return outputs[(served["rounds"] - 1) % len(outputs)].text

    return reply, bash
