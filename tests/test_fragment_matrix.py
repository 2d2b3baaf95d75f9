"""The fragment editor's remaining matrix, checked on what the ScriptedModel received.

Built-in System parts as project fragments, a disabled message surviving a compaction in
the same round, secrets in tool results kept out of the store, and the thinking-mode and
budget rows of the article's validation matrix. Real SQLite files, no stand-ins.
"""

from __future__ import annotations

import json
import platform
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from harness import ContextPolicy, Fragments, HarnessAgent, Message, RuntimeContext
from harness.accounting import estimate_request
from harness.events import AgentEvent
from harness.fragments.builtins import Builtin, builtin_changes, seed_builtins
from harness.fragments.model import FragmentScope
from harness.markers import ORIGIN_ID, is_summary
from harness.messages import ToolCall
from harness.request import ModelRequest
from harness.sessions import FragmentEvent, SessionKey, SessionStore, open_store
from harness.sessions.store import FragmentStore
from harness.types import Middleware
from middleware import (
    BudgetFit,
    Compaction,
    FragmentEditor,
    PairValidation,
    PlanModeOptions,
    TaskState,
    ToolResultOffload,
)
from middleware._history import check_pairs
from middleware.fragment_editor import LeftOut
from middleware.stack import DEFAULT_BUILTINS
from middleware.task_state.state import enter_plan_mode
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u1", session_id="s1")
KEY = SessionKey("u1", "agent", "s1")
PROJECT = FragmentScope.of_project("agent")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = open_store(f"sqlite://{tmp_path / 'sessions.db'}")
    yield opened
    await opened.aclose()


def agent_with(
    store: SessionStore, model: ScriptedModel, stack: list[Middleware], **options: object
) -> HarnessAgent:
    return HarnessAgent(
        model=model,
        tools=[shell],
        stack=stack,
        store=store,
        system_prompt="You are careful.",
        **options,  # type: ignore[arg-type]
    )


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    if command == "needle":
        return "NEEDLE-RESULT " + "hay " * 150
    if command.startswith("leak"):
        return (
            "OPENAI_API_KEY=sk-proj1234567890abcdefXYZ\n"
            "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig'\n"
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretkeybody\n"
            "-----END RSA PRIVATE KEY-----\n"
        )
    return f"output of {command}: " + "data " * 150


def system_of(model: ScriptedModel) -> str:
    return model.agent_requests[-1].system_text


# ------------------------------------------------------------ built-in System parts
async def test_builtin_parts_are_project_fragments_listed_edited_and_disabled(
    store: SessionStore, tmp_path: Path
) -> None:
    model = ScriptedModel(default="ok")
    folder = tmp_path / "work"
    stack: list[Middleware] = [FragmentEditor(builtins=DEFAULT_BUILTINS), PairValidation()]
    agent = agent_with(store, model, stack, workspace=str(folder))
    await agent.call("hi", CTX)
    system = system_of(model)
    assert "Working principles:" in system
    assert time.strftime("%Y-%m-%d", time.gmtime()) in system and "{date}" not in system
    assert f"Working folder: {folder.resolve()}" in system
    assert platform.system() in system

    fragments = Fragments(store, KEY)
    listed = {f.id: f for f in await fragments.list(scope="project")}
    assert {b.id for b in DEFAULT_BUILTINS} <= set(listed)
    assert all(listed[b.id].kind == "system" for b in DEFAULT_BUILTINS)
    assert "{date}" in listed["builtin-environment"].content  # stored as the template

    await fragments.disable("builtin-principles", scope="project")
    await fragments.edit("builtin-environment", content="Env: {platform}", scope="project")
    version = await fragments.version("project")
    await agent.call("again", CTX)
    system = system_of(model)
    assert "Working principles" not in system
    assert f"Env: {platform.system()}" in system and "Working folder" not in system
    # Seeding is done once: later requests write nothing and keep the developer's changes.
    await agent.call("third", CTX)
    assert await fragments.version("project") == version
    seeds = [
        e.event
        for e in await store.events(KEY, kinds=("fragment",))
        if isinstance(e.event, FragmentEvent) and e.event.op == "seed"
    ]
    assert sorted(e.fragment_id for e in seeds) == sorted(b.id for b in DEFAULT_BUILTINS)

    await fragments.revert("builtin-environment", scope="project")
    await agent.call("fourth", CTX)
    assert "Working folder:" in system_of(model)


