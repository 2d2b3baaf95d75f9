"""Shapes of text that per-character weights misprice: runs, dense ASCII, repeated units.

- runs of one character (spaces, ``=``, ``-``, newlines, zeros …) are counted per block of
  32 and 256 characters at what the tokenizer really charges for them, since tokenizers
  merge such runs into a few long tokens (every 4th code unit is tested first: a block
  shows as eight samples in a row that are run characters, and the characters counted are
  only those seen in eight equal samples; `_run_savings`);
- *dense* ASCII text — whose main estimate (runs counted as runs) is at least
  ``dense_gate`` tokens per character: base64, hex, hashes, UUIDs, numbers, random ASCII,
  about 3 % of real agent messages — is counted with its own table plus the places where
  tokenizers start a new word piece (lowercase→uppercase, letter→digit, symbol→letter),
  counted with ``bytes.count`` on a class map (`dense_features`). A per-character model
  cannot price both prose and base64.
- an ASCII text that repeats one unit of up to 32 characters holding a word start ("ok ok ok",
  "aee aee", "| a | b |") is one sample, which its weights can price at a quarter of its
  tokens: the family's exact tokenizer counts two blocks of four units and the rest is
  multiplied (`periodic_tokens`), without a tokenizer ``floor`` × its bytes. One bounded
  ``find`` of its first 8 bytes rules that out for nearly every other text (`period`);
- a short text (under `_SHORT_TEXT` characters) is one sample of a few pieces, and three
  shapes of it go far under the floor: a run shorter than a block (`_short_run`), a string
  without a space that reads as random (`_random_string`: passwords, keys, base64), and
  random accented words (`_accented`). The caller counts the first exactly and prices the
  others at ``floor`` × their bytes (a byte-level token holds a byte or more); a space rules
  the second out at once, and the first in a text of a block or more.

``harness/tokens/_approximate.py`` applies them; ``benchmarks/fit_estimator.py`` measures the runs.

Searches in bytes use ``find`` (one byte: an ``int`` with ``in``), never ``sub in data`` with
``bytes``: CPython first tries ``sub`` as an integer and formats a ``TypeError`` it then
drops, some 1,800 instructions a test, more than the search of a short text itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

RUN_CHARS = " \t\n\r=-_*#.~0/+|:<>\\`'\"─━═"
"""Characters whose runs tokenizers merge into long tokens; counted per block (see `RUN_BLOCK`)."""
RUN_BLOCK = 32
"""A run of this many characters counts its measured cost instead of its characters' weights."""
RUN_LONG = 256
"""… and each block of this many, inside a longer run, its measured long-run cost."""
RUN_MIN_TEXT = RUN_BLOCK
"""Texts shorter than a block skip the run check."""
_RUN_MARK = bytes(
    1 if (b < 0x80 and chr(b) in RUN_CHARS) or b in (0x00, 0x01, 0x50) else 0 for b in range(256)
)
"""Marks the (low) bytes of run characters: one C scan tells whether any block can exist."""
_RUN_PROBE = b"\x01" * RUN_BLOCK
_STRIDE = 4
_SPARSE = RUN_BLOCK // _STRIDE
"""A run of `RUN_BLOCK` holds this many consecutive samples."""
_SPARSE_PROBE = b"\x01" * _SPARSE
_SPARSE_RUNS = tuple(bytes((byte,)) * _SPARSE for byte in range(256))
"""XOR of consecutive samples: this many zero bytes in a row mark four equal samples."""


_LETTER_CLASSES = (
    bytes(
        ord("a")
        if chr(b).islower()
        else ord("A")
        if chr(b).isupper()
        else ord("0")
        if chr(b).isdigit()
        else ord(" ")
        if chr(b).isspace()
        else ord(".")
        for b in range(128)
    )
    + b" " * 128
)
"""Maps ASCII to its class: ``a`` lowercase, ``A`` uppercase, ``0`` digit, ``.`` other
visible, space otherwise."""


def dense_features(text: str) -> tuple[int, int, int]:
    """Return the transitions of ASCII ``text`` where tokenizers start a new word piece.

    (lowercase letters followed by an uppercase one, letters followed by a digit, symbols
    followed by a letter).
    """
    classes = text.encode("ascii").translate(_LETTER_CLASSES)
    return (
        classes.count(b"aA"),
        classes.count(b"a0") + classes.count(b"A0"),
        classes.count(b".a") + classes.count(b".A"),
    )


