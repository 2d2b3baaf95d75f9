"""TaskState: show the structured task state — todos, plan mode, goal, requirements, checks.

Place in the stack: after ContextSources and before FragmentEditor and the budget layers.
Its blocks are required (category ``task``), so BudgetFit counts them as fixed cost: task
state is what keeps a long task on track, so it is never dropped for optional material.

The state itself lives in ``AgentState.extensions`` as frozen msgspec values (`middleware.task_state.state`),
written by tools (``todo_write``, ``propose_requirement``, ``enter_plan_mode`` …) or by the
application through the functions of `middleware.task_state.state` (`set_todos`, `enter_plan_mode`,
`begin_task`, `confirm_requirement`, `record_verification` …). This middleware only
*reads* it at every preparation and renders blocks for that one request: nothing is
appended to the persisted history. What it rendered is kept for the session with what it
was rendered from (`TaskState.render`): a round whose state, receipt and options are the
same costs their comparison (~1.5 µs against ~26 µs for todos, plan mode and a task).

- **Todos** (``task_list=True``, or `enable_task_list()`): the model replaces the whole list
  with ``todo_write``. While the latest ``todo_write`` receipt is still in the history being
  sent (not trimmed, offloaded or summarised away), the list is not shown twice; once it
  is gone a ``TASK_STATE`` block is rendered from the structured state.
- **Plan mode** (``plan_mode=PlanModeOptions()``): while the state is in plan mode, the
  mode's rules and the plan file go into System (part ``mode/plan``) and a
  ``RUNTIME_STATE`` block names the mode and the plan file. Nothing syncs the plan file
  into todos.
- **Task context** (``include_requirements`` / ``include_verification_results``; off by
  default and independent, either one also shows the goal and scope): requirements are
  confirmed or rejected by trusted code; a model proposal (``allow_requirement_proposals``)
  is shown as proposed, never as approved; a check result recorded against a subject
  version is shown as STALE once that subject's version changes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import ClassVar, Literal

import msgspec

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError
from harness.markers import rewritten
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse, SystemPart
from harness.state import AgentState
from harness.tools import Tool, ToolContext
from harness.types import Concern, Handler
from middleware.task_state.state import (
    DEFAULT_PLAN_FILE,
    DEFAULT_PLAN_RULES,
    PLAN_PART,
    TODOS_KEY,
    PlanMode,
    TaskContext,
    TodoItem,
    TodoList,
    enter_plan_mode,
    exit_plan_mode,
    numbered_todos,
    plan_mode,
    propose_requirement,
    task_context,
)

# ----------------------------------------------------------------- rendering
_MARK: dict[str, str] = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}


def render_todos(items: Iterable[TodoItem]) -> str:
    """Return the todo list as the model sees it (in receipts and in ``TASK_STATE``)."""
    listed = tuple(items)
    lines = [f"- {_MARK[i.status]} {i.id}. {i.content} ({i.status})" for i in listed]
    done = sum(1 for i in listed if i.status == "completed")
    body = "\n".join(lines) if lines else "(empty)"
    return f"Todo list ({done}/{len(listed)} completed):\n{body}"


def render_task(task: TaskContext, *, requirements: bool, verifications: bool) -> str:
    """Return the task context as the model sees it."""
    lines: list[str] = []
    if task.goal:
        lines.append(f"Task goal: {task.goal}")
    if task.scope:
        lines.append(f"Scope: {task.scope}")
    if requirements and task.requirements:
        lines.append("Requirements:")
        for r in task.requirements:
            label = {
                "confirmed": "confirmed",
                "rejected": "rejected",
                "proposed": "proposed by the model, NOT approved",
            }[r.status]
            note = f" — {r.note}" if r.note else ""
            lines.append(f"- [{label}] {r.id}: {r.text}{note}")
    if verifications and task.verifications:
        lines.append("Verification results:")
        for v in task.verifications:
            outcome = "PASSED" if v.passed else "FAILED"
            current = task.subject_versions.get(v.subject, v.version)
            stale = (
                f" — STALE: {v.subject} is now at version {current}; run the check again"
                if current != v.version
                else ""
            )
            detail = f": {v.detail}" if v.detail else ""
            lines.append(f"- {outcome} {v.check} on {v.subject} @ {v.version}{detail}{stale}")
    return "\n".join(lines)


# -------------------------------------------------------------------- options
class PlanModeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How plan mode is shown (pass to ``TaskState(plan_mode=...)``)."""

    plan_file: str = DEFAULT_PLAN_FILE
    """The plan file when the state names none."""
    rules: str = DEFAULT_PLAN_RULES
    """The System rules while in plan mode."""
    tools: bool = True
    """Give the model ``enter_plan_mode`` and ``exit_plan_mode`` tools."""