async def test_the_plan_mode_rules_are_a_fragment_that_governs_its_part(
    store: SessionStore,
) -> None:
    model = ScriptedModel(default="ok")
    stack: list[Middleware] = [
        TaskState(plan_mode=PlanModeOptions(plan_file="plans/login.md")),
        FragmentEditor(builtins=DEFAULT_BUILTINS),
        PairValidation(),
    ]
    agent = agent_with(store, model, stack)
    await agent.call("hi", CTX)  # not in plan mode: the rules fragment adds nothing
    assert "mode/plan" not in [p.name for p in model.agent_requests[-1].system]
    assert "plan mode" not in system_of(model)

    enter_plan_mode(agent.state(CTX))
    fragments = Fragments(store, KEY)
    await fragments.edit(
        "builtin-mode-plan", content="PLAN RULES v2: only read files.", scope="project"
    )
    await agent.call("plan it", CTX)
    (part,) = [p for p in model.agent_requests[-1].system if p.name == "mode/plan"]
    assert part.text.startswith("PLAN RULES v2: only read files.")
    assert "plans/login.md" in part.text  # what TaskState adds around the rules stays
    assert "Investigate and write the plan" not in part.text

    await fragments.disable("builtin-mode-plan", scope="project")
    await agent.call("and now", CTX)
    assert "mode/plan" not in [p.name for p in model.agent_requests[-1].system]
    assert "fragment_disabled:fragment:builtin-mode-plan@3" in model.agent_requests[-1].transforms


async def test_seeding_is_idempotent_and_upgrades_only_untouched_builtins(
    store: SessionStore,
) -> None:
    first = (
        Builtin(id="builtin-a", title="A", content="rule a v1"),
        Builtin(id="builtin-b", title="B", content="rule b v1"),
    )
    assert isinstance(store, FragmentStore)
    version, seeded = await seed_builtins(store, PROJECT, first)
    assert [f.content for f in seeded] == ["rule a v1", "rule b v1"]
    assert await seed_builtins(store, PROJECT, first) == (version, seeded)  # nothing written

    fragments = Fragments(store, KEY)
    await fragments.edit("builtin-b", content="my own rule b", scope="project")
    newer = (
        Builtin(id="builtin-a", title="A", content="rule a v2", revision=2),
        Builtin(id="builtin-b", title="B", content="rule b v2", revision=2),
    )
    _, after = await seed_builtins(store, PROJECT, newer)
    by_id = {f.id: f for f in after}
    assert by_id["builtin-a"].content == "rule a v2" and by_id["builtin-a"].builtin == 2
    assert by_id["builtin-b"].content == "my own rule b"  # the developer's edit stands
    assert builtin_changes(newer, after) == []


# ------------------------------------------- left out while compaction runs
async def test_a_disabled_message_survives_a_compaction_in_the_same_round(
    store: SessionStore,
) -> None:
    def reply(request: ModelRequest) -> Message:
        last = request.history[-1]
        if last.role == "user":
            command = "needle" if "needle" in last.text else f"step{len(request.history)}"
            return ScriptedModel.tool_call("shell", {"command": command})
        return Message.assistant("done")

    model = ScriptedModel(default=reply, window=None)
    stack: list[Middleware] = [
        FragmentEditor(),
        ToolResultOffload(),
        BudgetFit(),
        Compaction(trigger_messages=12, memory=None),
        PairValidation(),
    ]
    agent = agent_with(store, model, stack, policy=ContextPolicy(max_input_tokens=4_000))
    await agent.call("start the task", CTX)
    await agent.call("find the needle", CTX)
    needle = next(m for m in agent.state(CTX).working_history if "NEEDLE" in m.text)
    fragments = Fragments(store, KEY)
    await fragments.disable(needle.id)

    for i in range(8):
        await agent.call(f"go on {i}", CTX)
    compacted = [
        r for r in model.agent_requests if any("history_compaction" in t for t in r.transforms)
    ]
    assert compacted, "the budget must force a compaction while the needle is disabled"
    summaries = [r for r in model.requests if r.ids.purpose == "summary"]
    assert summaries and not any("NEEDLE" in m.text for r in summaries for m in r.history)
    working = agent.state(CTX).working_history
    assert any(is_summary(m) for m in working)
    assert any(m.id == needle.id for m in working), "the disabled result was lost"
    assert check_pairs(working).ok
    assert not any("NEEDLE" in m.text for r in model.agent_requests[-9:] for m in r.history)

    await fragments.enable(needle.id)
    await agent.call("what did the needle say?", CTX)
    sent = model.agent_requests[0 - 2]  # the request that answered with the tool call
    assert any("NEEDLE-RESULT" in m.text for m in sent.history)
    assert check_pairs(sent.history).ok
    for request in model.requests:
        assert estimate_request(request, request.estimator) <= request.input_limit


