"""Work kept across a session's calls, and what every call or request no longer pays again.

A session's running state (token totals, manifest items, the pair check's and the offload
scan's last history) lives in the session's scratch space (`AgentState.scratch`), so the
first round of a new call costs its new messages; the figures it gives must equal counting
everything, also when the history changed between calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import ContextManifest, ContextPolicy, HarnessAgent, Message, RuntimeContext, ToolCall
from harness.accounting import estimate_request, manifest_items
from harness.adapters._conversion import _CONVERSIONS, chain_hashes, split_messages
from harness.adapters.completion import _SCRATCHES, prepare_messages
from harness.chain import check_order, compose
from harness.errors import ConfigurationError, InvalidInputError, InvalidToolPairs
from harness.markers import SUMMARY, TRIMMED
from harness.request import ModelRequest, ModelResponse, RunScope
from harness.sessions import open_store
from harness.sessions.recorder import SessionRecorder
from harness.sessions.store import CompactionEvent, Event, MessageEvent, RewriteEvent, SessionKey
from harness.state import AgentState, SessionScratch
from harness.tokens import ApproximateEstimator
from harness.types import Handler, Middleware
from middleware import Compaction, default_stack
from middleware.budget_fit import BudgetFit
from middleware.pair_validation import PairValidation
from middleware.tool_result_offload import ToolResultOffload
from providers import ScriptedModel


# ------------------------------------------------------------------------- ways in
async def test_a_path_is_a_workspace_like_its_str(tmp_path: Path) -> None:
    model = ScriptedModel(model="gpt-4o", replies=["done"])
    agent = HarnessAgent(model=model, workspace=tmp_path / "ws")
    assert agent.workspace.local and agent.workspace.root == str((tmp_path / "ws").resolve())
    await agent.call("hello", RuntimeContext(user_id="u", session_id="s"))
    assert (tmp_path / "ws" / ".harness" / "sessions.db").is_file()  # the default store is there


def test_order_checks_read_statements_and_still_refuse_a_wrong_order() -> None:
    check_order(default_stack())  # the default order is accepted
    with pytest.raises(ConfigurationError, match="BudgetFit stands before ToolResultOffload"):
        check_order([BudgetFit(), ToolResultOffload()])


async def test_a_function_with_stated_concerns_is_ordered_like_a_class() -> None:
    async def late(request: ModelRequest, call_next: Handler) -> ModelResponse:
        return await call_next(request)

    late.concerns = frozenset()  # type: ignore[attr-defined]
    late.after = BudgetFit.concerns  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="late stands before BudgetFit"):
        compose([late, BudgetFit()], ScriptedModel(model="gpt-4o").complete)
    compose([BudgetFit(), late], ScriptedModel(model="gpt-4o").complete)


# --------------------------------------------------------------- the session's scratch
def _history(n: int) -> list[Message]:
    history = [Message.user("fix the failing test", id="u0")]
    for i in range(n):
        call = ToolCall(id=f"c{i}", name="sh", arguments=f'{{"n": {i}}}')
        history += [
            Message.assistant(id=f"a{i}", tool_calls=[call]),
            Message.tool(f"c{i}", f"output number {i} " * 10, id=f"t{i}"),
        ]
    return history


class _Counting(ApproximateEstimator):
    """Counts how often a message is measured (a subclass keeps a cache of its own)."""

    calls = 0

    def count_message(self, message: Message) -> int:
        _Counting.calls += 1
        return super().count_message(message)


def _no_compaction() -> list[Middleware]:
    return [m for m in default_stack() if not isinstance(m, Compaction)]


async def test_the_first_round_of_a_new_call_counts_only_its_new_messages() -> None:
    model = ScriptedModel(model="gpt-4o", default=lambda request: Message.assistant("ok"))
    agent = HarnessAgent(
        model=model, stack=_no_compaction(), policy=ContextPolicy(estimator=_Counting("o200k"))
    )
    ctx = RuntimeContext(user_id="u", session_id="s")
    agent.state(ctx).append(*_history(150))
    await agent.call("first", ctx)
    _Counting.calls = 0
    await agent.call("second", ctx)  # new: the last reply and this input
    assert _Counting.calls <= 4, f"{_Counting.calls} measurements for 2 new of 303 messages"
    other = RuntimeContext(user_id="u2", session_id="s")  # another user's session: its own
    agent.state(other).append(*_history(150))
    _Counting.calls = 0
    await agent.call("first", other)
    assert _Counting.calls >= 300  # nothing carried over from the first user's session
    assert agent.state(ctx).scratch is not agent.state(other).scratch


async def test_manifests_equal_counting_everything_when_the_history_changed_between_calls() -> None:
    manifests: list[ContextManifest] = []
    replies = iter(
        [
            *(ScriptedModel.tool_call("sh", {"n": i}, id=f"k{i}") for i in range(3)),
            Message.assistant("done"),
        ]
        * 4
    )
    model = ScriptedModel(model="gpt-4o", default=lambda request: next(replies))

    def sh(n: int) -> str:
        """Run a step.

        Args:
            n: the step.
        """
        return ("big output line\n" * 300) if n == 1 else f"small output {n}"

    stack = default_stack(offload=ToolResultOffload(max_result_chars=2_000, preview_chars=200))
    stack = [m for m in stack if not isinstance(m, Compaction)]
    states: dict[SessionKey, AgentState] = {}
    agent = HarnessAgent(
        model=model,
        tools=[sh],
        stack=stack,
        policy=ContextPolicy(observer=manifests.append),
        states=states,
    )
    ctx = RuntimeContext(user_id="u", session_id="s")
    agent.state(ctx).append(*_history(30))
    await agent.call("one", ctx)
    state = agent.state(ctx)
    # Between calls the middle of the working history changes (an edit, another writer).
    middle = state.working_history[20]
    state.commit_working(
        [
            *state.working_history[:20],
            middle.replace(content=f"{middle.text} (edited)"),
            *state.working_history[21:],
        ]
    )
    await agent.call("two", ctx)
    # A second agent (its own stack objects) serving the same state from the shared mapping.
    second = HarnessAgent(
        model=model,
        tools=[sh],
        stack=[m for m in default_stack() if not isinstance(m, Compaction)],
        policy=ContextPolicy(observer=manifests.append),
        states=states,  # its own store: the session is recorded there from now on
    )
    await second.call("three", ctx)
    del state.working_history[5:9]  # two whole tool units gone
    state.touch()
    await agent.call("four", ctx)
    sent = [m for m in manifests if m.purpose == "agent"]
    assert len(sent) == len(model.agent_requests) == 16
    for manifest, request in zip(sent, model.agent_requests, strict=True):
        alone = request.replace(run=None)
        assert manifest.estimated_input_tokens == estimate_request(alone)
        assert manifest.items == manifest_items(alone)[1]


async def test_a_pair_broken_between_calls_is_still_refused() -> None:
    model = ScriptedModel(model="gpt-4o", default=lambda request: Message.assistant("ok"))
    agent = HarnessAgent(model=model, stack=[PairValidation(mode="fail")])
    ctx = RuntimeContext(user_id="u", session_id="s")
    agent.state(ctx).append(*_history(20))
    await agent.call("first", ctx)
    state = agent.state(ctx)
    del state.working_history[10]  # an old tool result: its call is left without it
    state.touch()
    with pytest.raises(InvalidToolPairs):
        await agent.call("second", ctx)


def test_scratch_is_per_owner_bounded_and_no_part_of_the_state() -> None:
    scratch = SessionScratch()
    first, second = object(), object()
    assert scratch.slot(first, list) is scratch.slot(first, list)
    assert scratch.slot(second, list) is not scratch.slot(first, list)
    for _ in range(SessionScratch.MAX_SLOTS):
        scratch.slot(object(), list)
    assert len(scratch) <= SessionScratch.MAX_SLOTS  # full: dropped, remade on use
    one, two = AgentState(session_id="s"), AgentState(session_id="s")
    one.scratch.slot(first, list[int]).append(1)
    assert one == two  # caches do not make two states differ
    run = RunScope()  # without a session: per call
    assert run.session_slot(first, list) is run.slot(first, list)


async def test_a_settled_calibration_keeps_its_estimator_and_counts_exactly_as_it_says() -> None:
    manifests: list[ContextManifest] = []
    script = [ScriptedModel.tool_call("sh", {"n": i}, id=f"k{i}") for i in range(8)]
    model = ScriptedModel([*script, "done"], usage_factor=1.2)

    def sh(n: int) -> str:
        """Run a step.

        Args:
            n: the step.
        """
        return f"step {n} " * 40

    agent = HarnessAgent(
        model=model,
        tools=[sh],
        stack=[PairValidation()],
        policy=ContextPolicy(calibrate=True, observer=manifests.append),
        max_rounds=12,
    )
    await agent.call("go")
    factors = [m.calibration for m in manifests]
    assert factors[0] == 1.0 and abs(factors[-1] - 1.2) / 1.2 <= 0.03
    learned = agent.state().calibration["scripted"]
    assert all(f * 256 == round(f * 256) for f in factors)  # a step of 1/256
    assert factors[-1] >= learned - 1 / 256  # rounded up from what was learned
    requests = model.agent_requests
    for i in range(1, len(requests)):  # the same factor: the same estimator (and its totals)
        same = requests[i].policy.estimator is requests[i - 1].policy.estimator
        assert same == (factors[i] == factors[i - 1])
    for manifest, request in zip(manifests, requests, strict=True):
        assert manifest.estimated_input_tokens == estimate_request(request.replace(run=None))


# ------------------------------------------------------------------------- the recorder
async def test_the_recorder_logs_what_changed_wherever_it_changed() -> None:
    """Appends, a rewrite in the middle, a compaction: events and stored ids as they happened."""
    store = open_store("sqlite://")
    key = SessionKey("u", "a", "s")
    recorder = SessionRecorder(store, key)
    state = AgentState(session_id="s")
    state.append(*_history(40))
    await recorder.commit(state)

    async def committed() -> list[Event]:
        before = {e.seq for e in await store.events(key, limit=10**6)}
        await recorder.commit(state)
        found = await store.load(key)
        assert found is not None
        assert found[0].working_ids == tuple(m.id for m in state.working_history)
        return [e.event for e in await store.events(key, limit=10**6) if e.seq not in before]

    state.append(Message.user("one more"))
    (added,) = await committed()
    assert isinstance(added, MessageEvent) and added.message.text == "one more"
    assert await committed() == []  # nothing changed: nothing written
    middle = state.working_history[30]
    copy = middle.revise("trim", metadata={TRIMMED: True}, content="[trimmed]")
    state.commit_working([*state.working_history[:30], copy, *state.working_history[31:]])
    (rewrite,) = await committed()
    assert isinstance(rewrite, RewriteEvent)
    assert (rewrite.original_id, rewrite.how, rewrite.message.id) == (middle.id, "trim", copy.id)
    summary = Message.user("what happened so far", id="sum1", metadata={SUMMARY: True})
    replaced = [m.id for m in state.working_history[1:61]]
    state.commit_working([state.working_history[0], summary, *state.working_history[61:]])
    (compaction,) = await committed()
    assert isinstance(compaction, CompactionEvent)
    assert compaction.summary.id == "sum1" and list(compaction.replaced) == replaced
    await store.aclose()


# --------------------------------------------------------- the drop-in's conversion
def _conversation(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(n):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}", "function_call": None},
        ]
    return messages


def _fresh(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(m) for m in messages]


@pytest.mark.parametrize("where", [None, 0, 1, 17, 40])
def test_a_resent_conversation_converts_as_if_never_seen(where: int | None) -> None:
    """Grown, or changed at any place (the system message, the middle, the end)."""
    _CONVERSIONS.clear()
    first = _conversation(20)
    split_messages(_fresh(first))
    second = [*_fresh(first), {"role": "user", "content": "and now?"}]
    if where is not None:
        second[where] = {**second[where], "content": "changed"}
    got = split_messages(second)
    _CONVERSIONS.clear()
    assert got == split_messages(second)  # the same, converted from scratch
    _, history = got
    assert [m.id for m in history] == [h[:16] for h in chain_hashes(history)]


def test_a_callers_later_change_to_its_dicts_reaches_no_other_conversion() -> None:
    _CONVERSIONS.clear()
    messages = _conversation(5)
    _, before = split_messages(messages)
    messages[3]["content"] = "rewritten after the call"  # the caller reuses its dicts
    _, after = split_messages(_conversation(5))
    assert after == before
    _, changed = split_messages(messages)
    assert changed[2].text == "rewritten after the call"


def test_a_malformed_message_after_a_known_prefix_names_its_position() -> None:
    _CONVERSIONS.clear()
    messages = _conversation(4)
    split_messages(messages)
    with pytest.raises(InvalidInputError, match=r"messages\[9\]"):
        split_messages([*_fresh(messages), {"role": "tool", "content": 3}])


async def test_prepared_requests_reusing_the_conversion_and_scratch_equal_fresh_ones() -> None:
    """Through `prepare_messages` (the proxy hook's way in): a session and a stateless caller
    resend a growing conversation, once edited in the middle; what is prepared (messages and
    manifest figures) equals preparing every request in a fresh process."""

    async def serve(fresh: bool) -> list[tuple[Any, ...]]:
        store = open_store("sqlite://")
        stack = default_stack(offload=ToolResultOffload(max_result_chars=500, preview_chars=100))
        stack = [m for m in stack if not isinstance(m, Compaction)]
        conversation = _conversation(12)
        call = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        conversation[4] = {"role": "assistant", "content": None, "tool_calls": [call]}
        conversation[5] = {"role": "tool", "tool_call_id": "c1", "content": "long line\n" * 80}
        out: list[tuple[Any, ...]] = []
        for step in range(5):
            if step == 3:
                conversation[7] = {**conversation[7], "content": "edited later"}
            for session in ("s", None):
                if fresh:
                    _CONVERSIONS.clear()
                    _SCRATCHES.clear()
                sent, manifest = await prepare_messages(
                    "gpt-4o",
                    _fresh(conversation),
                    client=ScriptedModel(model="gpt-4o"),
                    stack=stack,
                    session_id=session,
                    user_id="u",
                    store=store,
                )
                assert manifest is not None
                items = [(i.source_id, i.tokens) for i in manifest.items]
                out.append((sent, manifest.estimated_input_tokens, items, manifest.transforms))
            conversation += [
                {"role": "assistant", "content": f"reply {step}"},
                {"role": "user", "content": f"more {step}"},
            ]
        await store.aclose()
        return out

    reused = await serve(fresh=False)
    # No workspace here: the long result is shortened to an inline preview.
    assert any(t.startswith("offload_failed:c1") for *_, transforms in reused for t in transforms)
    assert reused == await serve(fresh=True)


def test_kept_conversions_are_scoped_by_caller() -> None:
    _CONVERSIONS.clear()
    messages = _conversation(5)
    split_messages(messages, scope="alice\0agent")
    key, found = _CONVERSIONS.find(list(messages), "alice\0agent")
    assert found is not None
    other, nothing = _CONVERSIONS.find(list(messages), "bob\0agent")
    assert nothing is None and other != key
