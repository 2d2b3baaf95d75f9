"""BudgetFit: fit the request's blocks into the input budget and set the history budget.

Place in the stack: after ToolResultOffload (so oversized tool output is already a preview)
and before Compaction (which reads the ``history_budget`` this middleware sets).

The budget is spent in this order:

1. **Fixed cost** — the System parts, the tool schemas, reply priming, every *required*
   block and every *state* block (placement ``TASK_STATE``; TaskState marks all its blocks
   required). None of it can be dropped.
2. **History minimum** — what Compaction never removes (`middleware._layout.minimum`):
   the pinned task, the current summary, the newest user message and the last unit (the
   last assistant message with tool calls and its results, or the last message). Compaction
   keeps these, so they cannot be made smaller here — plus ``SUMMARY_ROOM`` for the
   summary when the history holds more than that. When fixed cost
   plus this minimum exceed ``request.input_limit`` the build stops with
   `ContextBudgetExceeded` and the model is not called: the request could never fit
   as it is. The error names the last unit's tool results (``protected_results``), so
   ToolResultOffload can offload them to the workspace and prepare the request again.
   ``min_history_tokens`` can reserve more history room than the minimum (never more than
   the whole history); that extra reserve only makes blocks give way, it never fails.
3. **Optional blocks** — whatever is left after 1 and 2. When the optional blocks do not
   all fit, they are left out in the order of the selection policy (default: memory and
   knowledge first, then other optional material, lowest priority first), each recorded
   as ``omitted_for_budget:<source_id>``. Blocks are dropped strictly in that order: the
   omitted blocks are always the first ones of the policy's order.

What remains after the fixed cost and the kept blocks is the history budget, set as
``request.history_budget`` for Compaction (it is at least the history minimum).

Cost of a warm round: while the whole request fits with `SUMMARY_ROOM` to spare, nothing
can be refused or dropped and the history minimum is not looked for: the round costs the
request's estimate (a count per *new* message; the history's total is a running one,
`harness.accounting.HistoryTally`; the fixed cost comes with it, and the layers after this
one get the same measurement back from identity checks) and an identity check of the blocks
(`_Memo`: split and counted again only when they change). Near the limit everything
is recounted exactly (`harness.accounting.counted_near_limit`) and the minimum is found
without a pass over the history (the newest user turn is tracked by the running tally, the
last unit found from the end, its tokens are differences of running sums). The selection
policy orders the optional blocks once per set of blocks, when (and only when) something
must be dropped; the cut for a given room is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Final

import msgspec
from msgspec.structs import replace

from harness.accounting import (
    HistoryTally,
    blocks_framing,
    count_off_loop,
    counted_near_limit,
    fixed_tokens,
    history_tokens,
    tally_of,
)
from harness.blocks import ContextBlock
from harness.errors import ConfigurationError, ContextBudgetExceeded
from harness.manifest import Transform, TransformKind
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse
from harness.tokens import TokenEstimator
from harness.types import Concern, Handler
from middleware._layout import SUMMARY_ROOM, last_unit_start, layout
from middleware._selection import DefaultSelection, SelectionPolicy

DROPPED_FOR_BUDGET: Final = TransformKind("omitted_for_budget", omitted=True)
"""An optional block dropped to fit the budget: ``omitted_for_budget:<source_id>``."""


def is_fixed(block: ContextBlock) -> bool:
    """Return whether ``block`` counts as fixed cost (required or task state)."""
    return block.required or block.where == "TASK_STATE"


class BudgetFit:
    """Fit the request into ``request.input_limit``: drop optional blocks, set the history budget.

    Args:
        selection: orders optional blocks for dropping (default: `DefaultSelection`).
        min_history_tokens: room kept for the history besides its minimum (newest user
            message and trailing tool-call group); the larger of the two is reserved,
            capped at the history's actual size. 0 keeps only the minimum.

    Raises:
        ConfigurationError: when ``selection`` has no ``drop_order`` or
            ``min_history_tokens`` is negative.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.FITS_BUDGET})
    after: ClassVar[frozenset[Concern]] = frozenset(
        {Concern.ADDS_CONTEXT, Concern.SHRINKS_TOOL_RESULTS}
    )

    def __init__(
        self,
        *,
        selection: SelectionPolicy | None = None,
        min_history_tokens: int = 0,
    ) -> None:
        if selection is not None and not isinstance(selection, SelectionPolicy):
            raise ConfigurationError(
                f"selection must have a 'drop_order(blocks) -> blocks' method, got {selection!r}"
            )
        if isinstance(min_history_tokens, bool) or not isinstance(min_history_tokens, int):
            raise ConfigurationError(
                f"min_history_tokens must be an int ≥ 0, got {min_history_tokens!r}"
            )
        if min_history_tokens < 0:
            raise ConfigurationError(f"min_history_tokens must be ≥ 0, got {min_history_tokens}")
        self.selection: SelectionPolicy = selection if selection is not None else DefaultSelection()
        self.min_history_tokens = min_history_tokens

    def __repr__(self) -> str:
        return (
            f"BudgetFit(selection={self.selection!r}, min_history_tokens={self.min_history_tokens})"
        )

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Fit ``request`` into its budget and pass it on with ``history_budget`` set."""
        await count_off_loop(request)  # big new texts counted in a thread, not on the loop
        return await call_next(self.fit(request))

    def fit(self, request: ModelRequest) -> ModelRequest:
        """Return ``request`` with optional blocks dropped as needed and ``history_budget`` set.

        Raises:
            ContextBudgetExceeded: when System, tool schemas, required and state blocks
                plus the history minimum exceed the input limit.
        """
        request, tokens = counted_near_limit(request)  # exact counts near the limit
        est = request.estimator
        limit = request.input_limit
        run = request.run
        memo = run.session_slot(self, _Memo) if run is not None else _Memo()
        parts = memo.blocks_of(request.blocks, est)
        fixed = fixed_tokens(request, est)  # measured above: the run's last measurement
        if parts.fixed:
            fixed += parts.framing + parts.fixed
        overhead = 0 if parts.fixed else parts.framing
        if tokens + SUMMARY_ROOM <= limit:
            # The whole request fits with room for a summary to spare: the history minimum
            # and any reserve are at most the history plus that room, so nothing can be
            # refused or dropped, and the minimum need not be found. One field changes:
            # msgspec's replace, without `ModelRequest.replace`'s keyword repacking.
            used = parts.optional_tokens + overhead if parts.optional else 0
            return replace(request, history_budget=limit - fixed - used)
        if fixed > limit:
            raise ContextBudgetExceeded(
                f"System, tool schemas, required and task-state blocks need ~{fixed} tokens "
                f"but the input limit is {limit}: shorten the instructions or required "
                "blocks, offer fewer tools, or raise ContextPolicy.max_input_tokens",
                required_tokens=fixed,
                limit=limit,
                transforms=request.transforms,
            )
        minimum = memo.minimum_tokens(request, tally_of(request, est))
        if fixed + minimum > limit:
            raise ContextBudgetExceeded(
                f"System, tool schemas, required and task-state blocks (~{fixed} tokens) "
                f"plus the newest user message and last tool results (~{minimum} tokens) "
                f"exceed the input limit of {limit}: shorten them, offer fewer tools, or "
                "raise ContextPolicy.max_input_tokens",
                required_tokens=fixed + minimum,
                limit=limit,
                transforms=request.transforms,
                protected_results=_last_results(request.history),
            )
        reserve = self._history_reserve(request, minimum)
        room = max(0, limit - fixed - reserve)
        total = parts.optional_tokens
        if not parts.optional or total + overhead <= room:
            used = total + overhead if parts.optional else 0
            return request.replace(history_budget=limit - fixed - used)
        cut = parts.cut(self.selection, room, overhead, est)
        used = cut.kept_tokens + overhead if cut.kept_any else 0
        return request.replace(
            blocks=cut.blocks,
            history_budget=limit - fixed - used,
            transforms=request.transforms + cut.transforms,
        )

    def _history_reserve(self, request: ModelRequest, minimum: int) -> int:
        reserve = minimum
        if self.min_history_tokens > reserve:
            whole = history_tokens(request)
            reserve = max(reserve, min(self.min_history_tokens, whole))
        return reserve


class _Cut(msgspec.Struct, frozen=True):
    """What one budget's room left of the optional blocks."""

    room: int
    """The room it was made for (with the same blocks message overhead)."""
    blocks: tuple[ContextBlock, ...]
    """The request's blocks without the dropped ones, in their order."""
    transforms: tuple[Transform, ...]
    """``omitted_for_budget:<source_id>`` per dropped block, in drop order."""
    kept_tokens: int
    """The tokens of the optional blocks kept (0 when all went)."""
    kept_any: bool
    """Whether any optional block is kept (a kept block may count 0 tokens)."""


