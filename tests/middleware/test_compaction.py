"""Compaction through the real agent loop and the ScriptedModel.

Every test asserts on what the model actually received (``model.requests``), on the
agent's state, or on the workspace — never on a mocked middleware.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.generators import synthetic_trajectories
from benchmarks.trajectories import TRAJECTORY_DIR, load_trajectories
from harness import (
    ConfigurationError,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    ModelResponse,
    RuntimeContext,
    ToolCall,
    Workspace,
)
from harness.accounting import estimate_request
from harness.sessions.redaction import redact_message
from harness.state import StateKey
from harness.tokens import approximate
from harness.types import Handler, Middleware
from middleware._history import check_pairs, safe_cut
from middleware.compaction import (
    DEFAULT_SUMMARY_PROMPT,
    MERGE_PROMPT,
    REQUEST_KEY,
    SUMMARY_HEADER,
    Compaction,
    last_unit_start,
    select_cut,
)
from middleware.compaction._in_place import IN_PLACE_PROMPT
from middleware.compaction._summariser import render_message
from middleware.memory import MemoryStore, WorkspaceMemory, extract_facts
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")


# ------------------------------------------------------------------- helpers
def shell(command: str) -> str:
    """Run a shell command.

    Args:
        command: the command line.
    """
    return f"$ {command}\n" + "".join(
        f"{command} line {i}: some output text here\n" for i in range(60)
    )


def write_file(path: str, content: str) -> str:
    """Write a file.

    Args:
        path: where to write.
        content: the new content.
    """
    return f"wrote {len(content)} characters to {path}"


def calls(n: int, *, tool: str = "shell", start: int = 0) -> list[Message]:
    return [ScriptedModel.tool_call(tool, {"command": f"cmd{start + i}"}) for i in range(n)]


def agent(
    model: ScriptedModel,
    *stack: Middleware,
    workspace: Workspace | None = None,
    max_input_tokens: int | None = None,
    max_rounds: int = 40,
) -> HarnessAgent:
    policy = ContextPolicy(max_input_tokens=max_input_tokens) if max_input_tokens else None
    return HarnessAgent(
        model=model,
        system_prompt="You are a careful engineer.",
        tools=[shell, write_file],
        stack=list(stack),
        policy=policy,
        workspace=workspace,
        max_rounds=max_rounds,
    )


def every_ten(**overrides: Any) -> Compaction:
    """A Compaction that summarises at 10 messages and keeps the last 4, with no trimming and
    no memory: what most summary tests need (``overrides`` change or add settings)."""
    settings: dict[str, Any] = {
        "trigger_messages": 10,
        "keep_tokens": 0,
        "keep_messages": 4,
        "trim_min_tokens": None,
        "memory": None,
    }
    return Compaction(**{**settings, **overrides})


def summaries(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.ids.purpose == "summary"]


def prompt_of(request: ModelRequest) -> str:
    """Return what a summary request asks to summarise: its prompt, or the conversation
    before the instruction of an in-place request, rendered as the transcript would be."""
    if request.history[-1].text == IN_PLACE_PROMPT:
        return "\n\n".join(render_message(m) for m in request.history[:-1])
    assert len(request.history) == 1 and request.history[0].role == "user"
    return request.history[0].text


def compacted(request: ModelRequest) -> bool:
    return any(t.startswith("history_compaction:") for t in request.transforms)


def numbered_summary() -> Callable[[ModelRequest], str]:
    count = 0

    def reply(request: ModelRequest) -> str:
        nonlocal count
        count += 1
        return f"SUMMARY-{count}: the goal is to run commands."

    return reply


# ------------------------------------------------------------- configuration
def test_custom_summary_prompt_without_messages_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match=r"\{messages\}"):
        Compaction(summary_prompt="Summarise the conversation, please.")
    Compaction(summary_prompt="Summarise:\n{messages}")  # accepted


@pytest.mark.parametrize(
    "kwargs",
    [
        {"trigger_messages": 2},
        {"trigger_messages": True},
        {"trigger": 1.5},
        {"trigger": 0.0},
        {"trigger": 0},
        {"trigger": "0.8"},
        {"keep_tokens": -1},
        {"keep_messages": 0},
        {"keep_tokens": 0, "keep_messages": 197},  # over the 200-message guard - 4
        {"keep_tokens": 0, "keep_messages": 47, "trigger_messages": 50},
        {"auto": "no"},
        {"model": object()},
        {"trim_protect_tokens": -5},
        {"trim_min_tokens": -1},
        {"trim_preview_chars": -1},
        {"max_arg_length": 0},
        {"truncation_text": 3},
        {"summary_chunk_tokens": 10},
        {"memory": "MEMORY.md"},
    ],
)
def test_bad_configuration_is_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Compaction(**kwargs)


def test_defaults() -> None:
    c = Compaction().settings
    assert (c.trigger_messages, c.trigger, c.keep_tokens, c.keep_messages) == (None, None, None, 20)
    # window-aware: 75 % of the input limit, 200 messages only as a guard
    assert (c.token_trigger, c.message_trigger, c.auto) == (0.75, 200, True)
    assert (c.trim_protect_tokens, c.trim_min_tokens) == (40_000, 20_000)
    assert c.truncate_args is False and c.compact_tool is False
    assert c.truncation_text == "... [truncated] ..." and c.max_arg_length == 2000
    assert isinstance(c.memory, WorkspaceMemory)
    assert Compaction().tools() == []
    for section in ("goal", "conclusions", "artefacts", "Next steps"):
        assert section in DEFAULT_SUMMARY_PROMPT


# --------------------------------------------------------------- stage 1: trim
async def test_old_tool_outputs_are_trimmed_and_the_newest_protected() -> None:
    model = ScriptedModel([*calls(8), "done"])
    compaction = Compaction(
        trigger_messages=1000,
        trim_protect_tokens=1500,
        trim_min_tokens=1000,
        trim_preview_chars=80,
        memory=None,
    )
    # Trimming waits until a round must change the history anyway: here, the history
    # outgrowing its budget (trimming then makes it fit, so nothing is summarised).
    a = agent(model, compaction, max_input_tokens=3_500)
    await a.call("run the commands", CTX)

    last = model.agent_requests[-1].history
    tools = [m for m in last if m.role == "tool"]
    trimmed = [m for m in tools if m.meta("trimmed")]
    assert trimmed and len(trimmed) < len(tools)
    # The newest outputs are protected and intact; only older ones were trimmed.
    assert not tools[-1].meta("trimmed") and tools[-1].text == shell("cmd7")
    first_kept = tools.index(next(m for m in tools if not m.meta("trimmed")))
    assert all(m.meta("trimmed") for m in tools[:first_kept])
    for m in trimmed:
        assert m.text.startswith(shell(m.text.split("\n")[0][2:])[:80])
        assert len(m.text) < 300 and "trimmed" in m.text
        assert m.id.endswith("~trim") and m.meta("origin_id")
    assert any(
        t.startswith("tool_output_trim:") for r in model.agent_requests for t in r.transforms
    )
    # Only what is sent changed: the full history keeps every output in full.
    assert [m.text for m in await a.history(CTX) if m.role == "tool"] == [
        shell(f"cmd{i}") for i in range(8)
    ]
    assert not summaries(model)


async def test_the_newest_results_are_never_trimmed_even_without_protection() -> None:
    parallel = Message.assistant(
        tool_calls=[
            ToolCall(id=f"p{i}", name="shell", arguments=json.dumps({"command": f"p{i}"}))
            for i in range(3)
        ]
    )
    model = ScriptedModel([*calls(3), parallel, "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=1000,
            trim_protect_tokens=0,
            trim_min_tokens=0,
            trim_preview_chars=50,
            memory=None,
        ),
        max_input_tokens=3_200,
    )
    await a.call("go", CTX)
    last = model.agent_requests[-1].history
    assert [m.meta("trimmed") for m in last if m.role == "tool"] == [True] * 3 + [None] * 3
    assert [m.text for m in last[-3:]] == [shell(f"p{i}") for i in range(3)]


async def test_trimming_waits_for_a_round_that_rewrites_the_history_anyway() -> None:
    # Enough old output to trim from the second round on, but nothing is due until the
    # history outgrows its budget: until then every request repeats the previous one's
    # history byte for byte (a provider's prompt cache keeps matching), then one batch.
    model = ScriptedModel([*calls(8), "done"])
    compaction = Compaction(
        trigger_messages=1000, trim_protect_tokens=100, trim_min_tokens=100, memory=None
    )
    a = agent(model, compaction, max_input_tokens=3_500)
    await a.call("run the commands", CTX)

    rounds = model.agent_requests
    trims = [i for i, r in enumerate(rounds) if any("tool_output_trim" in t for t in r.transforms)]
    assert trims and trims[0] > 2
    for before, after in itertools.pairwise(rounds):
        if after in (rounds[i] for i in trims):
            continue
        shared = after.history[: len(before.history)]
        assert [(m.id, m.text) for m in shared] == [(m.id, m.text) for m in before.history]
    assert not summaries(model)


async def test_trimming_waits_for_enough_trimmable_output() -> None:
    model = ScriptedModel([*calls(5), "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=1000, trim_protect_tokens=500, trim_min_tokens=1_000_000, memory=None
        ),
    )
    await a.call("go", CTX)
    assert not any(m.meta("trimmed") for r in model.agent_requests for m in r.history)
    assert not any(
        t.startswith("tool_output_trim") for r in model.agent_requests for t in r.transforms
    )


async def test_trimmed_output_is_not_trimmed_again() -> None:
    model = ScriptedModel([*calls(8), "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=1000,
            trim_protect_tokens=1500,
            trim_min_tokens=300,
            trim_preview_chars=80,
            memory=None,
        ),
        max_input_tokens=3_000,
    )
    await a.call("go", CTX)
    trimmed_ids = [m.id for r in model.agent_requests for m in r.history if m.meta("trimmed")]
    assert trimmed_ids and all(i.count("~trim") == 1 for i in trimmed_ids)


# ------------------------------------------------------ stage 2: argument cuts
def writes(n: int) -> list[Message]:
    return [
        ScriptedModel.tool_call(
            "write_file", {"path": f"f{i}.py", "content": f"# file {i}\n" + "x = 1\n" * 400}
        )
        for i in range(n)
    ]


async def test_old_long_arguments_are_truncated_outside_the_kept_range() -> None:
    model = ScriptedModel([*writes(5), "done"])
    compaction = Compaction(
        trigger_messages=1000,
        keep_tokens=0,
        keep_messages=4,
        truncate_args=True,
        max_arg_length=100,
        trim_min_tokens=None,
        memory=None,
    )
    # Truncation waits for a round that must change the history: the last one here, where
    # the history outgrows its budget.
    a = agent(model, compaction, max_input_tokens=6_000)
    await a.call("write the files", CTX)

    last = model.agent_requests[-1].history
    assistants = [m for m in last if m.tool_calls]
    old, recent = assistants[:-2], assistants[-2:]
    for m in old:
        args = json.loads(m.tool_calls[0].arguments)
        full = f"# file {assistants.index(m)}\n" + "x = 1\n" * 400
        assert args["content"] == full[:20] + "... [truncated] ..."
        assert args["path"].startswith("f")  # short strings are left alone
        assert m.meta("args_truncated") is True
    for m in recent:
        assert len(json.loads(m.tool_calls[0].arguments)["content"]) > 2000
    assert any(
        t.startswith("tool_args_truncate:") for r in model.agent_requests for t in r.transforms
    )
    # The executed arguments are intact: the tools saw them and the full history keeps them.
    record = await a.history(CTX)
    full_calls = [m for m in record if m.tool_calls]
    assert full_calls
    assert all(len(json.loads(m.tool_calls[0].arguments)["content"]) > 2000 for m in full_calls)
    assert all("wrote 2409 characters" in m.text for m in record if m.role == "tool")


async def test_argument_truncation_is_off_by_default() -> None:
    model = ScriptedModel([*writes(5), "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=1000, keep_tokens=0, keep_messages=2, trim_min_tokens=None, memory=None
        ),
    )
    await a.call("write the files", CTX)
    assert all(
        len(c.arguments) > 2000 for m in model.agent_requests[-1].history for c in m.tool_calls
    )


async def test_unparsable_arguments_are_left_alone() -> None:
    broken = Message.assistant(
        tool_calls=[ToolCall(id="c1", name="write_file", arguments="{not json " + "y" * 500)]
    )
    model = ScriptedModel([broken, *writes(3), "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=1000,
            keep_tokens=0,
            keep_messages=2,
            truncate_args=True,
            max_arg_length=50,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    await a.call("go", CTX)
    sent = next(
        m for m in model.agent_requests[-1].history if m.tool_calls and m.tool_calls[0].id == "c1"
    )
    assert sent.tool_calls[0].arguments == broken.tool_calls[0].arguments


# --------------------------------------------------------- stage 3: summaries
async def test_summary_by_message_count_keeps_recent_messages_and_pins_the_task() -> None:
    model = ScriptedModel([*calls(6), "done"], summary="SUMMARY-A")
    a = agent(
        model,
        every_ten(
            in_place_summary=False,  # the transcript form
        ),
    )
    await a.call("run six commands", CTX)

    (summary_request,) = summaries(model)
    prompt = prompt_of(summary_request)
    assert "[tool call shell] " in prompt and "cmd0 line 0" in prompt
    assert "run six commands" not in prompt  # the pinned task is not summarised away

    at = next(i for i, r in enumerate(model.agent_requests) if compacted(r))
    history = model.agent_requests[at].history
    assert history[0].text == "run six commands" and history[0].role == "user"
    assert history[1].meta("summary") is True and history[1].text.startswith(SUMMARY_HEADER)
    assert history[1].text.endswith("SUMMARY-A")
    kept = history[2:]
    assert 1 <= len(kept) <= 4 and kept[0].role == "assistant" and check_pairs(history).ok
    # The kept messages are the originals (same ids), not copies.
    full_ids = [m.id for m in await a.history(CTX)]
    n = full_ids.index(kept[0].id) - 1
    assert [m.id for m in kept] == full_ids[n + 1 : n + 1 + len(kept)]
    assert len(model.agent_requests[at - 1].history) == n + 1 + len(kept) - 2
    assert f"history_compaction:{n}" in model.agent_requests[at].transforms


@pytest.mark.parametrize("pin", [False, True], ids=["default", "pin_first_task"])
async def test_a_newer_user_turn_folds_the_first_task_into_the_summary(pin: bool) -> None:
    model = ScriptedModel(["ok", *calls(8), "done"])
    a = agent(model, every_ten(in_place_summary=False, pin_first_task=pin))  # transcript form
    await a.call("first task", CTX)
    await a.call("second request: run the commands", CTX)
    requests = [r for r in model.agent_requests if compacted(r)]
    assert len(requests) >= 2
    current = (await a.history(CTX))[2]
    assert current.text == "second request: run the commands"
    at = 1 if pin else 0  # where the summary is: after the pinned task, or first
    for request in requests:
        h = request.history
        assert sum(m.text == "first task" for m in h) == (1 if pin else 0)
        assert h[at].meta("summary") and h[at + 1] == current
        assert h[at + 2].role == "assistant" and check_pairs(h).ok
    prompts = [prompt_of(r) for r in summaries(model)]
    assert all("second request" not in p for p in prompts)
    assert ("first task" in prompts[0]) is not pin  # summarised (not lost), or still pinned
    assert "ok" in prompts[0]


async def test_the_full_record_is_kept_while_the_working_history_shrinks() -> None:
    model = ScriptedModel([*calls(8), "done"])
    a = agent(
        model,
        every_ten(),
    )
    await a.call("go", CTX)
    state, full = a.state(CTX), await a.history(CTX)
    assert len(full) == 1 + 8 * 2 + 1
    assert full[0].text == "go"
    assert [m.text for m in full if m.role == "tool"] == [shell(f"cmd{i}") for i in range(8)]
    assert not any(m.meta("summary") for m in full)
    assert len(state.working_history) < 10
    assert state.working_history[0] == full[0]
    assert state.working_history[1].meta("summary")


async def test_no_compaction_on_the_rounds_after_a_compaction() -> None:
    model = ScriptedModel([*calls(12), "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=14, keep_tokens=0, keep_messages=4, trim_min_tokens=None, memory=None
        ),
    )
    await a.call("go", CTX)
    flags = [compacted(r) for r in model.agent_requests]
    first = flags.index(True)
    assert flags[first + 1 : first + 4] == [False, False, False]
    assert len(summaries(model)) == flags.count(True)
    # The prefix (pinned task, summary, kept) stays byte-stable while nothing is compacted.
    a1, a2 = model.agent_requests[first + 1].history, model.agent_requests[first + 3].history
    assert [m.id for m in a1] == [m.id for m in a2[: len(a1)]]
    assert a1[1].text == a2[1].text


async def test_dynamic_keep_range_leaves_room_for_many_rounds() -> None:
    model = ScriptedModel([*calls(20), "done"])
    a = agent(model, Compaction(trigger_messages=20, trim_min_tokens=None, memory=None))
    await a.call("go", CTX)
    flags = [compacted(r) for r in model.agent_requests]
    first = flags.index(True)
    assert first == 10  # round k sends 1 + 2k messages: 21 ≥ 20 first at round 10
    after = model.agent_requests[first].history
    assert len(after) <= 20 // 2  # at most half the trigger: pinned, summary, 8 kept
    assert flags[first + 1 : first + 5] == [False] * 4


async def test_token_budget_trigger_with_budget_fit_keeps_a_dynamic_share() -> None:
    from middleware.budget_fit import BudgetFit

    model = ScriptedModel([*calls(12), "done"])
    a = agent(
        model, BudgetFit(), Compaction(trim_min_tokens=None, memory=None), max_input_tokens=5000
    )
    await a.call("go", CTX)
    est = a.policy.estimator
    assert est is not None
    at = next(i for i, r in enumerate(model.agent_requests) if compacted(r))
    assert at > 0 and len(model.agent_requests[at - 1].history) < 50  # triggered by tokens
    for request in model.agent_requests:
        assert request.history_budget is not None
        assert est.count_messages(request.history) <= request.history_budget
    after = model.agent_requests[at]
    kept = after.history[2:]
    assert after.history_budget is not None
    assert est.count_messages(kept) <= 0.35 * after.history_budget or len(kept) == 2


async def test_trigger_fraction_compacts_before_the_budget_is_full() -> None:
    model = ScriptedModel([*calls(12), "done"])
    a = agent(
        model, Compaction(trigger=0.4, trim_min_tokens=None, memory=None), max_input_tokens=8000
    )
    await a.call("go", CTX)
    at = next(i for i, r in enumerate(model.agent_requests) if compacted(r))
    before = model.agent_requests[at - 1]
    assert estimate_request(before) <= 0.4 * 8000 < estimate_request(before) + 1200
    for r in model.agent_requests:
        assert estimate_request(r) < 8000
    flags = [compacted(r) for r in model.agent_requests]
    assert not any(a and b for a, b in itertools.pairwise(flags))


async def test_an_earlier_summary_is_updated_not_resummarised() -> None:
    model = ScriptedModel([*calls(14), "done"], summary=numbered_summary())
    a = agent(
        model,
        every_ten(
            in_place_summary=False,  # the transcript form
        ),
    )
    await a.call("go", CTX)
    first, second = summaries(model)[:2]
    assert "previous summary" not in prompt_of(first)
    text = prompt_of(second)
    assert "SUMMARY-1: the goal is to run commands." in text and "previous summary" in text
    assert SUMMARY_HEADER not in text  # the summary itself, not the wrapper message
    history = model.agent_requests[-1].history
    assert sum(1 for m in history if m.meta("summary")) == 1
    assert history[0].text == "go"
    assert history[1].meta("summarised") > 10


async def test_custom_prompt_with_previous_summary_placeholder() -> None:
    prompt = "PREV<{previous_summary}>\nMSGS<{messages}>"
    model = ScriptedModel([*calls(14), "done"], summary=numbered_summary())
    a = agent(
        model,
        Compaction(
            trigger_messages=10,
            keep_tokens=0,
            keep_messages=4,
            summary_prompt=prompt,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    await a.call("go", CTX)
    first, second = (prompt_of(r) for r in summaries(model)[:2])
    assert first.startswith("PREV<>\nMSGS<[")
    assert second.startswith("PREV<\nHere is the previous summary") and "SUMMARY-1" in second


async def test_summarisation_is_chunked_and_merged_when_the_early_part_is_large() -> None:
    chunk = 1200
    model = ScriptedModel([*calls(10), "done"], summary=numbered_summary())
    a = agent(
        model,
        Compaction(
            trigger_messages=16,
            keep_tokens=0,
            keep_messages=4,
            summary_chunk_tokens=chunk,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    await a.call("go", CTX)
    requests = summaries(model)
    partials = [r for r in requests if not prompt_of(r).startswith(MERGE_PROMPT[:40])]
    merges = [r for r in requests if prompt_of(r).startswith(MERGE_PROMPT[:40])]
    assert len(partials) >= 3 and len(merges) == 1
    for r in requests:
        assert estimate_request(r, model.estimator) <= chunk
        assert r.input_limit >= chunk and r.history[0].role == "user"
    merged = prompt_of(merges[0])
    for i in range(1, len(partials) + 1):
        assert f"SUMMARY-{i}:" in merged
    # Every early command reached some partial summary request, in order.
    joined = "\n".join(prompt_of(r) for r in partials)
    early = [i for i in range(10) if f'[tool call shell] {{"command": "cmd{i}"}}' in joined]
    assert early == list(range(len(early))) and len(early) >= 6
    history = model.agent_requests[-1].history
    assert history[1].text.endswith(f"SUMMARY-{len(partials) + 1}: the goal is to run commands.")


async def test_merging_is_chunked_too() -> None:
    long_summary = "## Key conclusions\n" + "a conclusion with several words in it\n" * 60
    counter = {"n": 0}

    def reply(request: ModelRequest) -> str:
        counter["n"] += 1
        return f"S{counter['n']} " + long_summary

    chunk = 1000
    model = ScriptedModel([*calls(12), "done"], summary=reply)
    a = agent(
        model,
        Compaction(
            trigger_messages=20,
            keep_tokens=0,
            keep_messages=4,
            summary_chunk_tokens=chunk,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    await a.call("go", CTX)
    requests = summaries(model)
    merges = [r for r in requests if prompt_of(r).startswith(MERGE_PROMPT[:40])]
    assert len(merges) >= 2  # the partials did not fit one merge request
    for r in requests:
        assert estimate_request(r, model.estimator) <= chunk


async def test_summaries_go_straight_to_the_summariser_not_through_the_stack() -> None:
    seen: list[str] = []

    async def outer(request: ModelRequest, call_next: Handler) -> ModelResponse:
        seen.append(request.ids.purpose)
        return await call_next(request)

    summariser = ScriptedModel(summary="FROM-THE-SUMMARISER", model="summariser", window=32_000)
    model = ScriptedModel([*calls(6), "done"], summary="FROM-THE-AGENT-MODEL")
    events: list[str] = []
    a = agent(
        model,
        outer,
        Compaction(
            trigger_messages=10,
            keep_tokens=0,
            keep_messages=4,
            model=summariser,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    async for event in a.stream_events("go", CTX):
        if event.kind == "context_build" and event.manifest is not None:
            events.append(event.manifest.purpose)
    assert set(seen) == {"agent"}
    assert not summaries(model)
    (request,) = summariser.requests
    assert request.ids.purpose == "summary" and request.model == "summariser"
    assert request.ids.session_id == "s" and request.blocks == () and request.system == ()
    assert request.input_limit == 32_000 - 4096 - 1024
    assert "summary" in events and events.count("agent") == len(model.agent_requests)
    assert model.agent_requests[-1].history[1].text.endswith("FROM-THE-SUMMARISER")


async def test_only_the_chunks_the_summariser_rejects_are_halved_and_asked_again() -> None:
    summariser = ScriptedModel(model="small-summariser", overflow_above=1500)
    model = ScriptedModel([*calls(8), "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=14,
            keep_tokens=0,
            keep_messages=4,
            model=summariser,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    await a.call("go", CTX)
    assert summariser.overflows >= 1
    sizes = [ScriptedModel.prompt_tokens(r) for r in summariser.requests]
    rejected = [r for r, size in zip(summariser.requests, sizes, strict=True) if size > 1500]
    answered = [r for r, size in zip(summariser.requests, sizes, strict=True) if size <= 1500]
    assert sizes[0] > 1500 and len(rejected) == summariser.overflows and len(answered) > 2
    # Every early command was summarised by exactly one answered request.
    partials = [prompt_of(r) for r in answered if not prompt_of(r).startswith(MERGE_PROMPT[:40])]
    for i in range(8):
        command = f'[tool call shell] {{"command": "cmd{i}"}}'
        assert sum(command in p for p in partials) <= 1
    assert sum('"cmd0"' in p for p in partials) == 1
    assert any(compacted(r) for r in model.agent_requests)


async def test_a_failing_summariser_never_bricks_the_session() -> None:
    from harness import ProviderUnavailable

    down = {"on": True}

    def reply(request: ModelRequest) -> str:
        if down["on"]:
            raise ProviderUnavailable("summariser down", provider="scripted", status=503)
        return "SUMMARY-AFTER-RECOVERY"

    model = ScriptedModel([*calls(10), "done", *calls(2, start=10), "done again"], summary=reply)
    a = agent(
        model,
        Compaction(
            trigger_messages=16,
            keep_tokens=0,
            keep_messages=4,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    events = [e async for e in a.stream_events("go", CTX)]
    assert events[-1].kind == "final" and events[-1].message is not None
    assert events[-1].message.text == "done"
    failed = [
        r for r in model.agent_requests if "summary_failed:ProviderUnavailable" in r.transforms
    ]
    assert failed, "the round where the summariser failed still went to the model"
    for request in failed:
        assert check_pairs(request.history).ok
        assert len(request.history) < 16
        assert any(m.meta("summary_failed") for m in request.history)
    warnings = [e for e in events if e.kind == "warning"]
    assert warnings and warnings[0].code == "summary_failed"
    # Nothing was lost: the working history kept every message for the next try.
    assert len(a.state(CTX).working_history) == len(await a.history(CTX))
    down["on"] = False
    await a.call("continue", CTX)
    last = model.agent_requests[-1]
    assert any("SUMMARY-AFTER-RECOVERY" in m.text for m in last.history)
    assert not any(m.meta("summary_failed") for m in a.state(CTX).working_history)


async def test_an_empty_summary_leaves_the_early_part_out_for_the_round() -> None:
    model = ScriptedModel([*calls(6), "done"], summary="   ")
    a = agent(
        model,
        every_ten(),
    )
    reply = await a.call("go", CTX)
    assert reply.text == "done"
    assert any("summary_failed:empty_summary" in r.transforms for r in model.agent_requests)


async def test_structured_state_is_not_summarised() -> None:
    model = ScriptedModel([*calls(6), "done"])
    a = agent(
        model,
        every_ten(),
    )
    todos: StateKey[list[Any]] = StateKey("app/todos", list)
    a.state(CTX).set(todos, [{"content": "TODO-ITEM-XYZ", "status": "pending"}])
    await a.call("go", CTX)
    assert summaries(model) and all("TODO-ITEM-XYZ" not in prompt_of(r) for r in summaries(model))
    kept = a.state(CTX).get(todos)
    assert kept is not None and kept[0]["content"] == "TODO-ITEM-XYZ"


# ------------------------------------------------------------ forced / tool
def force_on(rounds: set[int]) -> Middleware:
    """A user middleware that forces compaction on the given rounds (as OverflowRetry does)."""
    seen = {"n": 0}

    async def force(request: ModelRequest, call_next: Handler) -> ModelResponse:
        n = seen["n"]
        seen["n"] += 1
        if n in rounds:
            request = request.replace(force_compaction=True)
        return await call_next(request)

    return force


async def test_force_compaction_is_honoured_below_every_trigger() -> None:
    model = ScriptedModel([*calls(4), "done"])
    a = agent(model, force_on({4}), Compaction(trim_min_tokens=None, memory=None))
    await a.call("go", CTX)
    assert [compacted(r) for r in model.agent_requests] == [False] * 4 + [True]
    history = model.agent_requests[4].history
    # Forced: everything but the pinned task and the last unit is summarised.
    assert history[0].text == "go" and history[1].meta("summary")
    assert [m.role for m in history[2:]] == ["assistant", "tool"] and check_pairs(history).ok
    assert "history_compaction:6" in model.agent_requests[4].transforms


async def test_forced_compaction_with_nothing_to_compact_says_so() -> None:
    from harness import ContextOverflowError

    model = ScriptedModel([*calls(1), "done"])
    a = agent(model, force_on({0}), Compaction(trim_min_tokens=None, memory=None))
    with pytest.raises(ContextOverflowError) as info:
        await a.call("go", CTX)
    assert info.value.reason == "nothing_to_compact"
    assert not summaries(model) and not model.agent_requests


async def test_forced_compaction_after_a_compaction_summarises_the_rest() -> None:
    model = ScriptedModel([*calls(8), "done"], summary=numbered_summary())
    a = agent(
        model,
        force_on({7}),
        Compaction(
            trigger_messages=10, keep_tokens=0, keep_messages=6, trim_min_tokens=None, memory=None
        ),
    )
    await a.call("go", CTX)
    history = model.agent_requests[7].history
    assert compacted(model.agent_requests[7])
    assert len(history) == 4 and len(summaries(model)) >= 2
    assert history[1].text.endswith(
        f"SUMMARY-{len(summaries(model))}: the goal is to run commands."
    )


async def test_the_agent_can_ask_for_compaction_with_a_tool() -> None:
    model = ScriptedModel(
        [*calls(3), ScriptedModel.tool_call("compact_conversation"), *calls(2, start=3), "done"]
    )
    compaction = Compaction(
        compact_tool=True, keep_tokens=0, keep_messages=2, trim_min_tokens=None, memory=None
    )
    assert [t.name for t in compaction.tools()] == ["compact_conversation"]
    a = agent(model, compaction)
    assert "compact_conversation" in a.tools
    await a.call("go", CTX)
    flags = [compacted(r) for r in model.agent_requests]
    assert flags == [False, False, False, False, True, False, False]
    assert len(summaries(model)) == 1
    history = model.agent_requests[4].history
    assert history[1].meta("request") == a.state(CTX).get(REQUEST_KEY)
    assert history[-1].text.startswith("Compaction requested")


# ------------------------------------------------------------------ memory
async def test_memory_hook_appends_facts_to_memory_md(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    workspace.write_text("MEMORY.md", "# Memory\n")
    script: list[Message | str] = [
        Message.assistant(
            "Note: the tests live in tests/unit.",
            tool_calls=[
                ToolCall(
                    id="w1",
                    name="write_file",
                    arguments=json.dumps({"path": "src/app.py", "content": "x"}),
                )
            ],
        ),
        *calls(5),
        "done",
    ]
    model = ScriptedModel(script)
    a = agent(
        model,
        Compaction(
            trigger_messages=10,
            keep_tokens=0,
            keep_messages=4,
            trim_min_tokens=None,
            memory=WorkspaceMemory(scope="project"),
        ),
        workspace=workspace,
    )
    await a.call("go", CTX)
    memory = workspace.read_text("MEMORY.md")
    assert memory.startswith("# Memory\n\n## From session s (")
    assert "- Note: the tests live in tests/unit.\n" in memory
    assert "- Files changed: `src/app.py`\n" in memory
    at = next(r for r in model.agent_requests if compacted(r))
    assert "memory_record:2" in at.transforms
    # Recording the same facts again appends nothing.
    store = WorkspaceMemory(scope="project", workspace=workspace)
    assert await store.record(await a.history(CTX), at) == 0
    assert workspace.read_text("MEMORY.md") == memory


async def test_memory_hook_records_user_preferences_from_later_calls(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    model = ScriptedModel([*calls(2), "ok", "ok again", *calls(4, start=2), "done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=10,
            keep_tokens=0,
            keep_messages=4,
            trim_min_tokens=None,
            memory=WorkspaceMemory(scope="project"),
        ),
        workspace=workspace,
    )
    await a.call("first task", CTX)
    await a.call("Please always run the linter before committing.", CTX)
    await a.call("now run more commands", CTX)
    assert "- Please always run the linter before committing.\n" in workspace.read_text("MEMORY.md")


async def test_memory_none_or_no_workspace_writes_nothing(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    model = ScriptedModel(
        [ScriptedModel.tool_call("write_file", {"path": "a.py", "content": "x"}), *calls(5), "done"]
    )
    a = agent(
        model,
        every_ten(),
        workspace=workspace,
    )
    await a.call("go", CTX)
    assert summaries(model) and not workspace.exists("MEMORY.md")
    # Default store without a workspace: compaction works, nothing is recorded.
    model = ScriptedModel(
        [ScriptedModel.tool_call("write_file", {"path": "a.py", "content": "x"}), *calls(5), "done"]
    )
    a = agent(
        model, Compaction(trigger_messages=10, keep_tokens=0, keep_messages=4, trim_min_tokens=None)
    )
    await a.call("go", CTX)
    assert summaries(model)
    assert not any(t.startswith("memory_") for r in model.agent_requests for t in r.transforms)


class Recorder:
    """A user-written memory store: remembers what it was given and when."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.batches: list[tuple[list[str], int]] = []

    async def record(self, messages: Sequence[Message], request: ModelRequest) -> int:
        self.batches.append(([m.id for m in messages], len(summaries(self.model))))
        return 1


