"""Tool-call pairing over a history: units, safe cut points, checks and repair.

The kernel's one pairing rule: the pre-send check of every request (`harness.presend`)
enforces it, and the middleware that cut or validate the history (Compaction,
PairValidation, through ``middleware._history``) keep it.
One rule throughout — the one providers enforce (OpenAI, Anthropic): every tool call of an
assistant message is answered by exactly one ``tool`` message, and those results come
*directly after* that assistant message, before any other message. Results among
themselves may come in any order.

The public surface is small:

- `units` — the atomic spans of a history: an assistant message with tool calls together
  with the results that directly follow it, or a single other message.
- `safe_cut` — the nearest index where a history may be cut without splitting a unit.
- `check_pairs` — which calls dangle, which results are orphans, which are misplaced;
  `pairs_valid` — only whether all is well, from a start index without copying.
- `repair_pairs` — a history that satisfies the rule, and what was done to get it.
- `label` — a short, stable form of a (possibly 1.5 KB) tool-call id for transforms.

All functions are pure: they never mutate their input, and on a valid history
`repair_pairs` returns the very same message objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

import msgspec

from harness.manifest import Transform, TransformKind
from harness.markers import INTERRUPTED_TEXT, interrupted_result
from harness.messages import Message

PAIR_REPAIR: Final = TransformKind("pair_repair")
"""A pair repaired: ``pair_repair:{orphan,moved,dangling}:<label of the id>``."""

_LABEL_MAX = 64


def label(call_id: str | None) -> str:
    """Return ``call_id`` short enough for a transform or an error message.

    Ids up to 64 characters are returned unchanged; longer ones (some providers send
    ~1.5 KB ids) become their first 24 characters, ``…`` and a 12-hex-digit hash, which is
    stable and practically unique.
    """
    if call_id is None:
        return "<no tool_call_id>"
    if len(call_id) <= _LABEL_MAX:
        return call_id
    digest = hashlib.blake2b(call_id.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{call_id[:24]}…{digest}"


def units(history: Sequence[Message]) -> list[tuple[int, int]]:
    """Return the ``[start, end)`` spans of the history's atomic units, in order.

    An assistant message with tool calls forms one unit with the ``tool`` messages that
    directly follow it; every other message (including a stray ``tool`` message) is a unit
    of its own. The spans cover the history without gaps.
    """
    spans: list[tuple[int, int]] = []
    i, n = 0, len(history)
    while i < n:
        end = i + 1
        if history[i].role == "assistant" and history[i].tool_calls:
            while end < n and history[end].role == "tool":
                end += 1
        spans.append((i, end))
        i = end
    return spans


def safe_cut(history: Sequence[Message], index: int, *, forward: bool = False) -> int:
    """Return the nearest index to ``index`` where ``history`` may be cut.

    Cutting at ``k`` means ``history[:k]`` and ``history[k:]`` are handled apart (e.g.
    summarised and kept). A cut is safe when it does not fall inside a unit (see
    `units`): ``0``, ``len(history)`` and the start of every unit are safe.

    Args:
        history: the messages.
        index: the wanted cut, clamped to ``[0, len(history)]``.
        forward: move to the next safe cut at or after ``index`` instead of the previous
            one at or before it.
    """
    n = len(history)
    index = max(0, min(index, n))
    if forward:
        while index < n and not _starts_unit(history, index):
            index += 1
        return index
    if index == n or history[index].role != "tool":
        return index
    # A tool message: its unit starts at the assistant message with calls before the
    # results it is among, if there is one; else it is a unit of its own.
    owner = index - 1
    while owner >= 0 and history[owner].role == "tool":
        owner -= 1
    if owner >= 0 and history[owner].role == "assistant" and history[owner].tool_calls:
        return owner
    return index


def _starts_unit(history: Sequence[Message], index: int) -> bool:
    # A tool message directly after an assistant-with-calls unit continues that unit.
    if index >= len(history) or history[index].role != "tool":
        return True
    j = index - 1
    while j >= 0 and history[j].role == "tool":
        j -= 1
    return j < 0 or not (history[j].role == "assistant" and history[j].tool_calls)


class PairCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What is wrong with a history's tool-call pairing (all empty: nothing)."""

    dangling: tuple[str, ...] = ()
    """Call ids with no result anywhere in the history, in order of the calls."""
    orphans: tuple[str, ...] = ()
    """``tool_call_id`` of results with no call in the history, or a second result for
    an already answered call, in order of the results."""
    misplaced: tuple[str, ...] = ()
    """Call ids whose result exists but not directly after the call (before it, or after
    another message), in order of the calls."""

    @property
    def ok(self) -> bool:
        """Whether every call has exactly one result, directly after it."""
        return not (self.dangling or self.orphans or self.misplaced)


class _Plan(msgspec.Struct, kw_only=True):
    answers: dict[int, list[tuple[str, int]]]
    """For each assistant index with calls: (call id, result index or -1), in call order."""
    in_place: set[int]
    """Indices of results directly after their own call (they stay where they are)."""
    moved: set[int]
    """Indices of results that answer a call elsewhere (they move to that call)."""
    check: PairCheck


