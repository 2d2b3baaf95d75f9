"""TaskState: show the structured task state — todos, plan mode, goal, requirements, checks.

Place in the stack: after ContextSources and before FragmentEditor and the budget layers.
Its blocks are category ``task``, which BudgetFit counts as fixed cost: task state is what
keeps a long task on track, so it is never dropped for optional material.

The state itself lives in ``AgentState.extensions`` as frozen msgspec values, written by
tools (``todo_write``, ``propose_requirement``, ``enter_plan_mode`` …) or by the
application through the functions of this module (`set_todos`, `enter_plan_mode`,
`begin_task`, `confirm_requirement`, `record_verification` …). This middleware only
*reads* it at every preparation and renders blocks for that one request: nothing is
appended to the persisted history.

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
from harness.errors import ConfigurationError, InvalidInputError
from harness.markers import rewritten
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse, SystemPart
from harness.state import AgentState
from harness.tools import Tool, ToolContext
from harness.types import Concern, Handler

TODOS_KEY = "task_state/todos"
"""The `AgentState.extensions` key of the `TodoList`."""
PLAN_KEY = "task_state/plan_mode"
"""The `AgentState.extensions` key of the `PlanMode` state."""
TASK_KEY = "task_state/task"
"""The `AgentState.extensions` key of the `TaskContext`."""
DEFAULT_PLAN_FILE = "PLAN.md"
"""The plan file when neither the state nor the options name one."""
DEFAULT_PLAN_RULES = (
    "You are in plan mode. Investigate and write the plan to the plan file; do not change "
    "other files or run commands with side effects. When the plan is ready, present it and "
    "leave plan mode before you start carrying it out."
)
"""The System rules of plan mode."""

TodoStatus = Literal["pending", "in_progress", "completed"]
RequirementStatus = Literal["proposed", "confirmed", "rejected"]


# ------------------------------------------------------------------------ values
class TodoItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item of the todo list."""

    content: str
    """What to do, as an imperative sentence."""
    status: TodoStatus = "pending"
    """``pending``, ``in_progress`` or ``completed``."""
    id: str = ""
    """A stable id; given by position (``1``, ``2`` …) when left empty."""


class TodoList(msgspec.Struct, frozen=True, kw_only=True):
    """The structured todo list and the tool call whose receipt shows it in full."""

    items: tuple[TodoItem, ...] = ()
    """The items, in order."""
    receipt_call_id: str | None = None
    """The ``todo_write`` call whose result holds this list (``None``: set by the application)."""