async def test_a_custom_memory_store_sees_the_early_part_before_the_summary() -> None:
    model = ScriptedModel([*calls(6), "done"])
    recorder = Recorder(model)
    assert isinstance(recorder, MemoryStore)
    a = agent(
        model,
        Compaction(
            trigger_messages=10,
            keep_tokens=0,
            keep_messages=4,
            trim_min_tokens=None,
            memory=recorder,
        ),
    )
    await a.call("go", CTX)
    ((ids, summaries_before),) = recorder.batches
    assert summaries_before == 0
    full = await a.history(CTX)
    assert ids == [m.id for m in full[1 : 1 + len(ids)]]
    assert "memory_record:1" in next(r for r in model.agent_requests if compacted(r)).transforms


def test_extract_facts_heuristic() -> None:
    facts = extract_facts(
        [
            Message.user("Fix the bug.\nRemember: the CI uses Python 3.11\nthanks"),
            Message.assistant("Decision: keep the old API.\nI will look around."),
            Message.assistant(
                tool_calls=[ToolCall(id="1", name="edit_file", arguments='{"file_path": "a/b.py"}')]
            ),
            Message.assistant(
                tool_calls=[ToolCall(id="2", name="shell", arguments='{"path": "ignored"}')]
            ),
            Message.user("x", metadata={"summary": True}),
        ]
    )
    assert facts == [
        "Remember: the CI uses Python 3.11",
        "Decision: keep the old API.",
        "Files changed: `a/b.py`",
    ]


