"""Middleware: one context concern each, composed around the model client.

`default_stack()` returns them in their place; import any one to build your own list.
"""

from harness.task import (
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
from middleware._selection import DefaultSelection, SelectionPolicy
from middleware.budget_fit import BudgetFit
from middleware.compaction import Compaction
from middleware.context_sources import ContextRequest, ContextSource, ContextSources, context_source
from middleware.fragment_editor import FragmentEditor
from middleware.overflow_retry import OverflowRetry
from middleware.pair_validation import PairValidation
from middleware.session_tools import SessionTools
from middleware.stack import default_stack
from middleware.task_state import PlanModeOptions, TaskState, enable_task_list
from middleware.tool_result_offload import ToolResultOffload, purge_session
from middleware.tracing import Tracing
from middleware.workspace_materials import Instruction, WorkspaceMaterials, instruction

__all__ = [
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