class TaskState:
    """Render todos, plan mode and task context from the agent state for each request.

    Args:
        task_list: give the model ``todo_write`` and show the todo list when its receipt
            has left the history.
        plan_mode: show plan mode (System rules, a ``RUNTIME_STATE`` block) while the
            state is in it; ``None`` turns plan mode off.
        include_requirements: show the task's goal, scope and requirements.
        include_verification_results: show the task's goal, scope and check results
            (STALE when the subject's version changed).
        allow_requirement_proposals: give the model ``propose_requirement`` (needs
            ``include_requirements``; a proposal is never shown as approved).
        purposes: request purposes the state is shown for (default: the agent loop only;
            summaries do not repeat task state).

    Raises:
        ConfigurationError: for ``allow_requirement_proposals`` without
            ``include_requirements``, or a bad ``plan_mode``.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.ADDS_CONTEXT})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self,
        *,
        task_list: bool = False,
        plan_mode: PlanModeOptions | None = None,
        include_requirements: bool = False,
        include_verification_results: bool = False,
        allow_requirement_proposals: bool = False,
        purposes: Collection[str] = ("agent",),
    ) -> None:
        if plan_mode is not None and not isinstance(plan_mode, PlanModeOptions):
            raise ConfigurationError(
                f"plan_mode must be PlanModeOptions(...) or None, got {plan_mode!r}"
            )
        if allow_requirement_proposals and not include_requirements:
            raise ConfigurationError(
                "allow_requirement_proposals needs include_requirements=True, or the model's "
                "proposals would never be shown"
            )
        if isinstance(purposes, str):
            raise ConfigurationError(f"purposes must be a collection, e.g. ({purposes!r},)")
        self.task_list = bool(task_list)
        self.plan_mode = plan_mode
        self.include_requirements = bool(include_requirements)
        self.include_verification_results = bool(include_verification_results)
        self.allow_requirement_proposals = bool(allow_requirement_proposals)
        self.purposes = frozenset(purposes)

    def __repr__(self) -> str:
        return (
            f"TaskState(task_list={self.task_list}, plan_mode={self.plan_mode!r}, "
            f"include_requirements={self.include_requirements}, "
            f"include_verification_results={self.include_verification_results}, "
            f"allow_requirement_proposals={self.allow_requirement_proposals})"
        )

    # ------------------------------------------------------------------ tools
    def tools(self) -> list[Tool]:
        """Return the tools the options call for (``todo_write``, plan mode, proposals)."""
        found: list[Tool] = []
        if self.task_list:
            found.append(Tool(todo_write, description=TODO_WRITE_DESCRIPTION))
        if self.plan_mode is not None and self.plan_mode.tools:
            found.append(Tool(_enter_plan_mode_tool, name="enter_plan_mode"))
            found.append(Tool(_exit_plan_mode_tool, name="exit_plan_mode"))
        if self.allow_requirement_proposals:
            found.append(Tool(_propose_requirement_tool, name="propose_requirement"))
        return found

    # ------------------------------------------------------------- middleware
    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Add this request's task-state blocks (and plan-mode System part) and pass it on."""
        state = request.state
        if (
            state is None
            or request.ids.purpose not in self.purposes
            or not (
                self.task_list
                or self.plan_mode is not None
                or self.include_requirements
                or self.include_verification_results
            )
        ):
            return await call_next(request)  # nothing it could show (the default stack's)
        return await call_next(self.render(request, state))

    def render(self, request: ModelRequest, state: AgentState) -> ModelRequest:
        """Return ``request`` with the state blocks for ``state`` added.

        What the state came to is kept for the session (`_Rendered`) with everything it was
        rendered from: the state values (frozen; a task's subject versions by value), the
        receipt the history shows and the options. A round with all of them equal reuses
        the parts instead of rendering and hashing the texts again.
        """
        listed = state.get(TODOS_KEY) if self.task_list else None
        if not (listed is not None and listed.items):
            listed = None
        # While the receipt is in the history the block is only a stand-in: the agent drops
        # it if the receipt survives offload and compaction, so the list is never shown
        # twice and never missing.
        receipt = _receipt_shown(request.history, listed.receipt_call_id) if listed else None
        task = (
            task_context(state)
            if self.include_requirements or self.include_verification_results
            else None
        )
        mode = plan_mode(state) if self.plan_mode is not None else None
        key = (
            listed,
            receipt,
            task,
            tuple(task.subject_versions.items()) if task is not None else (),
            mode,
            self.plan_mode,
            self.include_requirements,
            self.include_verification_results,
        )
        memo = request.run.session_slot(self, _Rendered) if request.run is not None else None
        if memo is not None and memo.key == key:
            system, blocks = memo.system, memo.blocks
        else:
            system, blocks = self._parts(listed, receipt, task, mode)
            if memo is not None:
                memo.key, memo.system, memo.blocks = key, system, blocks
        if not blocks and not system:
            return request
        return request.replace(system=request.system + system, blocks=request.blocks + blocks)

    def _parts(
        self,
        listed: TodoList | None,
        receipt: str | None,
        task: TaskContext | None,
        mode: PlanMode | None,
    ) -> tuple[tuple[SystemPart, ...], tuple[ContextBlock, ...]]:
        """Render the System parts and blocks of one state."""
        blocks: list[ContextBlock] = []
        system: tuple[SystemPart, ...] = ()
        if listed is not None:
            blocks.append(
                _state_block("todos", render_todos(listed.items), "TASK_STATE").replace(
                    superseded_by=receipt
                )
            )
        if task is not None:
            text = render_task(
                task,
                requirements=self.include_requirements,
                verifications=self.include_verification_results,
            )
            if text:
                blocks.append(_state_block("task", text, "TASK_STATE"))
        if self.plan_mode is not None and mode is not None and mode.active:
            path = mode.plan_file or self.plan_mode.plan_file
            system = (
                SystemPart(
                    name=PLAN_PART, text=f"{self.plan_mode.rules}\nThe plan file is {path}."
                ),
            )
            blocks.append(
                _state_block("plan_mode", f"Current mode: plan\nPlan file: {path}", "RUNTIME_STATE")
            )
        return system, tuple(blocks)