# ------------------------------------------------------------ pair safety
@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Well-formed histories: user/assistant turns and multi-call turns with their results."""
    out: list[Message] = [Message.user("task")]
    n_turns = draw(st.integers(1, 25))
    for t in range(n_turns):
        kind = draw(st.sampled_from(["user", "text", "calls", "calls", "calls"]))
        if kind == "user":
            out.append(Message.user(f"more {t} " + "w " * draw(st.integers(0, 40))))
        elif kind == "text":
            out.append(Message.assistant(f"thinking {t} " + "w " * draw(st.integers(0, 40))))
        else:
            k = draw(st.integers(1, 4))
            ids = [f"c{t}_{j}" for j in range(k)]
            out.append(
                Message.assistant(
                    tool_calls=[ToolCall(id=i, name="shell", arguments="{}") for i in ids]
                )
            )
            order = draw(st.permutations(ids))
            out.extend(
                Message.tool(i, "r " * draw(st.integers(0, 200)), name="shell") for i in order
            )
    return out


@settings(max_examples=100, deadline=None)
@given(histories(), st.integers(0, 3000), st.integers(1, 30))
def test_select_cut_never_splits_a_call_from_its_result(
    history: list[Message], keep: int, max_messages: int
) -> None:
    est = approximate()
    body = history[1:]
    cut = select_cut(body, est.count_message, keep_tokens=keep, max_messages=max_messages)
    assert 0 <= cut < len(body)
    assert safe_cut(body, cut) == cut
    kept, early = body[cut:], body[:cut]
    assert check_pairs(kept).ok and check_pairs(early).ok
    assert kept[0].role != "tool"
    # The smallest such cut: one more unit would break a limit (or there is none).
    if cut > 0:
        wider = body[safe_cut(body, cut - 1) :]
        assert est.count_messages(wider) > keep or len(wider) > max_messages
    if cut < last_unit_start(body):
        assert est.count_messages(kept) <= keep and len(kept) <= max_messages


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(1, 8))
async def test_compacted_history_is_pair_valid_through_the_agent(
    history: list[Message], keep: int
) -> None:
    model = ScriptedModel(["done"])
    a = agent(
        model,
        Compaction(
            trigger_messages=12,
            keep_tokens=0,
            keep_messages=keep,
            trim_min_tokens=None,
            memory=None,
        ),
    )
    a.state(CTX).append(*history)
    await a.call("next", CTX)
    (sent,) = model.agent_requests
    assert check_pairs(sent.history).ok
    record = await a.history(CTX)
    original = [*history, record[-2]]
    if compacted(sent):
        # "next" is a newer user turn: a first task, if any, is summarised with the rest.
        assert sent.history[0].meta("summary")
        kept = sent.history[1:]
        assert [m.id for m in kept] == [m.id for m in original[len(original) - len(kept) :]]
        assert kept[0].role != "tool"
    else:
        assert len(original) < 12
    assert record[: len(history)] == history


# ------------------------------------------------------ a recorded trajectory
def real_trajectory() -> tuple[Message, ...]:
    """The first shared SWE-agent run long enough to compact (skip when ../shared is absent)."""
    for run in load_trajectories():
        if len(run.messages) >= 20 and sum(1 for m in run.messages if m.tool_calls) >= 8:
            return run.messages
    pytest.skip(f"no SWE-agent trajectory of 20+ messages under {TRAJECTORY_DIR}")


def generated_trajectory() -> tuple[Message, ...]:
    """The benchmarks' generated run (seed 0): the same shape, always available."""
    return synthetic_trajectories(seed=0, count=1)[0].messages


