"""Work kept across a session's calls, and what every call or request no longer pays again.

A session's running state (token totals, manifest items, the pair check's and the offload
scan's last history) lives in the session's scratch space (`AgentState.scratch`), so the
first round of a new call costs its new messages; the figures it gives must equal counting
everything, also when the history changed between calls.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import HarnessAgent, RuntimeContext
from harness.chain import check_order, compose
from harness.errors import ConfigurationError
from harness.request import ModelRequest, ModelResponse
from harness.types import Handler
from middleware import default_stack
from middleware.budget_fit import BudgetFit
from middleware.tool_result_offload import ToolResultOffload
from providers import ScriptedModel


# ------------------------------------------------------------------------- ways in
async def test_a_path_is_a_workspace_like_its_str(tmp_path: Path) -> None:
    model = ScriptedModel(model="gpt-4o", replies=["done"])
    agent = HarnessAgent(model=model, workspace=tmp_path / "ws")
    assert agent.workspace.local and agent.workspace.root == str((tmp_path / "ws").resolve())
    await agent.call("hello", RuntimeContext(user_id="u", session_id="s"))
    assert (tmp_path / "ws" / ".harness" / "sessions.db").is_file()  # the default store is there


def test_order_checks_read_statements_and_still_refuse_a_wrong_order() -> None:
    check_order(default_stack())  # the default order is accepted
    with pytest.raises(ConfigurationError, match="BudgetFit stands before ToolResultOffload"):
        check_order([BudgetFit(), ToolResultOffload()])


async def test_a_function_with_stated_concerns_is_ordered_like_a_class() -> None:
    async def late(request: ModelRequest, call_next: Handler) -> ModelResponse:
        return await call_next(request)

    late.concerns = frozenset()  # type: ignore[attr-defined]
    late.after = BudgetFit.concerns  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="late stands before BudgetFit"):
        compose([late, BudgetFit()], ScriptedModel(model="gpt-4o").complete)
    compose([BudgetFit(), late], ScriptedModel(model="gpt-4o").complete)
