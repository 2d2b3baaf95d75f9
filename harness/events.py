"""Events of the agent's event stream (``agent.stream_events``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from harness.manifest import ContextManifest, Usage
from harness.messages import Message, ToolCall

EventKind = Literal[
    "text",
    "text_delta",
    "reasoning_delta",
    "tool_call",
    "tool_result",
    "context_build",
    "usage",
    "compaction_started",
    "compaction_finished",
    "final",
    "error",
    "warning",
]


class CompactionReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a compaction is about to do, or did (on ``compaction_*`` events).

    So an app can show "compacting…" and audit what left the history the model sees; the
    originals stay in the session log.
    """

    call_id: str
    """The agent request being compacted."""
    reason: str
    """Why: ``messages``, ``tokens`` (over the trigger or the budget), ``cost`` (the cost-aware
    trigger: compacting now pays for itself), ``requested`` (the
    ``compact_conversation`` tool, `HarnessAgent.compact`, ``harness sessions compact``) or
    ``forced`` (after a provider overflow)."""
    messages_before: int
    """Messages of the history before."""
    tokens_before: int
    """Estimated tokens of the history before."""
    messages_after: int = -1
    """Messages of the history after (-1 on ``compaction_started``)."""
    tokens_after: int = -1
    """Estimated tokens of the history after (-1 on ``compaction_started``)."""
    summarised: int = 0
    """Messages replaced by the summary."""
    trimmed: int = 0
    """Tool outputs cut to a preview."""
    truncated: int = 0
    """Tool calls whose long arguments were shortened."""
    summary_id: str | None = None
    """The id of the summary message (in the working history and the session log)."""
    failure: str | None = None
    """Why the summariser failed, when it did (the early part was left out this round)."""
    focus: str | None = None
    """What a manual request asked the summary to focus on."""


class AgentEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One thing that happened during an agent call."""

    kind: EventKind
    """``text`` (a round's assistant text), ``text_delta`` (a piece of it as the model
    streams it; see `HarnessAgent.stream_events`), ``reasoning_delta`` (a piece of a
    thinking model's reasoning, streamed before its text), ``tool_call``, ``tool_result``,
    ``context_build`` (a manifest, before the request is sent), ``usage`` (what the provider
    reported for a request, agent or summary, with its cost), ``compaction_started`` /
    ``compaction_finished`` (a `CompactionReport`), ``final`` (the reply), ``error`` or
    ``warning`` (something degraded but the call went on, e.g. ``summary_failed``)."""
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
    usage: Usage | None = None
    """The provider's report on ``usage`` events."""
    call_id: str | None = None
    """On ``usage`` events: the request's call id (its manifest's ``call_id``)."""
    purpose: str | None = None
    """On ``usage`` events: ``agent`` or ``summary``."""
    model: str | None = None
    """On ``usage`` events: the model that answered."""
    compaction: CompactionReport | None = None
    """On ``compaction_started`` / ``compaction_finished``."""


def usage_event(
    usage: Usage | None, *, call_id: str, purpose: str, model: str
) -> AgentEvent | None:
    """Return the ``usage`` event of one answered request (``None`` when nothing was reported)."""
    if usage is None:
        return None
    return AgentEvent(kind="usage", usage=usage, call_id=call_id, purpose=purpose, model=model)
