"""The approximate model's weights (`Coefficients`), their sum in C, and CJK rarity.

A `Coefficients` is a linear model with non-negative weights over the whole text:

- every UTF-16 code unit adds the weight of its low byte (for ASCII and Latin-1 that is
  the character itself: letters, digits, punctuation, spaces, newlines each cost their own)
  and the weight of its high byte — its 256-character *page*, which names the script
  (Cyrillic, Arabic, Devanagari, Thai, Hangul, CJK and its extensions, emoji via their
  surrogates, full-width and half-width forms, private use …);
- rare CJK ideographs — those the family's tokenizer does not encode as one token (a packed
  set per family: 2,515 of U+4E00–9FFF are one token for o200k, 549 for cl100k), and the
  supplementary planes — add an extra weight, so random common characters (about half of
  them two tokens for o200k) and real Chinese (nearly all one token, merged into words) are
  both priced (`rare_cjk_count`).

Summing a weight table runs in C (``bytes.translate`` and ``zlib.adler32`` over 2 KB
chunks, `_weigh`), so a count costs about as much as two copies of the text. The weights
are fitted per family by ``benchmarks/fit_estimator.py`` on one part of the data and
checked on the rest (``benchmarks/bench_estimation.py``); the fit lives in
``harness/tokens/_fitted_coefficients.py``.
"""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Iterable
from functools import cache
from zlib import adler32

import msgspec

from harness.errors import ConfigurationError

_MAX_WEIGHT = 31
_CHUNK = 2048
"""Bytes one ``adler32`` call sums: ``1 + _CHUNK · _MAX_WEIGHT`` stays under its modulus 65521."""


_CJK_RUNS = re.compile("[\u4e00-\u9fff]+")
_ASTRAL_IDEOGRAPHS = re.compile("[\U00020000-\U0003ffff]")
_NOT_CJK_PAGES = bytes(b for b in range(256) if not (0x4E <= b <= 0x9F or 0xD8 <= b <= 0xDB))


def _hex_table(table: str, name: str) -> bytes:
    try:
        weights = bytes.fromhex(table)
    except ValueError as error:
        raise ConfigurationError(f"Coefficients.{name} must be hex digits: {error}") from None
    if len(weights) != 256 or max(weights) > _MAX_WEIGHT:
        raise ConfigurationError(
            f"Coefficients.{name} must hold 256 weights of 0–{_MAX_WEIGHT}; "
            "generate it with benchmarks/fit_estimator.py"
        )
    return weights


class Coefficients(msgspec.Struct, frozen=True, kw_only=True):
    """A linear model with non-negative weights over a text's UTF-16 code units.

    tokens ≈ fixed + unit · Σ table[low byte] + page_unit · Σ pages[high byte]
    + rare_cjk · (CJK ideographs outside GB2312) − run corrections (see `runs`).
    For ASCII and Latin-1 the low byte is the character and the page is 0.
    """

    table: str
    """512 hex digits: per low byte, its weight in units of ``unit`` (0–31)."""
    unit: float
    """Tokens per ``table`` step."""
    pages: str = "00" * 256
    """512 hex digits: per high byte (a 256-character page: a script), its weight (0–31)."""
    page_unit: float = 0.0
    """Tokens per ``pages`` step."""
    rare_cjk: float = 0.0
    """Extra tokens per rare CJK ideograph (see `rare_cjk_count`)."""
    cjk_single: str = ""
    """The ideographs U+4E00–9FFF the family's tokenizer encodes as one token, packed (see
    `pack_cjk`); the others are its rare ones. Empty: rare means outside GB2312."""
    fixed: float = 0.0
    """Tokens added once per text."""
    runs: tuple[tuple[str, float, float], ...] = ()
    """(character, tokens of a run of `RUN_BLOCK`, tokens per `RUN_LONG` characters of a long
    run): each block of such characters counts its run cost instead of its weights."""
    dense: str = "00" * 256
    """512 hex digits: per ASCII byte, its weight (0–31) in *dense* text — an ASCII text whose
    ``table`` estimate is at least ``dense_gate`` tokens per character (base64, hex, hashes,
    random ASCII, numbers), where the tokenizer's word pieces are short and the prose weights
    under-count. Ignored while ``dense_unit`` is 0."""
    dense_unit: float = 0.0
    """Tokens per ``dense`` step."""
    dense_gate: float = 0.0
    """Tokens per character (by ``table``) from which an ASCII text is dense."""
    dense_case: float = 0.0
    """Tokens per lowercase letter followed by an uppercase one, in dense text: tokenizers
    start a word piece there (base64 and random text are full of them)."""
    dense_digit: float = 0.0
    """Tokens per letter followed by a digit, in dense text (a digit starts a piece too)."""
    dense_symbol: float = 0.0
    """Tokens per symbol followed by a letter, in dense text."""

    def __post_init__(self) -> None:
        _hex_table(self.table, "table")
        _hex_table(self.pages, "pages")
        _hex_table(self.dense, "dense")
        numbers = (
            self.unit,
            self.page_unit,
            self.rare_cjk,
            self.fixed,
            self.dense_unit,
            self.dense_gate,
            self.dense_case,
            self.dense_digit,
            self.dense_symbol,
        )
        if min(numbers) < 0 or any(min(a, b) < 0 or len(c) != 1 for c, a, b in self.runs):
            raise ConfigurationError(
                "Coefficients must be non-negative (a negative weight lets a long text of "
                "one character count as nothing); refit with benchmarks/fit_estimator.py"
            )

    @property
    def weights(self) -> bytes:
        """The 256 integer low-byte weights."""
        return bytes.fromhex(self.table)

    def char_tokens(self, char: str, *, dense: bool = False) -> float:
        """Return the tokens one occurrence of ``char`` adds, outside runs and CJK rarity.

        With ``dense``, the weight it has in dense text (ASCII characters only).
        """
        if dense:
            return sum(self.dense_unit * bytes.fromhex(self.dense)[ord(c)] for c in char)
        total = 0.0
        for unit in char.encode("utf-16-le", "surrogatepass")[0::2]:
            total += self.unit * self.weights[unit]
        for page in char.encode("utf-16-le", "surrogatepass")[1::2]:
            total += self.page_unit * bytes.fromhex(self.pages)[page]
        return total


