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
import threading
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


LEARN_MARGIN = 1.05
"""A learned factor stays at least this much above every reported ÷ estimated ratio seen."""
LEARN_STEP = 0.7
"""How far one observation lowers a learned factor toward its target (never below it)."""
LEARN_MAX = 4.0
"""The highest learned factor (a provider counting 4x our bound is a bug, not a tokenizer)."""
LEARN_KEYS = 1024
"""(model, api_base) pairs one process learns; the oldest is forgotten beyond."""


class LearnedRatio:
    """What one (model, api_base) reported against our raw estimates: the factor to count with.

    Starts at 1.0 (the raw estimate). Every observation lowers the factor by `LEARN_STEP`
    of the way toward ``worst × LEARN_MARGIN`` — ``worst`` the highest reported ÷ estimated
    ratio seen — never below it; a report above the calibrated estimate (a contradiction)
    raises it to that target at once. So the factor is never below any ratio observed.
    """

    __slots__ = ("factor", "observations", "worst")

    def __init__(self) -> None:
        self.factor = 1.0
        self.worst = 0.0
        self.observations = 0

    def observe(self, *, estimated: int, reported: int) -> float:
        """Fold in one request's raw estimate and reported prompt tokens; return the factor."""
        if estimated <= 0 or reported <= 0:
            return self.factor
        ratio = reported / estimated
        self.observations += 1
        if reported > estimated * self.factor:  # a contradiction: raise at once
            self.worst = ratio
            self.factor = min(LEARN_MAX, ratio * LEARN_MARGIN)
            return self.factor
        self.worst = max(self.worst, ratio)
        target = min(LEARN_MAX, self.worst * LEARN_MARGIN)
        self.factor = max(target, self.factor - LEARN_STEP * (self.factor - target))
        return self.factor


class LearnedRow:
    """One (model, api_base)'s learned ratio as a store keeps it (`harness.sessions`).

    ``observations`` is what this process adds since its last save (a store adds it up).
    """

    __slots__ = ("api_base", "factor", "model", "observations", "worst")

    def __init__(
        self, model: str, api_base: str, *, worst: float, factor: float, observations: int
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.worst = worst
        self.factor = factor
        self.observations = observations

    def __repr__(self) -> str:
        return (
            f"LearnedRow({self.model!r}, {self.api_base!r}, worst={self.worst}, "
            f"factor={self.factor}, observations={self.observations})"
        )


def merged_factor(a: float, b: float, worst: float) -> float:
    """Return the factor of two learned ratios merged: the lower, never under ``worst``.

    Each side's factor is at least its own worst ratio × `LEARN_MARGIN` (or 1.0, unlearned);
    the merged one is at least the worst ratio of both × `LEARN_MARGIN`, so no process's
    observation is ever under-counted by the factor another one learned.
    """
    return min(LEARN_MAX, max(min(a, b), worst * LEARN_MARGIN))


class UsageLearner:
    """Per (model, api_base), in process: the factor learned from the provider's usage.

    `harness.accounting.observe_usage` feeds it (the LiteLLM client, after every answer that
    reports usage, for models counted with ``bound:unknown``); `harness.accounting.
    counted_near_limit` counts such a model's requests with `factor_for` its model: the
    highest factor of any api_base serving that name, rounded up to 1/`STEPS`, so one
    estimator (and its running totals) serves while the factor stays put.
    """

    STEPS = 256

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, str], LearnedRatio] = {}
        self._held: dict[tuple[int, str, float], CalibratedEstimator] = {}
        self._lock = threading.Lock()
        self._unsaved: dict[tuple[str, str], int] = {}
        """Observations per key since `unsaved` last handed them to a store."""

    def observe(self, model: str, api_base: str | None, *, estimated: int, reported: int) -> float:
        """Fold in one answer's usage; return the (model, api_base)'s factor."""
        key = (model, api_base or "")
        with self._lock:
            ratio = self._ratios.get(key)
            if ratio is None:
                if len(self._ratios) >= LEARN_KEYS:
                    self._ratios.pop(next(iter(self._ratios)))
                ratio = self._ratios[key] = LearnedRatio()
            factor = ratio.observe(estimated=estimated, reported=reported)
            self._unsaved[key] = self._unsaved.get(key, 0) + 1
            return factor

    def unsaved(self) -> list[LearnedRow]:
        """Return (and forget) what was learned since the last call, for a store to keep."""
        with self._lock:
            keys, self._unsaved = self._unsaved, {}
            return [
                LearnedRow(m, b, worst=r.worst, factor=r.factor, observations=n)
                for (m, b), n in keys.items()
                if (r := self._ratios.get((m, b))) is not None
            ]

    def merge(self, rows: Iterable[LearnedRow]) -> None:
        """Take what a store kept (other processes' observations): never lowers a bound.

        The worst ratio becomes the higher of the two and the factor `merged_factor`.
        """
        with self._lock:
            for row in rows:
                if not (0.0 <= row.worst <= LEARN_MAX and 0.0 < row.factor <= LEARN_MAX):
                    continue  # not a ratio this code wrote: ignored, never trusted
                key = (row.model, row.api_base)
                ratio = self._ratios.get(key)
                if ratio is None:
                    if len(self._ratios) >= LEARN_KEYS:
                        self._ratios.pop(next(iter(self._ratios)))
                    ratio = self._ratios[key] = LearnedRatio()
                    ratio.factor = row.factor
                    ratio.worst = row.worst
                    ratio.observations = row.observations
                    continue
                worst = max(ratio.worst, row.worst)
                if ratio.observations == 0:
                    ratio.factor = max(row.factor, worst * LEARN_MARGIN)
                else:
                    ratio.factor = merged_factor(ratio.factor, row.factor, worst)
                ratio.worst = worst
                ratio.observations = max(ratio.observations, row.observations)

    def factor_for(self, model: str) -> float:
        """Return the highest learned factor of ``model`` on any api_base (1.0: none)."""
        factors = [r.factor for (m, _), r in list(self._ratios.items()) if m == model]
        if not factors:
            return 1.0
        return math.ceil(max(factors) * self.STEPS - 1e-9) / self.STEPS

    def estimator(self, base: TokenEstimator, model: str) -> CalibratedEstimator | None:
        """Return ``base`` corrected by ``model``'s learned factor, or ``None`` (none learned)."""
        factor = self.factor_for(model)
        if factor == 1.0:
            return None
        key = (id(base), model, factor)
        held = self._held.get(key)
        if held is None or held.base is not base:
            if len(self._held) >= LEARN_KEYS:
                self._held.clear()
            held = self._held[key] = CalibratedEstimator(base, factor)
        return held

    def forget(self) -> None:
        """Forget everything learned (tests, benchmarks)."""
        with self._lock:
            self._ratios.clear()
            self._held.clear()
            self._unsaved.clear()


LEARNED = UsageLearner()
"""The process's learned factors."""
