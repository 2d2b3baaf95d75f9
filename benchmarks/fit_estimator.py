"""Fit the approximate estimator per tokenizer family, and report it on data it never saw.

    python -m benchmarks.fit_estimator [--quick] [--no-shared] [--write]

The model is `harness.tokens.Coefficients`: non-negative weights per UTF-16 low byte (the
character, for ASCII and Latin-1), per page (the script), per rare CJK ideograph, plus run
costs for runs of one character. Run costs are not fitted: they are measured directly with
the exact tokenizer (a run of `RUN_BLOCK` characters, and a very long one). Everything else is fitted, in pure
Python (numpy is not a dependency):

1. Each low byte belongs to a class (vowel, consonant, upper, digit, space, newline …) and
   printable ASCII bytes deviate from their class under a ridge penalty; each page belongs
   to a script group. Pages no training text uses get `UNSEEN_PAGE` tokens per character,
   the byte-level worst case.
2. Weighted least squares on relative error (texts weighted by 1/(tokens + 4)^1.5, every
   workload a fixed share); negative weights are clipped to 0 and the tables rounded to
   their 0–31 steps.
3. Conservative steps: the whole model is scaled so that every real workload's sum is at
   least ``1 + MARGIN`` times exact and every other one at least ``1 + OTHER_MARGIN``; a
   script group whose classes still come out under is raised until they do not.
4. Dense ASCII text (`DENSE_GATE`) gets its own table, fitted the same way on the texts the
   main table calls dense, with three transition terms (`harness.tokens.dense_features`);
   every workload has the same share there. The rare-CJK term counts the ideographs the
   family's tokenizer does not encode as one token (`cjk_single`, measured, not fitted).

**Data.** Real transcripts and Chinese documents from ``../shared`` when present (the output
says which workloads were used), CPython's own code and prose, the generated corpora of
`benchmarks.corpus`, and the wide evaluation set of `benchmarks.textgen` (every script and
encoding). **Out-of-sample.** The wide set is regenerated with another seed (texts never
fitted); and for each corpus family (real, stdlib, synthetic, wide) the model is refitted
without it and reported on it (leave one family out). ``FAMILY_FLOOR`` is the lowest
per-class summed ratio seen out-of-sample — the shipped fit on the regenerated wide set, and
the refits on the real, stdlib and synthetic families they left out — minus `FLOOR_MARGIN`,
rounded down to 0.05. The lowest ratio of a single text (of at least `SINGLE_TEXT_TOKENS`
tokens) is printed too: one text of a short unit repeated can go far lower. (Leaving the whole wide set out leaves most scripts with no data at
all; that row is printed to show why the wide set is needed, but it does not describe the
shipped fit, which has seen every script.)
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from benchmarks.corpus import Workload, all_workloads, message_texts
from benchmarks.textgen import WIDE_CLASSES, wide_workloads
from benchmarks.trajectories import SHARED
from harness.tokens import (
    FAMILIES,
    RUN_BLOCK,
    RUN_CHARS,
    RUN_LONG,
    RUN_MIN_TEXT,
    ApproximateEstimator,
    Coefficients,
    ExactEstimator,
    dense_features,
    exact_for_family,
    pack_cjk,
    rare_cjk_count,
)

MAX_WEIGHT = 31
MARGIN = 0.03
"""Each real workload's estimated sum must exceed its exact sum by at least this share."""
OTHER_MARGIN = 0.04
"""… and every other guarded workload's sum by at least this share: with 0, a fit without
real data (leave one family out) under-counted real transcripts by 2–3 % (DeepSeek,
Anthropic); 0.04 keeps every family's sum over."""
CLASS_TARGET = 1.0
"""A script group is raised until each class it dominates reaches this summed ratio."""
UNSEEN_PAGE = 3.0
"""Tokens per code unit of a page no training text uses (3 UTF-8 bytes, one token each)."""
FLOOR_MARGIN = 0.05
DENSE_GATE = 0.36
"""Tokens per character (by the main table) from which an ASCII text is *dense* and is
counted with its own table: base64, hex, hashes, numbers and random ASCII are all above it,
prose, code and 97 % of real agent messages below (0 turns the dense table off)."""
MIN_ANY = 0.02
"""The least a character may cost: a zero weight would let a long text of it count as nothing."""
MIN_LOW = {"control": 0.5, "cr": 0.25}
"""Higher minimums for characters the data has few of and tokenizers seldom merge."""
RIDGE = 10.0
"""Pull of each weight toward its prior, in thousandths of its own information."""
ERROR_EXPONENT = 1.5
PRIMARY = frozenset({"swe-agent-trajectories", "zh-seeds"})
GUARDED = frozenset(
    {*PRIMARY, "stdlib-code", "stdlib-prose", "agent-session", "prose-en", "code-py", "zh-prose"}
)
"""Mixed, realistic workloads that set the global scale. The single-format classes (base64,
random ASCII, one script …) do not: a per-character model cannot price every one of them
without over-counting everything else. Scripts are raised per page group instead; the rest
are reported and set the floor."""
NOT_RAISED = frozenset({"cjk-common", "cjk-random"})
"""Random Chinese characters cost more than Chinese words; raising the CJK pages for them
would over-count real Chinese (the rare-ideograph term covers the rarest)."""
WORKLOAD_WEIGHT = {
    "swe-agent-trajectories": 20.0,
    "zh-seeds": 10.0,
    "agent-session": 4.0,
    "stdlib-code": 3.0,
    "stdlib-prose": 3.0,
}
"""Share of the fit each workload gets (1 when not listed, 0.5 for the wide set)."""