_SHORT_TEXT = 512
"""Texts shorter than this are one sample of a few pieces, which per-character weights can
price at a third of their tokens: `_short_run` and the caller look for the shapes that do …"""
_SHORT_MIN = 8
"""… from this many characters (shorter texts are a few tokens: under the floor by one or two
as a text, never as a message, whose framing adds five or more)."""
_SHORT_RUN = RUN_BLOCK // 2
"""Run characters in a row that make a short text a run (the run rule starts at `RUN_BLOCK`) …"""
_SHORT_RUN_SHARE = 2
"""… when at least one character in this many is a run character (a run of 16 inside 300
characters of prose costs a few tokens more than its weights say, not a third of the text)."""
_SHORT_RANDOM = 8
"""A short text without a space reads as a random string (`_random_string`) when one character
in this many is an uppercase letter among lowercase ones or a symbol of `_ODD_SYMBOLS`."""
_ODD_SYMBOLS = b"!#$%&'*;<>?@\\^`|~"
"""Symbols that JSON, paths, URLs and identifiers seldom hold, and random ASCII does."""
_CASE_CLASSES = bytes(
    ord("!")
    if b in _ODD_SYMBOLS
    else ord("a")
    if b < 0x80 and chr(b).islower()
    else ord("A")
    if b < 0x80 and chr(b).isupper()
    else ord(".")
    for b in range(256)
)
"""Maps ASCII to ``!`` an odd symbol, ``a`` lowercase, ``A`` uppercase, ``.`` the rest."""
_SHORT_RUN_PROBE = b"\x01" * _SHORT_RUN
_SPACE = ord(" ")
"""A space, as ``bytes`` membership tests it without an exception (``_SPACE in low``)."""
_LOWER = ord("a")


def _short_run(low: bytes, spaced: bool = False) -> bool:
    r"""Return whether ASCII ``low`` is mostly runs: `_SHORT_RUN` run characters in a row.

    The weights price run characters near zero (inside prose and code they merge into
    words), and the run rule starts at a `RUN_BLOCK`: ``"end" + "\t" * 31`` counts 2 for 5,
    ``"<" * 23`` 1 for 5: in a text of a few such runs (or one, and little else) that is
    most of its tokens. A text of one character repeated is a run whatever the character
    (``"a" * 29``: 2 for 4 by Anthropic's tokenizer).

    ``spaced``: the caller knows ``low`` holds a space and at least `_SHORT_RUN` bytes. One
    character repeated is then spaces, a run character that the marks find: the test for
    it is skipped (two C calls on the usual short argument string).
    """
    if not spaced and not low.strip(low[:1]):
        return True
    marks = low.translate(_RUN_MARK)
    return marks.find(_SHORT_RUN_PROBE) >= 0 and marks.count(1) * _SHORT_RUN_SHARE >= len(low)


def _random_string(low: bytes) -> bool:
    """Return whether the ASCII text ``low`` (without a space) reads as a random string.

    Passwords, keys, base64 and line noise mix cases and hold odd symbols (`_SHORT_RANDOM`).
    Their weights and their dense count can both stay near half their tokens (a 17-character
    one 6 for 14), while JSON arguments, paths and snake_case names have few of either.
    """
    classes = low.translate(_CASE_CLASSES)
    marked = classes.count(b"!")
    if _LOWER in classes:
        marked += classes.count(b"A")
    return marked * _SHORT_RANDOM >= len(low)


_SHORT_ACCENTED = 8
"""A short text with at least one accented Latin letter in this many characters costs at
least ``floor`` × its bytes: the weights price an accented letter as the word it usually sits
in (about a twentieth of a token), but in names, codes and random words each one starts a
new piece."""
_NOT_LATIN_PAGES = bytes(range(3, 256))
"""High bytes of UTF-16 code units outside U+0000–02FF (ASCII, Latin-1, Latin Extended, IPA)."""


def _accented(text: str, high: bytes) -> bool:
    """Return whether one character of ``text`` in `_SHORT_ACCENTED` is Latin beyond ASCII.

    ``high`` holds the high bytes of its UTF-16 code units. Text in another script is ruled
    out by one C call; Latin text pays an ASCII encode more.
    """
    size = len(text)
    latin = len(high.translate(None, _NOT_LATIN_PAGES))
    if latin * _SHORT_ACCENTED < size:
        return False
    return (latin - len(text.encode("ascii", "ignore"))) * _SHORT_ACCENTED >= size


