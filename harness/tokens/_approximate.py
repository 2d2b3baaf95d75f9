"""The fast approximate estimator, the default: fitted weights, corrected for text shapes.

`ApproximateEstimator` prices a text by its family's `Coefficients`
(``harness/tokens/_weights.py``, fitted in ``harness/tokens/_fitted_coefficients.py``), corrected
for runs, dense ASCII, repeated units and short texts (``harness/tokens/_text_shapes.py``). One count
reads the whole text in a few C calls, about as much as two copies of the text. A short text
(under 512 characters) of a shape the weights misprice costs at least ``floor`` × its bytes
when it is a random string or random accented words (a byte-level token holds a byte or more,
so that is safe without loading a tokenizer far from the limit), and its exact count when it
is mostly runs shorter than a block (rare). An ordinary short text pays one search for a space
to rule that out.

**The floor.** For every estimator, ``floor`` is a lower bound of estimate ÷ exact count for
any text: a request whose estimate is below ``floor × limit`` fits for sure; nearer the limit
a caller recounts with ``exact_counter`` (one shared, lazily loaded exact estimator per
family). Exact estimators have ``floor = 1``. An approximate family's floor is the lowest
summed ratio of any text class seen out-of-sample on the wide evaluation set
(``benchmarks/textgen.py``), minus a margin (see `FAMILY_FLOOR`).
"""

from __future__ import annotations

import math
from zlib import adler32

from harness.errors import ConfigurationError
from harness.tokens._ceiling import byte_ceiling
from harness.tokens._count_cache import CachedEstimator
from harness.tokens._estimator import TokenEstimator
from harness.tokens._exact_tokens import EXACT_METHODS, FAMILIES, shared_exact
from harness.tokens._fitted_coefficients import FAMILY_COEFFICIENTS, FAMILY_FLOOR
from harness.tokens._floor import byte_floor
from harness.tokens._images import image_rule
from harness.tokens._text_shapes import (
    _LETTER_CLASSES,
    _LETTER_RUN_GATE,
    _PERIOD_END,
    _PERIOD_PROBE,
    _RUN_MARK,
    _SHORT_MIN,
    _SHORT_RUN,
    _SHORT_TEXT,
    _SPACE,
    _SPARSE_PROBE,
    _STRIDE,
    _WORD_CLASSES,
    RUN_BLOCK,
    RUN_LONG,
    RUN_MIN_TEXT,
    _accented,
    _by_low_byte,
    _letter_runs_in,
    _may_hold_letter_run,
    _random_string,
    _Run,
    _run_savings,
    _short_run,
    period,
    periodic_tokens,
)
from harness.tokens._weights import (
    _CHUNK,
    _NOT_CJK_PAGES,
    Coefficients,
    _rare_cjk,
    _weigh,
    rare_cjk_count,
)