WIDE_NAMES = frozenset(WIDE_CLASSES)
PAGE_GROUPS: dict[str, range | tuple[int, ...]] = {
    "latin-ext": range(0x01, 0x03),
    "greek": (0x03, 0x1F),
    "cyrillic": (0x04,),
    "hebrew-armenian": (0x05,),
    "arabic": range(0x06, 0x09),
    "indic": range(0x09, 0x0E),
    "thai-lao": (0x0E,),
    "other-bmp-scripts": (*range(0x0F, 0x1E), *range(0xA0, 0xAC)),
    "latin-ext-additional": (0x1E,),
    "punctuation": (0x20,),
    "symbols": range(0x21, 0x30),
    "cjk-punct-kana": range(0x30, 0x34),
    "cjk-ext-a": range(0x34, 0x4E),
    "cjk": range(0x4E, 0xA0),
    "hangul": range(0xAC, 0xD8),
    "surrogates": range(0xD8, 0xE0),
    "private-use": range(0xE0, 0xF9),
    "cjk-compat": range(0xF9, 0xFB),
    "presentation-forms": range(0xFB, 0xFF),
    "fullwidth": (0xFF,),
}
PAGE_GROUP = {page: name for name, pages in PAGE_GROUPS.items() for page in pages}


def low_class(byte: int) -> str:
    """Return the class of a UTF-16 low byte (the character itself for ASCII and Latin-1)."""
    if byte >= 0xC0:
        return "latin1-letter"
    if byte >= 0x80:
        return "latin1-symbol"
    char = chr(byte)
    named = {" ": "space", "\n": "newline", "\t": "tab", "\r": "cr"}
    if char in named:
        return named[char]
    if byte < 0x20 or byte == 0x7F:
        return "control"
    if char.isdigit():
        return "digit"
    if char.isupper():
        return "upper"
    if char.islower():
        return "vowel" if char in "aeiou" else "consonant"
    return "punct"


LOW_CLASSES = sorted({low_class(b) for b in range(256)})
OWN = [b for b in range(0x21, 0x7F)]
GROUPS = list(PAGE_GROUPS)
INDEX: dict[tuple[str, object], int] = {}
for _name in LOW_CLASSES:
    INDEX["class", _name] = len(INDEX)
for _byte in OWN:
    INDEX["own", _byte] = len(INDEX)
for _group in GROUPS:
    INDEX["page", _group] = len(INDEX)
INDEX["rare", None] = len(INDEX)
INDEX["fixed", None] = len(INDEX)
INDEX["case", None] = len(INDEX)
INDEX["digit", None] = len(INDEX)
INDEX["symbol", None] = len(INDEX)
N_PARAMS = len(INDEX)
CLASS_OF = [INDEX["class", low_class(b)] for b in range(256)]
OWN_OF = {b: INDEX["own", b] for b in OWN}


