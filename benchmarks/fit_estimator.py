"""Fit the approximate estimator's per-byte weights, one tokenizer family at a time.

    python -m benchmarks.fit_estimator [--quick] [--family o200k ...] [--holdout NAME ...]

The model (`harness.tokens.Coefficients`): tokens ≈ fixed + Σ over the UTF-8 bytes of the
text (or of its sample, `harness.tokens.sample_text`) of a weight per byte value.

How it is fitted, in pure Python (numpy is not a dependency):

1. Every byte value belongs to a class (lower-case letter, digit, space, CJK lead byte …).
   A byte's weight is its class weight plus its own deviation; the deviations are pulled
   toward zero by a ridge penalty, so a byte seldom seen in the data gets its class's
   weight and the fit does not learn the quirks of one generator.
2. Weighted least squares on relative error: each text is weighted by 1/(tokens + 4)², the
   4 being the per-message framing, so short texts count as they do inside a message; each
   workload gets a fixed share of the total weight (real transcripts the largest).
3. The weights are rounded to the 0–63 table, and then everything is scaled by the
   smallest factor that makes the summed estimate of every guarded workload at least
   ``1 + MARGIN`` times the exact count: the estimator must not under-count.

``--holdout NAME`` leaves workloads out of the fit and reports them separately: the honest
check of how the model does on text it never saw (e.g. ``--holdout swe-agent-trajectories
zh-seeds``). The printed ``FAMILY_COEFFICIENTS`` block is what `harness/tokens.py` holds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from benchmarks.corpus import Workload, all_workloads, message_texts
from harness.tokens import (
    MESSAGE_OVERHEAD,
    ApproximateEstimator,
    Coefficients,
    ExactEstimator,
    exact_for_family,
    sample_text,
)

FAMILIES = ("o200k", "cl100k", "deepseek", "anthropic")
MAX_WEIGHT = 63
MARGIN = 0.025
"""Summed over each primary workload (the real data), the estimate must exceed the exact
count by at least this: unseen transcripts and documents differ from ours."""
OTHER_MARGIN = -0.01
"""… and over every other guarded workload by at least this (a pure corpus of one kind of
text may come out slightly under; a real mix of them does not)."""
PRIMARY = frozenset({"swe-agent-trajectories", "zh-seeds"})
RIDGE = 5.0
ERROR_EXPONENT = 1.5
"""Samples are weighted by 1/(tokens + framing)^this: 2 fits relative error per message,
lower values give long messages (which dominate a corpus's sum) more say."""
CEIL_OFFSET = 0.0
"""The estimator rounds up; the fit may aim this much below the exact count to make up
(0: keep the round-up as extra safety, it measured better on per-message error)."""
"""Penalty on a byte's deviation from its class weight (in units of weighted squared error)."""

WORKLOAD_WEIGHT = {
    "swe-agent-trajectories": 5.0,
    "zh-seeds": 5.0,
    "agent-session": 2.0,
    "stdlib-code": 1.5,
    "stdlib-prose": 1.5,
    "zh-prose": 0.5,
    "zh-code": 0.5,
}
"""Share of the fit each workload gets (1 when not listed). Real Chinese outweighs the
generated kind: how many tokens a Chinese character costs depends on how common its words
are, which a generator from a word list only approximates."""
UNGUARDED = frozenset({"other-scripts", "hexdump", "logs", "paths"})
"""Workloads reported but not used to set the conservative scale: single-format stress
tests (a whole corpus of hex dumps) that a per-byte model cannot get right without
over-counting everything else; in a real transcript they are a minority of messages."""


# ------------------------------------------------------------------- byte classes
def byte_class(byte: int) -> str:
    """Return the class of one byte value (see the module docstring)."""
    if byte >= 0xF0:
        return "lead4"
    if byte >= 0xE0:
        return {0xE2: "lead3-symbol", 0xE3: "lead3-cjk-punct", 0xEF: "lead3-fullwidth"}.get(
            byte, "lead3-cjk" if 0xE4 <= byte <= 0xE9 else "lead3-other"
        )
    if byte >= 0xC0:
        return "lead2-latin" if byte <= 0xC3 else "lead2"
    if byte >= 0x80:
        return "continuation"
    char = chr(byte)
    if char.islower():
        return "lower"
    if char.isupper():
        return "upper"
    if char.isdigit():
        return "digit"
    named = {" ": "space", "\n": "newline", "\t": "tab", "\r": "cr"}
    if char in named:
        return named[char]
    if byte < 0x20 or byte == 0x7F:
        return "control"
    return "punct"


CLASSES = sorted({byte_class(b) for b in range(256)})
CLASS_INDEX = {name: i for i, name in enumerate(CLASSES)}
OWN_WEIGHT = [b for b in range(256) if 0x21 <= b <= 0x7E]
"""Bytes with their own deviation from the class weight: printable ASCII."""
OWN_INDEX = {b: len(CLASSES) + i for i, b in enumerate(OWN_WEIGHT)}
FIXED_INDEX = len(CLASSES) + len(OWN_WEIGHT)
N_PARAMS = FIXED_INDEX + 1
CLASS_PRIOR_RIDGE = 0.05
"""A light pull of every class weight toward 0.3 tokens/byte, for classes the data lacks."""


def byte_counts(text: str) -> dict[int, float]:
    """Return how often each byte value occurs in ``text`` as the estimator reads it
    (its sample, scaled back to the whole text)."""
    sample, scale = sample_text(text)
    return {b: n * scale for b, n in Counter(sample.encode("utf-8", "surrogatepass")).items()}


def features_of(counts: dict[int, float]) -> dict[int, float]:
    """Return the sparse feature vector (class counts, own-byte counts, 1) of byte counts."""
    features: dict[int, float] = {FIXED_INDEX: 1.0}
    for byte, value in counts.items():
        cls = CLASS_INDEX[byte_class(byte)]
        features[cls] = features.get(cls, 0.0) + value
        own = OWN_INDEX.get(byte)
        if own is not None:
            features[own] = value
    return features


# ---------------------------------------------------------------------- the data
@dataclass
class Sample:
    """One text: its workload, message index, features and exact counts per family."""

    workload: str
    message: int
    counts: dict[int, float]
    features: dict[int, float]
    exact: dict[str, int]


def build_samples(workloads: Sequence[Workload], exact: dict[str, ExactEstimator]) -> list[Sample]:
    """Return a `Sample` per text of every message of ``workloads``."""
    out = []
    for workload in workloads:
        for index, message in enumerate(workload.messages):
            for text in message_texts(message):
                exact_counts = {family: est.count(text) for family, est in exact.items()}
                counts = byte_counts(text)
                out.append(Sample(workload.name, index, counts, features_of(counts), exact_counts))
    return out


# ------------------------------------------------------------------- the solver
def solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Solve ``matrix · x = vector`` by Gaussian elimination with partial pivoting."""
    n = len(vector)
    rows = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        if abs(lead) < 1e-12:
            continue
        pivot_row = rows[col]
        for r in range(col + 1, n):
            factor = rows[r][col] / lead
            if factor:
                row = rows[r]
                for c in range(col, n + 1):
                    row[c] -= factor * pivot_row[c]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        row = rows[i]
        acc = row[n] - sum(row[j] * x[j] for j in range(i + 1, n))
        x[i] = acc / row[i] if abs(row[i]) > 1e-12 else 0.0
    return x


def sample_weights(samples: Sequence[Sample], family: str) -> list[float]:
    """Return the least-squares weight of each sample: relative error, workload shares."""
    per_workload = Counter(s.workload for s in samples)
    total_share = sum(WORKLOAD_WEIGHT.get(name, 1.0) for name in per_workload)
    return [
        WORKLOAD_WEIGHT.get(s.workload, 1.0)
        / total_share
        / per_workload[s.workload]
        / (s.exact[family] + MESSAGE_OVERHEAD) ** ERROR_EXPONENT
        for s in samples
    ]


def normal_equations(
    rows: Iterable[tuple[dict[int, float], float, float]], size: int
) -> tuple[list[list[float]], list[float]]:
    """Return XᵀWX and XᵀWy for sparse rows of (features, target, weight)."""
    normal = [[0.0] * size for _ in range(size)]
    rhs = [0.0] * size
    for features, y, weight in rows:
        items = list(features.items())
        for i, xi in items:
            wxi = weight * xi
            rhs[i] += wxi * y
            row = normal[i]
            for j, xj in items:
                row[j] += wxi * xj
    return normal, rhs


def fit_weights(samples: Sequence[Sample], family: str, ridge: float = RIDGE) -> list[float]:
    """Return continuous per-byte weights (256) followed by the fixed term."""
    weights = sample_weights(samples, family)
    normal, rhs = normal_equations(
        ((s.features, s.exact[family], w) for s, w in zip(samples, weights, strict=True)),
        N_PARAMS,
    )
    scale = sum(normal[i][i] for i in range(N_PARAMS)) / N_PARAMS
    for i in range(len(CLASSES)):
        normal[i][i] += CLASS_PRIOR_RIDGE * scale * 1e-3
        rhs[i] += CLASS_PRIOR_RIDGE * scale * 1e-3 * 0.3
    for i in OWN_INDEX.values():
        normal[i][i] += ridge * scale * 1e-3
    params = solve(normal, rhs)
    weights = []
    for byte in range(256):
        value = params[CLASS_INDEX[byte_class(byte)]]
        own = OWN_INDEX.get(byte)
        if own is not None:
            value += params[own]
        weights.append(value)
    return [*weights, params[FIXED_INDEX]]


WEIGHT_RANGE = (-0.2, 1.3)
"""Tokens per byte a weight is clipped to before rounding (keeps the 64 steps fine)."""


def quantize(weights: Sequence[float], samples: Sequence[Sample], family: str) -> Coefficients:
    """Round continuous weights (256 + fixed) to a 0–63 table, then refit unit/base/fixed.

    Rounding moves each byte's weight by up to half a step; refitting the three continuous
    terms on the rounded table takes back the part of that error that does not cancel.
    """
    per_byte = [min(WEIGHT_RANGE[1], max(WEIGHT_RANGE[0], w)) for w in weights[:256]]
    low, high = min(per_byte), max(per_byte)
    unit = (high - low) / MAX_WEIGHT
    table = bytes(round((w - low) / unit) for w in per_byte)
    rows = (
        (
            {
                0: sum(table[b] * n for b, n in s.counts.items()),
                1: sum(s.counts.values()),
                2: 1.0,
            },
            s.exact[family],
            w,
        )
        for s, w in zip(samples, sample_weights(samples, family), strict=True)
    )
    normal, rhs = normal_equations(rows, 3)
    unit, base, fixed = solve(normal, rhs)
    return Coefficients(table=table.hex(), unit=unit, base=base, fixed=fixed - CEIL_OFFSET)


def scaled(coefficients: Coefficients, factor: float) -> Coefficients:
    """Return ``coefficients`` with every term multiplied by ``factor``."""
    return Coefficients(
        table=coefficients.table,
        unit=coefficients.unit * factor,
        base=coefficients.base * factor,
        fixed=coefficients.fixed * factor,
    )


# ------------------------------------------------------------------- evaluation
@dataclass
class Errors:
    """Per-message error statistics of one workload, in percent."""

    median: float
    p95: float
    sum_error: float


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def message_errors(
    workload: Workload, approx: ApproximateEstimator, exact: ExactEstimator
) -> Errors:
    """Return per-message errors of ``approx`` against ``exact`` (framing included)."""
    errors = []
    total_est = total_exact = 0
    for message in workload.messages:
        est = approx.count_message(message)
        ex = exact.count_message(message)
        total_est += est
        total_exact += ex
        errors.append(abs(est - ex) / ex * 100)
    return Errors(
        statistics.median(errors),
        percentile(errors, 0.95),
        (total_est - total_exact) / total_exact * 100,
    )


def fit_family(
    family: str,
    train: Sequence[Workload],
    samples: Sequence[Sample],
    exact: ExactEstimator,
) -> tuple[Coefficients, float]:
    """Fit, quantize and scale one family; return the coefficients and the scale factor."""
    raw = quantize(fit_weights(samples, family), samples, family)
    factor = 0.0
    for workload in train:
        if workload.name in UNGUARDED:
            continue
        approx = ApproximateEstimator(family, raw)
        est = sum(approx.count_message(m) for m in workload.messages)
        ex = sum(exact.count_message(m) for m in workload.messages)
        margin = MARGIN if workload.name in PRIMARY else OTHER_MARGIN
        factor = max(factor, (1 + margin) * ex / est)
    return scaled(raw, factor), factor


def format_coefficients(results: dict[str, Coefficients]) -> str:
    """Return the ``FAMILY_COEFFICIENTS`` block for `harness/tokens.py`."""
    lines = [
        "# Fitted by benchmarks/fit_estimator.py (python -m benchmarks.fit_estimator); the",
        "# data and the per-workload errors are in its output.",
        "FAMILY_COEFFICIENTS: dict[str, Coefficients] = {",
    ]
    for family, c in results.items():
        lines.append(f'    "{family}": Coefficients(')
        lines.append("        table=(")
        for i in range(0, 512, 64):
            lines.append(f'            "{c.table[i : i + 64]}"')
        lines.append("        ),")
        lines.append(f"        unit={c.unit:.6f},")
        lines.append(f"        base={c.base:.6f},")
        lines.append(f"        fixed={c.fixed:.4f},")
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer synthetic messages")
    parser.add_argument("--family", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--holdout", nargs="*", default=[], help="workloads left out of the fit")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    workloads = all_workloads(quick=args.quick, seed=0)
    train = [w for w in workloads if w.name not in args.holdout]
    held = [w for w in workloads if w.name in args.holdout]
    print("fit data:", ", ".join(f"{w.name} ({w.source}, {len(w.messages)} msgs)" for w in train))
    if held:
        print("held out:", ", ".join(w.name for w in held))
    exact = {family: exact_for_family(family) for family in args.family}
    samples = build_samples(train, exact)
    results: dict[str, Coefficients] = {}
    for family in args.family:
        coefficients, factor = fit_family(family, train, samples, exact[family])
        results[family] = coefficients
        approx = ApproximateEstimator(family, coefficients)
        print(f"\n{family}: conservative scale ×{factor:.4f}")
        print(f"  {'workload':24s} {'median%':>8s} {'p95%':>7s} {'sum%':>7s}")
        for workload in workloads:
            e = message_errors(workload, approx, exact[family])
            mark = " (held out)" if workload in held else ""
            print(f"  {workload.name:24s} {e.median:8.1f} {e.p95:7.1f} {e.sum_error:+7.1f}{mark}")
    print()
    print(format_coefficients(results))
    print(f"\n# {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
