"""Structured task state: todos, plan mode, goal, requirements and verification results.

The values live in ``AgentState.extensions`` as frozen msgspec structs under this module's
keys (`TODOS_KEY`, `PLAN_KEY`, `TASK_KEY`); these functions are the one way to read and
change them — from tools (``todo_write``), from trusted application
code (`confirm_requirement`, `record_verification` …) or from the TaskState middleware,
which only reads them to render blocks. The seed keeps structured state apart from the
conversation: it is never summarised with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

import msgspec

from harness.errors import InvalidInputError
from harness.state import AgentState, StateKey

DEFAULT_PLAN_FILE = "PLAN.md"
"""The plan file when neither the state nor the options name one."""
PLAN_PART: Final = "mode/plan"
"""The name of the System part plan mode adds (a built-in fragment can govern it)."""

DEFAULT_PLAN_RULES = (
    "You are in plan mode. Investigate and write the plan to the plan file; do not change "
    "other files or run commands with side effects. When the plan is ready, present it and "
    "leave plan mode before you start carrying it out."
)
"""The System rules of plan mode (also the text of the built-in ``mode/plan`` fragment)."""
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


# ------------------------------------------------------------------------ keys
TODOS_KEY: Final = StateKey("task_state/todos", TodoList)
"""Where the session's `TodoList` is kept."""
PLAN_KEY: Final = StateKey("task_state/plan_mode", PlanMode)
"""Where the session's `PlanMode` state is kept."""
TASK_KEY: Final = StateKey("task_state/task", TaskContext)
"""Where the session's `TaskContext` is kept."""


# ----------------------------------------------------------- state functions
def todo_items(state: AgentState) -> tuple[TodoItem, ...]:
    """Return the session's todo items."""
    current = state.get(TODOS_KEY)
    return current.items if current is not None else ()


def set_todos(
    state: AgentState, items: Iterable[TodoItem], *, receipt_call_id: str | None = None
) -> None:
    """Replace the todo list (application side; the model uses ``todo_write``).

    Raises:
        InvalidInputError: for an item without content or duplicate ids.
    """
    state.set(TODOS_KEY, TodoList(items=numbered_todos(items), receipt_call_id=receipt_call_id))


def plan_mode(state: AgentState) -> PlanMode:
    """Return the session's plan-mode state."""
    current = state.get(PLAN_KEY)
    return current if current is not None else PlanMode()


def enter_plan_mode(state: AgentState, plan_file: str | None = None) -> None:
    """Put the session into plan mode, optionally with its own plan file."""
    if plan_file is not None and (not isinstance(plan_file, str) or not plan_file.strip()):
        raise InvalidInputError(f"plan_file must be a non-empty path, got {plan_file!r}")
    state.set(PLAN_KEY, PlanMode(active=True, plan_file=plan_file))


def exit_plan_mode(state: AgentState) -> None:
    """Take the session out of plan mode."""
    state.set(PLAN_KEY, PlanMode(active=False, plan_file=plan_mode(state).plan_file))


def task_context(state: AgentState) -> TaskContext:
    """Return the session's task context (empty when no task was begun)."""
    current = state.get(TASK_KEY)
    return current if current is not None else TaskContext()


def begin_task(state: AgentState, goal: str, scope: str = "") -> None:
    """Start a task: set its goal and scope and clear older requirements and results."""
    if not isinstance(goal, str) or not goal.strip():
        raise InvalidInputError("begin_task needs a non-empty goal")
    state.set(TASK_KEY, TaskContext(goal=goal, scope=scope))


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
    state.set(TASK_KEY, msgspec.structs.replace(current, subject_versions=versions))


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
    state.set(
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
    state.set(
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
            state.set(TASK_KEY, msgspec.structs.replace(current, requirements=tuple(requirements)))
            return changed
    known = ", ".join(r.id for r in current.requirements) or "none"
    raise InvalidInputError(f"there is no requirement {id!r} (known: {known})")


def numbered_todos(items: Iterable[TodoItem]) -> tuple[TodoItem, ...]:
    """Return ``items`` checked (content, unique ids) with missing ids numbered from 1."""
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