# ---------------------------------------------------------------------- run costs
RunCosts = tuple[tuple[str, float, float], ...]


def measure_runs(exact: ExactEstimator) -> RunCosts:
    """Return (char, tokens of 8, tokens per 64 in a long run) for each `RUN_CHARS` char."""
    return tuple(
        (char, float(exact.count(char * RUN_BLOCK)), exact.count(char * RUN_LONG * 100) / 100)
        for char in RUN_CHARS
    )


# ---------------------------------------------------------------------- samples
@dataclass
class Sample:
    """One text's features (its run blocks taken out) and exact counts per family."""

    workload: str
    low: Counter[int]
    pages: Counter[int]
    rare: dict[str, int]
    """Rare CJK ideographs per family (see `harness.tokens.rare_cjk_count`)."""
    exact: dict[str, int]
    run_tokens: dict[str, float] = field(default_factory=dict)
    """What the run blocks cost per family (subtracted from the target)."""
    whole: Counter[int] | None = None
    """For an ASCII text, its bytes before the run blocks were taken out (the dense gate)."""
    case: int = 0
    """For an ASCII text, lowercase letters followed by an uppercase one (`dense_features`)."""
    digit: int = 0
    """… letters followed by a digit …"""
    symbol: int = 0
    """… and symbols followed by a letter."""


def cjk_single(exact: ExactEstimator) -> str:
    """Return the packed set of ideographs U+4E00–9FFF that ``exact`` encodes as one token."""
    return pack_cjk(chr(c) for c in range(0x4E00, 0xA000) if exact.count(chr(c)) == 1)


def make_sample(
    workload: str,
    text: str,
    exact: dict[str, ExactEstimator],
    runs: dict[str, RunCosts],
    singles: dict[str, str],
) -> Sample:
    """Return the `Sample` of one text."""
    data = text.encode("utf-16-le", "surrogatepass")
    low = Counter(data[0::2])
    whole = Counter(low) if text.isascii() else None
    pages = Counter(data[1::2])
    pages.pop(0, None)
    run_tokens = dict.fromkeys(exact, 0.0)
    if len(text) >= RUN_MIN_TEXT:
        for family in exact:
            per_long = RUN_LONG // RUN_BLOCK
            for char, alone, long_run in runs[family]:
                blocks = text.count(char * RUN_BLOCK)
                if not blocks:
                    continue
                longs = text.count(char * RUN_LONG) if blocks >= per_long else 0
                run_tokens[family] += blocks * alone - longs * (per_long * alone - long_run)
        for char in RUN_CHARS:
            blocks = text.count(char * RUN_BLOCK)
            if blocks:
                unit = char.encode("utf-16-le")
                low[unit[0]] -= RUN_BLOCK * blocks
                if unit[1]:
                    pages[unit[1]] -= RUN_BLOCK * blocks
    rare = {f: rare_cjk_count(text, singles[f]) for f in exact}
    case, digit, symbol = dense_features(text) if whole is not None else (0, 0, 0)
    return Sample(
        workload,
        low,
        pages,
        rare,
        {f: e.count(text) for f, e in exact.items()},
        run_tokens,
        whole,
        case,
        digit,
        symbol,
    )


def samples_of(
    workloads: Sequence[Workload],
    exact: dict[str, ExactEstimator],
    runs: dict[str, RunCosts],
    singles: dict[str, str],
) -> list[Sample]:
    """Return a `Sample` per text of every message of ``workloads``."""
    return [
        make_sample(w.name, text, exact, runs, singles)
        for w in workloads
        for message in w.messages
        for text in message_texts(message)
    ]


def features(sample: Sample, family: str, *, transitions: bool = False) -> list[tuple[int, float]]:
    """Return the sparse feature vector of a sample (with ``transitions``: the dense model's)."""
    dense: dict[int, float] = {INDEX["fixed", None]: 1.0}
    if transitions:
        dense[INDEX["case", None]] = float(sample.case)
        dense[INDEX["digit", None]] = float(sample.digit)
        dense[INDEX["symbol", None]] = float(sample.symbol)
    for byte, n in sample.low.items():
        if n:
            index = OWN_OF.get(byte, CLASS_OF[byte])
            dense[index] = dense.get(index, 0.0) + n
    for page, n in sample.pages.items():
        if n:
            index = INDEX["page", PAGE_GROUP.get(page, "other-bmp-scripts")]
            dense[index] = dense.get(index, 0.0) + n
    if sample.rare[family]:
        dense[INDEX["rare", None]] = float(sample.rare[family])
    return list(dense.items())


