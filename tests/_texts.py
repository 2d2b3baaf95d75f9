"""Texts of every script and encoding the budget tests feed the stack (deterministic per seed).

Shared by the end-to-end budget promise (`tests.test_budget_promise`) and the estimator's
floor tests (`tests.test_tokens`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def _chars(rng: random.Random, ranges: Sequence[tuple[int, int]], n: int) -> str:
    out = []
    for _ in range(n):
        lo, hi = ranges[rng.randrange(len(ranges))]
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _words(rng: random.Random, alphabet: str, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:n]


def generate(kind: str, n: int, seed: int) -> str:
    """Return ``n`` characters of text class ``kind`` (deterministic for ``seed``)."""
    rng = random.Random(seed)
    if kind == "english":
        return _words(rng, "etaoinshrdlucmfwypvbgkqjxz", n)
    if kind == "hangul":
        return _chars(rng, [(0xAC00, 0xD7A3)], n)
    if kind == "thai":
        return _chars(rng, [(0x0E01, 0x0E4E)], n)
    if kind == "devanagari":
        return _chars(rng, [(0x0900, 0x097F)], n)
    if kind == "arabic":
        return _words(rng, "".join(chr(c) for c in range(0x0621, 0x064B)), n)
    if kind == "cyrillic":
        return _words(rng, "".join(chr(c) for c in range(0x0430, 0x0450)), n)
    if kind == "cjk":
        return _chars(rng, [(0x4E00, 0x9FFF), (0x20000, 0x2A6DF)], n)
    if kind == "emoji":
        return _chars(rng, [(0x1F300, 0x1F5FF), (0x1F900, 0x1F9FF)], n)
    if kind == "fullwidth":
        return _chars(rng, [(0xFF01, 0xFF5E), (0xFF65, 0xFF9F)], n)
    if kind == "private":
        return _chars(rng, [(0xE000, 0xF8FF)], n)
    if kind == "base64":
        return "".join(
            rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
            for _ in range(n)
        )
    if kind == "hexdump":
        lines = []
        for offset in range(0, n, 78):
            data = bytes(rng.randrange(256) for _ in range(16))
            hexes = " ".join(f"{b:02x}" for b in data)
            text = "".join(chr(b) if 32 <= b < 127 else "." for b in data)
            lines.append(f"{offset:08x}  {hexes}  |{text}|")
        return "\n".join(lines)[:n]
    if kind == "digits":
        return "".join(rng.choice("0123456789") for _ in range(n))
    if kind == "spaces":
        return rng.choice([" ", "\r", "\t", "=", "\n"]) * n
    if kind == "periodic":
        unit = _words(rng, "abcdef", rng.randint(2, 12)) + " "
        return (unit * (n // len(unit) + 1))[:n]
    raise AssertionError(kind)


KINDS = [
    "english", "hangul", "thai", "devanagari", "arabic", "cyrillic", "cjk", "emoji",
    "fullwidth", "private", "base64", "hexdump", "digits", "spaces", "periodic",
]  # fmt: skip
