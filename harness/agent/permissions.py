"""Which tool calls may run: allow, deny or ask, per tool and argument pattern.

Checked by the agent before every tool runs. A denied call is not run: the model gets an
error result that says so, and the session's record logs the denial. ``ask`` calls the
application's approver; an approval holds for that tool for the rest of the session and
is kept with the session's structured state (never summarised with the conversation).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from fnmatch import fnmatchcase
from typing import Final, Literal

import msgspec

from harness.errors import ConfigurationError
from harness.messages import ToolCall
from harness.state import AgentState, StateKey

Decision = Literal["allow", "deny", "ask"]
Approver = Callable[[ToolCall], Awaitable[bool] | bool]
"""Asked about a call marked ``ask``; returns whether it may run."""


class PermissionRule(msgspec.Struct, frozen=True, kw_only=True):
    """One rule: calls of tools matching ``tool`` whose arguments match ``arguments``."""

    tool: str
    """A tool name or a shell-style pattern (``write_*``)."""
    decision: Decision
    """``allow``, ``deny`` or ``ask``."""
    arguments: str = "*"
    """A shell-style pattern over the call's JSON arguments (``*"path": "/etc/*``)."""

    def __post_init__(self) -> None:
        if self.decision not in ("allow", "deny", "ask"):
            raise ConfigurationError(
                f"a permission rule's decision is 'allow', 'deny' or 'ask', got {self.decision!r}"
            )

    def matches(self, call: ToolCall) -> bool:
        """Return whether ``call`` falls under this rule."""
        return fnmatchcase(call.name, self.tool) and fnmatchcase(call.arguments, self.arguments)


class ToolPermissions(msgspec.Struct, frozen=True, kw_only=True):
    """An ordered list of rules; the first that matches decides, else ``default``."""

    rules: tuple[PermissionRule, ...] = ()
    default: Decision = "allow"

    def decide(self, call: ToolCall) -> Decision:
        """Return what the rules say about ``call``."""
        for rule in self.rules:
            if rule.matches(call):
                return rule.decision
        return self.default


class Approvals(msgspec.Struct, frozen=True, kw_only=True):
    """The tools an approver allowed in this session."""

    tools: tuple[str, ...] = ()


APPROVALS_KEY: Final = StateKey("permissions/approved", Approvals)
"""Where the tools approved in a session are kept."""


async def permission_denial(
    permissions: ToolPermissions, approve: Approver | None, call: ToolCall, state: AgentState
) -> str | None:
    """Return the error result of a call the permissions refuse, or ``None`` to run it."""
    decision = permissions.decide(call)
    if decision == "allow":
        return None
    if decision == "ask":
        approved = state.get(APPROVALS_KEY) or Approvals()
        if call.name in approved.tools:
            return None
        if approve is not None:
            answer = approve(call)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer:
                state.set(APPROVALS_KEY, Approvals(tools=(*approved.tools, call.name)))
                return None
        return (
            f"Error: the call to {call.name} was not run: it needs approval and was not "
            "approved. Do not retry it; ask the user or continue without it."
        )
    return (
        f"Error: the call to {call.name} was not run: the permission policy denies it. "
        "Do not retry it; continue without it or ask the user."
    )