# ---------------------------------------------------------------------- the fit
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


def nonnegative_solve(
    matrix: list[list[float]], vector: list[float], sweeps: int = 400
) -> list[float]:
    """Minimise ``xᵀAx/2 − bᵀx`` over ``x ≥ 0`` by coordinate descent (A = ``matrix``)."""
    n = len(vector)
    x = [0.0] * n
    gradient = [-v for v in vector]  # A x − b at x = 0
    for _ in range(sweeps):
        moved = 0.0
        for i in range(n):
            diagonal = matrix[i][i]
            if diagonal <= 0:
                continue
            new = max(0.0, x[i] - gradient[i] / diagonal)
            step = new - x[i]
            if step:
                x[i] = new
                column = matrix[i]
                for j in range(n):
                    gradient[j] += column[j] * step
                moved = max(moved, abs(step))
        if moved < 1e-7:
            break
    return x


@dataclass
class Normal:
    """One workload's share of the normal equations (XᵀWX and XᵀWy, per family)."""

    matrix: dict[str, list[list[float]]]
    rhs: dict[str, list[float]]
    pages_seen: set[str]


def normal_of(
    samples: Sequence[Sample], families: Sequence[str], *, transitions: bool = False
) -> Normal:
    """Return the normal equations of one workload's samples (each workload sums to 1).

    The rare-CJK feature depends on the family's tokenizer, so each family has its matrix.
    """
    matrix = {f: [[0.0] * N_PARAMS for _ in range(N_PARAMS)] for f in families}
    rhs = {f: [0.0] * N_PARAMS for f in families}
    seen: set[str] = set()
    for sample in samples:
        scale = sample.exact["o200k"] if "o200k" in sample.exact else sample.exact[families[0]]
        weight = 1.0 / len(samples) / (scale + 4) ** ERROR_EXPONENT
        for f in families:
            items = features(sample, f, transitions=transitions)
            rows = matrix[f]
            for i, xi in items:
                wxi = weight * xi
                row = rows[i]
                for j, xj in items:
                    row[j] += wxi * xj
            target = sample.exact[f] - sample.run_tokens[f]
            vector = rhs[f]
            for i, xi in items:
                vector[i] += weight * xi * target
        seen.update(
            PAGE_GROUP.get(p, "other-bmp-scripts") for p, n in sample.pages.items() if n > 0
        )
    return Normal(matrix, rhs, seen)


def fit(
    normals: dict[str, Normal], family: str, runs: RunCosts, *, dense: bool = False
) -> Coefficients:
    """Return clipped, quantized (not yet conservative) coefficients from workload normals.

    With ``dense`` (the dense table) every workload gets the same share (see
    `WORKLOAD_WEIGHT`) and the transition terms are returned as ``dense_case`` and
    ``dense_digit`` and ``dense_symbol``.
    """
    matrix = [[0.0] * N_PARAMS for _ in range(N_PARAMS)]
    rhs = [0.0] * N_PARAMS
    seen: set[str] = set()
    for name, normal in normals.items():
        share = 1.0 if dense else WORKLOAD_WEIGHT.get(name, 0.5 if name in WIDE_NAMES else 1.0)
        for i in range(N_PARAMS):
            rhs[i] += share * normal.rhs[family][i]
            row, source = matrix[i], normal.matrix[family][i]
            for j in range(N_PARAMS):
                row[j] += share * source[j]
        seen |= normal.pages_seen
    scale = sum(matrix[i][i] for i in range(N_PARAMS)) / N_PARAMS
    for (kind, _key), i in INDEX.items():
        # A light pull toward a prior, relative to the term's own information, so that a
        # byte or script with little data is neither swamped nor wild.
        penalty = RIDGE * 1e-3 * matrix[i][i] + 1e-9 * scale
        prior = {"class": 0.3, "own": 0.3, "page": UNSEEN_PAGE, "rare": 1.0}.get(kind, 0.0)
        matrix[i][i] += penalty
        rhs[i] += penalty * prior
    params = nonnegative_solve(matrix, rhs)
    low = [
        min(
            1.0,
            max(MIN_LOW.get(low_class(byte), MIN_ANY), params[OWN_OF.get(byte, CLASS_OF[byte])]),
        )
        for byte in range(256)
    ]
    group_weight = {
        g: max(0.0, params[INDEX["page", g]]) if g in seen else UNSEEN_PAGE for g in GROUPS
    }
    pages = [0.0] + [group_weight[PAGE_GROUP.get(p, "other-bmp-scripts")] for p in range(1, 256)]
    built = build(
        low,
        pages,
        max(0.0, params[INDEX["rare", None]]),
        max(0.0, params[INDEX["fixed", None]]),
        runs,
    )
    if not dense:
        return built
    return msgspec.structs.replace(
        built,
        dense_case=max(0.0, params[INDEX["case", None]]),
        dense_digit=max(0.0, params[INDEX["digit", None]]),
        dense_symbol=max(0.0, params[INDEX["symbol", None]]),
    )


