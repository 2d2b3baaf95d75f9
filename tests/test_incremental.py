"""Rounds that cost only what is new — and give the same answers as counting everything.

The running state (token totals and manifest items per run, the pair check's and the
offload scan's last history, the shared count caches) is checked against the plain,
whole-history computation, including histories whose middle changed between rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import (
    ContextBlock,
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    RuntimeContext,
    SystemPart,
    ToolCall,
    ToolSchema,
)
from harness.accounting import (
    counted_near_limit,
    estimate_request,
    fixed_tokens,
    history_tokens,
    manifest_items,
)
from harness.accounting.prefix import shared_prefix
from harness.errors import InvalidToolPairs
from harness.manifest import CHUNK
from harness.markers import SUMMARY
from harness.request import ModelResponse, RunScope
from harness.state import SessionScratch
from harness.tokens import (
    FAMILY_COEFFICIENTS,
    ApproximateEstimator,
    CountCache,
    ExactEstimator,
    approximate,
    estimator_for,
    remember,
    shared_exact,
)
from harness.workspace import Workspace
from middleware import BudgetFit, Compaction, ToolResultOffload, default_stack
from middleware._history import safe_cut
from middleware._layout import current_user, last_unit_start, layout, minimum
from middleware.pair_validation import PairValidation
from providers import ScriptedModel

# ---------------------------------------------------------------------- histories
_POOL = [
    Message.user("fix the failing test", id="u0"),
    Message.user("also update the docs", id="u1"),
    Message.assistant("looking", id="a0"),
    Message.assistant(id="a1", tool_calls=[ToolCall(id="c1", name="ls", arguments="{}")]),
    Message.tool("c1", "README.md\nsetup.py", id="t1"),
    Message.assistant(id="a2", tool_calls=[ToolCall(id="c2", name="cat", arguments="{}")]),
    Message.tool("c2", "print('hello')\n" * 40, id="t2"),
    Message.tool("c9", "an orphan", id="t9"),
    Message.user("summary of earlier turns", id="s0", metadata={SUMMARY: True}),
]
messages = st.lists(st.sampled_from(_POOL), max_size=14).map(tuple)


def _request(history: tuple[Message, ...], run: RunScope | None, limit: int = -1) -> ModelRequest:
    return ModelRequest(
        model="gpt-4o",
        history=history,
        policy=ContextPolicy().resolve("gpt-4o"),
        input_limit=limit,
        run=run,
    )


def _naive_prefix(old: Sequence[Message], new: Sequence[Message]) -> int:
    shared = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        shared += 1
    return shared


# ------------------------------------------------------------------ shared prefix
@given(old=messages, new=messages)
def test_shared_prefix_is_the_longest_equal_prefix(
    old: tuple[Message, ...], new: tuple[Message, ...]
) -> None:
    assert shared_prefix(old, new) == _naive_prefix(old, new)
    assert shared_prefix(old, old + new) == len(old)


def test_shared_prefix_counts_equal_copies_and_stops_at_a_rewrite() -> None:
    history = tuple(Message.user(f"message {i}", id=f"m{i}") for i in range(50))
    copies = tuple(Message.user(m.text, id=m.id) for m in history)  # equal, not identical
    assert shared_prefix(history, copies) == 50
    rewritten = (*history[:20], history[20].replace(content="changed"), *history[21:])
    assert shared_prefix(history, rewritten) == 20
    run = RunScope()
    assert shared_prefix(history, rewritten, run) == 20
    assert shared_prefix(history, rewritten, run) == 20  # the run's last answer, reused
    assert shared_prefix(history, history[:5], run) == 5


# --------------------------------------------------------------- running totals
@settings(max_examples=60, deadline=None)
@given(rounds=st.lists(messages, min_size=1, max_size=6))
def test_running_totals_and_items_equal_counting_everything(
    rounds: list[tuple[Message, ...]],
) -> None:
    """Any sequence of histories in one run — grown, cut, rewritten in the middle."""
    run = RunScope()
    for history in rounds:
        with_run, alone = _request(history, run), _request(history, None)
        assert estimate_request(with_run) == estimate_request(alone)
        assert history_tokens(with_run) == approximate().count_messages(history)
        assert manifest_items(with_run) == manifest_items(alone)


_PARTS = st.sampled_from(["system", "tools", "blocks", "history", "estimator", "limit", "budget"])


@settings(max_examples=60, deadline=None)
@given(history=messages, changes=st.lists(_PARTS, min_size=1, max_size=8))
def test_the_runs_last_measurement_follows_every_part_that_changes(
    history: tuple[Message, ...], changes: list[str]
) -> None:
    """One part at a time changes between measurements of one run: each answer is fresh."""
    run = RunScope()
    request = _request(history, run)
    for step, part in enumerate(changes):
        if part == "system":
            request = request.replace(system=(SystemPart(name="p", text="rule " * step),))
        elif part == "tools":
            request = request.replace(tools=(ToolSchema(name="t", description="d" * step),))
        elif part == "blocks":
            request = request.replace(blocks=(ContextBlock.reference("b", "fact " * step),))
        elif part == "history":
            request = request.replace(history=(*request.history, Message.user(f"n{step}")))
        elif part == "estimator":
            other = ApproximateEstimator("o200k" if step % 2 else "cl100k")
            request = request.replace(policy=ContextPolicy(estimator=other))
        elif part == "limit":  # far from the estimate, then right at it: counted exactly
            near = estimate_request(request.replace(run=None))
            request = request.replace(input_limit=near if request.input_limit != near else -1)
        else:  # a field the estimate does not read: the last answer stands
            request = request.replace(history_budget=step)
        alone = request.replace(run=None)
        est = request.estimator
        counted, tokens = counted_near_limit(request)
        counted_alone, tokens_alone = counted_near_limit(alone)
        assert tokens == tokens_alone
        assert counted.estimator.method == counted_alone.estimator.method
        assert estimate_request(request) == estimate_request(alone)
        assert fixed_tokens(request, est) == fixed_tokens(alone, est)
        assert history_tokens(request) == history_tokens(alone)
        assert manifest_items(request) == manifest_items(alone)


def test_a_round_counts_only_its_new_messages() -> None:
    class Counting(ApproximateEstimator):  # a subclass keeps a private cache: every miss shows
        calls = 0

        def count_message(self, message: Message) -> int:
            Counting.calls += 1
            return super().count_message(message)

    est = Counting("o200k")
    run = RunScope()
    history = tuple(Message.user(f"turn {i}", id=f"m{i}") for i in range(300))
    request = _request(history, run).replace(policy=ContextPolicy(estimator=est))
    estimate_request(request)
    Counting.calls = 0
    grown = request.replace(history=(*history, Message.user("one more", id="new")))
    for _ in range(3):  # BudgetFit, Compaction and PairValidation each measure it
        estimate_request(grown)
    manifest_items(grown)
    assert Counting.calls == 1


# ----------------------------------------------------------------- pair validation
async def _send(request: ModelRequest) -> ModelResponse:
    return ModelResponse(message=Message.assistant("ok"))


async def test_pair_check_still_fails_when_a_later_round_breaks_an_old_pair() -> None:
    check = PairValidation()
    run = RunScope()
    call = Message.assistant(id="a", tool_calls=[ToolCall(id="c", name="ls", arguments="{}")])
    valid: tuple[Message, ...] = (
        Message.user("go", id="u"),
        call,
        Message.tool("c", "ok", id="t"),
        *(Message.user(f"more {i}", id=f"m{i}") for i in range(20)),
    )
    await check(_request(valid, run), _send)
    await check(_request((*valid, Message.user("next", id="n")), run), _send)
    dropped = valid[:2] + valid[3:]  # the old result is gone: the old call dangles
    with pytest.raises(InvalidToolPairs) as raised:
        await check(_request(dropped, run), _send)
    assert raised.value.dangling_calls == ("c",)
    dangling = (*valid, call.replace(id="a2", tool_calls=(ToolCall(id="d", name="x"),)))
    with pytest.raises(InvalidToolPairs):
        await check(_request(dangling, run), _send)
    late = (*valid, Message.tool("c", "a second answer", id="t2"))  # joins no unit
    with pytest.raises(InvalidToolPairs):
        await check(_request(late, run), _send)


@settings(max_examples=80, deadline=None)
@given(rounds=st.lists(messages, min_size=1, max_size=5))
async def test_pair_check_with_a_run_agrees_with_the_check_without(
    rounds: list[tuple[Message, ...]],
) -> None:
    with_run, alone = PairValidation(), PairValidation()
    run = RunScope()
    for history in rounds:
        outcomes = []
        for validator, scope in ((with_run, run), (alone, None)):
            try:
                await validator(_request(history, scope), _send)
                outcomes.append("sent")
            except InvalidToolPairs as exc:
                outcomes.append(f"{exc.dangling_calls}{exc.orphan_results}")
        assert outcomes[0] == outcomes[1]


# ------------------------------------------------------------------------ offload
async def test_offload_scans_new_results_and_rescans_a_rewritten_prefix() -> None:
    offload = ToolResultOffload(max_result_chars=1_000, preview_chars=100)
    run = RunScope(workspace=Workspace("memory://incremental-offload"))
    calls = [
        Message.assistant(id=f"a{i}", tool_calls=[ToolCall(id=f"c{i}", name="sh", arguments="{}")])
        for i in range(3)
    ]
    small = [Message.tool(f"c{i}", "short output", id=f"t{i}") for i in range(3)]
    history = (Message.user("go", id="u"), calls[0], small[0], calls[1], small[1])
    seen: list[ModelRequest] = []

    async def record(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(message=Message.assistant("ok"))

    await offload(_request(history, run), record)
    assert not seen[-1].transforms
    big = Message.tool("c2", "x" * 5_000, id="t2")
    await offload(_request((*seen[-1].history, calls[2], big), run), record)
    assert seen[-1].transforms == ("tool_result_offload:c2",)
    # An old result replaced by a big one (a different object) is decided again.
    rewritten = (*seen[-1].history[:2], Message.tool("c0", "y" * 5000, id="t0"))
    await offload(_request(rewritten + seen[-1].history[3:], run), record)
    assert seen[-1].transforms == ("tool_result_offload:c0",)


# ------------------------------------------------------------------------- layout
def _minimum_by_slicing(history: Sequence[Message]) -> tuple[Message, ...]:
    shape = layout(history)
    body = history[shape.start :]
    keep = [m for m in (shape.pinned, shape.previous) if m is not None]
    tail = last_unit_start(body)
    current = current_user(body)
    if current is not None and current < tail:
        keep.append(body[current])
    return (*keep, *body[tail:])


@given(history=messages)
def test_minimum_without_copying_the_body_is_the_same(history: tuple[Message, ...]) -> None:
    assert minimum(history) == _minimum_by_slicing(history)
    assert safe_cut(history, len(history)) == len(history)


# ------------------------------------------------------------- shared count caches
def test_estimators_that_count_alike_share_one_cache_of_numbers() -> None:
    assert estimator_for("gpt-4o") is approximate("o200k")
    fresh = ApproximateEstimator("o200k")
    assert fresh.cache is approximate("o200k").cache
    exact = estimator_for("gpt-4o-mini", exact=True)
    assert isinstance(exact, ExactEstimator) and exact.cache is shared_exact("o200k").cache
    custom = ApproximateEstimator("o200k", FAMILY_COEFFICIENTS["o200k"])
    assert custom.cache is not fresh.cache, "custom coefficients keep their own counts"
    assert ApproximateEstimator("cl100k").cache is not fresh.cache
    message = Message.user("a secret only this user wrote " * 3, id="private")
    fresh.count_message(message)
    for table in (fresh.cache.messages, fresh.cache.blocks, fresh.cache.tools):
        assert all(type(k) is int and type(v) is int for k, v in table.items()), "no text"


def test_a_full_cache_drops_its_oldest_quarter() -> None:
    cache = CountCache(limit=8)
    for key in range(8):
        remember(cache.messages, key, key * 10, cache.limit)
    remember(cache.messages, 8, 80, cache.limit)
    assert sorted(cache.messages) == [2, 3, 4, 5, 6, 7, 8]


async def test_a_fresh_agent_per_request_counts_only_messages_it_has_not_seen() -> None:
    history = [Message.user("fix the failing test", id="u0")]
    for i in range(40):
        call = ToolCall(id=f"c{i}", name="sh", arguments=f'{{"n": {i}}}')
        history += [
            Message.assistant(id=f"a{i}", tool_calls=[call]),
            Message.tool(f"c{i}", f"unique output number {i} " * 20, id=f"t{i}"),
        ]
    counts = approximate("o200k").cache.messages

    async def one_request(extra: Sequence[Message]) -> int:
        model = ScriptedModel(model="gpt-4o", replies=["done"])
        agent = HarnessAgent(model=model, stack=default_stack())
        ctx = RuntimeContext(user_id="stateless", session_id="s")
        agent.state(ctx).append(*[Message.from_openai(m.to_openai()) for m in history], *extra)
        before = len(counts)
        await agent.call("continue", ctx)
        return len(counts) - before

    await one_request(())
    new = [Message.user("a question nobody asked before", id="q")]
    added = await one_request(new)
    assert added <= 3, f"only the new messages are counted, not {added} of {len(history)}"


# ------------------------------------------------------------------ through the agent
@pytest.mark.parametrize("compacting", [False, True])
async def test_every_manifest_of_an_agent_call_equals_counting_everything(
    compacting: bool,
) -> None:
    """Rounds with offloads, compaction and a growing history: the running figures hold."""
    rounds = 14
    replies: list[Message | str] = [
        ScriptedModel.tool_call("sh", {"n": i}, id=f"call{i}") for i in range(rounds)
    ]
    model = ScriptedModel(model="gpt-4o", replies=[*replies, "done"])
    manifests: list[ContextManifest] = []

    def sh(n: int) -> str:
        """Run a step.

        Args:
            n: the step.
        """
        return ("big output line\n" * 400) if n % 4 == 3 else f"small output {n}"

    stack = default_stack(
        offload=ToolResultOffload(max_result_chars=2_000, preview_chars=200),
        compaction=Compaction(trigger_messages=12, keep_messages=4, keep_tokens=0),
    )
    if not compacting:
        stack = [m for m in stack if not isinstance(m, Compaction)]
    agent = HarnessAgent(
        model=model,
        tools=[sh],
        stack=stack,
        policy=ContextPolicy(observer=manifests.append),
        max_rounds=rounds + 2,
    )
    await agent.call("run the steps", RuntimeContext(user_id="u", session_id="s"))
    sent = [m for m in manifests if m.purpose == "agent"]
    assert len(sent) == len(model.agent_requests) == rounds + 1
    assert any(
        t.startswith("tool_result_offload:") for r in model.agent_requests for t in r.transforms
    )
    if compacting:
        assert any(
            t.startswith("history_compaction:") for r in model.agent_requests for t in r.transforms
        )
    for manifest, request in zip(sent, model.agent_requests, strict=True):
        alone = request.replace(run=None)
        assert manifest.estimated_input_tokens == estimate_request(alone)
        assert manifest.items == manifest_items(alone)[1]


async def test_manifests_of_a_session_without_tools_or_blocks_cross_chunk_edges() -> None:
    """No tail items (no tools, no blocks): a manifest's last chunk is all history, and a
    round can fill it exactly (this raised ValueError at 64 items once)."""
    calls = 70  # a user turn and a reply each: 140 messages, past two chunk edges
    model = ScriptedModel(model="gpt-4o", replies=[f"reply {i}" for i in range(calls)])
    manifests: list[ContextManifest] = []
    agent = HarnessAgent(
        model=model,
        system_prompt="Be brief.",  # one System item: the manifests' lengths are even
        stack=[],
        policy=ContextPolicy(observer=manifests.append),
    )
    ctx = RuntimeContext(user_id="u", session_id="no-tools")
    for i in range(calls):
        await agent.call(f"turn {i}", ctx)
    assert len(manifests) == len(model.agent_requests) == calls
    for manifest, request in zip(manifests, model.agent_requests, strict=True):
        assert not request.tools and not request.blocks
        assert manifest.items == manifest_items(request.replace(run=None))[1]
    assert len(manifests[-1].items) > 2 * CHUNK


# ------------------------------------------- kept System, tool and block costs and items
_PARTS = st.sampled_from(
    [
        (),
        (SystemPart(name="prompt", text="be careful"),),
        (SystemPart(name="prompt", text="be brief"),),
    ]
)
_TOOLS = st.sampled_from(
    [
        (),
        (ToolSchema(name="ls", description="list"),),
        (ToolSchema(name="cat", description="read"),),
    ]
)
_BLOCKS = st.lists(
    st.sampled_from(
        [
            ContextBlock.reference("guide", "read the guide"),
            ContextBlock.reference("guide", "read the new guide"),  # same id, other text
            ContextBlock.runtime("now", "it is late", revision="r1"),
            ContextBlock.runtime("now", "it is late", revision="r2"),  # same text, new revision
        ]
    ),
    max_size=3,
).map(tuple)


@settings(max_examples=80, deadline=None)
@given(rounds=st.lists(st.tuples(messages, _PARTS, _TOOLS, _BLOCKS), min_size=1, max_size=6))
def test_kept_parts_follow_every_change_of_system_tools_and_blocks(
    rounds: list[tuple[tuple[Message, ...], Any, Any, tuple[ContextBlock, ...]]],
) -> None:
    """Equal copies are reused, anything else is counted again: as counting everything gives."""
    run = RunScope(session=SessionScratch())
    history: tuple[Message, ...] = ()
    for drawn, system, tools, blocks in rounds:
        history += drawn
        alone = _request(history, None).replace(system=system, tools=tools, blocks=blocks)
        copy = msgspec.json.decode(msgspec.json.encode(alone.blocks), type=tuple[ContextBlock, ...])
        with_run = alone.replace(run=run, blocks=copy)  # equal blocks, other objects
        assert estimate_request(with_run) == estimate_request(alone)
        assert fixed_tokens(with_run, with_run.estimator) == fixed_tokens(alone, alone.estimator)
        assert manifest_items(with_run) == manifest_items(alone)


def test_shared_prefix_of_long_histories_compares_identities_then_content() -> None:
    history = tuple(Message.user(f"message {i}", id=f"m{i}") for i in range(600))
    assert shared_prefix(history, history + history[:3]) == 600  # the very same objects
    copies = tuple(Message.user(m.text, id=m.id) for m in history)  # equal, not identical
    assert shared_prefix(history, copies) == 600
    rewritten = (*history[:400], history[400].replace(content="changed"), *history[401:])
    assert shared_prefix(history, rewritten) == 400
    assert shared_prefix(rewritten, history[:450]) == 400


@settings(max_examples=60, deadline=None)
@given(
    history=messages,
    steps=st.lists(
        st.tuples(st.sampled_from(["agent", "summary"]), st.booleans(), st.integers(0, 13)),
        min_size=1,
        max_size=8,
    ),
)
def test_the_runs_measurement_lends_its_tally_only_to_its_own_estimator_and_purpose(
    history: tuple[Message, ...], steps: list[tuple[str, bool, int]]
) -> None:
    """Requests of two purposes and two estimators interleave in one run, each history
    rewritten at some message: every total and manifest equals the one counted from scratch."""
    from harness.request import RequestIds

    run = RunScope(session=SessionScratch())
    estimators = (ApproximateEstimator("o200k"), ApproximateEstimator("cl100k"))
    for step, (purpose, other, at) in enumerate(steps):
        if history and at < len(history):  # a rewrite in the middle: the prefix ends there
            changed = history[at].replace(content=f"rewritten {step}")
            history = (*history[:at], changed, *history[at + 1 :])
        history = (*history, Message.user(f"new {step}"))
        request = _request(history, run).replace(
            ids=RequestIds(purpose=purpose),
            policy=ContextPolicy(estimator=estimators[other]),
        )
        alone = request.replace(run=None)
        assert counted_near_limit(request)[1] == estimate_request(alone)
        assert history_tokens(request) == history_tokens(alone)
        assert manifest_items(request) == manifest_items(alone)


@settings(max_examples=60, deadline=None)
@given(rounds=st.lists(st.tuples(messages, st.booleans()), min_size=1, max_size=6))
async def test_slots_held_by_a_run_follow_the_session_across_calls(
    rounds: list[tuple[tuple[Message, ...], bool]],
) -> None:
    """Pair checks and fits in runs of one session — some rounds in a new call of it (a new
    run over the same scratch) — agree with the checks and fits made without any run."""
    check, fit = PairValidation(), BudgetFit()
    session = SessionScratch()
    run = RunScope(session=session)
    for history, new_call in rounds:
        if new_call:
            run = RunScope(session=session)
        outcomes = []
        for scope in (run, None):
            request = _request(history, scope, limit=10_000)
            try:
                await check(request, _send)
                outcomes.append(("sent", fit.fit(request).history_budget))
            except InvalidToolPairs as exc:
                outcomes.append((f"{exc.dangling_calls}{exc.orphan_results}", None))
        assert outcomes[0] == outcomes[1]
