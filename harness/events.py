"""Events of the agent's event stream (``agent.stream_events``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from harness.manifest import ContextManifest
from harness.messages import Message, ToolCall

EventKind = Literal[
    "text",
    "text_delta",
    "reasoning_delta",
    "tool_call",
    "tool_result",
    "context_build",
    "final",
    "error",
    "warning",
]


class AgentEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One thing that happened during an agent call."""

    kind: EventKind
    """``text`` (a round's assistant text), ``text_delta`` (a piece of it as the model
    streams it; see `HarnessAgent.stream_events`), ``reasoning_delta`` (a piece of a
    thinking model's reasoning, streamed before its text), ``tool_call``, ``tool_result``,
    ``context_build`` (a manifest), ``final`` (the reply), ``error`` or ``warning`` (something degraded but
    the call went on, e.g. ``summary_failed``)."""
    code: str | None = None
    """A stable name for ``warning`` and ``error`` events (``summary_failed`` …)."""
    round: int = 0
    """The ReAct round (0-based) the event belongs to."""
    text: str | None = None
    """Assistant text, or an error message."""
    tool_call: ToolCall | None = None
    """The call, on ``tool_call`` events."""
    message: Message | None = None
    """The tool result on ``tool_result``, the reply on ``final``."""
    manifest: ContextManifest | None = None
    """The manifest on ``context_build``."""