def _plan(history: Sequence[Message]) -> _Plan:
    spans = units(history)
    owner: dict[int, int] = {}  # tool index -> the assistant index whose unit it is in
    by_call: dict[str, list[int]] = {}  # call id -> tool indices answering it, in order
    for start, end in spans:
        for j in range(start + 1, end):
            owner[j] = start
    for j, message in enumerate(history):
        if message.role == "tool" and message.tool_call_id is not None:
            by_call.setdefault(message.tool_call_id, []).append(j)
    claimed: set[int] = set()
    answers: dict[int, list[tuple[str, int]]] = {}
    # Pass 1: results directly after their call stay where they are.
    for start, _end in spans:
        if not (history[start].role == "assistant" and history[start].tool_calls):
            continue
        row: list[tuple[str, int]] = []
        for call in history[start].tool_calls:
            found = next(
                (j for j in by_call.get(call.id, ()) if owner.get(j) == start and j not in claimed),
                -1,
            )
            if found >= 0:
                claimed.add(found)
            row.append((call.id, found))
        answers[start] = row
    in_place = set(claimed)
    # Pass 2: a call still unanswered takes its first unclaimed result from elsewhere.
    dangling: list[str] = []
    misplaced: list[str] = []
    for row in answers.values():
        for k, (call_id, found) in enumerate(row):
            if found >= 0:
                continue
            moved = next((j for j in by_call.get(call_id, ()) if j not in claimed), -1)
            if moved >= 0:
                claimed.add(moved)
                row[k] = (call_id, moved)
                misplaced.append(call_id)
            else:
                dangling.append(call_id)
    orphans = tuple(
        _result_id(message)
        for j, message in enumerate(history)
        if message.role == "tool" and j not in claimed
    )
    check = PairCheck(dangling=tuple(dangling), orphans=orphans, misplaced=tuple(misplaced))
    return _Plan(answers=answers, in_place=in_place, moved=claimed - in_place, check=check)


def pairs_valid(history: Sequence[Message], start: int = 0) -> bool:
    """Return whether ``history[start:]`` is validly paired: `check_pairs` ``.ok``, no copy.

    One quick pass from ``start`` (no slice, no allocation per message): the incremental
    check of a grown history costs its new units only.
    """
    i, n = start, len(history)
    while i < n:
        message = history[i]
        i += 1
        role = message.role
        if role == "tool":
            return False
        calls = message.tool_calls
        if role != "assistant" or not calls:
            continue
        if len(calls) == 1:  # the usual unit (no list): its result, then a stray one fails above
            if i >= n or history[i].role != "tool" or history[i].tool_call_id != calls[0].id:
                return False
            i += 1
        else:
            pending = [call.id for call in calls]
            while i < n and history[i].role == "tool":
                call_id = history[i].tool_call_id
                if call_id not in pending:
                    return False
                pending.remove(call_id)
                i += 1
            if pending:
                return False
    return True


def _result_id(message: Message) -> str:
    """The id an orphan result is reported by: its call id, or ``message:<id>`` without one."""
    return message.tool_call_id or f"message:{message.id}"


def check_pairs(history: Sequence[Message]) -> PairCheck:
    """Return what is wrong with the tool-call pairing of ``history``."""
    if pairs_valid(history):
        return PairCheck()
    return _plan(history).check


def repair_pairs(
    history: Sequence[Message], *, interrupted_text: str = INTERRUPTED_TEXT
) -> tuple[tuple[Message, ...], tuple[Transform, ...]]:
    """Return ``history`` with valid pairs, and one transform per change.

    - a misplaced result is moved directly after its call (``pair_repair:moved:<id>``);
    - a call without any result gets a synthetic result ``interrupted_text``, placed
      after the results its group already has (``pair_repair:dangling:<id>``);
    - a result without a call, or a second result for one call, is dropped
      (``pair_repair:orphan:<id>``).

    Ids in transforms are shortened with `label`. A valid history comes back as the same
    messages and no transforms. A synthetic result's id is derived from its assistant
    message's id, so repairing the same history twice gives the same ids.
    """
    if pairs_valid(history):
        return tuple(history), ()
    plan = _plan(history)
    out: list[Message] = []
    transforms: list[Transform] = []
    for start, end in units(history):
        first = history[start]
        row = plan.answers.get(start)
        if row is None:  # a lone message
            if first.role != "tool":
                out.append(first)
            elif start not in plan.moved:
                transforms.append(Transform(PAIR_REPAIR, f"orphan:{label(_result_id(first))}"))
            continue
        out.append(first)
        for j in range(start + 1, end):
            if j in plan.in_place:
                out.append(history[j])
            elif j not in plan.moved:
                transforms.append(Transform(PAIR_REPAIR, f"orphan:{label(_result_id(history[j]))}"))
        for position, (call_id, found) in enumerate(row):
            if found in plan.in_place:
                continue
            if found >= 0:
                out.append(history[found])
                transforms.append(Transform(PAIR_REPAIR, f"moved:{label(call_id)}"))
                continue
            out.append(
                interrupted_result(
                    first.tool_calls[position],
                    text=interrupted_text,
                    id=f"{first.id}~interrupted{position}",
                )
            )
            transforms.append(Transform(PAIR_REPAIR, f"dangling:{label(call_id)}"))
    return tuple(out), tuple(transforms)