def build(
    low: Sequence[float], pages: Sequence[float], rare: float, fixed: float, runs: RunCosts
) -> Coefficients:
    """Return `Coefficients` with the tables rounded to their 0–31 steps."""
    unit = max(max(low), 1e-6) / MAX_WEIGHT
    page_unit = max(max(pages), 1e-6) / MAX_WEIGHT
    return Coefficients(
        table=bytes(min(MAX_WEIGHT, round(w / unit)) for w in low).hex(),
        unit=unit,
        pages=bytes(min(MAX_WEIGHT, round(w / page_unit)) for w in pages).hex(),
        page_unit=page_unit,
        rare_cjk=rare,
        fixed=fixed,
        runs=runs,
    )


def scaled(c: Coefficients, factor: float) -> Coefficients:
    """Return ``c`` with every fitted term times ``factor`` (run costs are measured, kept)."""
    return msgspec.structs.replace(
        c,
        unit=c.unit * factor,
        page_unit=c.page_unit * factor,
        rare_cjk=c.rare_cjk * factor,
        fixed=c.fixed * factor,
        dense_unit=c.dense_unit * factor,
        dense_gate=c.dense_gate * factor,
        dense_case=c.dense_case * factor,
        dense_digit=c.dense_digit * factor,
        dense_symbol=c.dense_symbol * factor,
    )


def raised_pages(c: Coefficients, extra: dict[int, float]) -> Coefficients:
    """Return ``c`` with ``extra`` tokens per character added to some pages."""
    weights = [w * c.page_unit for w in bytes.fromhex(c.pages)]
    for page, add in extra.items():
        weights[page] += add
    low = [w * c.unit for w in c.weights]
    raised = build(low, weights, c.rare_cjk, c.fixed, c.runs)
    return msgspec.structs.replace(c, pages=raised.pages, page_unit=raised.page_unit)


# ---------------------------------------------------------------------- evaluation
@dataclass
class Row:
    """Error figures of one workload."""

    workload: str
    ratio: float
    """Σ estimate ÷ Σ exact over the workload's texts (no framing)."""
    median: float
    p95: float
    sum_error: float
    """Per message (framing included), in percent."""


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def evaluate(workload: Workload, approx: ApproximateEstimator, exact: ExactEstimator) -> Row:
    """Return the `Row` of ``approx`` against ``exact`` on one workload."""
    errors = []
    est_total = exact_total = text_est = text_exact = 0
    for message in workload.messages:
        est, ex = approx.count_message(message), exact.count_message(message)
        est_total += est
        exact_total += ex
        errors.append(abs(est - ex) / ex * 100)
        for text in message_texts(message):
            text_est += approx.count(text)
            text_exact += exact.count(text)
    return Row(
        workload.name,
        text_est / max(1, text_exact),
        statistics.median(errors),
        percentile(errors, 0.95),
        (est_total - exact_total) / exact_total * 100,
    )


SINGLE_TEXT_TOKENS = 100
"""Single texts of at least this many exact tokens are reported alone (not in the floor)."""