class PlanMode(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the session is in plan mode, and its plan file."""

    active: bool = False
    """In plan mode."""
    plan_file: str | None = None
    """The plan file (``None``: the options' default)."""


class Requirement(msgspec.Struct, frozen=True, kw_only=True):
    """One requirement of the task."""

    id: str
    """A stable id (``R1``, ``R2`` … when not given)."""
    text: str
    """What is required."""
    status: RequirementStatus = "confirmed"
    """``proposed`` (by the model, not approved), ``confirmed`` or ``rejected``."""
    proposed_by: Literal["application", "model"] = "application"
    """Who added it."""
    note: str = ""
    """Why it was proposed or rejected."""


class Verification(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one check against one version of a subject."""

    check: str
    """The check's name (``unit-tests``, ``lint`` …)."""
    passed: bool
    """Whether it passed."""
    subject: str
    """What was checked (a file, a module, a build)."""
    version: str
    """The subject's version the check ran against."""
    detail: str = ""
    """A short result text."""


class TaskContext(msgspec.Struct, frozen=True, kw_only=True):
    """The task's goal, scope, requirements and verification results."""

    goal: str = ""
    """What the task must achieve."""
    scope: str = ""
    """What the task may touch."""
    requirements: tuple[Requirement, ...] = ()
    """Requirements, in the order they were added."""
    verifications: tuple[Verification, ...] = ()
    """The latest result per (check, subject)."""
    subject_versions: dict[str, str] = {}
    """The current version of each subject (replaced, never mutated)."""


# ----------------------------------------------------------- state functions
def todo_items(state: AgentState) -> tuple[TodoItem, ...]:
    """Return the session's todo items."""
    current = state.extension(TODOS_KEY)
    return current.items if isinstance(current, TodoList) else ()


def set_todos(
    state: AgentState, items: Iterable[TodoItem], *, receipt_call_id: str | None = None
) -> None:
    """Replace the todo list (application side; the model uses ``todo_write``).

    Raises:
        InvalidInputError: for an item without content or duplicate ids.
    """
    state.set_extension(
        TODOS_KEY, TodoList(items=_numbered(items), receipt_call_id=receipt_call_id)
    )


def plan_mode(state: AgentState) -> PlanMode:
    """Return the session's plan-mode state."""
    current = state.extension(PLAN_KEY)
    return current if isinstance(current, PlanMode) else PlanMode()


def enter_plan_mode(state: AgentState, plan_file: str | None = None) -> None:
    """Put the session into plan mode, optionally with its own plan file."""
    if plan_file is not None and (not isinstance(plan_file, str) or not plan_file.strip()):
        raise InvalidInputError(f"plan_file must be a non-empty path, got {plan_file!r}")
    state.set_extension(PLAN_KEY, PlanMode(active=True, plan_file=plan_file))


def exit_plan_mode(state: AgentState) -> None:
    """Take the session out of plan mode."""
    state.set_extension(PLAN_KEY, PlanMode(active=False, plan_file=plan_mode(state).plan_file))


def task_context(state: AgentState) -> TaskContext:
    """Return the session's task context (empty when no task was begun)."""
    current = state.extension(TASK_KEY)
    return current if isinstance(current, TaskContext) else TaskContext()


def begin_task(state: AgentState, goal: str, scope: str = "") -> None:
    """Start a task: set its goal and scope and clear older requirements and results."""
    if not isinstance(goal, str) or not goal.strip():
        raise InvalidInputError("begin_task needs a non-empty goal")
    state.set_extension(TASK_KEY, TaskContext(goal=goal, scope=scope))


def add_requirement(state: AgentState, text: str, *, id: str | None = None) -> Requirement:
    """Add a requirement confirmed by trusted code and return it."""
    return _add_requirement(state, text, id=id, status="confirmed", by="application", note="")


def propose_requirement(state: AgentState, text: str, *, reason: str = "") -> Requirement:
    """Add a requirement proposed by the model (shown as proposed until confirmed)."""
    return _add_requirement(state, text, id=None, status="proposed", by="model", note=reason)


def confirm_requirement(state: AgentState, id: str) -> Requirement:
    """Confirm requirement ``id`` (trusted code only) and return it.

    Raises:
        InvalidInputError: when there is no requirement ``id``.
    """
    return _set_status(state, id, "confirmed", None)


def reject_requirement(state: AgentState, id: str, reason: str = "") -> Requirement:
    """Reject requirement ``id`` (trusted code only) and return it.

    Raises:
        InvalidInputError: when there is no requirement ``id``.
    """
    return _set_status(state, id, "rejected", reason)


def set_subject_version(state: AgentState, subject: str, version: str) -> None:
    """Record the current version of ``subject``; older results for it become STALE."""
    current = task_context(state)
    versions = {**current.subject_versions, subject: version}
    state.set_extension(TASK_KEY, msgspec.structs.replace(current, subject_versions=versions))


def record_verification(
    state: AgentState, check: str, passed: bool, subject: str, version: str, detail: str = ""
) -> Verification:
    """Record the result of ``check`` on ``subject`` at ``version`` and return it.

    The latest result per (check, subject) is kept. When the subject's current version is
    not known yet, ``version`` becomes it.
    """
    if not check or not subject or not version:
        raise InvalidInputError("record_verification needs a check name, a subject and a version")
    result = Verification(
        check=check, passed=passed, subject=subject, version=version, detail=detail
    )
    current = task_context(state)
    kept = tuple(v for v in current.verifications if (v.check, v.subject) != (check, subject))
    versions = current.subject_versions
    if subject not in versions:
        versions = {**versions, subject: version}
    state.set_extension(
        TASK_KEY,
        msgspec.structs.replace(current, verifications=(*kept, result), subject_versions=versions),
    )
    return result


def _add_requirement(
    state: AgentState,
    text: str,
    *,
    id: str | None,
    status: RequirementStatus,
    by: Literal["application", "model"],
    note: str,
) -> Requirement:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("a requirement needs a non-empty text")
    current = task_context(state)
    taken = {r.id for r in current.requirements}
    if id is None:
        number = len(current.requirements) + 1
        while f"R{number}" in taken:
            number += 1
        id = f"R{number}"
    elif id in taken:
        raise InvalidInputError(f"requirement {id!r} exists already; pick another id")
    requirement = Requirement(id=id, text=text.strip(), status=status, proposed_by=by, note=note)
    state.set_extension(
        TASK_KEY,
        msgspec.structs.replace(current, requirements=(*current.requirements, requirement)),
    )
    return requirement


def _set_status(
    state: AgentState, id: str, status: RequirementStatus, note: str | None
) -> Requirement:
    current = task_context(state)
    for position, requirement in enumerate(current.requirements):
        if requirement.id == id:
            changed = msgspec.structs.replace(
                requirement, status=status, note=requirement.note if note is None else note
            )
            requirements = list(current.requirements)
            requirements[position] = changed
            state.set_extension(
                TASK_KEY, msgspec.structs.replace(current, requirements=tuple(requirements))
            )
            return changed
    known = ", ".join(r.id for r in current.requirements) or "none"
    raise InvalidInputError(f"there is no requirement {id!r} (known: {known})")


def _numbered(items: Iterable[TodoItem]) -> tuple[TodoItem, ...]:
    out: list[TodoItem] = []
    seen: set[str] = set()
    for position, item in enumerate(items, start=1):
        if not isinstance(item, TodoItem):
            raise InvalidInputError(f"todo {position} is {item!r}, not a TodoItem")
        if not item.content.strip():
            raise InvalidInputError(f"todo {position} has no content; describe the step")
        if not item.id:
            item = msgspec.structs.replace(item, id=str(position))
        if item.id in seen:
            raise InvalidInputError(f"two todos have the id {item.id!r}; ids must be unique")
        seen.add(item.id)
        out.append(item)
    return tuple(out)


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
        if state is None or request.ids.purpose not in self.purposes:
            return await call_next(request)
        return await call_next(self.render(request, state))

    def render(self, request: ModelRequest, state: AgentState) -> ModelRequest:
        """Return ``request`` with the state blocks for ``state`` added."""
        blocks: list[ContextBlock] = []
        system: tuple[SystemPart, ...] = ()
        if self.task_list:
            listed = state.extension(TODOS_KEY)
            if isinstance(listed, TodoList) and listed.items:
                # While the receipt is in the history the block is only a stand-in: the
                # agent drops it if the receipt survives offload and compaction, so the
                # list is never shown twice and never missing.
                receipt = _receipt_shown(request.history, listed.receipt_call_id)
                blocks.append(
                    _state_block("todos", render_todos(listed.items), "TASK_STATE").replace(
                        superseded_by=receipt
                    )
                )
        if self.include_requirements or self.include_verification_results:
            text = render_task(
                task_context(state),
                requirements=self.include_requirements,
                verifications=self.include_verification_results,
            )
            if text:
                blocks.append(_state_block("task", text, "TASK_STATE"))
        if self.plan_mode is not None:
            mode = plan_mode(state)
            if mode.active:
                path = mode.plan_file or self.plan_mode.plan_file
                system = (
                    SystemPart(
                        name="mode/plan",
                        text=f"{self.plan_mode.rules}\nThe plan file is {path}.",
                    ),
                )
                blocks.append(
                    _state_block(
                        "plan_mode", f"Current mode: plan\nPlan file: {path}", "RUNTIME_STATE"
                    )
                )
        if not blocks and not system:
            return request
        return request.replace(
            system=request.system + system, blocks=request.blocks + tuple(blocks)
        )


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
        name, text, category="task", placement=placement, source_id=f"state/{name}"
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
    items = _numbered(todos)
    context.state.set_extension(TODOS_KEY, TodoList(items=items, receipt_call_id=context.call.id))
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