@pytest.mark.parametrize(
    "trajectory", [real_trajectory, generated_trajectory], ids=["real", "generated"]
)
async def test_compaction_on_a_replayed_trajectory(
    trajectory: Callable[[], tuple[Message, ...]],
) -> None:
    traj = list(trajectory())
    assert check_pairs(traj).ok
    model = ScriptedModel(["I will continue from here."])
    a = agent(
        model,
        Compaction(
            trigger_messages=12, keep_tokens=0, keep_messages=6, trim_min_tokens=None, memory=None
        ),
    )
    a.state(CTX).append(*traj)
    await a.call("Continue.", CTX)

    (summary_request,) = summaries(model)
    (sent,) = model.agent_requests
    kept = sent.history[1:]
    record = await a.history(CTX)
    original = [*traj, record[len(traj)]]
    # "Continue." is a newer user turn: the task is summarised with the early part.
    early = original[: len(original) - len(kept)]
    prompt = prompt_of(summary_request)
    assert len(early) >= 10
    for m in early:
        if m.text.strip():
            assert m.text.strip()[:60] in prompt
        for call in m.tool_calls:
            assert f"[tool call {call.name}] {call.arguments}" in prompt
    # The kept part is the trajectory's tail, untouched, and pair-valid.
    assert sent.history[0].meta("summary")
    assert [m.id for m in kept] == [m.id for m in original[-len(kept) :]]
    assert [m.text for m in kept] == [m.text for m in original[-len(kept) :]]
    assert check_pairs(sent.history).ok and check_pairs(kept).ok
    # The full record is unchanged (as stored: with secrets redacted); only the working
    # history shrank.
    assert record[: len(traj)] == [redact_message(m) for m in traj]
    assert len(a.state(CTX).working_history) == len(sent.history) + 1 < len(record)