def single_text_ratios(
    workloads: Sequence[Workload], approx: ApproximateEstimator, exact: ExactEstimator
) -> list[float]:
    """Return estimate ÷ exact of every text of at least `SINGLE_TEXT_TOKENS` exact tokens."""
    out = []
    for w in workloads:
        for text in w.texts():
            tokens = exact.count(text)
            if tokens >= SINGLE_TEXT_TOKENS:
                out.append(approx.count(text) / tokens)
    return out


def texts_ratio(
    samples: Sequence[Sample], approx: ApproximateEstimator, texts: Sequence[str], family: str
) -> float:
    """Return Σ estimate ÷ Σ exact over ``texts`` (their samples give the exact counts)."""
    return sum(approx.count(t) for t in texts) / max(1, sum(s.exact[family] for s in samples))


def conservative(
    raw: Coefficients,
    family: str,
    train: Sequence[Workload],
    samples: dict[str, list[Sample]],
    texts: dict[str, list[str]],
) -> tuple[Coefficients, float]:
    """Scale ``raw`` so no guarded training workload is under; raise under-counted scripts."""
    factor = 0.0
    for workload in train:
        if workload.name not in GUARDED:
            continue
        approx = ApproximateEstimator(family, raw)
        ratio = texts_ratio(samples[workload.name], approx, texts[workload.name], family)
        margin = MARGIN if workload.name in PRIMARY else OTHER_MARGIN
        factor = max(factor, (1 + margin) / ratio)
    coefficients = scaled(raw, factor)
    for _ in range(3):
        extra: dict[int, float] = {}
        approx = ApproximateEstimator(family, coefficients)
        for workload in train:
            if workload.name in NOT_RAISED:
                continue
            group_pages = Counter[int]()
            for s in samples[workload.name]:
                group_pages.update({p: n for p, n in s.pages.items() if n > 0})
            chars = sum(sum(s.low.values()) for s in samples[workload.name])
            if not group_pages or group_pages.total() < 0.5 * chars:
                continue
            ratio = texts_ratio(samples[workload.name], approx, texts[workload.name], family)
            if ratio >= CLASS_TARGET:
                continue
            exact_sum = sum(s.exact[family] for s in samples[workload.name])
            missing = (CLASS_TARGET - ratio) * exact_sum
            for page, n in group_pages.items():
                share = n / group_pages.total()
                extra[page] = max(extra.get(page, 0.0), missing * share / n)
        if not extra:
            break
        coefficients = raised_pages(coefficients, extra)
    return coefficients, factor


# ---------------------------------------------------------------------- driver
@dataclass
class Data:
    """Workloads grouped in corpus families, with their samples and texts."""

    groups: dict[str, list[Workload]]
    samples: dict[str, list[Sample]]
    texts: dict[str, list[str]]
    normals: dict[str, Normal]
    singles: dict[str, str]
    """Per family, the packed one-token ideographs (`cjk_single`)."""


def corpus_family(workload: Workload) -> str:
    """Return the corpus family a workload belongs to (the unit left out)."""
    if workload.source == "real":
        return "real"
    return workload.source


def load_data(
    workloads: Sequence[Workload], exact: dict[str, ExactEstimator], runs: dict[str, RunCosts]
) -> Data:
    """Return samples and normal equations of every workload."""
    groups: dict[str, list[Workload]] = {}
    samples: dict[str, list[Sample]] = {}
    texts: dict[str, list[str]] = {}
    normals: dict[str, Normal] = {}
    singles = {f: cjk_single(e) for f, e in exact.items()}
    for w in workloads:
        groups.setdefault(corpus_family(w), []).append(w)
        texts[w.name] = [t for m in w.messages for t in message_texts(m)]
        samples[w.name] = samples_of([w], exact, runs, singles)
        normals[w.name] = normal_of(samples[w.name], list(exact))
    return Data(groups, samples, texts, normals, singles)


def is_dense(sample: Sample, c: Coefficients, family: str, gate: float = DENSE_GATE) -> bool:
    """Return whether ``c`` estimates the ASCII text of ``sample`` dense (see `DENSE_GATE`).

    As the estimator does: its main estimate, with run blocks at their run cost, is at least
    ``gate`` tokens per character.
    """
    if sample.whole is None:
        return False
    size = sample.whole.total()
    weights = c.weights
    steps = sum(weights[b] * n for b, n in sample.low.items())
    return size > 0 and steps * c.unit + sample.run_tokens[family] >= gate * size