class _Rendered:
    """What a session's task state came to last (`TaskState.render`), and from what."""

    __slots__ = ("blocks", "key", "system")

    def __init__(self) -> None:
        self.key: tuple[object, ...] | None = None
        self.system: tuple[SystemPart, ...] = ()
        self.blocks: tuple[ContextBlock, ...] = ()


def enable_task_list(
    *,
    plan_mode: PlanModeOptions | None = None,
    include_requirements: bool = False,
    include_verification_results: bool = False,
    allow_requirement_proposals: bool = False,
) -> TaskState:
    """Return a `TaskState` with the todo list on: ``TaskState(task_list=True, ...)``."""
    return TaskState(
        task_list=True,
        plan_mode=plan_mode,
        include_requirements=include_requirements,
        include_verification_results=include_verification_results,
        allow_requirement_proposals=allow_requirement_proposals,
    )


def _state_block(
    name: str, text: str, placement: Literal["TASK_STATE", "RUNTIME_STATE"]
) -> ContextBlock:
    return ContextBlock.runtime(
        name, text, category="task", placement=placement, source_id=f"state/{name}", required=True
    )


def _receipt_shown(history: tuple[Message, ...], call_id: str | None) -> str | None:
    """Return the id of the tool result of ``call_id`` when ``history`` shows it in full."""
    if call_id is None:
        return None
    for message in reversed(history):  # the receipt is usually recent
        if message.role == "tool" and message.tool_call_id == call_id:
            return None if rewritten(message) else message.id
    return None


# ---------------------------------------------------------------------- tools
TODO_WRITE_DESCRIPTION = (
    "Replace the whole todo list (send every item, in order) to plan and track multi-step "
    "work: mark one item in_progress when you start it and completed as soon as it is done."
)
"""The description the model sees for ``todo_write``."""


async def todo_write(todos: list[TodoItem], context: ToolContext) -> str:
    """Replace the session's todo list and return the receipt (the ``todo_write`` tool).

    Args:
        todos: the complete new list; each item has content, status (pending, in_progress,
            completed) and an optional stable id.
        context: injected by the agent (the state and the call whose id marks the receipt).
    """
    items = numbered_todos(todos)
    context.state.set(TODOS_KEY, TodoList(items=items, receipt_call_id=context.call.id))
    return "Updated. " + render_todos(items)


async def _enter_plan_mode_tool(context: ToolContext, plan_file: str | None = None) -> str:
    """Enter plan mode: investigate and write a plan before changing anything.

    Args:
        context: injected by the agent.
        plan_file: the plan file to write (default: the configured one).
    """
    enter_plan_mode(context.state, plan_file)
    return "Plan mode is on."


async def _exit_plan_mode_tool(context: ToolContext) -> str:
    """Leave plan mode once the plan is written and ready to carry out."""
    exit_plan_mode(context.state)
    return "Plan mode is off."


async def _propose_requirement_tool(text: str, context: ToolContext, reason: str = "") -> str:
    """Propose a task requirement; it stays a proposal until the application confirms it.

    Args:
        text: the requirement.
        context: injected by the agent.
        reason: why you think it is required.
    """
    requirement = propose_requirement(context.state, text, reason=reason)
    return (
        f"Proposed requirement {requirement.id}; it is NOT approved until the application "
        "confirms it."
    )