class _Blocks:
    """A request's blocks split for fitting: counted once, ordered for dropping once.

    Kept per BudgetFit and session (`_Memo`) with the tuple they came from, while requests
    carry the same blocks (or equal ones) and the same estimator: the warm round's blocks
    cost an identity check. The selection policy's order is asked for on the first request
    that must drop something, and the last cut is kept for its room (a policy's order is a
    function of the blocks it is given).
    """

    __slots__ = (
        "_cut",
        "_order",
        "blocks",
        "estimator",
        "fixed",
        "framing",
        "optional",
        "optional_tokens",
    )

    def __init__(self, blocks: tuple[ContextBlock, ...], estimator: TokenEstimator) -> None:
        self.blocks = blocks
        self.estimator = estimator
        count_block = estimator.count_block
        self.fixed = 0
        """The tokens of the required and task-state blocks."""
        self.optional: list[ContextBlock] = []
        self.optional_tokens = 0
        for block in blocks:
            # is_fixed(block), inlined: this loop runs once per block and change of blocks.
            if block.required or block.placement == "TASK_STATE":
                self.fixed += count_block(block)
            else:
                self.optional.append(block)
                self.optional_tokens += count_block(block)
        self.framing = blocks_framing(blocks)
        """The blocks messages' framing for all of ``blocks``: at least that of any part."""
        self._order: Sequence[ContextBlock] | None = None
        self._cut: _Cut | None = None

    def cut(
        self, selection: SelectionPolicy, room: int, overhead: int, est: TokenEstimator
    ) -> _Cut:
        """Return the blocks left when the policy's first blocks go until the rest fits ``room``."""
        if self._cut is not None and self._cut.room == room:
            return self._cut
        order = self._order
        if order is None:
            order = self._order = _checked_order(selection, self.optional)
        count_block = est.count_block  # cached: a dictionary lookup per dropped block
        dropped: list[ContextBlock] = []
        remaining = self.optional_tokens
        for block in order:
            if remaining + overhead <= room:
                break
            dropped.append(block)
            remaining -= count_block(block)
        gone = {id(b) for b in dropped}
        kept_any = len(dropped) < len(order)
        self._cut = _Cut(
            room,
            tuple(b for b in self.blocks if id(b) not in gone),
            tuple(Transform(DROPPED_FOR_BUDGET, b.source_id) for b in dropped),
            remaining if kept_any else 0,  # nothing is left: no blocks message either
            kept_any,
        )
        return self._cut


