"""Durable sessions through the agent: resume in a new process, conflicts, permissions.

Real SQLite files (and a real child process killed with SIGKILL); the PostgreSQL backend
passes the same store contract in ``tests/sessions``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness import HarnessAgent, RuntimeContext, StateConflict
from harness.agent.permissions import PermissionRule, ToolPermissions
from harness.sessions import open_store
from middleware import default_stack, enable_task_list
from middleware.task_state.state import TodoItem, enter_plan_mode, plan_mode, set_todos, todo_items
from providers import ScriptedModel
from providers.scripted import Reply

ROOT = Path(__file__).resolve().parent.parent
CTX = RuntimeContext(user_id="u1", session_id="s1")


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    return f"ran {command}: " + "output line\n" * 5


def agent_on(store: str, model: ScriptedModel, **kw: object) -> HarnessAgent:
    return HarnessAgent(
        model=model,
        tools=[shell],
        stack=default_stack(task=enable_task_list()),
        store=store,
        **kw,  # type: ignore[arg-type]
    )


async def test_a_new_agent_on_the_same_store_resumes_exactly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    first_model = ScriptedModel([ScriptedModel.tool_call("shell", {"command": "ls"}), "listed"])
    first = agent_on(url, first_model)
    state = await first.load(CTX)
    set_todos(state, [TodoItem(content="fix the bug", status="in_progress")])
    enter_plan_mode(state, "PLAN.md")
    state.calibration["scripted"] = 1.25
    await first.call("list the files", CTX)
    before = [(m.id, m.text) for m in first.state(CTX).working_history]

    second_model = ScriptedModel(["resumed"])
    second = agent_on(url, second_model)  # as a new process would: nothing in memory
    await second.call("and now?", CTX)
    resumed = await second.load(CTX)
    assert [(m.id, m.text) for m in resumed.working_history][: len(before)] == before
    assert todo_items(resumed) == (TodoItem(content="fix the bug", status="in_progress", id="1"),)
    assert plan_mode(resumed).active and plan_mode(resumed).plan_file == "PLAN.md"
    assert resumed.calibration["scripted"] == 1.25
    (request,) = second_model.agent_requests
    assert [m.id for m in request.history][: len(before)] == [i for i, _ in before]
    # The full record is read from the store on demand.
    record = await second.history(CTX)
    assert [m.text for m in record if m.role == "user"] == ["list the files", "and now?"]


async def test_another_user_with_the_same_session_id_sees_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    await agent_on(url, ScriptedModel(["ok"])).call("ALICE-SECRET", CTX)
    model = ScriptedModel(["ok"])
    bob = RuntimeContext(user_id="u2", session_id="s1")
    await agent_on(url, model).call("hello", bob)
    assert "ALICE-SECRET" not in str([m.text for m in model.agent_requests[0].history])
    store = open_store(url)
    try:
        assert [s.session_id for s in await store.sessions("u2")] == ["s1"]
        assert [h.snippet for h in await store.search("u2", "ALICE")] == []
    finally:
        await store.aclose()


async def test_two_writers_on_one_session_one_gets_a_state_conflict(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    a = agent_on(url, ScriptedModel(default="a"))
    b = agent_on(url, ScriptedModel(default="b"))
    await a.load(CTX)
    await b.load(CTX)  # both read version 0
    await a.call("from a", CTX)
    with pytest.raises(StateConflict) as caught:
        await b.call("from b", CTX)
    assert "another" in str(caught.value).lower() or "version" in str(caught.value).lower()
    # b forgot its stale copy: its next call reloads and goes on from a's record.
    await b.call("from b again", CTX)
    texts = [m.text for m in await b.history(CTX)]
    assert texts == ["from a", "a", "from b again", "b"]  # nothing lost, nothing twice


CHILD = textwrap.dedent(
    """
    import sys, anyio
    from harness import HarnessAgent, RuntimeContext
    from middleware.task_state.state import TodoItem, enter_plan_mode, set_todos
    from middleware import default_stack, enable_task_list
    from providers import ScriptedModel

    url, phase = sys.argv[1], sys.argv[2]
    ctx = RuntimeContext(user_id="u1", session_id="s1")

    def shell(command: str) -> str:
        \"\"\"Run a command.

        Args:
            command: the command line.
        \"\"\"
        if command == "hang":
            print("TOOL-STARTED", flush=True)
            import time
            time.sleep(60)
        return "ran " + command

    script = [ScriptedModel.tool_call("shell", {"command": "ls"}), "round one done",
              ScriptedModel.tool_call("shell", {"command": "hang"})]
    agent = HarnessAgent(model=ScriptedModel(script), tools=[shell],
                         stack=default_stack(task=enable_task_list()), store=url)

    async def main() -> None:
        state = await agent.load(ctx)
        set_todos(state, [TodoItem(content="step one", status="in_progress")])
        enter_plan_mode(state, "PLAN.md")
        await agent.call("first", ctx)
        print("ROUND-ONE-COMMITTED", flush=True)
        await agent.call("second", ctx)

    anyio.run(main)
    """
)


def kill_child_in_its_tool(url: str) -> None:
    """Run the child until its second round's tool has started, then SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, "run"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert child.stdout is not None and child.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while "TOOL-STARTED" not in seen and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        seen.append(line.strip())
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert "ROUND-ONE-COMMITTED" in seen and "TOOL-STARTED" in seen, child.stderr.read()