def with_dense(data: Data, names: Sequence[str], family: str, main: Coefficients) -> Coefficients:
    """Return ``main`` with a dense table fitted on the ASCII texts ``main`` gates dense.

    Each training workload contributes its dense texts (a workload with none contributes
    nothing); the table is fitted like the main one, on those texts only.
    """
    normals = {}
    for name in names:
        dense = [s for s in data.samples[name] if is_dense(s, main, family)]
        if dense:
            normals[name] = normal_of(dense, [family], transitions=True)
    if not normals:
        return main
    fitted = fit(normals, family, main.runs, dense=True)
    return msgspec.structs.replace(
        main,
        dense=fitted.table,
        dense_unit=fitted.unit,
        dense_gate=DENSE_GATE,
        dense_case=fitted.dense_case,
        dense_digit=fitted.dense_digit,
        dense_symbol=fitted.dense_symbol,
    )


def fit_on(data: Data, names: Sequence[str], family: str, runs: RunCosts) -> Coefficients:
    """Return the conservative coefficients fitted on the workloads ``names``."""
    raw = fit({n: data.normals[n] for n in names}, family, runs)
    raw = msgspec.structs.replace(raw, cjk_single=data.singles[family])
    if DENSE_GATE:
        raw = with_dense(data, names, family, raw)
    train = [w for ws in data.groups.values() for w in ws if w.name in names]
    coefficients, factor = conservative(raw, family, train, data.samples, data.texts)
    print(f"  (fit on {len(names)} workloads: scale ×{factor:.3f})", file=sys.stderr)
    return coefficients


def workloads_used(*, quick: bool, shared: bool, seed: int = 0) -> list[Workload]:
    """Return the fit data: real (if ``shared``), stdlib, generated corpora, the wide set."""
    count = 40 if quick else 80
    base = all_workloads(
        quick=quick, seed=seed, count=count, shared=SHARED if shared else Path("/nonexistent")
    )
    wide = wide_workloads(seed=seed, count=12 if quick else 24)
    for w in wide:
        object.__setattr__(w, "source", "wide")
    return [*base, *wide]


def floor_of(ratios: Sequence[float]) -> float:
    """Return the floor: the lowest ratio minus `FLOOR_MARGIN`, rounded down to 0.05."""
    return max(0.05, math.floor((min(ratios) - FLOOR_MARGIN) * 20) / 20)


FITTED = re.compile(r"# BEGIN FITTED\n.*?# END FITTED\n", re.S)
FITTED_FILE = (
    Path(__file__).resolve().parent.parent / "harness" / "tokens" / "_fitted_coefficients.py"
)
"""The module whose FITTED block ``--write`` replaces."""