# ------------------------------------------------- with OverflowRetry and pairs
async def test_a_provider_overflow_is_answered_with_a_forced_compaction() -> None:
    from middleware.overflow_retry import OverflowRetry
    from middleware.pair_validation import PairValidation

    model = ScriptedModel([*calls(6), "done"], overflow_above=2500)
    a = agent(
        model, OverflowRetry(), Compaction(trim_min_tokens=None, memory=None), PairValidation()
    )
    reply = await a.call("go", CTX)
    assert reply.text == "done" and model.overflows >= 1
    retries = [r for r in model.agent_requests if "overflow_retry:1" in r.transforms]
    assert retries and all(compacted(r) for r in retries)
    for r in retries:
        assert [m.role for m in r.history[2:]] == ["assistant", "tool"]
        assert ScriptedModel.prompt_tokens(r) <= 2500


async def test_an_overflow_with_nothing_to_compact_reaches_the_caller() -> None:
    from harness import ContextOverflowError
    from middleware.overflow_retry import OverflowRetry
    from middleware.pair_validation import PairValidation

    model = ScriptedModel([*calls(1), "done"], overflow_above=400)
    a = agent(
        model, OverflowRetry(), Compaction(trim_min_tokens=None, memory=None), PairValidation()
    )
    with pytest.raises(ContextOverflowError) as info:
        await a.call("go", CTX)
    assert info.value.reason == "nothing_to_compact"
    assert not summaries(model) and model.overflows == 1