# --------------------------------------------------- secrets never stored in clear
async def test_secrets_in_tool_results_never_reach_the_store_in_clear(
    store: SessionStore, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [
            ScriptedModel.tool_call("shell", {"command": "leak password=hunter2-in-args"}),
            "read them",
        ],
        default="ok",
    )
    agent = agent_with(store, model, [FragmentEditor(), PairValidation()])
    await agent.call("show me the config; my password: swordfish99", CTX)
    # The model read the tool's real output in the round after it (RAM keeps the clear text).
    assert any("sk-proj1234567890abcdefXYZ" in m.text for m in model.agent_requests[-1].history)

    await store.aclose()
    secrets = [
        b"sk-proj1234567890abcdefXYZ",
        b"eyJhbGciOiJIUzI1NiJ9",
        b"MIIEowIBAAKCAQEAsecretkeybody",
        b"hunter2-in-args",
        b"swordfish99",
    ]
    raw = _stored_bytes(tmp_path)
    assert b"[REDACTED:api_key]" in raw and b"[REDACTED:private_key]" in raw
    assert [s for s in secrets if s in raw] == []
    with sqlite3.connect(tmp_path / "sessions.db") as conn:
        texts = [row[0] for row in conn.execute("SELECT body FROM events")]
    assert texts and not any(s.decode() in str(t) for t in texts for s in secrets)

    reopened = open_store(f"sqlite://{tmp_path / 'sessions.db'}")
    try:
        resumed = agent_with(reopened, ScriptedModel(default="ok"), [PairValidation()])
        history = (await resumed.load(CTX)).working_history
        call = next(m for m in history if m.tool_calls)
        arguments = json.loads(call.tool_calls[0].arguments)  # still valid JSON
        assert arguments == {"command": "leak password=[REDACTED:password]"}
        result = next(m for m in history if m.role == "tool")
        assert "Bearer [REDACTED:bearer]" in result.text
    finally:
        await reopened.aclose()


# ------------------------------------------------------------- the matrix rows
async def test_thinking_mode_keeps_reasoning_when_one_of_two_results_is_disabled(
    store: SessionStore,
) -> None:
    both = ScriptedModel.tool_call("shell", {"command": "a"})
    second = msgspec.structs.replace(both.tool_calls[0], id="call_b", arguments='{"command": "b"}')
    both = both.replace(tool_calls=(*both.tool_calls, second), reasoning_content="r-calls")
    model = ScriptedModel(
        [both, Message.assistant("read both", reasoning_content="r-read")],
        default=Message.assistant("ok", reasoning_content="r-ok"),
    )
    agent = agent_with(store, model, [FragmentEditor(), PairValidation()])
    await agent.call("run a and b", CTX)
    result_b = next(m for m in agent.state(CTX).working_history if m.tool_call_id == "call_b")
    fragments = Fragments(store, KEY)
    await fragments.disable(result_b.id)
    note = await fragments.add("a note", title="n1")
    await fragments.add("another note", title="n2")
    await fragments.move(note.id, position=1)
    await agent.call("go on", CTX)
    sent = model.agent_requests[-1].history
    assistants = [m for m in sent if m.role == "assistant"]
    assert [m.reasoning_content for m in assistants] == ["r-calls", "r-read"]
    assert [c.id for c in assistants[0].tool_calls] == [both.tool_calls[0].id]
    assert check_pairs(sent).ok and not any(m.tool_call_id == "call_b" for m in sent)
    blocks = [b.source_id for b in model.agent_requests[-1].blocks]
    assert blocks.index(f"fragment:{note.id}@2") == len(blocks) - 1  # moved after n2
    # The working history kept the whole assistant turn and both results.
    working = agent.state(CTX).working_history
    turn = next(m for m in working if m.reasoning_content == "r-calls")
    assert len(turn.tool_calls) == 2 and any(m.id == result_b.id for m in working)


async def test_over_budget_a_fragment_is_omitted_with_a_warning_and_nothing_overflows(
    store: SessionStore,
) -> None:
    limit = 6_000
    model = ScriptedModel(default="ok", window=None, overflow_above=limit)
    stack: list[Middleware] = [FragmentEditor(), ToolResultOffload(), BudgetFit(), PairValidation()]
    agent = agent_with(store, model, stack, policy=ContextPolicy(max_input_tokens=limit))
    fragments = Fragments(store, KEY)
    small = await fragments.add("Use the decimal module.", title="money")
    big = await fragments.add("word " * 9_000, title="huge")
    events: list[AgentEvent] = [e async for e in agent.stream_events("hi", CTX)]
    request = model.agent_requests[-1]
    assert f"omitted_for_budget:fragment:{big.id}@1" in request.transforms
    assert any(b.source_id == f"fragment:{small.id}@1" for b in request.blocks)
    assert model.overflows == 0
    assert estimate_request(request, request.estimator) <= limit
    warned = [e for e in events if e.kind == "warning" and e.code == "fragment_omitted_for_budget"]
    assert len(warned) == 1 and big.id in (warned[0].text or "")


