"""ContextPressure (opt-in): tell the model how full its context window is.

Where it sits: with the other context sources, before BudgetFit (it adds one runtime block,
which BudgetFit may drop like any optional block). Before every request it estimates the
request as it arrives — System, tools, the history before this round's compaction, the blocks
— and adds a short ``context_pressure`` block: how many of the input limit's tokens are in
use and at what share older turns get summarised, so the model can keep notes of what it
still needs before that happens (as Codex' token-budget guidance and AgentScope's buffer
notice do). Off unless added to the stack: every request then carries a few more tokens, in
the runtime part after the history, so the cached prefix is not broken.
"""

from __future__ import annotations

from typing import ClassVar, Final

from harness.accounting import estimate_request
from harness.blocks import ContextBlock
from harness.errors import ConfigurationError
from harness.policy import DEFAULT_INPUT_TOKENS
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler

BLOCK_ID: Final = "context_pressure"
"""The id of the block it adds."""
DEFAULT_COMPACT_AT: Final = 0.75
"""The share it names as the compaction point: Compaction's default trigger."""


class ContextPressure:
    """Add a runtime block saying how much of the window is used and when compaction comes.

    Args:
        compact_at: the share of the input limit at which the stack compacts (set it to
            your Compaction's ``trigger`` when you changed that), or ``None`` to say nothing
            about compaction.
        priority: the block's priority for BudgetFit (it is never required).

    Raises:
        ConfigurationError: when ``compact_at`` is not a fraction in (0, 1].
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.ADDS_CONTEXT})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(self, *, compact_at: float | None = DEFAULT_COMPACT_AT, priority: int = 0) -> None:
        if compact_at is not None and (
            isinstance(compact_at, bool)
            or not isinstance(compact_at, int | float)
            or not 0.0 < compact_at <= 1.0
        ):
            raise ConfigurationError(
                f"compact_at must be a fraction of the input limit in (0, 1] or None, "
                f"got {compact_at!r}"
            )
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ConfigurationError(f"priority must be an int, got {priority!r}")
        self.compact_at = compact_at
        self.priority = priority

    def __repr__(self) -> str:
        return f"ContextPressure(compact_at={self.compact_at!r}, priority={self.priority})"

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Add the block and pass the request on."""
        if request.ids.purpose != "agent":
            return await call_next(request)
        limit = request.input_limit if request.input_limit > 0 else DEFAULT_INPUT_TOKENS
        used = estimate_request(request)
        text = pressure_text(used, limit, self.compact_at)
        block = ContextBlock.runtime(BLOCK_ID, text, priority=self.priority, category="pressure")
        return await call_next(request.replace(blocks=(*request.blocks, block)))


def pressure_text(used: int, limit: int, compact_at: float | None) -> str:
    """Return the block's text for ``used`` of ``limit`` input tokens."""
    share = used / limit if limit > 0 else 0.0
    text = f"Context window: about {used:,} of {limit:,} input tokens in use ({share:.0%})."
    if compact_at is None:
        return text
    if share >= compact_at:
        return (
            f"{text} Older turns are being summarised now (at {compact_at:.0%}); the full "
            "record stays in the session log."
        )
    return (
        f"{text} Older turns will be summarised at about {compact_at:.0%}; note anything "
        "from them you will still need."
    )
