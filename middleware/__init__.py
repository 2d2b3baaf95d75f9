"""Middleware: one context concern each, composed around the model client.

`default_stack()` returns them in their place; import any one to build your own list.

Names are imported on first use (PEP 562 ``__getattr__``), so ``import middleware``
costs almost nothing and a program pays only for the parts it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from middleware._selection import DefaultSelection, SelectionPolicy
    from middleware.budget_fit import BudgetFit
    from middleware.compaction import Compaction
    from middleware.context_sources import (
        ContextRequest,
        ContextSource,
        ContextSources,
        context_source,
    )
    from middleware.fragment_editor import FragmentEditor
    from middleware.overflow_retry import OverflowRetry
    from middleware.pair_validation import PairValidation
    from middleware.session_tools import SessionTools
    from middleware.stack import DEFAULT_BUILTINS, default_stack
    from middleware.task_state import PlanModeOptions, TaskState, enable_task_list
    from middleware.task_state.state import (
        TodoItem,
        begin_task,
        confirm_requirement,
        enter_plan_mode,
        exit_plan_mode,
        propose_requirement,
        record_verification,
        reject_requirement,
        set_subject_version,
        set_todos,
    )
    from middleware.tool_result_offload import ToolResultOffload, purge_session
    from middleware.tracing import Tracing
    from middleware.workspace_materials import Instruction, WorkspaceMaterials, instruction

_HOMES: dict[str, str] = {
    "BudgetFit": "middleware.budget_fit",
    "Compaction": "middleware.compaction",
    "ContextRequest": "middleware.context_sources",
    "ContextSource": "middleware.context_sources",
    "ContextSources": "middleware.context_sources",
    "DefaultSelection": "middleware._selection",
    "FragmentEditor": "middleware.fragment_editor",
    "Instruction": "middleware.workspace_materials",
    "OverflowRetry": "middleware.overflow_retry",
    "PairValidation": "middleware.pair_validation",
    "PlanModeOptions": "middleware.task_state",
    "SelectionPolicy": "middleware._selection",
    "SessionTools": "middleware.session_tools",
    "TaskState": "middleware.task_state",
    "TodoItem": "middleware.task_state.state",
    "ToolResultOffload": "middleware.tool_result_offload",
    "Tracing": "middleware.tracing",
    "WorkspaceMaterials": "middleware.workspace_materials",
    "begin_task": "middleware.task_state.state",
    "confirm_requirement": "middleware.task_state.state",
    "context_source": "middleware.context_sources",
    "default_stack": "middleware.stack",
    "DEFAULT_BUILTINS": "middleware.stack",
    "enable_task_list": "middleware.task_state",
    "enter_plan_mode": "middleware.task_state.state",
    "exit_plan_mode": "middleware.task_state.state",
    "instruction": "middleware.workspace_materials",
    "propose_requirement": "middleware.task_state.state",
    "purge_session": "middleware.tool_result_offload",
    "record_verification": "middleware.task_state.state",
    "reject_requirement": "middleware.task_state.state",
    "set_subject_version": "middleware.task_state.state",
    "set_todos": "middleware.task_state.state",
}
"""Where each exported name lives; imported on first use (`__getattr__`)."""


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _HOMES)

__all__ = [
    "DEFAULT_BUILTINS",
    "BudgetFit",
    "Compaction",
    "ContextRequest",
    "ContextSource",
    "ContextSources",
    "DefaultSelection",
    "FragmentEditor",
    "Instruction",
    "OverflowRetry",
    "PairValidation",
    "PlanModeOptions",
    "SelectionPolicy",
    "SessionTools",
    "TaskState",
    "TodoItem",
    "ToolResultOffload",
    "Tracing",
    "WorkspaceMaterials",
    "begin_task",
    "confirm_requirement",
    "context_source",
    "default_stack",
    "enable_task_list",
    "enter_plan_mode",
    "exit_plan_mode",
    "instruction",
    "propose_requirement",
    "purge_session",
    "record_verification",
    "reject_requirement",
    "set_subject_version",
    "set_todos",
]
