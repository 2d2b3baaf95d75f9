"""The layout of a working history, and the part of it that is never compacted away.

One module for the rule that BudgetFit and Compaction must agree on: a working history is

    [pinned task] [summary] body…

where the pinned task is a first user message that is not a summary, the summary is the
one that replaced earlier turns, and the body is what Compaction may summarise. Whatever
happens, Compaction keeps a summary, the newest user message of the body and the body's
last unit (a tool call with its results, or one message), and the pinned task while no
newer user turn came (always, with ``Compaction(pin_first_task=True)``); `minimum` is those
messages with the pinned task always among them, so BudgetFit reserves at least the room
Compaction cannot give back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from harness.markers import is_summary
from harness.messages import Message
from middleware._history import safe_cut

SUMMARY_ROOM: Final = 100
"""Tokens a compacted history needs for its summary message at the least: the framing, the
header line and a short text. BudgetFit reserves it beside the minimum whenever the history
holds more than the minimum (so something will be summarised); Compaction never gives a
summary less."""


class Layout(msgspec.Struct, frozen=True):
    """Where the compactable body starts, after the pinned task and the current summary."""

    start: int
    """The index of the body's first message."""
    pinned: Message | None
    """The pinned task, when the history starts with one."""
    previous: Message | None
    """The summary right after the task, when there is one."""


def layout(history: Sequence[Message]) -> Layout:
    """Return the layout of ``history``."""
    start = 0
    pinned = previous = None
    if history and history[0].role == "user" and not is_summary(history[0]):
        pinned = history[0]
        start = 1
    if start < len(history) and is_summary(history[start]):
        previous = history[start]
        start += 1
    return Layout(start, pinned, previous)


def current_user(body: Sequence[Message], start: int = 0) -> int | None:
    """Return the index of the newest user message of ``body[start:]`` (not a summary), if any.

    The index is into ``body``; ``start`` spares a caller the copy a slice would make.
    """
    for i in range(len(body) - 1, start - 1, -1):
        if body[i].role == "user" and not is_summary(body[i]):
            return i
    return None


def last_unit_start(body: Sequence[Message]) -> int:
    """Return where the last unit of ``body`` starts (``0`` for an empty body)."""
    return safe_cut(body, len(body) - 1) if body else 0


def minimum(history: Sequence[Message]) -> tuple[Message, ...]:
    """Return the messages Compaction never removes, in order.

    The pinned task, the current summary, the newest user message and the last unit of
    the body. (A compaction adds a new summary, which gets at least `SUMMARY_ROOM`.)
    """
    shape = layout(history)
    keep = [m for m in (shape.pinned, shape.previous) if m is not None]
    # Indices into the whole history (no copy of the body: this runs every round). The
    # pinned task and the summary never continue a unit, so the last unit starts where it
    # would in the body alone.
    tail = max(shape.start, safe_cut(history, len(history) - 1))
    current = current_user(history, shape.start)
    if current is not None and current < tail:
        keep.append(history[current])
    return (*keep, *history[tail:])