def format_block(results: dict[str, Coefficients], floors: dict[str, float]) -> str:
    """Return the fitted block of `harness/tokens/_fitted_coefficients.py`."""
    lines = ["# BEGIN FITTED", "FAMILY_COEFFICIENTS: dict[str, Coefficients] = {"]
    for family, c in results.items():
        lines.append(f'    "{family}": Coefficients(')
        for name, table in (("table", c.table), ("pages", c.pages)):
            lines.append(f"        {name}=(")
            lines.extend(f'            "{table[i : i + 64]}"' for i in range(0, 512, 64))
            lines.append("        ),")
        lines.append(f"        unit={c.unit:.6f},")
        lines.append(f"        page_unit={c.page_unit:.6f},")
        lines.append(f"        rare_cjk={c.rare_cjk:.4f},")
        lines.append(f"        fixed={c.fixed:.4f},")
        if c.cjk_single:
            lines.append("        cjk_single=(")
            lines.extend(
                f'            "{c.cjk_single[i : i + 64]}"' for i in range(0, len(c.cjk_single), 64)
            )
            lines.append("        ),")
        if c.dense_unit:
            lines.append("        dense=(")
            lines.extend(f'            "{c.dense[i : i + 64]}"' for i in range(0, 512, 64))
            lines.append("        ),")
            lines.append(f"        dense_unit={c.dense_unit:.6f},")
            lines.append(f"        dense_gate={c.dense_gate:.4f},")
            lines.append(f"        dense_case={c.dense_case:.4f},")
            lines.append(f"        dense_digit={c.dense_digit:.4f},")
            lines.append(f"        dense_symbol={c.dense_symbol:.4f},")
        lines.append("        runs=(")
        lines.extend(f"            ({ch!r}, {a:.2f}, {b:.2f})," for ch, a, b in c.runs)
        lines.append("        ),")
        lines.append("    ),")
    lines.append("}")
    lines.append("FAMILY_FLOOR: dict[str, float] = {")
    lines.extend(f'    "{f}": {v:.2f},' for f, v in floors.items())
    lines.append("}")
    lines.append("# END FITTED")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer generated texts")
    parser.add_argument(
        "--no-shared", action="store_true", help="ignore ../shared (generated data only)"
    )
    parser.add_argument("--family", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--no-lofo", action="store_true", help="skip the leave-one-family-out fits")
    parser.add_argument(
        "--write",
        action="store_true",
        help="write the fit into harness/tokens/_fitted_coefficients.py",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    shared = SHARED.exists() and not args.no_shared
    exact = {f: exact_for_family(f) for f in args.family}
    runs = {f: measure_runs(e) for f, e in exact.items()}
    workloads = workloads_used(quick=args.quick, shared=shared)
    print(
        "workload:",
        "real ../shared data + generated" if shared else "generated and stdlib only (no ../shared)",
    )
    data = load_data(workloads, exact, runs)
    for group, ws in data.groups.items():
        print(f"  {group:9s}: " + ", ".join(f"{w.name} ({len(w.messages)})" for w in ws))
    unseen = wide_workloads(seed=1, count=12 if args.quick else 24)
    print(f"# data ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    results: dict[str, Coefficients] = {}
    floors: dict[str, float] = {}
    names = [w.name for w in workloads]
    for family in args.family:
        coefficients = fit_on(data, names, family, runs[family])
        results[family] = coefficients
        approx = ApproximateEstimator(family, coefficients)
        print(f"\n{family}: fitted on everything; in-sample | wide set, new seed (out-of-sample)")
        print(
            f"  {'workload':24s} {'ratio':>6s} {'med%':>6s} {'p95%':>6s} {'sum%':>6s} | {'ratio':>6s}"
        )
        out_ratios = []
        unseen_rows = {w.name: evaluate(w, approx, exact[family]) for w in unseen}
        for w in workloads:
            r = evaluate(w, approx, exact[family])
            u = unseen_rows.get(w.name)
            tail = f" | {u.ratio:6.2f}" if u else ""
            print(
                f"  {w.name:24s} {r.ratio:6.2f} {r.median:6.1f} {r.p95:6.1f} {r.sum_error:+6.1f}{tail}"
            )
        out_ratios += [u.ratio for u in unseen_rows.values()]
        singles = single_text_ratios(unseen, approx, exact[family])
        if not args.no_lofo:
            print(f"  leave one corpus family out ({family}): ratio med% p95% sum%")
            for group, held in data.groups.items():
                rest = [n for n in names if n not in {w.name for w in held}]
                lofo = ApproximateEstimator(family, fit_on(data, rest, family, runs[family]))
                for w in held:
                    r = evaluate(w, lofo, exact[family])
                    if group != "wide":
                        out_ratios.append(r.ratio)
                        singles += single_text_ratios([w], lofo, exact[family])
                    print(
                        f"    {group:9s} {w.name:24s} {r.ratio:6.2f} {r.median:6.1f} {r.p95:6.1f} {r.sum_error:+6.1f}"
                    )
        floors[family] = min(0.95, floor_of(out_ratios))
        print(
            f"  floor: {floors[family]:.2f} (lowest out-of-sample class ratio "
            f"{min(out_ratios):.3f}; a single text of ≥ {SINGLE_TEXT_TOKENS} tokens went as "
            f"low as {min(singles):.3f})"
        )
    block = format_block(results, floors)
    if args.write:
        source = FITTED_FILE.read_text("utf-8")
        FITTED_FILE.write_text(FITTED.sub(lambda _: block, source, count=1), "utf-8")
        print(f"\nwrote the fit into {FITTED_FILE}")
    else:
        print("\n" + block)
    print(f"# {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
