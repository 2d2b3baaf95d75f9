"""The default stack: the list the agent uses when given none.

It is a plain list, outermost first — copy it, reorder it, shorten it or add your own
middleware. Each keyword replaces one concern's default instance; the common settings
(instructions, sources) have shortcuts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from harness.fragments.builtins import Builtin
from harness.types import Middleware
from middleware.budget_fit import BudgetFit
from middleware.compaction import Compaction
from middleware.context_sources import ContextSource, ContextSources
from middleware.fragment_editor import FragmentEditor
from middleware.overflow_retry import OverflowRetry
from middleware.pair_validation import PairValidation
from middleware.task_state import TaskState
from middleware.task_state.state import DEFAULT_PLAN_RULES, PLAN_PART
from middleware.tool_result_offload import ToolResultOffload
from middleware.tracing import Tracing
from middleware.workspace_materials import Instruction, WorkspaceMaterials

DEFAULT_BUILTINS: Final = (
    Builtin(
        id="builtin-principles",
        title="Working principles",
        content=(
            "Working principles:\n"
            "- Read the code and context that matter before you change anything.\n"
            "- Make the smallest change that does the task; leave unrelated code as it is.\n"
            "- Check the result (run the tests or the command) before you say it is done.\n"
            "- Say plainly what you did, what you did not do, and what is uncertain."
        ),
    ),
    Builtin(
        id="builtin-environment",
        title="Environment",
        content="Environment:\n- Date: {date}\n- Platform: {platform}\n- Working folder: {cwd}",
    ),
    Builtin(
        id="builtin-mode-plan",
        title="Plan mode rules",
        content=DEFAULT_PLAN_RULES,
        part=PLAN_PART,
    ),
)
"""Working principles, environment information and the plan mode's rules."""


def default_stack(
    *,
    instructions: Iterable[Instruction] = (),
    sources: Iterable[ContextSource] = (),
    tracing: Tracing | None = None,
    overflow: OverflowRetry | None = None,
    materials: WorkspaceMaterials | None = None,
    context_sources: ContextSources | None = None,
    task: TaskState | None = None,
    fragments: FragmentEditor | None = None,
    offload: ToolResultOffload | None = None,
    budget: BudgetFit | None = None,
    compaction: Compaction | None = None,
    pairs: PairValidation | None = None,
) -> list[Middleware]:
    """Return the default middleware list, outermost first.

    Tracing → OverflowRetry → WorkspaceMaterials → ContextSources → TaskState →
    FragmentEditor → ToolResultOffload → BudgetFit → Compaction → PairValidation.

    Args:
        instructions: named instructions for System (``instruction(name, text)``), used
            when ``materials`` is not given.
        sources: dynamic context sources (``context_source(...)``), used when
            ``context_sources`` is not given.
        tracing: replaces the default `Tracing()`.
        overflow: replaces the default `OverflowRetry()`.
        materials: replaces the default `WorkspaceMaterials(instructions=instructions)`.
        context_sources: replaces the default `ContextSources(sources=sources)`.
        task: replaces the default `TaskState()` (e.g. ``enable_task_list()``).
        fragments: replaces the default `FragmentEditor()` (e.g.
            ``FragmentEditor(builtins=DEFAULT_BUILTINS)`` for the built-in System parts of
            `harness.fragments.builtins`).
        offload: replaces the default `ToolResultOffload()`.
        budget: replaces the default `BudgetFit()`.
        compaction: replaces the default `Compaction()`.
        pairs: replaces the default `PairValidation()`.
    """
    return [
        tracing or Tracing(),
        overflow or OverflowRetry(),
        materials or WorkspaceMaterials(instructions=instructions),
        context_sources or ContextSources(sources=sources),
        task or TaskState(),
        fragments or FragmentEditor(),
        offload or ToolResultOffload(),
        budget or BudgetFit(),
        compaction or Compaction(),
        pairs or PairValidation(),
    ]