def _last_results(history: tuple[Message, ...]) -> tuple[str, ...]:
    """Return the message ids of the tool results in the history's last unit.

    The unit is part of the minimum that cannot be dropped, so the error names them: a
    middleware outside this one that can shrink them (ToolResultOffload) may try again.
    """
    return tuple(m.id for m in history[last_unit_start(history) :] if m.role == "tool")


def _checked_order(
    selection: SelectionPolicy, optional: list[ContextBlock]
) -> Sequence[ContextBlock]:
    order = selection.drop_order(optional)
    if type(selection) is not DefaultSelection and (
        len(order) != len(optional) or {id(b) for b in order} != {id(b) for b in optional}
    ):
        raise ConfigurationError(
            f"the selection policy {selection!r} must return each optional block "
            f"exactly once; it returned {len(order)} for {len(optional)} blocks"
        )
    return order


class _Memo:
    """One BudgetFit's memory of the session's last request: its blocks and history layout.

    The history minimum's positions cost no pass over the history: the layout (pinned task,
    summary) is kept while the first two messages are the same objects, the newest user
    turn comes from the running tally (`harness.accounting.HistoryTally.newest_user`), the
    last unit is found from the end, and the tokens are differences of the running sums.
    """

    __slots__ = ("_blocks", "first", "start")

    def __init__(self) -> None:
        self._blocks: _Blocks | None = None
        self.first: tuple[Message, ...] = ()
        """The first two messages of the last history measured."""
        self.start = 0
        """Its layout's body start."""

    def blocks_of(self, blocks: tuple[ContextBlock, ...], est: TokenEstimator) -> _Blocks:
        """Return ``blocks`` split and counted, reused while they and ``est`` are unchanged."""
        known = self._blocks
        if (
            known is None
            or known.estimator is not est
            or (known.blocks is not blocks and known.blocks != blocks)
        ):
            known = self._blocks = _Blocks(blocks, est)
        return known

    def minimum_tokens(self, request: ModelRequest, tally: HistoryTally) -> int:
        """Return the tokens of what Compaction never removes (`middleware._layout.minimum`).

        Plus `SUMMARY_ROOM` when the history holds more than that minimum.
        """
        history = request.history
        n = len(history)
        first = self.first
        if len(first) != min(n, 2) or any(a is not b for a, b in zip(first, history, strict=False)):
            self.first = history[:2]  # the layout reads these two only
            self.start = layout(history).start
        start = self.start
        current = tally.newest_user(history, start)
        tail = max(start, last_unit_start(history))
        picks = list(range(start))  # the pinned task and the summary
        if current is not None and current < tail:
            picks.append(current)
        tokens = tally.picked(history, picks, tail, request.run)
        if len(picks) + n - tail < n:
            tokens += SUMMARY_ROOM  # the rest will be summarised: room for the summary
        return tokens
