"""PairValidation (and the pairing helpers of middleware._history) through the real agent."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import (
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    ModelResponse,
    RuntimeContext,
    ToolCall,
)
from harness.accounting import estimate_request
from harness.agent.loop import interrupted_results
from harness.errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    InvalidToolPairs,
    StateConflict,
)
from harness.manifest import Transform, TransformKind
from harness.markers import INTERRUPTED, INTERRUPTED_TEXT
from harness.presend.pairs import (
    _plan,
    check_pairs,
    label,
    pairs_valid,
    repair_pairs,
    safe_cut,
    units,
)
from harness.sessions import SessionKey
from harness.state import AgentState
from harness.tokens import shared_exact
from harness.types import Handler, Middleware
from middleware.pair_validation import Mode, PairValidation
from providers import ScriptedModel

CTX = RuntimeContext(session_id="s")


# ----------------------------------------------------------------- builders
def A(*ids: str, id: str | None = None) -> Message:
    """An assistant message calling tools ``ids``."""
    return Message.assistant(
        None,
        tool_calls=[ToolCall(id=i, name=f"tool_{i}") for i in ids],
        id=id or f"A-{'-'.join(ids)}",
    )


def T(call_id: str, id: str | None = None) -> Message:
    """The result of call ``call_id``."""
    return Message.tool(
        call_id, f"result of {call_id}", name=f"tool_{call_id}", id=id or f"T-{call_id}"
    )


def U(text: str) -> Message:
    return Message.user(text, id=f"U-{text}")


def agent_with(
    history: Sequence[Message],
    *stack: Middleware,
    model: ScriptedModel | None = None,
    manifests: list[ContextManifest] | None = None,
    max_input_tokens: int | None = None,
    tools: Sequence[Callable[..., Any]] = (),
) -> tuple[HarnessAgent, ScriptedModel]:
    model = model or ScriptedModel(default="ok")
    state = AgentState(session_id="s", working_history=list(history), full_history=list(history))
    policy = ContextPolicy(
        observer=manifests.append if manifests is not None else None,
        max_input_tokens=max_input_tokens,
    )
    agent = HarnessAgent(
        model=model,
        stack=list(stack),
        policy=policy,
        states={SessionKey("", "agent", "s"): state},
        tools=tools,
    )
    return agent, model


def ids(messages: Sequence[Message]) -> list[str]:
    return [m.id for m in messages]


def oracle_valid(history: Sequence[Message]) -> bool:
    """The rule, stated independently: results directly follow their call, one each."""
    i = 0
    while i < len(history):
        message = history[i]
        i += 1
        if message.role == "tool":
            return False
        if message.role == "assistant" and message.tool_calls:
            wanted = Counter(c.id for c in message.tool_calls)
            got: Counter[str | None] = Counter()
            while i < len(history) and history[i].role == "tool":
                got[history[i].tool_call_id] += 1
                i += 1
            if got != wanted:
                return False
    return True


TEST: Final = TransformKind("test")
"""A user middleware's own kind of transform."""