_WORD_CLASSES = bytes(0x20 if b in b" \t\n\v\f\r" else 0x61 for b in range(256))
"""Maps ASCII whitespace (what the tokenizers' ``\\s`` matches) to a space, the rest to ``a``:
``b" a"`` marks a word start, where every family's pre-tokenizer starts a new piece."""
PERIOD_MAX = RUN_BLOCK
"""The longest unit `period` looks for."""
_PERIOD_PROBE = 8
_PERIOD_END = PERIOD_MAX + _PERIOD_PROBE


def period(low: bytes) -> int:
    """Return the length of the unit of at most `PERIOD_MAX` bytes that ``low`` repeats, or 0.

    At least two units and a partial last one; the shortest such unit. The search for the
    first bytes' next occurrence is bounded, so a text that is not periodic costs nearly nothing;
    a text that only starts periodic (indentation, a ``====`` rule) fails on a window in its
    middle or at its end before the whole text is compared.
    """
    size = len(low)
    probe = low[:_PERIOD_PROBE]
    unit = low.find(probe, 1, _PERIOD_END)
    if unit == 1:  # it starts with a run: a unit within the run would make it all one run
        head = low[:_PERIOD_END]
        run = len(head) - len(head.lstrip(probe[:1]))
        if run == len(head):
            return 1 if low[1:] == low[:-1] else 0
        unit = low.find(probe, run + 1, _PERIOD_END)
    while unit > 0 and 2 * unit <= size:
        window = min(_PERIOD_END, size - unit)
        middle = (size - unit - window) // 2
        if (
            low[size - window :] == low[size - window - unit : size - unit]
            and low[middle : middle + window] == low[middle + unit : middle + unit + window]
            and low[unit:] == low[:-unit]
        ):
            return unit
        unit = low.find(probe, unit + 1, _PERIOD_END)
    return 0


_PERIODIC_BLOCK = 4
"""Units a block holds at the least when `periodic_tokens` counts a periodic text by blocks …"""
_PERIODIC_BLOCK_BYTES = 128
"""… and bytes at the least: whitespace units merge across units in some families, and a
block this long repeats the same merges as the next one."""