class ApproximateEstimator(CachedEstimator):
    """Fast estimate from non-negative per-character weights, calibrated per tokenizer family.

    One count reads the whole text in a few C calls; see `Coefficients` and the module
    docstring. ``floor`` is the family's measured lower bound of estimate ÷ exact.
    """

    exact = False

    def __init__(
        self,
        family: str = "o200k",
        coefficients: Coefficients | None = None,
        *,
        floor: float | None = None,
    ) -> None:
        # The family's own table counts alike in every instance: one shared cache. Custom
        # coefficients or a subclass (which may count otherwise) keep a private one.
        alike = coefficients is None and type(self) is ApproximateEstimator
        super().__init__(shared_as=f"approximate:{family}" if alike else None)
        if coefficients is None:
            if family not in FAMILY_COEFFICIENTS:
                raise ConfigurationError(
                    f"unknown tokenizer family {family!r}; use one of {sorted(FAMILY_COEFFICIENTS)}"
                )
            coefficients = FAMILY_COEFFICIENTS[family]
        self.family = family
        self.method = f"approximate:{family}"
        self.floor = FAMILY_FLOOR.get(family, 0.5) if floor is None else floor
        self.images = image_rule(family)
        self.coefficients = coefficients
        self._low = coefficients.weights
        self._pages = bytes.fromhex(coefficients.pages)
        self._unit = coefficients.unit
        self._page_unit = coefficients.page_unit
        self._rare = coefficients.rare_cjk
        self._cjk_single = coefficients.cjk_single
        if self._cjk_single:
            _rare_cjk(self._cjk_single)  # validated and compiled once, up front
        self._fixed = coefficients.fixed
        self._dense = bytes.fromhex(coefficients.dense)
        self._dense_unit = coefficients.dense_unit
        self._case = coefficients.dense_case
        self._digit = coefficients.dense_digit
        self._symbol = coefficients.dense_symbol
        self._transitions = bool(self._case or self._digit or self._symbol)
        # ASCII text is dense from this many tokens per character (0: no dense table)
        self._dense_gate = coefficients.dense_gate if coefficients.dense_unit else 0.0
        runs = self._run_savings(coefficients, dense=False)
        self._runs = _by_low_byte(runs)
        self._ascii_runs = _by_low_byte(r for r in runs if r[0].isascii())
        self._dense_runs = _by_low_byte(
            self._run_savings(coefficients, dense=True) if coefficients.dense_unit else ()
        )

    @staticmethod
    def _run_savings(coefficients: Coefficients, *, dense: bool) -> tuple[_Run, ...]:
        """Return the `_Run` of each run character (ASCII ones only when ``dense``)."""
        runs = []
        per_long = RUN_LONG // RUN_BLOCK
        for char, alone, long_run in coefficients.runs:
            if dense and not char.isascii():
                continue
            per_char = coefficients.char_tokens(char, dense=dense)
            runs.append(
                (
                    char * RUN_BLOCK,
                    RUN_BLOCK * per_char - alone,
                    char * RUN_LONG,
                    per_long * alone - long_run,
                )
            )
        return tuple(runs)

    @property
    def exact_counter(self) -> TokenEstimator | None:
        """The family's shared exact estimator, loaded on first use."""
        return shared_exact(self.family) if self.family in FAMILIES else None

    @property
    def ceiling(self) -> TokenEstimator | None:
        """A count never below the exact counter's (`ByteCeiling`), without loading it."""
        known = EXACT_METHODS.get(self.family)
        return byte_ceiling(*known) if known is not None else None

    @property
    def lower_bound(self) -> TokenEstimator | None:
        """A count never above the exact counter's (`ByteFloor`), without loading it."""
        known = EXACT_METHODS.get(self.family)
        return byte_floor(*known) if known is not None else None

    def count(self, text: str) -> int:
        """Return the estimated token count of ``text`` (0 for empty text, else ≥ 1)."""
        size = len(text)
        if not size:
            return 0
        if not text.isascii():
            return self._count_wide(text, size)
        low = text.encode("ascii")
        weights = low.translate(self._low)
        total = (
            (adler32(weights) & 0xFFFF) - 1 if size <= _CHUNK else _weigh(weights)
        ) * self._unit
        dense = self._dense_gate
        if size < RUN_MIN_TEXT:
            # Shorter than a run block: no run, period or letter run to look for, only the
            # short shapes (most tool-call arguments and names end here).
            if dense and total >= dense * size:
                total = self._dense_count(low)
            estimate = total + self._fixed
            if size >= _SHORT_MIN:
                if _SPACE not in low:
                    estimate = self._short_bound(low, estimate, False)
                elif size >= _SHORT_RUN and _short_run(low, True):  # spaced: only runs matter
                    estimate = self._short_bound(low, estimate, True)
            return 1 if estimate < 1.0 else math.ceil(estimate)
        # A run of RUN_BLOCK characters covers RUN_BLOCK // _STRIDE consecutive samples of
        # every _STRIDE-th code unit, all run characters and all equal. Testing the samples
        # is cheap and rules out nearly every real text; the rest is scanned for each run.
        sample = low[::_STRIDE]
        runs = sample.translate(_RUN_MARK).find(_SPARSE_PROBE) >= 0
        if runs:
            total -= _run_savings(text, sample, self._ascii_runs)
        # Dense: the main estimate, runs counted as runs, is at least dense_gate per character.
        if dense and total >= dense * size:
            total = self._dense_count(low)
            if runs:
                total -= _run_savings(text, sample, self._dense_runs)
        estimate = total + self._fixed
        # One bounded search of the first bytes rules out nearly every text that is not periodic.
        if low.find(low[:_PERIOD_PROBE], 1, _PERIOD_END) > 0:
            bound = self._periodic_bound(low, estimate)
            if bound != estimate:
                return 1 if bound < 1.0 else math.ceil(bound)
        # A run of one letter or digit is priced as letters inside words, or sends a text
        # to the dense table, which prices it near nothing (q x 100 inside text: 5 for 53);
        # only a text estimated under the gate can hold enough of one.
        if estimate < _LETTER_RUN_GATE * size and _may_hold_letter_run(low):
            estimate = self._letter_runs(text, estimate)
        # A short text with a space is not a random string, and a run in it shorter than a
        # block costs a few tokens more than its weights say: only a text shorter than a
        # block can be mostly such a run. One C search on most real text.
        if size < _SHORT_TEXT and _SPACE not in low:
            estimate = self._short_bound(low, estimate, False)
        return 1 if estimate < 1.0 else math.ceil(estimate)

    def _count_wide(self, text: str, size: int) -> int:
        """Return `count` of a ``text`` of ``size`` characters that is not all ASCII."""
        data = text.encode("utf-16-le", "surrogatepass")
        low, high = data[0::2], data[1::2]
        total = (
            _weigh(low.translate(self._low)) * self._unit
            + _weigh(high.translate(self._pages)) * self._page_unit
        )
        if self._rare and len(high.translate(None, _NOT_CJK_PAGES)):
            total += self._rare * rare_cjk_count(text, self._cjk_single)
        estimate = total + self._fixed
        if size >= RUN_MIN_TEXT:  # runs as in `count`; no dense table beyond ASCII
            sample = low[::_STRIDE]
            if sample.translate(_RUN_MARK).find(_SPARSE_PROBE) >= 0:
                estimate -= _run_savings(text, sample, self._runs)
            # A letter run among other scripts: no estimate gate, as their weights raise it.
            if _may_hold_letter_run(low):
                estimate = self._letter_runs(text, estimate)
        # Random accented words cost about 0.3 a character by their weights; real text in
        # other scripts far more, and it skips the scan.
        if _SHORT_MIN <= size < _SHORT_TEXT and 2 * estimate < size and _accented(text, high):
            estimate = max(estimate, self.floor * len(text.encode("utf-8", "surrogatepass")))
        return 1 if estimate < 1.0 else math.ceil(estimate)

    def _letter_runs(self, text: str, estimate: float) -> float:
        """Return the count of ``text`` with its letter and digit runs counted as runs.

        A run of one letter is split by the tokenizer into pieces of 2 to 8 (``q`` × 100: 50
        tokens), while the dense table its weights send the text to prices it near nothing
        (``"key: "`` + ``q`` × 100: 5 for 53), and in other scripts' text the weights price
        it as letters inside words (``"上下文" + "k" × 500``: 0.26x). The family's exact
        tokenizer counts each run (`periodic_tokens`, a few blocks at most) and the rest of
        the text is estimated without them; without a tokenizer a run costs ``floor`` × its
        length (a byte-level token holds a byte or more).
        """
        spans = list(_letter_runs_in(text))
        if not spans:
            return estimate
        exact = self.exact_counter
        pieces: list[str] = []
        cost = 0.0
        at = 0
        for start, end in spans:
            pieces.append(text[at:start])
            run = text[start:end].encode("ascii")
            cost += periodic_tokens(run, 1, exact.count) if exact else self.floor * len(run)
            at = end
        pieces.append(text[at:])
        rest = "".join(pieces)
        return cost + (self.count(rest) if rest else 0)

    def _short_bound(self, low: bytes, estimate: float, spaced: bool) -> float:
        """Return ``estimate``, or a safe count of short ASCII ``low`` where it is mispriced.

        A short text is one sample of a few pieces, and two shapes of it go far under the
        floor. A string without a space (``spaced`` false) that reads as random
        (`_random_string`: a 21-character password at 7 tokens for 16, base64 at 0.48) costs
        ``floor`` × its bytes: every tokenizer here is byte-level (a token holds a byte or
        more), so that is at least ``floor`` × its exact count without loading a tokenizer
        (0.75-1.1x exact on random strings; CamelCase names and paths it catches too, a few
        tokens over). A text that is mostly runs shorter than a block (`_short_run`: ``"<"``
        × 26 is 1 for 4) is counted by the family's exact tokenizer, as bytes would price it
        five times over; without one it keeps its estimate.
        """
        if _short_run(low, spaced):  # rare, and bytes would price it five times over or more
            exact = self.exact_counter
            return exact.count(low.decode("ascii")) if exact is not None else estimate
        if not spaced and _random_string(low):
            return max(estimate, self.floor * len(low))
        return estimate

    def _periodic_bound(self, low: bytes, estimate: float) -> float:
        r"""Return ``estimate``, or what ASCII ``low`` costs if it repeats one unit.

        A text that repeats one short unit (`period`) with a word start in it is one sample
        of a class, not a class: the floor, measured over classes, does not hold for it.
        Per-character weights fitted on prose price short words of common letters ("a a a",
        "ok ok", "aee aee") at a quarter to a third of their tokens. The tokenizer counts each
        repetition alike (every word start begins a new piece), so the family's exact
        tokenizer counts a few units and the rest is multiplied (`periodic_tokens`). Without
        one (custom coefficients, the bound), ``floor`` × its bytes: a byte-level token is at
        least one byte. A unit without a word start (``"  \n"``, CRLF, ``abab``) may merge
        across units or not, by family (Anthropic's tokenizer gives ``"  \n"`` a token each,
        about twice the weights' price): with the exact tokenizer it is counted the same way,
        over blocks long enough for merges to repeat alike; without one it keeps its
        estimate. Runs of one character keep theirs (the weights price runs, `_run_savings`).
        """
        if self.floor * len(low) <= estimate:
            return estimate
        unit = period(low)
        if unit < 2:
            return estimate
        exact = self.exact_counter
        if exact is not None:
            # Never under one unit's own count: a short unit may be priced by the short
            # shapes' floor above what its repetitions cost exactly ("ServerTimeoutErr" 10,
            # x 3 exactly 9), and more text never counts less.
            one = self.count(low[:unit].decode("ascii"))
            return max(estimate, periodic_tokens(low, unit, exact.count), one)
        if low[: 2 * unit].translate(_WORD_CLASSES).find(b" a") >= 0:
            return self.floor * len(low)
        return estimate

    def _dense_count(self, low: bytes) -> float:
        """Return the dense table's sum and transition terms of ASCII ``low`` (runs not out)."""
        total = _weigh(low.translate(self._dense)) * self._dense_unit
        if self._transitions:
            classes = low.translate(_LETTER_CLASSES)
            total += (
                self._case * classes.count(b"aA")
                + self._digit * (classes.count(b"a0") + classes.count(b"A0"))
                + self._symbol * (classes.count(b".a") + classes.count(b".A"))
            )
        return total