class Marker:
    """A user middleware that records a transform, to see it in failure manifests."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        return await call_next(request.with_transforms(Transform(TEST, "marker")))


# ------------------------------------------------------- fixed cases, both modes
CASES = {
    "dangling": (
        # (a trailing dangling group is answered by the agent itself; see test_agent)
        [U("1"), A("a", "b"), T("a"), U("x")],
        {"dangling_calls": ("b",), "orphan_results": (), "misplaced_results": ()},
        ["U-1", "A-a-b", "T-a", "A-a-b~interrupted1", "U-x", "U-go"],
        ("pair_repair:dangling:b",),
    ),
    "orphan": (
        [U("1"), T("z"), A("a"), T("a")],
        {"dangling_calls": (), "orphan_results": ("z",), "misplaced_results": ()},
        ["U-1", "A-a", "T-a", "U-go"],
        ("pair_repair:orphan:z",),
    ),
    "after_another_message": (
        [U("1"), A("a"), U("interrupt"), T("a")],
        {"dangling_calls": (), "orphan_results": (), "misplaced_results": ("a",)},
        ["U-1", "A-a", "T-a", "U-interrupt", "U-go"],
        ("pair_repair:moved:a",),
    ),
    "before_its_call": (
        [U("1"), T("a"), A("a"), U("x")],
        {"dangling_calls": (), "orphan_results": (), "misplaced_results": ("a",)},
        ["U-1", "A-a", "T-a", "U-x", "U-go"],
        ("pair_repair:moved:a",),
    ),
    "duplicate_result": (
        [A("a"), T("a"), T("a", id="T-a-again")],
        {"dangling_calls": (), "orphan_results": ("a",), "misplaced_results": ()},
        ["A-a", "T-a", "U-go"],
        ("pair_repair:orphan:a",),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_fail_mode_refuses_broken_pairs_without_calling_the_model(case: str) -> None:
    history, fields, _, _ = CASES[case]
    manifests: list[ContextManifest] = []
    agent, model = agent_with(history, Marker(), PairValidation(), manifests=manifests)
    with pytest.raises(InvalidToolPairs) as caught:
        await agent.call(U("go"), CTX)
    error = caught.value
    assert error.validation == "invalid_tool_pairs"
    assert error.dangling_calls == fields["dangling_calls"]
    assert error.orphan_results == fields["orphan_results"]
    assert error.misplaced_results == fields["misplaced_results"]
    assert "mode='repair'" in error.message
    assert model.requests == []
    (manifest,) = manifests
    assert manifest.validation == "invalid_tool_pairs" and manifest.transforms == ("test:marker",)
    assert ids(agent.state(CTX).working_history) == ids(history)  # the refused turn is not kept


@pytest.mark.parametrize("case", sorted(CASES))
async def test_repair_mode_fixes_pairs_and_records_transforms(case: str) -> None:
    history, _, expected_ids, transforms = CASES[case]
    agent, model = agent_with(history, PairValidation(mode="repair"))
    assert (await agent.call(U("go"), CTX)).text == "ok"
    (request,) = model.requests
    assert ids(request.history) == expected_ids
    assert request.transforms == transforms
    assert oracle_valid(request.history)
    synthetic = [m for m in request.history if m.meta(INTERRUPTED)]
    assert all(m.text == INTERRUPTED_TEXT for m in synthetic)
    # The repaired history was committed: the next call needs no repair.
    await agent.call("next", CTX)
    assert model.requests[1].transforms == ()


async def test_valid_pairs_pass_unchanged() -> None:
    history = [U("1"), A("a", "b"), T("b"), T("a"), Message.assistant("text"), A("c"), T("c")]
    for mode in ("fail", "repair"):
        agent, model = agent_with(history, PairValidation(mode=mode))
        await agent.call(U("go"), CTX)
        assert ids(model.requests[0].history) == ids([*history, U("go")])
        assert model.requests[0].transforms == ()


@pytest.mark.parametrize("mode", ["fail", "repair"])
async def test_a_call_cancelled_mid_tool_on_the_next_call(mode: Mode) -> None:
    async def slow() -> str:
        """A tool that takes too long."""
        await anyio.sleep(10)
        return "late"

    model = ScriptedModel([ScriptedModel.tool_call("slow", id="cut"), "answer"])
    agent, _ = agent_with([], PairValidation(mode=mode), model=model, tools=[slow])
    with anyio.move_on_after(0.05) as scope:
        await agent.call(U("1"), CTX)
    assert scope.cancelled_caught
    # The session holds the call without a result; the agent answers it on the next call,
    # so the pairs are valid before PairValidation even looks (in both modes).
    assert (await agent.call(U("go"), CTX)).text == "answer"
    second = model.requests[1]
    assert not [t for t in second.transforms if t.startswith("pair_repair")]
    assert [m.role for m in second.history] == ["user", "assistant", "tool", "user"]
    assert second.history[2].text == INTERRUPTED_TEXT
    assert second.history[2].tool_call_id == "cut" and second.history[2].name == "slow"


# ------------------------------------------------------------------ budget
async def test_budget_is_checked_on_the_final_request() -> None:
    history = [U("x" * 4_000)]
    probe_agent, probe = agent_with(history, PairValidation())
    await probe_agent.call(U("go"), CTX)
    needed = estimate_request(probe.requests[0], shared_exact("o200k"))  # exact near the limit

    agent, model = agent_with(history, PairValidation(), max_input_tokens=needed)
    await agent.call(U("go"), CTX)  # exactly at the limit: sent
    assert len(model.requests) == 1

    manifests: list[ContextManifest] = []
    agent, model = agent_with(
        history, Marker(), PairValidation(), max_input_tokens=needed - 1, manifests=manifests
    )
    with pytest.raises(ContextBudgetExceeded) as caught:
        await agent.call(U("go"), CTX)
    assert caught.value.required_tokens == needed and caught.value.limit == needed - 1
    assert "BudgetFit" in caught.value.message
    assert model.requests == []
    assert [m.validation for m in manifests] == ["budget_exceeded"]
    assert manifests[0].transforms == ("test:marker",)


async def test_budget_counts_the_synthetic_results_of_a_repair() -> None:
    history = [U("1"), A(*[f"c{i}" for i in range(40)])]
    probe_agent, probe = agent_with(history, PairValidation(mode="repair"))
    await probe_agent.call(U("go"), CTX)
    repaired = estimate_request(probe.requests[0])
    unrepaired = estimate_request(probe.requests[0].replace(history=(*history, U("go"))))
    assert repaired > unrepaired
    agent, model = agent_with(history, PairValidation(mode="repair"), max_input_tokens=repaired - 1)
    with pytest.raises(ContextBudgetExceeded):
        await agent.call(U("go"), CTX)
    assert model.requests == []


# ---------------------------------------------------------- state conflicts
class TouchesTodos:
    """A (misbehaving) user middleware that changes structured state during preparation."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        assert request.state is not None
        request.state.set_extension("todos", ["sneaky"])
        return await call_next(request)