def _stored_bytes(folder: Path) -> bytes:
    """Every byte of the SQLite store's files (the database, its WAL and shared memory)."""
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("sessions.db"))


def test_left_out_messages_come_back_in_place_unless_their_call_was_summarised() -> None:
    calls = (ToolCall(id="c1", name="shell"), ToolCall(id="c2", name="shell"))
    task, asked = Message.user("task"), Message.assistant("", tool_calls=calls)
    r1, r2 = Message.tool("c1", "one"), Message.tool("c2", "two (disabled)")
    later, x_call = (
        Message.user("later"),
        Message.assistant("", tool_calls=(ToolCall(id="x", name="shell"),)),
    )
    x_result, last = Message.tool("x", "x (disabled)"), Message.user("last")
    copy = asked.replace(id=f"{asked.id}~calls1", tool_calls=calls[:1])
    left = LeftOut(
        history=(task, asked, r1, r2, later, x_call, x_result, last),
        sent=frozenset(m.id for m in (task, r1, later, last)),
        stand_ins=((copy.id, asked.id),),
    )
    # Nothing rewritten: the whole turn and the left-out unit are back in their places.
    assert left.restore((task, copy, r1, later, last)) == left.history
    # Compaction summarised the turn and "later": r2 goes with its call; the unit that was
    # left out whole comes back right after the summary.
    summary = Message.user("summary", metadata={"summary": True})
    assert left.restore((task, summary, last)) == (task, summary, x_call, x_result, last)
    # A rewritten copy (offload, trim) stands at its original's place.
    trimmed = r1.replace(id="r1-trimmed", content="on", metadata={ORIGIN_ID: r1.id})
    assert left.restore((task, copy, trimmed, later, last)) == (
        task,
        asked,
        trimmed,
        r2,
        later,
        x_call,
        x_result,
        last,
    )


async def test_an_edit_made_while_the_agent_serves_the_session_reaches_its_next_request(
    store: SessionStore,
) -> None:
    fragments = Fragments(store, KEY)
    rule = await fragments.add("Rule: use tabs.", title="style")

    async def reformat(command: str) -> str:
        """Reformat (edits the style rule from outside the agent, as the CLI would).

        Args:
            command: what to reformat.
        """
        await fragments.edit(rule.id, content="Rule: use four spaces.")
        return f"reformatted {command}"

    model = ScriptedModel([ScriptedModel.tool_call("reformat", {"command": "x.py"}), "done"])
    agent = HarnessAgent(
        model=model, tools=[reformat], stack=[FragmentEditor(), PairValidation()], store=store
    )
    await agent.call("reformat x.py", CTX)
    first, second = model.agent_requests  # two requests of one agent call
    assert "use tabs" in "\n".join(b.text for b in first.blocks)
    texts = "\n".join(b.text for b in second.blocks)
    assert "four spaces" in texts and "tabs" not in texts


async def test_a_session_nearing_its_window_gets_a_warning(store: SessionStore) -> None:
    limit = 2_000
    model = ScriptedModel(default="ok", window=None)
    stack: list[Middleware] = [FragmentEditor(warn_at=0.5), BudgetFit(), PairValidation()]
    agent = agent_with(store, model, stack, policy=ContextPolicy(max_input_tokens=limit))
    quiet = [e async for e in agent.stream_events("hi", CTX)]
    assert not any(e.code == "context_near_limit" for e in quiet)
    notes = " ".join(f"fact-{i}" for i in range(300))  # ~1,100 tokens
    await Fragments(store, KEY).add(notes, title="long notes")
    loud = [e async for e in agent.stream_events("and now?", CTX)]
    (warning,) = [e for e in loud if e.code == "context_near_limit"]
    used = model.agent_requests[-1]
    assert estimate_request(used, used.estimator) >= limit // 2
    assert f"of {limit:,} input tokens" in (warning.text or "")
    logged = [e.event for e in await store.events(KEY, kinds=("warning",))]
    assert any(getattr(e, "code", "") == "context_near_limit" for e in logged)
