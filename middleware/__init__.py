"""Middleware: one context concern each, composed around the model client.

`default_stack()` returns them in their place; import any one to build your own list.

Names are imported on first use (PEP 562 ``__getattr__``), so ``import middleware``
costs almost nothing and a program pays only for the parts it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    # `import X as X`: the type checker's explicit re-export (``__all__`` is not a literal)
    from middleware._selection import DefaultSelection as DefaultSelection
    from middleware._selection import SelectionPolicy as SelectionPolicy
    from middleware.budget_fit import BudgetFit as BudgetFit
    from middleware.compaction import Compaction as Compaction
    from middleware.context_pressure import ContextPressure as ContextPressure
    from middleware.context_sources import ContextRequest as ContextRequest
    from middleware.context_sources import ContextSource as ContextSource
    from middleware.context_sources import ContextSources as ContextSources
    from middleware.context_sources import context_source as context_source
    from middleware.fragment_editor import FragmentEditor as FragmentEditor
    from middleware.image_budget import ImageBudget as ImageBudget
    from middleware.model_fallback import Fallback as Fallback
    from middleware.model_fallback import ModelFallback as ModelFallback
    from middleware.overflow_retry import OverflowRetry as OverflowRetry
    from middleware.pair_validation import PairValidation as PairValidation
    from middleware.provider_compaction import ProviderCompaction as ProviderCompaction
    from middleware.provider_context_editing import (
        ProviderContextEditing as ProviderContextEditing,
    )
    from middleware.session_tools import SessionTools as SessionTools
    from middleware.stack import DEFAULT_BUILTINS as DEFAULT_BUILTINS
    from middleware.stack import default_stack as default_stack
    from middleware.task_state import PlanModeOptions as PlanModeOptions
    from middleware.task_state import TaskState as TaskState
    from middleware.task_state import enable_task_list as enable_task_list
    from middleware.task_state.state import TodoItem as TodoItem
    from middleware.task_state.state import begin_task as begin_task
    from middleware.task_state.state import confirm_requirement as confirm_requirement
    from middleware.task_state.state import enter_plan_mode as enter_plan_mode
    from middleware.task_state.state import exit_plan_mode as exit_plan_mode
    from middleware.task_state.state import propose_requirement as propose_requirement
    from middleware.task_state.state import record_verification as record_verification
    from middleware.task_state.state import reject_requirement as reject_requirement
    from middleware.task_state.state import set_subject_version as set_subject_version
    from middleware.task_state.state import set_todos as set_todos
    from middleware.tool_result_offload import ToolResultOffload as ToolResultOffload
    from middleware.tool_result_offload import purge_session as purge_session
    from middleware.tracing import Tracing as Tracing
    from middleware.workspace_materials import Instruction as Instruction
    from middleware.workspace_materials import WorkspaceMaterials as WorkspaceMaterials
    from middleware.workspace_materials import instruction as instruction

_HOMES: dict[str, str] = {
    "BudgetFit": "middleware.budget_fit",
    "Compaction": "middleware.compaction",
    "ContextPressure": "middleware.context_pressure",
    "ContextRequest": "middleware.context_sources",
    "ContextSource": "middleware.context_sources",
    "ContextSources": "middleware.context_sources",
    "DefaultSelection": "middleware._selection",
    "FragmentEditor": "middleware.fragment_editor",
    "Instruction": "middleware.workspace_materials",
    "Fallback": "middleware.model_fallback",
    "ImageBudget": "middleware.image_budget",
    "ModelFallback": "middleware.model_fallback",
    "OverflowRetry": "middleware.overflow_retry",
    "ProviderCompaction": "middleware.provider_compaction",
    "ProviderContextEditing": "middleware.provider_context_editing",
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

__all__ = sorted(_HOMES)
"""Every lazy export (a test checks the ``TYPE_CHECKING`` imports name the same)."""