class AppendsMessage:
    """A (misbehaving) user middleware that appends to the history during preparation."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        assert request.state is not None
        request.state.append(Message.user("written meanwhile", id="U-meanwhile"))
        return await call_next(request)


class RevisesLastAndTouches:
    """Rewrites the last message (as offload does) and changes structured state."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        assert request.state is not None
        request.state.touch()
        last = request.history[-1].revise("shrink", content="short")
        return await call_next(request.replace(history=(*request.history[:-1], last)))


@pytest.mark.parametrize(
    ("middleware", "kind"),
    [
        (TouchesTodos(), "state_conflict"),
        (AppendsMessage(), "history_conflict"),
        (RevisesLastAndTouches(), "state_conflict"),
    ],
)
async def test_state_changed_during_preparation_is_a_conflict(
    middleware: Middleware, kind: str
) -> None:
    manifests: list[ContextManifest] = []
    agent, model = agent_with(
        [U("1")], middleware, PairValidation(mode="repair"), manifests=manifests
    )
    with pytest.raises(StateConflict) as caught:
        await agent.call(U("go"), CTX)
    assert caught.value.validation == kind
    expected, actual = caught.value.expected_version, caught.value.actual_version
    assert expected is not None and actual is not None and expected < actual
    assert model.requests == []
    assert [m.validation for m in manifests] == [kind]


async def test_unchanged_state_is_no_conflict() -> None:
    agent, model = agent_with([U("1")], PairValidation())
    await agent.call(U("go"), CTX)
    await agent.call("again", CTX)
    assert len(model.requests) == 2


def test_configuration_is_validated() -> None:
    with pytest.raises(ConfigurationError):
        PairValidation(mode="lenient")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        PairValidation(interrupted_text="")
    assert PairValidation().mode == "fail"


# ------------------------------------------------------------ _history helpers
def test_units_and_safe_cut() -> None:
    history = [U("1"), A("a", "b"), T("a"), T("b"), U("2"), T("stray"), A("c"), T("c")]
    assert units(history) == [(0, 1), (1, 4), (4, 5), (5, 6), (6, 8)]
    assert [safe_cut(history, i) for i in range(9)] == [0, 1, 1, 1, 4, 5, 6, 6, 8]
    assert [safe_cut(history, i, forward=True) for i in range(9)] == [0, 1, 4, 4, 4, 5, 6, 8, 8]
    assert safe_cut(history, -3) == 0 and safe_cut(history, 99) == 8
    assert safe_cut([], 0) == 0 and units([]) == []


def test_label_keeps_short_ids_and_shortens_long_ones() -> None:
    assert label("call_1") == "call_1"
    long_id = "x" * 1_500
    assert len(label(long_id)) < 40 and label(long_id) == label(long_id) != label(long_id + "y")
    assert label(None) == "<no tool_call_id>"


CALL_IDS = ["a", "b", "c", "d"]
event = st.one_of(
    st.tuples(st.just("user"), st.just("")),
    st.tuples(st.just("text"), st.just("")),
    st.tuples(
        st.just("call"), st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3, unique=True)
    ),
    st.tuples(
        st.just("pair"), st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3, unique=True)
    ),
    st.tuples(st.just("result"), st.sampled_from([*CALL_IDS, None])),
)


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    for n, (kind, arg) in enumerate(draw(st.lists(event, max_size=10))):
        if kind == "user":
            out.append(Message.user(f"u{n}", id=f"m{n}"))
        elif kind == "text":
            out.append(Message.assistant(f"t{n}", id=f"m{n}"))
        elif kind in ("call", "pair"):
            assert isinstance(arg, list)
            out.append(A(*arg, id=f"m{n}"))
            if kind == "pair":
                for k, call_id in enumerate(draw(st.permutations(arg))):
                    out.append(T(call_id, id=f"m{n}r{k}"))
        else:
            assert arg is None or isinstance(arg, str)
            out.append(Message(role="tool", tool_call_id=arg, content="r", id=f"m{n}"))
    return out


