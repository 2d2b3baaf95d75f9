"""Tool-call pairing for the middleware that cut a history: the kernel's rule, re-exported.

The rule and its helpers live in `harness.presend.pairs` (the pre-send check of every request,
`harness.presend`, needs them in the kernel); this face keeps the middleware's imports.
"""

from __future__ import annotations

from harness.presend.pairs import (
    PairCheck,
    check_pairs,
    label,
    pairs_valid,
    repair_pairs,
    safe_cut,
    units,
)

__all__ = [
    "PairCheck",
    "check_pairs",
    "label",
    "pairs_valid",
    "repair_pairs",
    "safe_cut",
    "units",
]