async def test_trim_thresholds_shrink_with_a_small_history_budget() -> None:
    # Defaults (protect 40,000, trim at 20,000 tokens) would never trim in a 6,000-token
    # budget; scaled to it (40 % and 20 %), old outputs are trimmed once the history outgrows
    # its budget, before anything is summarised.
    model = ScriptedModel([*calls(12), "done"])
    a = agent(model, Compaction(trigger_messages=1000, memory=None), max_input_tokens=6_000)
    await a.call("run the commands", CTX)
    assert any(
        t.startswith("tool_output_trim:") for r in model.agent_requests for t in r.transforms
    )
    last = model.agent_requests[-1]
    tools = [m for m in last.history if m.role == "tool"]
    assert tools[0].meta("trimmed") and not tools[-1].meta("trimmed")
    # In each round that trimmed, the untrimmed output is what the (scaled) protection
    # covers; between trims the history only grows, until it next outgrows its budget.
    for request in model.agent_requests:
        if not any(t.startswith("tool_output_trim:") for t in request.transforms):
            continue
        outputs = [m for m in request.history if m.role == "tool"]
        count = request.estimator.count_message
        protected = sum(count(m) for m in outputs if not m.meta("trimmed"))
        budget = request.history_budget or request.input_limit
        assert protected <= 0.4 * budget + max(count(m) for m in outputs)