def periodic_tokens(low: bytes, unit: int, count: Callable[[str], int]) -> int:
    """Return the tokens of ASCII ``low``, which repeats a ``unit``-byte unit, by ``count``.

    ``count`` reads the first block of units with the partial rest and the next block; every
    further block costs what that next one did. A unit with a word start tokenizes alike in
    every repetition, so this is the exact count up to a token at the ends of blocks; a
    whitespace unit that merges with its neighbours does so alike in every block of at
    least `_PERIODIC_BLOCK_BYTES`.
    """
    block = unit * max(_PERIODIC_BLOCK, -(-_PERIODIC_BLOCK_BYTES // unit))
    blocks, rest = divmod(len(low), block)
    if blocks <= 2:
        return count(low.decode("ascii"))
    head = count(low[: block + rest].decode("ascii"))
    step = count(low[: 2 * block + rest].decode("ascii")) - head
    return head + (blocks - 1) * step


_LETTER_RUN_GATE = 0.35
"""A text estimated under this many tokens a character is checked for letter runs
(`_may_hold_letter_run`, then `_letter_runs_in`). The weights price a run of one letter as
letters inside words, or send the text to the dense table, at 0.04-0.25 a character, while
tokenizers split it at 0.12-0.5: a text that is mostly such a run is estimated at 0.2-0.3 a
character. Code and logs are estimated at 0.22-0.35 too (most trajectory texts are under
the gate), so the check is a cheap sampled one and the scan runs only on a candidate."""
_LETTER_RUN = re.compile(rf"([0-9A-Za-z])\1{{{RUN_BLOCK - 1},}}")
_LETTERS_OR_0 = bytes(b if chr(b).isascii() and chr(b).isalnum() else 0 for b in range(256))
_LETTERS_OR_1 = bytes(b if chr(b).isascii() and chr(b).isalnum() else 1 for b in range(256))
_LETTER_STRIDE = 8
_LETTER_SPARSE = RUN_BLOCK // _LETTER_STRIDE
_EQUAL_PROBE = b"\0" * (_LETTER_SPARSE - 1)


def _may_hold_letter_run(low: bytes) -> bool:
    """Return whether a text may hold a run of one letter or digit of `RUN_BLOCK` or more.

    ``low`` holds the text's bytes (the low bytes of its code units). Such a run covers
    `_LETTER_SPARSE` consecutive samples of every `_LETTER_STRIDE`-th byte, all the same
    letter: each sample XOR the next is zero there, `_LETTER_SPARSE` - 1 times in a row
    (non-letters are mapped to 0 on one side and 1 on the other, so they never match). A
    few C passes over an eighth of the text (about 0.6 µs a kilobyte), where the regular
    expression costs 45: false candidates (a letter repeating every `_LETTER_STRIDE`
    characters for a block) go on to the scan, which finds nothing.
    """
    sample = low[::_LETTER_STRIDE]
    size = len(sample)
    if size < _LETTER_SPARSE:
        return False
    # Sample i against sample i + 1: the second number shifted by a byte. The last byte
    # meets nothing (0), so a non-letter there may add one zero: the probe then reports
    # a candidate only with real zeros before it, and the scan decides.
    left = int.from_bytes(sample.translate(_LETTERS_OR_0), "little")
    right = int.from_bytes(sample.translate(_LETTERS_OR_1), "little") >> 8
    return (left ^ right).to_bytes(size, "little").find(_EQUAL_PROBE) >= 0


_SCAN_WINDOW = 1 << 16
"""Characters one regular-expression call scans (`_letter_runs_in`): re holds the GIL."""


def _letter_runs_in(text: str) -> Iterator[tuple[int, int]]:
    """Yield ``(start, end)`` of each run of one ASCII letter or digit of a block or more.

    A regular-expression scan (about 45 µs a kilobyte): callers check the text first
    (`_LETTER_RUN_GATE`, `_may_hold_letter_run`). It scans windows of `_SCAN_WINDOW`
    characters and extends a run that reaches a window's end with ``startswith``: one call
    over a 16 MB run held the GIL for 0.7 s, which stops the event loop even when counting
    in a worker thread. The next window starts a block short of the last one's end, so a
    run across the edge is found whole.
    """
    size = len(text)
    at = 0
    while at < size:
        end = min(size, at + _SCAN_WINDOW)
        stop = at
        for found in _LETTER_RUN.finditer(text, at, end):
            start, stop = found.span()
            if stop == end < size:
                stop = _run_end(text, stop, text[start])
                yield start, stop
                break
            yield start, stop
        at = end if end == size else max(stop, end - (RUN_BLOCK - 1))


def _run_end(text: str, at: int, char: str) -> int:
    """Return where the run of ``char`` going on at ``at`` in ``text`` ends (short C calls)."""
    for step in (4096, 64, 1):
        piece = char * step
        while text.startswith(piece, at):
            at += step
    return at


_Run = tuple[str, float, str, float]
"""(block, what a block saves, long block, what a long block saves more)."""


def _run_savings(text: str, sample: bytes, runs: dict[int, tuple[_Run, ...]]) -> float:
    """Return what the runs of one character in ``text`` save over their weights.

    ``sample`` holds every `_STRIDE`-th low byte of ``text``; ``runs`` maps a low byte to
    the runs of characters with that low byte. A run of `RUN_BLOCK` shows as `_SPARSE`
    equal samples: only characters seen so are counted, in the whole text.
    """
    saved = 0.0
    per_long = RUN_LONG // RUN_BLOCK
    for byte, byte_runs in runs.items():
        if sample.find(_SPARSE_RUNS[byte]) < 0:
            continue
        for block, saving, long_block, long_saving in byte_runs:
            blocks = text.count(block)
            if blocks:
                saved += blocks * saving
                if blocks >= per_long:
                    saved += text.count(long_block) * long_saving
    return saved


def _by_low_byte(runs: Iterable[_Run]) -> dict[int, tuple[_Run, ...]]:
    """Return ``runs`` grouped by the low byte of their character."""
    out: dict[int, tuple[_Run, ...]] = {}
    for run in runs:
        byte = ord(run[0][0]) & 0xFF
        out[byte] = (*out.get(byte, ()), run)
    return out
