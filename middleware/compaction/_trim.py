"""Compaction's first two stages, which need no model: trim old tool output, truncate old arguments.

Both change only the working history (the agent commits it, so nothing is redone next
round) and mark what they rewrote (`harness.markers.TRIMMED`, `ARGS_TRUNCATED`), so a
message is never rewritten twice.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from harness.markers import ARGS_TRUNCATED, OFFLOADED, TRIMMED
from harness.messages import Message, ToolCall
from harness.tokens import TokenEstimator
from middleware.compaction._settings import CompactionSettings

TRIM_PROTECT_SHARE: Final = 0.4
"""At most this share of the history budget is protected from trimming (small windows)."""
TRIM_MIN_SHARE: Final = 0.2
"""Trimming starts once this share of the history budget is trimmable (small windows)."""
TRUNCATE_KEEP_CHARS: Final = 20
"""Characters a truncated argument keeps before the truncation text."""


def trim_tool_outputs(
    settings: CompactionSettings, history: tuple[Message, ...], est: TokenEstimator, budget: int
) -> tuple[tuple[Message, ...], int]:
    """Stage 1: shorten older tool outputs to previews once enough have piled up.

    The thresholds are absolute (~40,000 and ~20,000 tokens) for large windows and
    scale down with the history budget for small ones, where a fixed 40,000 would
    protect every tool output ever made.
    """
    if settings.trim_min_tokens is None:
        return history, 0
    count = est.count_message
    protect = min(settings.trim_protect_tokens, int(TRIM_PROTECT_SHARE * budget))
    minimum = min(settings.trim_min_tokens, int(TRIM_MIN_SHARE * budget))
    preview = settings.trim_preview_chars
    protected = 0
    trimmable = 0
    candidates: list[int] = []
    # The results the model has not answered yet (the trailing run) are always protected.
    tail = len(history)
    while tail > 0 and history[tail - 1].role == "tool":
        tail -= 1
    for i in range(len(history) - 1, -1, -1):
        message = history[i]
        if message.role != "tool":
            continue
        tokens = count(message)
        if protected < protect or i >= tail:
            protected += tokens
            continue
        content = message.content
        if (
            isinstance(content, str)
            and len(content) > preview + 100
            and not message.meta(TRIMMED)
            and not message.meta(OFFLOADED)
        ):
            candidates.append(i)
            trimmable += tokens
    if not candidates or trimmable < minimum:
        return history, 0
    out = list(history)
    for i in candidates:
        message = history[i]
        text = message.text
        rest = len(text) - preview
        out[i] = message.revise(
            "trim",
            metadata={TRIMMED: True},
            content=f"{text[:preview]}\n[… older tool output trimmed: {rest} more characters "
            "not shown; the full output is in the session log …]",
        )
    return tuple(out), len(candidates)


def truncate_arguments(
    settings: CompactionSettings, history: tuple[Message, ...], start: int, end: int
) -> tuple[tuple[Message, ...], int]:
    """Stage 2: shorten long string arguments of the tool calls in ``history[start:end]``."""
    out: list[Message] | None = None
    changed_calls = 0
    limit = settings.max_arg_length
    for i in range(start, end):
        message = history[i]
        if not message.tool_calls or message.meta(ARGS_TRUNCATED):
            continue
        calls: list[ToolCall] = []
        changed = 0
        for call in message.tool_calls:
            # A string value longer than the limit makes the JSON longer than it, too.
            new = _truncate_call(settings, call) if len(call.arguments) > limit else call
            changed += new is not call
            calls.append(new)
        if changed:
            if out is None:
                out = list(history)
            out[i] = message.revise(
                "truncate", metadata={ARGS_TRUNCATED: True}, tool_calls=tuple(calls)
            )
            changed_calls += changed
    return (tuple(out), changed_calls) if out is not None else (history, 0)


def _truncate_call(settings: CompactionSettings, call: ToolCall) -> ToolCall:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        return call  # not JSON: leave it exactly as the model wrote it
    changed, shortened = _truncate_value(settings, arguments)
    if not changed:
        return call
    return msgspec.structs.replace(call, arguments=json.dumps(shortened, ensure_ascii=False))


def _truncate_value(settings: CompactionSettings, value: Any) -> tuple[bool, Any]:
    if isinstance(value, str):
        if len(value) > settings.max_arg_length:
            return True, value[:TRUNCATE_KEEP_CHARS] + settings.truncation_text
        return False, value
    if isinstance(value, dict):
        items = {k: _truncate_value(settings, v) for k, v in value.items()}
        return any(c for c, _ in items.values()), {k: v for k, (_, v) in items.items()}
    if isinstance(value, list):
        pairs = [_truncate_value(settings, v) for v in value]
        return any(c for c, _ in pairs), [v for _, v in pairs]
    return False, value
