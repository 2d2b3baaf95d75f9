"""Calibration from provider usage: correct our estimates with what the provider counted.

With ``ContextPolicy(calibrate=True)`` the agent compares every response's reported prompt
tokens with the raw estimate of the request that produced it and moves a per-model
correction factor toward that ratio (exponential smoothing, bounded), kept in the session
state. The next requests are counted with `CalibratedEstimator`, and the manifest shows
the factor in use. Under-counting causes overflows; the bounds keep one odd response
(a cached prompt, a provider bug) from wrecking the budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from harness.blocks import ContextBlock
from harness.messages import Message, ToolSchema
from harness.tokens import TokenEstimator

MIN_FACTOR = 0.7
"""The lowest correction: we never trust a provider to count less than 70% of our estimate."""
MAX_FACTOR = 2.0
"""The highest correction."""
SMOOTHING = 0.5
"""How far one observation moves the factor toward the observed ratio."""


def updated_factor(
    factor: float, *, estimated: int, reported: int, smoothing: float = SMOOTHING
) -> float:
    """Return the correction factor after one observation.

    Args:
        factor: the factor in use for the request.
        estimated: the raw (uncorrected) estimate of the request's input tokens.
        reported: the prompt tokens the provider reported.
        smoothing: the weight of the new observation (0 < smoothing ≤ 1).
    """
    if estimated <= 0 or reported <= 0:
        return factor
    observed = reported / estimated
    moved = factor + smoothing * (observed - factor)
    return min(MAX_FACTOR, max(MIN_FACTOR, moved))


class CalibratedEstimator:
    """An estimator whose counts are another's multiplied by a correction factor."""

    def __init__(self, base: TokenEstimator, factor: float) -> None:
        self.base = base
        self.factor = factor
        self.method = f"{base.method}*calibrated"
        self.exact = False
        base_floor = getattr(base, "floor", 1.0)
        self.floor = min(1.0, base_floor * factor)
        """The bound of a calibrated count against the exact one (the base's, scaled)."""
        exact = None if base.exact else getattr(base, "exact_counter", None)
        # Near the limit the exact count is used, never corrected below it: a provider that
        # counts more than the tokenizer (factor > 1) still gets the larger number.
        self.exact_counter: TokenEstimator | None = (
            CalibratedExact(exact, factor) if exact is not None and factor > 1.0 else exact
        )

    def _scale(self, tokens: int) -> int:
        return math.ceil(tokens * self.factor)

    def count(self, text: str) -> int:
        """Return the corrected count of ``text``."""
        return self._scale(self.base.count(text))

    def count_message(self, message: Message) -> int:
        """Return the corrected count of one message (the base's cache is reused)."""
        return self._scale(self.base.count_message(message))

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Return the corrected total of ``messages``."""
        return sum(self.count_message(m) for m in messages)

    def count_tools(self, tools: Iterable[ToolSchema]) -> int:
        """Return the corrected cost of the tool schemas."""
        return self._scale(self.base.count_tools(tools))

    def count_block(self, block: ContextBlock) -> int:
        """Return the corrected count of one block."""
        return self._scale(self.base.count_block(block))


class CalibratedExact(CalibratedEstimator):
    """An exact count raised by a calibration factor ≥ 1: near the limit, the last word."""

    def __init__(self, base: TokenEstimator, factor: float) -> None:
        super().__init__(base, factor)
        self.floor = 1.0
        self.exact_counter = None
