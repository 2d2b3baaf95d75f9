"""TaskState through the real agent loop: todos, plan mode, requirements and verification."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from harness import (
    AgentState,
    ContextBlock,
    HarnessAgent,
    Message,
    ModelRequest,
    RuntimeContext,
    ToolContext,
    Workspace,
)
from harness.errors import ConfigurationError, InvalidInputError
from harness.messages import new_id
from harness.request import RunScope
from middleware.task_state import PlanModeOptions, TaskState, enable_task_list
from middleware.task_state.state import (
    TODOS_KEY,
    TodoItem,
    TodoList,
    add_requirement,
    begin_task,
    confirm_requirement,
    enter_plan_mode,
    exit_plan_mode,
    plan_mode,
    record_verification,
    reject_requirement,
    set_subject_version,
    set_todos,
    task_context,
    todo_items,
)
from providers import ScriptedModel

CTX = RuntimeContext(session_id="task")


def agent_with(
    task_state: TaskState,
    replies: Sequence[str | Message] = ("ok",),
    *,
    workspace: Workspace | None = None,
) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel(list(replies))
    agent = HarnessAgent(
        model=model, system_prompt="You help.", stack=[task_state], workspace=workspace
    )
    return agent, model


def state_blocks(request: ModelRequest) -> dict[str, ContextBlock]:
    return {b.source_id: b for b in request.blocks}


def write_todos(*items: tuple[str, str], call_id: str | None = None) -> Message:
    todos = [{"content": content, "status": status} for content, status in items]
    return ScriptedModel.tool_call("todo_write", {"todos": todos}, id=call_id)


# ----------------------------------------------------------------------- todos
async def test_todo_write_is_offered_only_with_the_task_list() -> None:
    agent, model = agent_with(enable_task_list())
    await agent.call("x", CTX)
    assert [t.name for t in model.agent_requests[0].tools] == ["todo_write"]
    plain, plain_model = agent_with(TaskState())
    await plain.call("x", CTX)
    assert plain_model.agent_requests[0].tools == ()


def test_enable_task_list_is_task_state_with_the_list_on() -> None:
    state = enable_task_list(include_requirements=True)
    assert isinstance(state, TaskState)
    assert state.task_list and state.include_requirements


async def test_todo_write_replaces_the_structured_list() -> None:
    agent, model = agent_with(
        enable_task_list(),
        [
            write_todos(("locate the cause", "in_progress"), ("add a test", "pending")),
            write_todos(("locate the cause", "completed"), ("add a test", "in_progress")),
            "done",
        ],
    )
    await agent.call("fix login", CTX)
    state = agent.state(CTX)
    assert todo_items(state) == (
        TodoItem(content="locate the cause", status="completed", id="1"),
        TodoItem(content="add a test", status="in_progress", id="2"),
    )
    stored = state.get(TODOS_KEY)
    assert isinstance(stored, TodoList)
    receipt = model.agent_requests[2].history[-1]
    assert receipt.tool_call_id == stored.receipt_call_id
    assert "[x] 1. locate the cause" in receipt.text and "[>] 2. add a test" in receipt.text


async def test_no_duplicate_list_while_the_receipt_is_in_the_history() -> None:
    agent, model = agent_with(
        enable_task_list(), [write_todos(("step one", "in_progress")), "done"]
    )
    await agent.call("x", CTX)
    first, second = model.agent_requests
    assert "state/todos" not in state_blocks(first)  # no list yet
    assert "state/todos" not in state_blocks(second)  # the receipt shows it in full


async def test_the_list_is_shown_once_the_receipt_was_trimmed() -> None:
    agent, model = agent_with(
        enable_task_list(), [write_todos(("step one", "in_progress"), call_id="t1"), "done", "ok"]
    )
    await agent.call("x", CTX)
    state = agent.state(CTX)
    position = next(i for i, m in enumerate(state.working_history) if m.tool_call_id == "t1")
    receipt = state.working_history[position]
    state.working_history[position] = receipt.revise(
        "trim", metadata={"trimmed": True}, content="[trimmed]"
    )
    await agent.call("next", CTX)
    block = state_blocks(model.agent_requests[-1])["state/todos"]
    assert block.where == "TASK_STATE" and block.category == "task" and block.required
    assert "[>] 1. step one (in_progress)" in block.text
    rendered = model.agent_requests[-1].render()[-1].text
    assert rendered.startswith("<TASK_STATE>\n[state/todos]\nTodo list (0/1 completed)")


async def test_the_list_is_shown_once_the_receipt_left_the_history() -> None:
    agent, model = agent_with(
        enable_task_list(), [write_todos(("step one", "completed")), "done", "ok"]
    )
    await agent.call("x", CTX)
    state = agent.state(CTX)
    summary = Message.user("Summary: the step is done.", metadata={"summary": True})
    state.commit_working([summary])  # what compaction leaves behind
    await agent.call("next", CTX)
    assert "[x] 1. step one" in state_blocks(model.agent_requests[-1])["state/todos"].text


async def test_state_blocks_never_enter_the_persisted_history() -> None:
    agent, model = agent_with(
        enable_task_list(include_requirements=True),
        ["one", "two"],
    )
    state = agent.state(CTX)
    set_todos(state, [TodoItem(content="ship it")])
    begin_task(state, "Fix login", "auth module")
    await agent.call("a", CTX)
    await agent.call("b", CTX)
    assert all(len(r.blocks) == 2 for r in model.agent_requests)
    for message in [*await agent.history(CTX), *state.working_history]:
        assert "ship it" not in message.text and "Fix login" not in message.text
    assert [m.role for m in state.working_history] == ["user", "assistant"] * 2


async def test_an_application_set_list_is_shown() -> None:
    agent, model = agent_with(enable_task_list())
    set_todos(agent.state(CTX), [TodoItem(content="read the code", status="in_progress")])
    await agent.call("x", CTX)
    assert "[>] 1. read the code" in state_blocks(model.agent_requests[0])["state/todos"].text


async def test_a_bad_todo_write_leaves_the_list_unchanged() -> None:
    bad = ScriptedModel.tool_call(
        "todo_write",
        {"todos": [{"content": "a", "id": "x"}, {"content": "b", "id": "x"}]},
    )
    agent, model = agent_with(enable_task_list(), [bad, "ok"])
    set_todos(agent.state(CTX), [TodoItem(content="keep me")])
    await agent.call("x", CTX)
    assert "Error" in model.agent_requests[1].history[-1].text
    assert "ids must be unique" in model.agent_requests[1].history[-1].text
    assert [i.content for i in todo_items(agent.state(CTX))] == ["keep me"]


def test_set_todos_validates_items() -> None:
    with pytest.raises(InvalidInputError):
        set_todos(AgentState(), [TodoItem(content=" ")])


# ------------------------------------------------------------------- plan mode
async def test_plan_mode_puts_rules_in_system_and_names_the_mode_and_file() -> None:
    agent, model = agent_with(TaskState(plan_mode=PlanModeOptions(plan_file="plans/login.md")))
    enter_plan_mode(agent.state(CTX))
    await agent.call("x", CTX)
    (request,) = model.agent_requests
    assert [p.name for p in request.system] == ["prompt", "mode/plan"]
    assert "plan mode" in request.system[1].text
    assert "plans/login.md" in request.system[1].text
    block = state_blocks(request)["state/plan_mode"]
    assert block.where == "RUNTIME_STATE" and block.category == "task"
    assert block.required  # BudgetFit never drops it, though it is not TASK_STATE
    assert block.text == "Current mode: plan\nPlan file: plans/login.md"


async def test_leaving_plan_mode_removes_it() -> None:
    agent, model = agent_with(TaskState(plan_mode=PlanModeOptions()), ["a", "b"])
    state = agent.state(CTX)
    enter_plan_mode(state, "PLAN-2.md")
    await agent.call("x", CTX)
    exit_plan_mode(state)
    await agent.call("y", CTX)
    first, second = model.agent_requests
    assert "PLAN-2.md" in state_blocks(first)["state/plan_mode"].text
    assert [p.name for p in second.system] == ["prompt"]
    assert "state/plan_mode" not in state_blocks(second)
    assert plan_mode(state).plan_file == "PLAN-2.md"


async def test_plan_mode_is_not_shown_when_the_option_is_off() -> None:
    agent, model = agent_with(TaskState(task_list=True))
    enter_plan_mode(agent.state(CTX))
    await agent.call("x", CTX)
    assert [p.name for p in model.agent_requests[0].system] == ["prompt"]
    assert model.agent_requests[0].blocks == ()


async def test_the_model_enters_and_leaves_plan_mode_with_tools() -> None:
    agent, model = agent_with(
        TaskState(plan_mode=PlanModeOptions()),
        [
            ScriptedModel.tool_call("enter_plan_mode"),
            ScriptedModel.tool_call("exit_plan_mode"),
            "done",
        ],
    )
    await agent.call("plan first", CTX)
    first, second, third = model.agent_requests
    assert {t.name for t in first.tools} == {"enter_plan_mode", "exit_plan_mode"}
    assert "state/plan_mode" not in state_blocks(first)
    assert "PLAN.md" in state_blocks(second)["state/plan_mode"].text
    assert "state/plan_mode" not in state_blocks(third)


async def test_nothing_syncs_the_plan_file_into_todos() -> None:
    workspace = Workspace(f"memory://plan-{new_id()}")
    workspace.write_text("PLAN.md", "- [ ] step one\n- [ ] step two\n")
    agent, model = agent_with(
        TaskState(task_list=True, plan_mode=PlanModeOptions()), workspace=workspace
    )
    enter_plan_mode(agent.state(CTX))
    await agent.call("x", CTX)
    assert todo_items(agent.state(CTX)) == ()
    blocks = state_blocks(model.agent_requests[0])
    # Plan mode is on and names its file, but the file's steps never become todos.
    assert "PLAN.md" in blocks["state/plan_mode"].text
    assert "state/todos" not in blocks
    assert not any("step one" in b.text for b in blocks.values())


# ---------------------------------------------------------------- task context
async def test_task_context_is_off_by_default() -> None:
    agent, model = agent_with(enable_task_list())
    state = agent.state(CTX)
    begin_task(state, "Fix login", "auth module")
    add_requirement(state, "Keep the API stable")
    record_verification(state, "unit-tests", True, "auth.py", "v1")
    await agent.call("x", CTX)
    assert model.agent_requests[0].blocks == ()


async def test_requirements_show_goal_scope_and_requirements_only() -> None:
    agent, model = agent_with(TaskState(include_requirements=True))
    state = agent.state(CTX)
    begin_task(state, "Fix login", "auth module")
    add_requirement(state, "Keep the API stable")
    record_verification(state, "unit-tests", True, "auth.py", "v1")
    await agent.call("x", CTX)
    text = state_blocks(model.agent_requests[0])["state/task"].text
    assert text == (
        "Task goal: Fix login\nScope: auth module\n"
        "Requirements:\n- [confirmed] R1: Keep the API stable"
    )


async def test_verification_results_show_goal_scope_and_results_only() -> None:
    agent, model = agent_with(TaskState(include_verification_results=True))
    state = agent.state(CTX)
    begin_task(state, "Fix login", "auth module")
    add_requirement(state, "Keep the API stable")
    record_verification(state, "unit-tests", False, "auth.py", "v1", "2 failures")
    await agent.call("x", CTX)
    text = state_blocks(model.agent_requests[0])["state/task"].text
    assert text == (
        "Task goal: Fix login\nScope: auth module\n"
        "Verification results:\n- FAILED unit-tests on auth.py @ v1: 2 failures"
    )


async def test_a_result_is_stale_once_the_subject_version_changes() -> None:
    agent, model = agent_with(TaskState(include_verification_results=True), ["a", "b", "c"])
    state = agent.state(CTX)
    begin_task(state, "Fix login")
    record_verification(state, "unit-tests", True, "auth.py", "v1")
    await agent.call("x", CTX)
    set_subject_version(state, "auth.py", "v2")
    await agent.call("y", CTX)
    before, after = (state_blocks(r)["state/task"].text for r in model.agent_requests)
    assert "PASSED unit-tests on auth.py @ v1" in before and "STALE" not in before
    assert "STALE: auth.py is now at version v2" in after
    record_verification(state, "unit-tests", True, "auth.py", "v2")
    await agent.call("z", CTX)
    assert "STALE" not in state_blocks(model.agent_requests[-1])["state/task"].text


async def test_a_model_proposal_is_shown_as_proposed_never_as_approved() -> None:
    agent, model = agent_with(
        TaskState(include_requirements=True, allow_requirement_proposals=True),
        [
            ScriptedModel.tool_call("propose_requirement", {"text": "Log failed logins"}),
            "done",
            "again",
            "and again",
        ],
    )
    state = agent.state(CTX)
    begin_task(state, "Fix login")
    await agent.call("x", CTX)
    assert "NOT approved" in model.agent_requests[1].history[-1].text
    text = state_blocks(model.agent_requests[1])["state/task"].text
    assert "- [proposed by the model, NOT approved] R1: Log failed logins" in text
    assert "[confirmed]" not in text
    confirm_requirement(state, "R1")
    await agent.call("y", CTX)
    assert (
        "- [confirmed] R1: Log failed logins"
        in state_blocks(model.agent_requests[2])["state/task"].text
    )
    reject_requirement(state, "R1", "out of scope")
    await agent.call("z", CTX)
    assert (
        "- [rejected] R1: Log failed logins — out of scope"
        in state_blocks(model.agent_requests[3])["state/task"].text
    )


async def test_proposals_need_the_option() -> None:
    agent, model = agent_with(TaskState(include_requirements=True))
    await agent.call("x", CTX)
    assert model.agent_requests[0].tools == ()


def test_proposals_without_requirements_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="include_requirements"):
        TaskState(allow_requirement_proposals=True)


def test_confirming_an_unknown_requirement_is_an_error() -> None:
    state = AgentState()
    begin_task(state, "goal")
    with pytest.raises(InvalidInputError, match="no requirement 'R9'"):
        confirm_requirement(state, "R9")


def test_begin_task_starts_afresh() -> None:
    state = AgentState()
    begin_task(state, "first")
    add_requirement(state, "a")
    record_verification(state, "lint", True, "x", "1")
    begin_task(state, "second")
    assert task_context(state).requirements == ()
    assert task_context(state).verifications == ()


def test_bad_plan_mode_option_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        TaskState(plan_mode=True)  # type: ignore[arg-type]


async def test_a_tool_result_recorded_during_a_call_shows_in_the_next_round() -> None:
    def run_tests(context: ToolContext) -> str:
        """Run the tests and record the result."""
        record_verification(context.state, "unit-tests", True, "auth.py", "v1")
        return "all passed"

    model = ScriptedModel([ScriptedModel.tool_call("run_tests"), "done"])
    agent = HarnessAgent(
        model=model,
        tools=[run_tests],
        stack=[TaskState(include_verification_results=True)],
    )
    begin_task(agent.state(CTX), "Fix login")
    await agent.call("x", CTX)
    first, second = model.agent_requests
    assert "unit-tests" not in state_blocks(first)["state/task"].text
    assert "PASSED unit-tests on auth.py @ v1" in state_blocks(second)["state/task"].text


async def test_the_todo_list_is_never_missing_nor_shown_twice_when_compaction_removes_the_receipt() -> (
    None
):
    from middleware.compaction import Compaction

    def note(text: str) -> str:
        """Take a note."""
        return text

    todos = [{"content": "step one", "status": "in_progress"}]
    script = [ScriptedModel.tool_call("todo_write", {"todos": todos})]
    script += [ScriptedModel.tool_call("note", {"text": f"n{i}"}) for i in range(8)]
    model = ScriptedModel([*script, "done"])
    agent = HarnessAgent(
        model=model,
        tools=[note],
        stack=[enable_task_list(), Compaction(trigger_messages=6, keep_tokens=0, keep_messages=2)],
    )
    await agent.call("work")
    after_write = model.agent_requests[1:]
    assert any(r.transforms for r in after_write)  # compaction did happen
    for request in after_write:
        receipt_shown = any(
            m.role == "tool" and m.name == "todo_write" and not m.meta("trimmed")
            for m in request.history
        )
        block_shown = any(b.source_id == "state/todos" for b in request.blocks)
        assert receipt_shown != block_shown, request.transforms


def test_a_kept_render_follows_every_input_it_was_made_from() -> None:
    """Rounds of one session reuse the rendered parts only while nothing they show changed.

    Each round's request is compared with a fresh TaskState's (nothing kept): the todos,
    the receipt in the history, plan mode, the task, a subject version replaced in place of
    the dict (documented as never mutated, still followed) and another session's state.
    """
    options = {
        "task_list": True,
        "plan_mode": PlanModeOptions(),
        "include_requirements": True,
        "include_verification_results": True,
    }
    kept = TaskState(**options)  # type: ignore[arg-type]
    state = AgentState()
    history: tuple[Message, ...] = (Message.user("go"),)

    def follows(state: AgentState) -> ModelRequest:
        run = RunScope(session=state.scratch)
        request = ModelRequest(model="gpt-4o", history=history, state=state, run=run)
        rendered = kept.render(request, state)
        fresh = TaskState(**options).render(request.replace(run=None), state)  # type: ignore[arg-type]
        assert (rendered.system, rendered.blocks) == (fresh.system, fresh.blocks)
        return rendered

    assert not follows(state).blocks
    set_todos(state, [TodoItem(content="read the code")])
    assert "read the code" in state_blocks(follows(state))["state/todos"].text
    assert "read the code" in state_blocks(follows(state))["state/todos"].text  # kept
    set_todos(state, [TodoItem(content="fix it")], receipt_call_id="c1")
    assert "fix it" in state_blocks(follows(state))["state/todos"].text
    history = (*history, Message.tool("c1", "Todo list (0/1 completed)", id="r1"))
    assert state_blocks(follows(state))["state/todos"].superseded_by == "r1"
    enter_plan_mode(state, "PLAN.md")
    assert [p.name for p in follows(state).system] == ["mode/plan"]
    exit_plan_mode(state)
    assert not follows(state).system
    begin_task(state, "ship the fix")
    add_requirement(state, "tests pass", id="R1")
    record_verification(state, "pytest", True, "repo", "v1")
    assert "STALE" not in state_blocks(follows(state))["state/task"].text
    task_context(state).subject_versions["repo"] = "v2"  # in place: still seen
    assert "STALE" in state_blocks(follows(state))["state/task"].text
    other = AgentState()
    assert not follows(other).blocks  # another session: its own (empty) state
    assert "ship the fix" in state_blocks(follows(state))["state/task"].text