async def test_the_dynamic_keep_range_counts_the_pinned_task() -> None:
    long_task = "Fix the parser. " + "Context about the bug. " * 300
    model = ScriptedModel([*calls(45), "done"])
    a = agent(
        model,
        Compaction(trigger_messages=100, trim_min_tokens=None, memory=None),
        max_input_tokens=20_000,
        max_rounds=60,
    )
    await a.call(long_task, CTX)
    after = next(r for r in model.agent_requests if compacted(r))
    budget = after.history_budget or after.input_limit
    est = after.estimator
    summary_tokens = sum(est.count_message(m) for m in after.history if m.meta("summary"))
    kept = est.count_messages(after.history) - summary_tokens
    last_unit = est.count_messages(after.history[-2:])
    assert kept <= 0.35 * budget + last_unit


# ------------------------------------------------------------ in-place summary
def in_place(request: ModelRequest) -> bool:
    return request.history[-1].text == IN_PLACE_PROMPT


def shell_units(n: int, output: Callable[[str], str] = shell) -> list[Message]:
    """Return ``n`` shell calls (commands ``old0``…, ids ``c0``…), each with its result."""
    return [
        m
        for i in range(n)
        for m in (
            ScriptedModel.tool_call("shell", {"command": f"old{i}"}, id=f"c{i}"),
            Message.tool(f"c{i}", output(f"old{i}"), name="shell"),
        )
    ]