@given(histories())
def test_check_and_repair_invariants(history: list[Message]) -> None:
    valid = oracle_valid(history)
    check = check_pairs(history)
    assert check.ok == valid
    repaired, transforms = repair_pairs(history)
    assert oracle_valid(repaired)
    if valid:
        assert repaired == tuple(history) and transforms == ()
    else:
        assert transforms
    # Non-tool messages are kept, in order; results are originals or synthetic.
    assert [m.id for m in repaired if m.role != "tool"] == [
        m.id for m in history if m.role != "tool"
    ]
    originals = {m.id for m in history}
    assert all(m.id in originals or m.meta(INTERRUPTED) is True for m in repaired)
    kinds = Counter(t.split(":")[1] for t in transforms)
    assert (
        kinds["dangling"] == len(check.dangling) == sum(bool(m.meta(INTERRUPTED)) for m in repaired)
    )
    assert kinds["moved"] == len(check.misplaced)
    assert kinds["orphan"] == len(check.orphans)
    dropped = sum(m.role == "tool" for m in history) - sum(
        m.role == "tool" and m.id in originals for m in repaired
    )
    assert dropped == kinds["orphan"]
    assert repair_pairs(repaired) == (repaired, ())  # idempotent


@given(histories(), st.integers(min_value=-2, max_value=14))
def test_safe_cuts_never_split_a_pair(history: list[Message], index: int) -> None:
    repaired, _ = repair_pairs(history)
    for forward in (False, True):
        k = safe_cut(repaired, index, forward=forward)
        assert 0 <= k <= len(repaired)
        assert oracle_valid(repaired[:k]) and oracle_valid(repaired[k:])
        clamped = max(0, min(index, len(repaired)))
        assert k >= clamped if forward else k <= clamped


@settings(max_examples=60, deadline=None)
@given(histories())
async def test_agent_fail_mode_raises_iff_pairs_are_invalid(history: list[Message]) -> None:
    agent, model = agent_with(history, PairValidation())
    effective = [*history, *interrupted_results(history)]  # what the agent answers first
    if oracle_valid(effective):
        assert (await agent.call(U("go"), CTX)).text == "ok"
        assert [m.id for m in model.requests[0].history][: len(history)] == ids(history)
        assert model.requests[0].history[-1].id == "U-go"
    else:
        with pytest.raises(InvalidToolPairs):
            await agent.call(U("go"), CTX)
        assert model.requests == []


@settings(max_examples=60, deadline=None)
@given(histories())
async def test_agent_repair_mode_always_sends_valid_pairs(history: list[Message]) -> None:
    agent, model = agent_with(history, PairValidation(mode="repair"))
    assert (await agent.call(U("go"), CTX)).text == "ok"
    sent = model.requests[0].history
    assert oracle_valid(sent)
    assert sent[-1].id == "U-go"
    assert ids(agent.state(CTX).working_history)[: len(sent)] == ids(sent)  # committed


def _cut_one_step_at_a_time(history: Sequence[Message], index: int) -> int:
    """The backward `safe_cut` as first written: step back while inside a unit."""
    index = max(0, min(index, len(history)))
    while 0 < index < len(history) and history[index].role == "tool":
        j = index - 1
        while j >= 0 and history[j].role == "tool":
            j -= 1
        if j < 0 or not (history[j].role == "assistant" and history[j].tool_calls):
            break
        index -= 1
    return index


@given(histories(), st.integers(min_value=-1, max_value=12), st.integers(min_value=0, max_value=12))
def test_pairs_valid_from_a_start_and_safe_cut_agree_with_their_references(
    history: list[Message], index: int, start: int
) -> None:
    # The reference is the full plan (`check_pairs` itself asks `pairs_valid` first).
    assert pairs_valid(history, start) == _plan(history[start:]).check.ok
    assert check_pairs(history[start:]).ok == _plan(history[start:]).check.ok
    assert safe_cut(history, index) == _cut_one_step_at_a_time(history, index)


def test_a_one_call_unit_is_valid_only_with_exactly_its_result_after_it() -> None:
    # `pairs_valid` reads a unit of one call without building its pending list: the same
    # answers as the full plan, on every way such a unit can be wrong.
    user = Message.user("go", id="u")
    cases = {
        (A("a", id="c"), T("a", id="r")): True,
        (A("a", id="c"), T("a", id="r"), user): True,
        (A("a", id="c"), T("a", id="r"), T("a", id="r2")): False,
        (A("a", id="c"), T("a", id="r"), T("b", id="r2")): False,
        (A("a", id="c"), T("b", id="r")): False,
        (A("a", id="c"),): False,
        (A("a", id="c"), user): False,
        (A("a", id="c"), Message(role="tool", content="r", id="r")): False,
        (A("a", "b", id="c"), T("b", id="r"), T("a", id="r2")): True,
    }
    for history, valid in cases.items():
        assert pairs_valid(history) is valid == _plan(history).check.ok, history
        assert pairs_valid((user, *history), 1) is valid, history