async def test_a_process_killed_mid_tool_resumes_with_the_call_answered_as_interrupted(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    kill_child_in_its_tool(url)
    model = ScriptedModel(["after the restart"])
    agent = agent_on(url, model)
    assert (await agent.call("third", CTX)).text == "after the restart"
    (request,) = model.agent_requests
    roles = [(m.role, m.text[:40]) for m in request.history]
    hang_call = next(
        m for m in request.history if m.tool_calls and "hang" in m.tool_calls[0].arguments
    )
    answer = next(m for m in request.history if m.tool_call_id == hang_call.tool_calls[0].id)
    assert answer.text == "no result: interrupted", roles
    state = agent.state(CTX)
    assert todo_items(state)[0].content == "step one"
    assert plan_mode(state).active


async def test_a_denied_call_is_not_run_and_the_model_is_told(tmp_path: Path) -> None:
    ran: list[str] = []

    def delete(path: str) -> str:
        """Delete a file.

        Args:
            path: the file.
        """
        ran.append(path)
        return "deleted"

    model = ScriptedModel([ScriptedModel.tool_call("delete", {"path": "/etc/passwd"}), "ok"])
    permissions = ToolPermissions(
        rules=(PermissionRule(tool="delete", arguments='*"/etc/*', decision="deny"),)
    )
    agent = HarnessAgent(
        model=model, tools=[delete], stack=[], store="sqlite://", permissions=permissions
    )
    await agent.call("clean up", CTX)
    assert ran == []
    result = next(m for m in model.agent_requests[-1].history if m.role == "tool")
    assert "permission policy denies it" in result.text
    events = await agent.store.events(agent.key(CTX), kinds=("tool_run",))
    assert [(e.event.name, e.event.denied) for e in events] == [("delete", True)]  # type: ignore[union-attr]


async def test_an_approval_is_asked_once_and_kept_with_the_session(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    asked: list[str] = []

    def approve(call: object) -> bool:
        asked.append(getattr(call, "name", ""))
        return True

    def deploy() -> str:
        """Deploy the service."""
        return "deployed"

    permissions = ToolPermissions(rules=(PermissionRule(tool="deploy", decision="ask"),))
    script: list[Reply] = [ScriptedModel.tool_call("deploy"), "done"]
    agent = HarnessAgent(
        model=ScriptedModel(script), tools=[deploy], stack=[], store=url,
        permissions=permissions, approve=approve,
    )  # fmt: skip
    await agent.call("deploy it", CTX)
    again = HarnessAgent(
        model=ScriptedModel(script), tools=[deploy], stack=[], store=url,
        permissions=permissions,  # no approver now: the session's approval still holds
    )  # fmt: skip
    await again.call("deploy again", CTX)
    assert asked == ["deploy"]
    results = [m.text for m in await again.history(CTX) if m.role == "tool"]
    assert results == ["deployed", "deployed"]


async def test_the_log_holds_every_message_once_and_what_replaced_what(tmp_path: Path) -> None:
    from harness.sessions import CompactionEvent, MessageEvent, RewriteEvent
    from middleware import Compaction

    url = f"sqlite:///{tmp_path}/sessions.db"
    script: list[Reply] = [
        *[ScriptedModel.tool_call("shell", {"command": f"step {i}"}) for i in range(8)],
        "done",
    ]
    model = ScriptedModel(script)
    agent = HarnessAgent(
        model=model,
        tools=[shell],
        stack=[Compaction(trigger_messages=10, keep_tokens=0, keep_messages=4, memory=None)],
        store=url,
        keep_full_history=True,  # the RAM record to compare the log with
    )
    await agent.call("work through the steps", CTX)
    logged = await agent.store.events(agent.key(CTX), limit=10_000)
    messages = [e.event.message.id for e in logged if isinstance(e.event, MessageEvent)]
    assert messages == [m.id for m in agent.state(CTX).full_history]  # each once, in order
    compactions = [e.event for e in logged if isinstance(e.event, CompactionEvent)]
    assert compactions and all(c.replaced for c in compactions)
    found = await agent.store.messages(agent.key(CTX), list(compactions[0].replaced))
    assert set(found) == set(compactions[0].replaced)  # every replaced id resolves
    rewrites = [e.event for e in logged if isinstance(e.event, RewriteEvent)]
    assert all(r.original_id in messages for r in rewrites if r.how == "trim")
    state, by_id = await agent.store.load(agent.key(CTX)) or (None, {})
    assert state is not None
    assert [by_id[i].id for i in state.working_ids] == [
        m.id for m in agent.state(CTX).working_history
    ]


async def test_by_default_ram_holds_the_working_history_and_the_record_is_read_from_the_store(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    script: list[Reply] = [ScriptedModel.tool_call("shell", {"command": "ls"}), "one", "two"]
    agent = HarnessAgent(model=ScriptedModel(script), tools=[shell], stack=[], store=url)
    await agent.call("first", CTX)
    await agent.call("second", CTX)
    state = agent.state(CTX)
    assert state.full_history == []  # RAM holds the working history only
    assert [m.text for m in state.working_history if m.role == "user"] == ["first", "second"]
    record = await agent.history(CTX)
    assert [m.role for m in record] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert len({m.id for m in record}) == len(record)  # nothing logged twice


async def test_a_failed_call_reports_its_own_error_even_when_recording_it_conflicts(
    tmp_path: Path,
) -> None:
    from harness import ProviderUnavailable

    url = f"sqlite:///{tmp_path}/sessions.db"
    a = agent_on(url, ScriptedModel(default="a"))
    down = ProviderUnavailable("provider down; retry later", provider="scripted", status=503)
    b = agent_on(url, ScriptedModel([down]))
    await a.load(CTX)
    await b.load(CTX)
    await a.call("from a", CTX)  # b's copy is stale now: its error record will conflict
    with pytest.raises(ProviderUnavailable, match="provider down"):
        await b.call("from b", CTX)
    assert b.key(CTX) not in b.states  # the stale copy was dropped; the next call reloads
