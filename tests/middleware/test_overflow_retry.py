"""OverflowRetry through the real agent loop: retry once, never re-run tools, give up cleanly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import anyio
import pytest

from harness import HarnessAgent, Message, ModelRequest, ModelResponse, RunScope, RuntimeContext
from harness.errors import (
    NOTHING_TO_COMPACT,
    ConfigurationError,
    ContextOverflowError,
    ProviderUnavailable,
)
from harness.manifest import Transform, TransformKind
from harness.sessions import SessionKey
from harness.state import AgentState
from harness.types import Handler, Middleware
from middleware._history import safe_cut
from middleware.overflow_retry import OverflowRetry
from middleware.pair_validation import PairValidation
from providers import ScriptedModel

CTX = RuntimeContext(session_id="s")


def overflow() -> ContextOverflowError:
    return ContextOverflowError("input too long for the window", provider="scripted", status=400)


KEEP_LAST: Final = TransformKind("keep_last")
"""A test middleware's own kind of transform."""


class KeepLast:
    """A small user compaction: on ``force_compaction`` keep only the last ``keep`` messages
    (moved back to a safe cut). Deterministic, so a second forced pass changes nothing."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.passes = 0

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        if request.force_compaction:
            self.passes += 1
            history = request.history
            cut = safe_cut(history, len(history) - self.keep)
            if cut <= 0:  # the protocol: a forced compaction that can shrink nothing says so
                raise ContextOverflowError("nothing to cut", reason=NOTHING_TO_COMPACT)
            request = request.replace(history=history[cut:]).with_transforms(
                Transform(KEEP_LAST, cut)
            )
        return await call_next(request)


class RunSpy:
    """Remembers the run scope, to check that OverflowRetry leaves no bookkeeping behind."""

    def __init__(self) -> None:
        self.runs: list[RunScope] = []

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        if request.run is not None:
            self.runs.append(request.run)
        return await call_next(request)


def long_history(n: int = 3, size: int = 4_000) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        out += [
            Message.user(f"{i}:" + "log line\n" * (size // 9), id=f"u{i}"),
            Message.assistant(f"ack {i}", id=f"a{i}"),
        ]
    return out


def make_agent(
    stack: Sequence[Middleware], model: ScriptedModel, history: Sequence[Message] = (), **kw: object
) -> HarnessAgent:
    state = AgentState(session_id="s", working_history=list(history), full_history=list(history))
    states = {SessionKey("", "agent", "s"): state}
    return HarnessAgent(model=model, stack=list(stack), states=states, **kw)  # type: ignore[arg-type]


def counting_tool() -> tuple[list[int], object]:
    runs: list[int] = []

    def count() -> str:
        """Count how often the tool ran."""
        runs.append(1)
        return f"ran {len(runs)} time(s)"

    return runs, count


async def test_an_overflow_is_retried_once_with_forced_compaction() -> None:
    model = ScriptedModel([overflow(), "ok"])
    agent = make_agent([OverflowRetry()], model)
    assert (await agent.call("go", CTX)).text == "ok"
    first, retry = model.agent_requests
    assert (first.force_compaction, retry.force_compaction) == (False, True)
    assert (first.transforms, retry.transforms) == ((), ("overflow_retry:1",))
    assert first.ids.call_id == retry.ids.call_id  # the same round, re-entered
    assert [m.id for m in retry.history] == [m.id for m in first.history]
    assert sum(m.text == "go" for m in await agent.history(CTX)) == 1  # task not re-submitted


async def test_tools_are_never_re_run() -> None:
    runs, count = counting_tool()
    model = ScriptedModel([ScriptedModel.tool_call("count"), overflow(), "done"])
    agent = make_agent([OverflowRetry()], model, tools=[count])
    assert (await agent.call("go", CTX)).text == "done"
    assert runs == [1]
    assert len(model.agent_requests) == 3
    retry = model.agent_requests[2]
    assert [m.text for m in retry.history if m.role == "tool"] == ["ran 1 time(s)"]
    assert [m.role for m in await agent.history(CTX)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_compaction_on_retry_lets_the_round_succeed() -> None:
    history = long_history()
    runs, count = counting_tool()
    probe = ScriptedModel(["x"])
    await make_agent([], probe, history, tools=[count]).call("go", CTX)
    too_big = ScriptedModel.prompt_tokens(probe.requests[0]) - 1  # the first round
    model = ScriptedModel([ScriptedModel.tool_call("count"), "done"], overflow_above=too_big)
    keep = KeepLast(keep=3)
    agent = make_agent([OverflowRetry(), keep, PairValidation()], model, history, tools=[count])
    assert (await agent.call("go", CTX)).text == "done"
    assert model.overflows == 1 and keep.passes == 1 and runs == [1]
    first, retry, last = model.agent_requests
    assert retry.transforms == ("overflow_retry:1", f"keep_last:{len(first.history) - 3}")
    assert [m.id for m in retry.history] == [m.id for m in first.history[-3:]]
    # The compacted history was committed: the next round does not overflow or compact again.
    assert last.force_compaction is False and last.history[:3] == retry.history
    assert len(await agent.history(CTX)) == len(history) + 4


async def test_nothing_to_compact_raises_the_original_error_without_resending() -> None:
    spy = RunSpy()
    keep = KeepLast(keep=3)
    model = ScriptedModel([overflow(), "never sent"])
    agent = make_agent([OverflowRetry(), spy, keep, PairValidation()], model)
    with pytest.raises(ContextOverflowError) as caught:
        await agent.call("go", CTX)
    error = caught.value
    assert "input too long for the window" in error.message
    assert "nothing more could be compacted" in error.message
    assert (error.reason, error.retries) == ("nothing_to_compact", 0)
    assert (error.provider, error.status) == ("scripted", 400)
    assert (
        isinstance(error.__cause__, ContextOverflowError)
        and error.__cause__.message == "input too long for the window"
    )
    assert len(model.agent_requests) == 1  # the identical retry was not sent
    assert list(model.script) == ["never sent"]
    assert len(spy.runs) == 2 and keep.passes == 1


async def test_without_a_compacting_middleware_the_retry_is_sent_as_it_is() -> None:
    model = ScriptedModel([overflow(), "accepted the second time"])
    agent = make_agent([OverflowRetry(), PairValidation()], model)
    assert (await agent.call("go", CTX)).text == "accepted the second time"
    first, retry = model.agent_requests
    assert [m.id for m in retry.history] == [m.id for m in first.history]


async def test_a_retry_that_overflows_too_reaches_the_caller() -> None:
    model = ScriptedModel([overflow(), overflow(), "never"])
    agent = make_agent([OverflowRetry()], model)
    with pytest.raises(ContextOverflowError) as caught:
        await agent.call("go", CTX)
    assert caught.value.reason == "retry_overflowed"
    assert "after 1 retry with forced compaction" in caught.value.message
    assert len(model.agent_requests) == 2 and list(model.script) == ["never"]


async def test_a_compacted_retry_that_still_overflows_reaches_the_caller() -> None:
    history = long_history()
    model = ScriptedModel(["never"], overflow_above=100)
    keep = KeepLast(keep=3)
    agent = make_agent([OverflowRetry(), keep, PairValidation()], model, history)
    with pytest.raises(ContextOverflowError) as caught:
        await agent.call("go", CTX)
    assert caught.value.reason == "retry_overflowed"
    assert model.overflows == 2 and keep.passes == 1
    assert [m.id for m in agent.state(CTX).working_history][:-1] == [
        m.id for m in history
    ]  # not committed


async def test_each_retry_forces_compaction_again() -> None:
    model = ScriptedModel(["never"], overflow_above=100)
    keep = KeepLast(keep=3)
    agent = make_agent(
        [OverflowRetry(max_retries=3), keep, PairValidation()], model, long_history()
    )
    with pytest.raises(ContextOverflowError) as caught:
        await agent.call("go", CTX)
    assert (caught.value.reason, caught.value.retries) == ("retry_overflowed", 3)
    assert model.overflows == 4 and keep.passes == 3


def test_a_compacting_middleware_outside_the_retry_is_refused_when_built() -> None:
    from middleware.compaction import Compaction

    with pytest.raises(ConfigurationError, match=r"Compaction stands before OverflowRetry"):
        HarnessAgent(model=ScriptedModel(), stack=[Compaction(), OverflowRetry()])


async def test_other_errors_are_not_retried() -> None:
    model = ScriptedModel([ProviderUnavailable("down; retry later", provider="scripted"), "never"])
    agent = make_agent([OverflowRetry()], model)
    with pytest.raises(ProviderUnavailable):
        await agent.call("go", CTX)
    assert len(model.agent_requests) == 1


async def test_max_retries_zero_passes_the_overflow_through() -> None:
    original = overflow()
    model = ScriptedModel([original, "never"])
    agent = make_agent([OverflowRetry(max_retries=0)], model)
    with pytest.raises(ContextOverflowError) as caught:
        await agent.call("go", CTX)
    assert caught.value is original and len(model.agent_requests) == 1


async def test_cancellation_is_not_caught_or_retried() -> None:
    async def hang(request: ModelRequest) -> str:
        await anyio.sleep(10)
        return "never"

    model = ScriptedModel([hang, "never"])
    agent = make_agent([OverflowRetry()], model)
    with anyio.move_on_after(0.05) as scope:
        await agent.call("go", CTX)
    assert scope.cancelled_caught
    assert len(model.agent_requests) == 1


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_bad_max_retries_is_rejected(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        OverflowRetry(max_retries=bad)  # type: ignore[arg-type]


async def test_with_compaction_one_overflow_means_one_compaction_and_one_retry() -> None:
    from middleware.compaction import Compaction

    history = long_history(n=4)
    runs, count = counting_tool()

    def count_big() -> str:
        """Run the counted tool and return a longish output."""
        assert callable(count)
        count()
        return "output line\n" * 200

    probe = ScriptedModel(["x"])
    await make_agent([], probe, history, tools=[count_big]).call("go", CTX)
    first_round = ScriptedModel.prompt_tokens(probe.requests[0])
    # Round 1 fits; round 2 (with the tool's output) overflows until compacted.
    model = ScriptedModel(
        [ScriptedModel.tool_call("count_big"), "done"], overflow_above=first_round + 100
    )
    # The first message stays pinned, so the one summary request holds only what the
    # overflowing request held beyond it (the model's tiny window would refuse more).
    compaction = Compaction(pin_first_task=True)
    agent = make_agent(
        [OverflowRetry(), compaction, PairValidation()], model, history, tools=[count_big]
    )
    assert (await agent.call("go", CTX)).text == "done"

    assert runs == [1]  # the tool ran once, before the overflow, and was not re-run
    assert model.overflows == 1
    summaries = [r for r in model.requests if r.ids.purpose == "summary"]
    assert len(summaries) == 1
    _round1, overflowed, retry = model.agent_requests
    assert overflowed.transforms == ()
    assert retry.force_compaction and retry.transforms[0] == "overflow_retry:1"
    assert sum(t.startswith("history_compaction:") for t in retry.transforms) == 1
    assert retry.ids.call_id == overflowed.ids.call_id
    # The tool's call and result survive compaction once each, still paired.
    assert [m.text for m in retry.history if m.role == "tool"] == ["output line\n" * 200]
    assert len(retry.history) < len(overflowed.history)
    assert sum(m.text == "go" for m in await agent.history(CTX)) == 1