def _weigh(data: bytes) -> int:
    """Return the sum of ``data``'s bytes (each at most `_MAX_WEIGHT`), in C."""
    size = len(data)
    if size <= _CHUNK:
        return (adler32(data) & 0xFFFF) - 1
    view = memoryview(data)
    return sum((adler32(view[i : i + _CHUNK]) & 0xFFFF) - 1 for i in range(0, size, _CHUNK))


def rare_cjk_count(text: str, single: str = "") -> int:
    """Return how many rare CJK ideographs ``text`` holds.

    Rare: in U+4E00–9FFF but not one token for the family (``single``, see `pack_cjk`) —
    or, without ``single``, not in GB2312, whose 6,763 characters cover nearly all of real
    Chinese text — or in the supplementary planes (extensions B and later).
    """
    if single:
        return len(_rare_cjk(single).findall(text))
    ideographs = "".join(_CJK_RUNS.findall(text))
    rare = len(ideographs) - len(ideographs.encode("gb2312", "ignore")) // 2
    return rare + len(_ASTRAL_IDEOGRAPHS.findall(text))


_CJK_FIRST = 0x4E00
_CJK_SIZE = 0xA000 - 0x4E00


def pack_cjk(single: Iterable[str]) -> str:
    """Return the set ``single`` of ideographs in U+4E00–9FFF as a bitmap, zlib and base85."""
    bits = bytearray(_CJK_SIZE // 8)
    for char in single:
        index = ord(char) - _CJK_FIRST
        if 0 <= index < _CJK_SIZE:
            bits[index // 8] |= 1 << (index % 8)
    return base64.b85encode(zlib.compress(bytes(bits), 9)).decode("ascii")


def _unpack_cjk(single: str) -> bytes:
    """Return the bitmap packed by `pack_cjk`."""
    try:
        bits = zlib.decompress(base64.b85decode(single))
    except (ValueError, zlib.error) as error:
        raise ConfigurationError(f"Coefficients.cjk_single is not a packed set: {error}") from None
    if len(bits) != _CJK_SIZE // 8:
        raise ConfigurationError("Coefficients.cjk_single must pack 20,992 bits (U+4E00–9FFF)")
    return bits


def _common_cjk(singles: Iterable[str]) -> str:
    """Return the ideographs that every packed set of ``singles`` holds, packed."""
    common = -1
    for single in singles:
        common &= int.from_bytes(_unpack_cjk(single), "little")
    bits = common.to_bytes(_CJK_SIZE // 8, "little")
    return pack_cjk(chr(_CJK_FIRST + i) for i in range(_CJK_SIZE) if bits[i // 8] >> (i % 8) & 1)


@cache
def _rare_cjk(single: str) -> re.Pattern[str]:
    """Return a pattern of one ideograph of U+4E00–9FFF not in ``single``, or astral."""
    bits = _unpack_cjk(single)
    ranges: list[str] = []
    start = None
    for index in range(_CJK_SIZE + 1):
        rare = index < _CJK_SIZE and not bits[index // 8] >> (index % 8) & 1
        if rare and start is None:
            start = index
        elif not rare and start is not None:
            ranges.append(f"{chr(_CJK_FIRST + start)}-{chr(_CJK_FIRST + index - 1)}")
            start = None
    return re.compile("[" + "".join(ranges) + "\U00020000-\U0003ffff]")
