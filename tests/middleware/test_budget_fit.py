"""BudgetFit through the real agent loop: what the model receives under a short budget."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import (
    ContextBlock,
    ContextBudgetExceeded,
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    ModelResponse,
    RuntimeContext,
    SystemPart,
)
from harness.accounting import estimate_request, fixed_tokens, tally_of
from harness.errors import ConfigurationError
from harness.markers import SUMMARY
from harness.messages import ToolCall
from harness.request import RunScope
from harness.state import SessionScratch
from harness.tokens import shared_exact
from harness.types import Handler
from middleware._layout import SUMMARY_ROOM
from middleware._layout import minimum as history_minimum
from middleware._selection import DefaultSelection
from middleware.budget_fit import BudgetFit, _Memo
from middleware.context_sources import ContextRequest, ContextSources, context_source
from middleware.task_state import TaskState
from middleware.task_state.state import TodoItem, set_todos
from providers import ScriptedModel

EXACT = shared_exact("o200k")


def words(n: int, word: str = "lorem") -> str:
    """Text of ``n`` words (o200k: about one token each)."""
    return " ".join([word] * n)


def source_of(blocks: Sequence[ContextBlock], name: str = "s") -> ContextSources:
    async def load(request: ContextRequest) -> list[ContextBlock]:
        return list(blocks)

    return ContextSources(sources=[context_source(name, load)])


def agent_for(
    blocks: Sequence[ContextBlock],
    limit: int,
    *,
    budget: BudgetFit | None = None,
    system_prompt: str = "You are careful.",
    manifests: list[ContextManifest] | None = None,
    replies: Sequence[str | Message] = ("ok",),
    extra: Sequence[object] = (),
    inner: Sequence[object] = (),
) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel(list(replies))
    observer = manifests.append if manifests is not None else None
    agent = HarnessAgent(
        model=model,
        system_prompt=system_prompt,
        stack=[source_of(blocks), *extra, budget or BudgetFit(), *inner],  # type: ignore[list-item]
        # Exact counts: these tests are about the selection, not about estimation error.
        policy=ContextPolicy(max_input_tokens=limit, observer=observer, estimator=EXACT),
    )
    return agent, model


def sent_ids(request: ModelRequest) -> list[str]:
    return [b.id for b in request.blocks]


def cost(request: ModelRequest) -> int:
    return estimate_request(request)


async def test_when_everything_fits_nothing_is_dropped_and_history_budget_is_the_rest() -> None:
    blocks = [ContextBlock.reference(f"b{i}", words(20)) for i in range(3)]
    agent, model = agent_for(blocks, 10_000)
    await agent.call("hello")
    (request,) = model.agent_requests
    assert sent_ids(request) == ["b0", "b1", "b2"]
    assert not request.transforms
    est = request.estimator
    blocks_cost = cost(request) - fixed_tokens(request, est) - est.count_messages(request.history)
    assert request.history_budget == 10_000 - fixed_tokens(request, est) - blocks_cost


async def test_memory_and_knowledge_go_first_even_with_a_higher_priority() -> None:
    blocks = [
        ContextBlock.reference("guide", words(40), priority=-50),
        ContextBlock.reference("mem", words(40), category="memory", priority=90),
        ContextBlock.reference("kb", words(40), category="knowledge", priority=80),
    ]
    probe, probe_model = agent_for(blocks, 100_000)
    await probe.call("hello")
    full = cost(probe_model.agent_requests[0])
    one_block = probe_model.agent_requests[0].estimator.count_block(
        probe_model.agent_requests[0].blocks[0]
    )
    manifests: list[ContextManifest] = []
    agent, model = agent_for(blocks, full - one_block - 1, manifests=manifests)
    await agent.call("hello")
    (request,) = model.agent_requests
    assert sent_ids(request) == ["guide"]
    assert request.transforms == (
        "omitted_for_budget:source/s/kb",
        "omitted_for_budget:source/s/mem",
    )
    assert manifests[-1].transforms == request.transforms
    assert "source/s/mem" not in {i.source_id for i in manifests[-1].items}


async def test_lower_priority_is_dropped_first_within_a_group() -> None:
    blocks = [
        ContextBlock.reference("high", words(40), priority=10),
        ContextBlock.reference("low", words(40), priority=-10),
        ContextBlock.reference("mid", words(40), priority=0),
    ]
    probe, probe_model = agent_for(blocks, 100_000)
    await probe.call("x")
    full = cost(probe_model.agent_requests[0])
    agent, model = agent_for(blocks, full - 5)
    await agent.call("x")
    assert sent_ids(model.agent_requests[0]) == ["high", "mid"]
    assert model.agent_requests[0].transforms == ("omitted_for_budget:source/s/low",)


def test_ties_drop_the_larger_then_the_later_block_first() -> None:
    a = ContextBlock.reference("a", "short")
    b = ContextBlock.reference("b", "a much longer text")
    c = ContextBlock.reference("c", "short")
    order = DefaultSelection().drop_order([a, b, c])
    assert [x.id for x in order] == ["b", "c", "a"]


async def test_required_blocks_are_kept_and_optional_ones_go_instead() -> None:
    blocks = [
        ContextBlock.reference("must", words(60), priority=-100, required=True),
        ContextBlock.reference("nice", words(60), priority=100),
    ]
    probe, probe_model = agent_for(blocks, 100_000)
    await probe.call("x")
    full = cost(probe_model.agent_requests[0])
    agent, model = agent_for(blocks, full - 5)
    await agent.call("x")
    assert sent_ids(model.agent_requests[0]) == ["must"]


async def test_required_material_over_the_limit_raises_and_the_model_is_not_called() -> None:
    blocks = [
        ContextBlock.runtime("must", words(400), required=True),
        ContextBlock.reference("nice", words(5)),
    ]
    manifests: list[ContextManifest] = []
    agent, model = agent_for(blocks, 300, manifests=manifests)
    with pytest.raises(ContextBudgetExceeded) as caught:
        await agent.call("x")
    assert model.requests == []
    assert caught.value.limit == 300
    assert caught.value.required_tokens > 300
    assert manifests[-1].validation == "budget_exceeded"
    assert manifests[-1].estimated_input_tokens == -1


async def test_system_alone_over_the_limit_raises() -> None:
    agent, model = agent_for([], 50, system_prompt=words(400))
    with pytest.raises(ContextBudgetExceeded):
        await agent.call("x")
    assert model.requests == []


async def test_tool_schemas_count_as_fixed_cost() -> None:
    def lookup(query: str, limit: int = 10) -> str:
        """Look something up in a very large catalogue of things with a long description.

        Args:
            query: what to look for, in plain words, as precise as you can make it.
            limit: the most results to return.
        """
        return query

    plain = HarnessAgent(
        model=ScriptedModel(["ok"]),
        system_prompt="s",
        stack=[BudgetFit()],
        policy=ContextPolicy(max_input_tokens=10_000, estimator=EXACT),
    )
    await plain.call("x")
    with_tool_model = ScriptedModel(["ok"])
    with_tool = HarnessAgent(
        model=with_tool_model,
        system_prompt="s",
        tools=[lookup],
        stack=[BudgetFit()],
        policy=ContextPolicy(max_input_tokens=10_000, estimator=EXACT),
    )
    await with_tool.call("x")
    plain_request = plain.client.requests[0]  # type: ignore[attr-defined]
    tool_request = with_tool_model.agent_requests[0]
    tool_cost = tool_request.estimator.count_tools(tool_request.tools)
    assert tool_cost > 0
    assert plain_request.history_budget - tool_request.history_budget == tool_cost
    limit = fixed_tokens(tool_request, tool_request.estimator) - 1
    tight = HarnessAgent(
        model=ScriptedModel(["ok"]),
        system_prompt="s",
        tools=[lookup],
        stack=[BudgetFit()],
        policy=ContextPolicy(max_input_tokens=limit, estimator=EXACT),
    )
    with pytest.raises(ContextBudgetExceeded):
        await tight.call("x")


async def test_task_state_blocks_are_fixed_cost_and_never_dropped() -> None:
    optional = [ContextBlock.reference("nice", words(60), priority=100)]
    agent, model = agent_for(optional, 100_000, extra=[TaskState(task_list=True)])
    set_todos(agent.state(RuntimeContext()), [TodoItem(content=words(60, "step"))])
    await agent.call("x")
    full = cost(model.agent_requests[0])
    assert {b.source_id for b in model.agent_requests[0].blocks} == {"source/s/nice", "state/todos"}

    tight, tight_model = agent_for(optional, full - 5, extra=[TaskState(task_list=True)])
    set_todos(tight.state(RuntimeContext()), [TodoItem(content=words(60, "step"))])
    await tight.call("x")
    assert [b.source_id for b in tight_model.agent_requests[0].blocks] == ["state/todos"]

    too_small, too_small_model = agent_for([], 60, extra=[TaskState(task_list=True)])
    set_todos(too_small.state(RuntimeContext()), [TodoItem(content=words(200, "step"))])
    with pytest.raises(ContextBudgetExceeded):
        await too_small.call("x")
    assert too_small_model.requests == []


async def test_room_is_reserved_for_the_newest_user_message() -> None:
    blocks = [ContextBlock.reference("nice", words(100))]
    probe, probe_model = agent_for(blocks, 100_000)
    await probe.call("short")
    request = probe_model.agent_requests[0]
    fits_with_short_input = cost(request)
    # The same budget, but the user's message is long: the block must give way to it.
    agent, model = agent_for(blocks, fits_with_short_input + 10)
    await agent.call(words(60, "please"))
    received = model.agent_requests[0]
    assert sent_ids(received) == []
    assert received.transforms == ("omitted_for_budget:source/s/nice",)
    assert cost(received) <= fits_with_short_input + 10


async def test_the_trailing_tool_call_group_is_reserved_too() -> None:
    def fetch() -> str:
        """Fetch the report."""
        return words(30, "report")

    blocks = [ContextBlock.reference("nice", words(60))]
    model = ScriptedModel([ScriptedModel.tool_call("fetch"), "done"])
    agent = HarnessAgent(
        model=model,
        tools=[fetch],
        stack=[source_of(blocks), BudgetFit()],
        policy=ContextPolicy(max_input_tokens=100_000),
    )
    await agent.call("go")
    first, second = model.agent_requests
    minimum = history_minimum(second.history)
    assert [m.role for m in minimum] == ["user", "assistant", "tool"]
    # A budget in which the block fits next to the first round but not the second.
    limit = cost(first) + 20
    assert cost(second) > limit
    model2 = ScriptedModel([ScriptedModel.tool_call("fetch"), "done"])
    agent2 = HarnessAgent(
        model=model2,
        tools=[fetch],
        stack=[source_of(blocks), BudgetFit()],
        policy=ContextPolicy(max_input_tokens=limit),
    )
    await agent2.call("go")
    one, two = model2.agent_requests
    assert sent_ids(one) == ["nice"]
    assert sent_ids(two) == []
    assert cost(two) <= limit


def test_history_minimum_is_what_compaction_keeps() -> None:
    call = ScriptedModel.tool_call("f", id="c1")
    history = (
        Message.user("task"),
        Message.assistant("a"),
        Message.user("new"),
        call,
        Message.tool("c1", "result"),
    )
    # The pinned task, the newest user message and the trailing tool-call group.
    assert [m.text for m in history_minimum(history)] == ["task", "new", "", "result"]
    assert [m.text for m in history_minimum(history[:3])] == ["task", "new"]
    assert history_minimum(()) == ()
    # After a compaction: the task, its summary, the tail; a summary is not "the newest user".
    summary = Message.user("summary", metadata={"summary": True})
    compacted = (history[0], summary, call, Message.tool("c1", "result"))
    assert [m.text for m in history_minimum(compacted)] == ["task", "summary", "", "result"]


async def test_min_history_tokens_reserves_more_history() -> None:
    blocks = [ContextBlock.reference("nice", words(60))]
    chosen: list[ModelRequest] = []

    async def record(request: ModelRequest, call_next: Handler) -> ModelResponse:
        chosen.append(request)  # what BudgetFit chose, as it leaves BudgetFit
        return await call_next(request)

    for reserve in (0, 10_000):
        chosen.clear()

        agent, model = agent_for(
            blocks, 2_000, budget=BudgetFit(min_history_tokens=reserve), inner=[record]
        )
        state = agent.state(RuntimeContext())
        for i in range(30):
            state.append(Message.user(words(50, f"q{i}")), Message.assistant(words(50, "a")))
        # No Compaction in this stack: the history alone is over the limit, so the request
        # is refused where it leaves the stack (harness.presend) and the model sees nothing.
        with pytest.raises(ContextBudgetExceeded):
            await agent.call("x")
        assert model.requests == []
        (request,) = chosen
        assert request.estimator.count_messages(request.history) > 2_000
        assert sent_ids(request) == (["nice"] if reserve == 0 else [])


async def test_a_history_minimum_that_cannot_fit_raises_before_the_model_is_called() -> None:
    agent, model = agent_for([ContextBlock.reference("nice", words(5))], 100)
    with pytest.raises(ContextBudgetExceeded) as caught:
        await agent.call(words(200, "please"))
    assert model.requests == []
    assert caught.value.required_tokens > 100


async def test_a_custom_selection_policy_decides_the_drop_order() -> None:
    class NewestFirst:
        def drop_order(self, blocks: Sequence[ContextBlock]) -> list[ContextBlock]:
            return list(reversed(blocks))

    blocks = [
        ContextBlock.reference("mem", words(40), category="memory"),
        ContextBlock.reference("b", words(40)),
        ContextBlock.reference("c", words(40)),
    ]
    probe, probe_model = agent_for(blocks, 100_000)
    await probe.call("x")
    full = cost(probe_model.agent_requests[0])
    agent, model = agent_for(blocks, full - 5, budget=BudgetFit(selection=NewestFirst()))
    await agent.call("x")
    assert sent_ids(model.agent_requests[0]) == ["mem", "b"]


async def test_a_selection_policy_that_loses_blocks_is_a_configuration_error() -> None:
    class Lossy:
        def drop_order(self, blocks: Sequence[ContextBlock]) -> list[ContextBlock]:
            return list(blocks[1:])

    blocks = [ContextBlock.reference(f"b{i}", words(40)) for i in range(3)]
    probe, probe_model = agent_for(blocks, 100_000)
    await probe.call("x")
    full = cost(probe_model.agent_requests[0])
    agent, model = agent_for(blocks, full - 5, budget=BudgetFit(selection=Lossy()))
    with pytest.raises(ConfigurationError, match="exactly once"):
        await agent.call("x")
    assert model.requests == []


def test_constructor_arguments_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        BudgetFit(min_history_tokens=-1)
    with pytest.raises(ConfigurationError):
        BudgetFit(selection="newest")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        DefaultSelection(drop_first="memory")


# ------------------------------------------------------------------ invariants
BLOCK = st.tuples(
    st.integers(min_value=1, max_value=80),  # words
    st.integers(min_value=-3, max_value=3),  # priority
    st.booleans(),  # required
    st.sampled_from(["memory", "knowledge", "source", "context"]),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(BLOCK, max_size=12), limit=st.integers(min_value=20, max_value=700))
async def test_invariants_hold_for_random_blocks_and_budgets(
    specs: list[tuple[int, int, bool, str]], limit: int
) -> None:
    blocks = [
        ContextBlock.reference(f"b{i}", words(n, f"w{i}"), priority=p, required=r, category=c)
        for i, (n, p, r, c) in enumerate(specs)
    ]
    agent, model = agent_for(blocks, limit, system_prompt="Be brief.")
    try:
        await agent.call("hi")
    except ContextBudgetExceeded as exc:
        # Only when System, tools, required blocks and the newest user message do not fit.
        assert model.requests == []
        required = tuple(b.replace(source_id=f"source/s/{b.id}") for b in blocks if b.required)
        probe = ModelRequest(
            model=agent.model,
            system=(SystemPart(name="prompt", text="Be brief."),),
            history=(Message.user("hi"),),
            blocks=required,
            policy=agent.policy,
        )
        # What may not be dropped (fixed material, then the newest user message) is too big.
        assert limit < exc.required_tokens <= estimate_request(probe)
        assert exc.required_tokens in (
            estimate_request(probe.replace(history=())),
            estimate_request(probe),
        )
        return
    (request,) = model.agent_requests
    kept = set(sent_ids(request))
    assert request.system == (SystemPart(name="prompt", text="Be brief."),)
    assert {b.id for b in blocks if b.required} <= kept
    optional = [b.replace(source_id=f"source/s/{b.id}") for b in blocks if not b.required]
    order = [b.id for b in DefaultSelection().drop_order(optional)]
    dropped = [i for i in order if i not in kept]
    assert dropped == order[: len(dropped)], "omitted blocks are the first in drop order"
    assert request.transforms == tuple(f"omitted_for_budget:source/s/{i}" for i in dropped)
    assert cost(request) <= limit
    assert request.history_budget is not None
    assert request.history_budget >= request.estimator.count_messages(request.history)
    if dropped:
        # Keeping one more block (the last one dropped) would not have fitted.
        last = next(b for b in optional if b.id == dropped[-1])
        assert cost(request.replace(blocks=(*request.blocks, last))) > limit


# ------------------------------------------------------------- the warm round's memory
_POOL = [
    Message.user("fix the failing test", id="u0"),
    Message.user("also update the docs", id="u1"),
    Message.assistant("looking", id="a0"),
    Message.assistant(id="a1", tool_calls=[ToolCall(id="c1", name="ls", arguments="{}")]),
    Message.tool("c1", "README.md\nsetup.py", id="t1"),
    Message.tool("c9", "an orphan", id="t9"),
    Message.user("summary of earlier turns", id="s0", metadata={SUMMARY: True}),
]
_BLOCKS = [
    ContextBlock.reference("guide", words(30)),
    ContextBlock.reference("mem", words(50), category="memory"),
    ContextBlock.reference("kb", words(20), category="knowledge", priority=5),
    ContextBlock.runtime("now", words(10)),
]
ROUND = st.tuples(
    st.lists(st.sampled_from(_POOL), max_size=10).map(tuple),  # appended, or a new history
    st.booleans(),  # grow the last history (else start from the drawn one)
    st.lists(st.sampled_from(_BLOCKS), max_size=4, unique=True).map(tuple),
    st.sampled_from(["You are careful.", "You are terse."]),
    st.integers(min_value=150, max_value=400),  # the input limit
)


def _fitted(request: ModelRequest, budget: BudgetFit) -> ModelRequest | type[ContextBudgetExceeded]:
    try:
        return budget.fit(request)
    except ContextBudgetExceeded:
        return ContextBudgetExceeded


@settings(max_examples=150, deadline=None)
@given(rounds=st.lists(ROUND, min_size=1, max_size=8))
def test_a_run_s_kept_blocks_and_minimum_give_what_fitting_from_scratch_gives(
    rounds: list[tuple[tuple[Message, ...], bool, tuple[ContextBlock, ...], str, int]],
) -> None:
    """Rounds of one session in any order: grown, rewritten, other blocks, prompt or limit."""
    budget, run = BudgetFit(), RunScope(session=SessionScratch())
    policy = ContextPolicy().resolve("gpt-4o")
    history: tuple[Message, ...] = ()
    for drawn, grow, blocks, prompt, limit in rounds:
        history = history + drawn if grow else drawn
        request = ModelRequest(
            model="gpt-4o",
            system=(SystemPart(name="prompt", text=prompt),),
            history=history,
            blocks=blocks,
            policy=policy,
            input_limit=limit,
        )
        warm = _fitted(request.replace(run=run), budget)
        cold = _fitted(request, BudgetFit())
        if isinstance(warm, ModelRequest) and isinstance(cold, ModelRequest):
            assert warm.replace(run=None) == cold
        else:
            assert warm == cold


def test_the_minimum_follows_a_new_user_message_and_a_new_summary() -> None:
    """The kept positions are found again only for what is new, and follow every change."""
    memo, run = _Memo(), RunScope(session=SessionScratch())
    policy = ContextPolicy().resolve("gpt-4o")
    call = Message.assistant(id="a", tool_calls=[ToolCall(id="c", name="ls", arguments="{}")])
    task = Message.user("the task " + words(30), id="task")
    summary = Message.user(words(40), id="sum", metadata={SUMMARY: True})
    history: tuple[Message, ...] = (task, Message.user(words(60), id="u1"), call)
    history += (Message.tool("c", "x", id="t"),)
    for step in (
        (Message.assistant("ok", id="a2"),),
        (Message.user(words(90), id="u2"), Message.assistant("ok", id="a3")),
        (Message.assistant("more", id="a4"),),
        (call, Message.tool("c", "y", id="t2")),
    ):
        history += step
        for shown in (history, (task, summary, *history[2:]), (summary, *history[3:])):
            request = ModelRequest(model="gpt-4o", history=shown, policy=policy, run=run)
            kept = history_minimum(shown)
            expected = request.estimator.count_messages(kept)
            if len(kept) < len(shown):
                expected += SUMMARY_ROOM
            assert memo.minimum_tokens(request, tally_of(request)) == expected


def test_a_selection_policy_is_asked_again_only_when_the_blocks_change() -> None:
    class Counting(DefaultSelection):
        asked = 0

        def drop_order(self, blocks: Sequence[ContextBlock]) -> list[ContextBlock]:
            Counting.asked += 1
            return super().drop_order(blocks)

    budget, run = BudgetFit(selection=Counting()), RunScope(session=SessionScratch())
    policy = ContextPolicy().resolve("gpt-4o")
    blocks = tuple(ContextBlock.reference(f"b{i}", words(40)) for i in range(3))
    history: tuple[Message, ...] = (Message.user("hi", id="u"),)
    for i in range(4):
        history += (Message.assistant(f"step {i}", id=f"a{i}"),)
        request = ModelRequest(
            model="gpt-4o", history=history, blocks=blocks, policy=policy, input_limit=120, run=run
        )
        assert budget.fit(request).transforms  # something is dropped each round
    assert Counting.asked == 1
    changed = request.replace(blocks=(*blocks[:2], blocks[2].replace(text=words(41))))
    warm = budget.fit(changed)
    assert Counting.asked == 2  # the blocks changed: asked again
    assert warm.replace(run=None) == budget.fit(changed.replace(run=None))


def test_one_budget_fit_serving_two_sessions_keeps_their_blocks_apart() -> None:
    """What one session's rounds kept never answers another's (one stack serves many users)."""
    budget = BudgetFit()
    policy = ContextPolicy().resolve("gpt-4o")
    history = (Message.user("hi", id="u"),)
    mine = tuple(ContextBlock.reference(f"mine{i}", words(40)) for i in range(3))
    theirs = tuple(ContextBlock.reference(f"theirs{i}", words(40 + i)) for i in range(3))
    runs = {mine: RunScope(session=SessionScratch()), theirs: RunScope(session=SessionScratch())}
    for _ in range(3):
        for blocks, run in runs.items():
            request = ModelRequest(
                model="gpt-4o", history=history, blocks=blocks, policy=policy, input_limit=120
            )
            warm = budget.fit(request.replace(run=run))
            assert warm.replace(run=None) == budget.fit(request)
            assert {b.id for b in warm.blocks} <= {b.id for b in blocks}


@settings(max_examples=150, deadline=None)
@given(rounds=st.lists(ROUND, min_size=1, max_size=4))
def test_a_request_with_room_to_spare_skips_the_minimum_and_gets_what_the_full_fit_gives(
    rounds: list[tuple[tuple[Message, ...], bool, tuple[ContextBlock, ...], str, int]],
) -> None:
    """The short way (fits with SUMMARY_ROOM to spare) relies on minimum ≤ history + room."""
    policy = ContextPolicy(estimator=EXACT)  # exact already: no switch near the limit
    history: tuple[Message, ...] = ()
    run = RunScope(session=SessionScratch())
    for drawn, grow, blocks, prompt, _ in rounds:
        history = history + drawn if grow else drawn
        request = ModelRequest(
            model="gpt-4o",
            system=(SystemPart(name="prompt", text=prompt),),
            history=history,
            blocks=blocks,
            policy=policy,
            run=run,
        )
        whole = request.estimator.count_messages(history)
        assert _Memo().minimum_tokens(request, tally_of(request)) <= whole + SUMMARY_ROOM
        spare = estimate_request(request) + SUMMARY_ROOM  # the least limit of the short way
        short = BudgetFit().fit(request.replace(input_limit=spare))
        full = _fitted(request.replace(input_limit=spare - 1), BudgetFit())
        assert short.blocks == blocks and not short.transforms
        if isinstance(full, ModelRequest) and full.blocks == blocks:
            assert short.history_budget == (full.history_budget or 0) + 1