async def test_the_summary_is_asked_in_place_with_the_previous_requests_prefix() -> None:
    # One request per compaction, starting as the agent's previous request did (System,
    # tools, history up to the cut), so a provider's prompt cache serves the early part.
    model = ScriptedModel([*calls(8), "done"], summary="SUMMARY-A")
    compaction = every_ten()
    a = agent(model, compaction)
    await a.call("run the commands", CTX)

    at = next(i for i, r in enumerate(model.agent_requests) if compacted(r))
    previous, after = model.agent_requests[at - 1], model.agent_requests[at]
    ask = summaries(model)[0]
    assert in_place(ask) and ask.tools == previous.tools
    assert ask.settings is not None and ask.settings["tool_choice"] == "none"
    sent, before = ask.render()[:-1], previous.render()
    assert [(m.id, m.text) for m in sent] == [(m.id, m.text) for m in before[: len(sent)]]
    # What is kept verbatim is not summarised; the summary replaces the rest.
    kept = after.history[2:]
    asked = {m.id for m in ask.history}
    assert kept and not asked & {m.id for m in kept}
    assert after.history[1].text.endswith("SUMMARY-A")
    assert len(summaries(model)) == sum(compacted(r) for r in model.agent_requests)


async def test_a_history_over_the_limit_is_summarised_in_place_then_as_a_transcript() -> None:
    # The first compaction of a long history cannot be asked in place whole (the prefix is
    # over the model's limit): the part that fits is, the rest goes as a transcript on top.
    model = ScriptedModel(["done"], summary="SUMMARY-B")
    compaction = Compaction(trim_min_tokens=None, memory=None)
    a = agent(model, compaction, max_input_tokens=3_000)
    a.state(CTX).append(Message.user("the task"), *shell_units(30))
    await a.call("go on", CTX)
    asks = summaries(model)
    # The longest prefix that fits is asked in place, the rest on top as a transcript.
    assert len(asks) >= 2 and in_place(asks[0]) and not any(in_place(r) for r in asks[1:])
    assert all(estimate_request(r, model.estimator) <= r.input_limit for r in asks)
    first = "\n".join(m.text for m in asks[0].history)
    rest = "\n".join(prompt_of(r) for r in asks[1:])
    assert "$ old0\n" in first and "$ old0\n" not in rest and "$ old28\n" in rest
    # "go on" is a newer user turn: the task went into the summary, which leads.
    assert model.agent_requests[0].history[0].text.endswith("SUMMARY-B")


async def test_a_long_text_at_the_end_of_the_early_part_is_cut_inside_the_one_request() -> None:
    # A long pasted message arriving last pushes the prefix over the summariser's limit:
    # the request still reads the whole early part, that text cut in the middle (head and
    # tail kept), instead of a second, uncached transcript request reading it whole.
    model = ScriptedModel(["done"], summary="SUMMARY-E")
    compaction = Compaction(trim_min_tokens=None, memory=None)
    a = agent(model, compaction, max_input_tokens=3_000)
    pasted = "PASTE-HEAD\n" + "".join(f"row {i}: a long pasted log line\n" for i in range(400))
    pasted += "PASTE-TAIL"
    units = shell_units(6, lambda command: f"$ {command}\nok")
    a.state(CTX).append(Message.user("the task"), *units, Message.user(pasted))
    await a.call("go on", CTX)
    (ask,) = summaries(model)
    assert in_place(ask) and estimate_request(ask, model.estimator) <= ask.input_limit
    prompt = prompt_of(ask)
    assert "the task" in prompt and "$ old0" in prompt and "$ old5" in prompt
    assert "PASTE-HEAD" in prompt and "PASTE-TAIL" in prompt and "row 200:" not in prompt
    assert "cut to fit the summary request" in prompt
    sent = model.agent_requests[0].history
    assert sent[0].text.endswith("SUMMARY-E") and sent[-1].text == "go on"
    assert all(m.text != pasted for m in sent)  # summarised, not kept


async def test_an_in_place_answer_without_text_falls_back_to_the_transcript() -> None:
    def reply(request: ModelRequest) -> Message | str:
        if in_place(request):  # a model that calls a tool despite tool_choice "none"
            return ScriptedModel.tool_call("shell", {"command": "ls"})
        return "SUMMARY-C"

    model = ScriptedModel([*calls(8), "done"], summary=reply)
    compaction = every_ten()
    a = agent(model, compaction)
    await a.call("run the commands", CTX)
    asks = summaries(model)
    assert in_place(asks[0]) and not in_place(asks[1])
    at = next(i for i, r in enumerate(model.agent_requests) if compacted(r))
    assert model.agent_requests[at].history[1].text.endswith("SUMMARY-C")


async def test_a_custom_summariser_or_prompt_gets_the_transcript() -> None:
    other = ScriptedModel([], summary="SUMMARY-D", model="another-model")
    for compaction in (
        Compaction(trigger_messages=10, keep_messages=4, keep_tokens=0, model=other, memory=None),
        Compaction(
            trigger_messages=10,
            keep_messages=4,
            keep_tokens=0,
            summary_prompt="Summarise:\n{messages}",
            memory=None,
        ),
    ):
        model = ScriptedModel([*calls(8), "done"], summary="SUMMARY-D")
        await agent(model, compaction).call("go", CTX)
        asks = summaries(model) or summaries(other)
        assert asks and not any(in_place(r) for r in asks)


async def test_a_provider_refusing_the_in_place_request_gets_the_transcript() -> None:
    from harness.errors import ProviderBadRequest

    def reply(request: ModelRequest) -> str | BaseException:
        if in_place(request):  # e.g. a provider that refuses tool_choice "none"
            return ProviderBadRequest("tool_choice is not supported", status=400)
        return "SUMMARY-E"

    model = ScriptedModel([*calls(12), "done"], summary=reply)
    compaction = every_ten()
    await agent(model, compaction).call("run the commands", CTX)
    asks = summaries(model)
    # Refused once: the transcript then and for every later compaction with this model.
    assert in_place(asks[0]) and not any(in_place(r) for r in asks[1:])
    assert sum(compacted(r) for r in model.agent_requests) >= 2
    at = next(i for i, r in enumerate(model.agent_requests) if compacted(r))
    assert model.agent_requests[at].history[1].text.endswith("SUMMARY-E")
    assert not any("summary_failed" in t for r in model.agent_requests for t in r.transforms)


async def test_a_trim_that_frees_little_comes_with_the_summary_in_the_same_round() -> None:
    # Each trim keeps most of an output (a long preview): it would fit the history back in
    # its budget for a round or two, then a summary would break the prompt cache again.
    model = ScriptedModel([*calls(10), "done"], summary="SUMMARY-F")
    compaction = Compaction(
        trigger_messages=1000, trim_protect_tokens=0, trim_min_tokens=0, trim_preview_chars=1800
    )
    a = agent(model, compaction, max_input_tokens=3_500)
    await a.call("run the commands", CTX)

    trimming = [
        r for r in model.agent_requests if any("tool_output_trim" in t for t in r.transforms)
    ]
    assert trimming and all(compacted(r) for r in trimming)
