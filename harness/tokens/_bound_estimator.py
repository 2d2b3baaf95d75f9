"""The conservative bound for models whose tokenizer is not shipped offline.

**Bound** (`BoundEstimator`, ``bound:unknown``): for models with no offline tokenizer
(Gemini, Llama, Mistral, Qwen …). Each weight is the largest of the four families' weights
and the result is divided by the smallest floor, so its count is at least every known
family's approximate count ÷ its floor, hence at least every known family's exact count.
It counts text as dense when any family would (its dense weights are the largest of every
family's dense and main weights), and an ideograph as rare when any family's is.
"""

from __future__ import annotations

import math
from functools import cache

import msgspec

from harness.tokens._approximate import ApproximateEstimator
from harness.tokens._estimator import TokenEstimator
from harness.tokens._exact_tokens import FAMILIES
from harness.tokens._fitted_coefficients import FAMILY_COEFFICIENTS, FAMILY_FLOOR
from harness.tokens._weights import _MAX_WEIGHT, Coefficients, _common_cjk


class BoundEstimator(ApproximateEstimator):
    """A conservative bound for models whose tokenizer is not shipped offline.

    Each weight is the largest of the known families' weights and the sum is divided by the
    smallest family floor, so the count is at least every known family's exact count (on
    the evaluation set, and by construction wherever the families' floors hold). Its own
    ``floor`` is 1.0 relative to those families; the unknown tokenizer itself cannot be
    measured, which is why the manifest names the method ``bound:unknown``.
    """

    def __init__(self) -> None:
        super().__init__("o200k", bound_coefficients(), floor=1.0)
        self.family = "unknown"
        self.method = "bound:unknown"
        self.images = "bound"
        if type(self) is BoundEstimator:
            self._share(self.method)

    @property
    def exact_counter(self) -> TokenEstimator | None:
        """``None``: no exact tokenizer is known for these models."""
        return None


@cache
def bound_coefficients() -> Coefficients:
    """Return the bound's coefficients: the largest weight of any family, ÷ the least floor.

    Per-character weights are the maximum over families (so every character costs at least
    what any family charges it), run costs the maximum too, and everything is divided by the
    smallest `FAMILY_FLOOR`.
    """
    families = [FAMILY_COEFFICIENTS[f] for f in FAMILIES]
    scale = 1.0 / min(FAMILY_FLOOR[f] for f in FAMILIES)
    unit = max(c.unit for c in families)
    page_unit = max(c.page_unit for c in families)
    low = [max(c.weights[b] * c.unit for c in families) for b in range(256)]
    high = [max(bytes.fromhex(c.pages)[b] * c.page_unit for c in families) for b in range(256)]
    runs: dict[str, tuple[float, float]] = {}
    for c in families:
        for char, alone, long_run in c.runs:
            old = runs.get(char, (0.0, 0.0))
            runs[char] = (max(old[0], alone), max(old[1], long_run))
    # Rare for the bound is rare for any family (a family without a set uses GB2312).
    singles = [c.cjk_single for c in families]
    bound = Coefficients(
        cjk_single=_common_cjk(singles) if all(singles) else "",
        table=bytes(min(_MAX_WEIGHT, math.ceil(w / unit - 1e-9)) for w in low).hex(),
        unit=unit * scale,
        pages=bytes(min(_MAX_WEIGHT, math.ceil(w / page_unit - 1e-9)) for w in high).hex(),
        page_unit=page_unit * scale,
        rare_cjk=max(c.rare_cjk for c in families) * scale,
        fixed=max(c.fixed for c in families) * scale,
        runs=tuple((ch, a * scale, b * scale) for ch, (a, b) in runs.items()),
    )
    gates = [c.dense_gate for c in families if c.dense_unit]
    if not gates:
        return bound
    # Dense when any family is dense: the bound's table sum is at least each family's ÷ the
    # least floor. Then every character costs the most any family charges it, dense or not.
    dense = [
        max(max(c.weights[b] * c.unit, bytes.fromhex(c.dense)[b] * c.dense_unit) for c in families)
        for b in range(256)
    ]
    dense_unit = max(max(dense), 1e-9) / _MAX_WEIGHT
    return msgspec.structs.replace(
        bound,
        dense=bytes(min(_MAX_WEIGHT, math.ceil(w / dense_unit - 1e-9)) for w in dense).hex(),
        dense_unit=dense_unit * scale,
        dense_gate=min(gates) * scale,
        dense_case=max(c.dense_case for c in families) * scale,
        dense_digit=max(c.dense_digit for c in families) * scale,
        dense_symbol=max(c.dense_symbol for c in families) * scale,
    )
