"""BudgetFit: fit the request's blocks into the input budget and set the history budget.

Place in the stack: after ToolResultOffload (so oversized tool output is already a preview)
and before Compaction (which reads the ``history_budget`` this middleware sets).

The budget is spent in this order:

1. **Fixed cost** — the System parts, the tool schemas, reply priming, every *required*
   block and every *state* block (category ``task`` or placement ``TASK_STATE``). None of
   it can be dropped.
2. **History minimum** — what Compaction never removes (`middleware._layout.minimum`):
   the pinned task, the current summary, the newest user message and the last unit (the
   last assistant message with tool calls and its results, or the last message). Compaction
   keeps these, so they cannot be made smaller here — plus ``SUMMARY_ROOM`` for the
   summary when the history holds more than that. When fixed cost
   plus this minimum exceed ``request.input_limit`` the build stops with
   `ContextBudgetExceeded` and the model is not called: the request could never fit.
   ``min_history_tokens`` can reserve more history room than the minimum (never more than
   the whole history); that extra reserve only makes blocks give way, it never fails.
3. **Optional blocks** — whatever is left after 1 and 2. When the optional blocks do not
   all fit, they are left out in the order of the selection policy (default: memory and
   knowledge first, then other optional material, lowest priority first), each recorded
   as ``omitted_for_budget:<source_id>``. Blocks are dropped strictly in that order: the
   omitted blocks are always the first ones of the policy's order.

What remains after the fixed cost and the kept blocks is the history budget, set as
``request.history_budget`` for Compaction (it is at least the history minimum).

Cost: one cached count per block, and per message new in this agent call (the history's
total is a running one, `harness.accounting.history_tokens`; near the limit it is recounted
exactly, see `harness.accounting.counted_near_limit`), one sort of the optional blocks when
(and only when) something must be dropped, then one pass.
"""

from __future__ import annotations

from typing import ClassVar

from harness.accounting import BLOCKS_FRAMING, counted_near_limit, fixed_tokens, history_tokens
from harness.blocks import ContextBlock
from harness.errors import ConfigurationError, ContextBudgetExceeded
from harness.request import ModelRequest, ModelResponse
from harness.tokens import TokenEstimator
from harness.types import Concern, Handler
from middleware._layout import SUMMARY_ROOM
from middleware._layout import minimum as history_minimum
from middleware._selection import DefaultSelection, SelectionPolicy


def is_fixed(block: ContextBlock) -> bool:
    """Return whether ``block`` counts as fixed cost (required or task state)."""
    return block.required or block.category == "task" or block.where == "TASK_STATE"


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
        return await call_next(self.fit(request))

    def fit(self, request: ModelRequest) -> ModelRequest:
        """Return ``request`` with optional blocks dropped as needed and ``history_budget`` set.

        Raises:
            ContextBudgetExceeded: when System, tool schemas, required and state blocks
                plus the history minimum exceed the input limit.
        """
        request, _ = counted_near_limit(request)  # exact counts near the limit
        est = request.estimator
        limit = request.input_limit
        count_block = est.count_block
        fixed_blocks = 0
        total = 0
        optional: list[ContextBlock] = []
        for block in request.blocks:
            # is_fixed(block), inlined: this loop runs once per block and request.
            if block.required or block.category == "task" or block.placement == "TASK_STATE":
                fixed_blocks += count_block(block)
            else:
                optional.append(block)
                total += count_block(block)
        fixed = fixed_tokens(request, est)
        if fixed_blocks:
            fixed += BLOCKS_FRAMING + fixed_blocks
        if fixed > limit:
            raise ContextBudgetExceeded(
                f"System, tool schemas, required and task-state blocks need ~{fixed} tokens "
                f"but the input limit is {limit}: shorten the instructions or required "
                "blocks, offer fewer tools, or raise ContextPolicy.max_input_tokens",
                required_tokens=fixed,
                limit=limit,
                transforms=request.transforms,
            )
        kept = history_minimum(request.history)
        minimum = est.count_messages(kept)
        if len(kept) < len(request.history):
            minimum += SUMMARY_ROOM  # the rest will be summarised: room for the summary
        if fixed + minimum > limit:
            raise ContextBudgetExceeded(
                f"System, tool schemas, required and task-state blocks (~{fixed} tokens) "
                f"plus the newest user message and last tool results (~{minimum} tokens) "
                f"exceed the input limit of {limit}: shorten them, offer fewer tools, or "
                "raise ContextPolicy.max_input_tokens",
                required_tokens=fixed + minimum,
                limit=limit,
                transforms=request.transforms,
            )
        reserve = self._history_reserve(request, minimum)
        room = max(0, limit - fixed - reserve)
        overhead = 0 if fixed_blocks else BLOCKS_FRAMING
        if not optional or total + overhead <= room:
            used = total + overhead if optional else 0
            return request.replace(history_budget=limit - fixed - used)

        dropped, kept_tokens = self._drop(optional, est, total, overhead, room)
        gone = {id(b) for b in dropped}
        used = kept_tokens + overhead if len(dropped) < len(optional) else 0
        return request.replace(
            blocks=tuple(b for b in request.blocks if id(b) not in gone),
            history_budget=limit - fixed - used,
            transforms=request.transforms
            + tuple(f"omitted_for_budget:{b.source_id}" for b in dropped),
        )

    def _drop(
        self,
        optional: list[ContextBlock],
        est: TokenEstimator,
        total: int,
        overhead: int,
        room: int,
    ) -> tuple[list[ContextBlock], int]:
        """Return the prefix of the policy's order that must go, and the tokens of the rest."""
        order = self.selection.drop_order(optional)
        if type(self.selection) is not DefaultSelection and (
            len(order) != len(optional) or {id(b) for b in order} != {id(b) for b in optional}
        ):
            raise ConfigurationError(
                f"the selection policy {self.selection!r} must return each optional block "
                f"exactly once; it returned {len(order)} for {len(optional)} blocks"
            )
        count_block = est.count_block  # cached: a dictionary lookup per dropped block
        dropped: list[ContextBlock] = []
        remaining = total
        for block in order:
            if remaining + overhead <= room:
                break
            dropped.append(block)
            remaining -= count_block(block)
        if len(dropped) == len(order):
            remaining = 0  # nothing is left: no blocks message either
        return dropped, remaining

    def _history_reserve(self, request: ModelRequest, minimum: int) -> int:
        reserve = minimum
        if self.min_history_tokens > reserve:
            whole = history_tokens(request)
            reserve = max(reserve, min(self.min_history_tokens, whole))
        return reserve
