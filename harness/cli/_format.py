"""How the ``harness`` store commands print: tables or JSON lines, times, one-line text, bars.

Shared by ``harness sessions``/``manifests`` (`harness.cli.sessions`), ``harness fragments``
(`harness.cli.fragments`) and ``harness context`` (`harness.cli.context`), so
every command looks the same and ``--json`` means JSON lines and nothing else on stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from harness.manifest import enc_hook

_JSON = msgspec.json.Encoder(enc_hook=enc_hook)
"""Encodes any printed value, manifests' items included."""

BAR_WIDTH = 20
"""Characters of a full `bar`."""


@dataclass
class Output:
    """Where a command's lines go: tables and notes for people, or JSON lines only."""

    as_json: bool

    def json(self, value: Any) -> None:
        """Print one JSON line."""
        sys.stdout.write(_JSON.encode(value).decode() + "\n")

    def text(self, text: str) -> None:
        """Print human text (only in table mode)."""
        sys.stdout.write(text + "\n")

    def note(self, text: str) -> None:
        """Print a human note: stdout for tables, stderr under ``--json``."""
        (sys.stderr if self.as_json else sys.stdout).write(text + "\n")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """Print an aligned table (the last column is not padded)."""
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
            for i, h in enumerate(headers)
        ]
        for row in (headers, *rows):
            cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
            self.text("  ".join([*cells, row[-1]]).rstrip())


def when(at: float) -> str:
    """Return a Unix time as local ``YYYY-MM-DD HH:MM:SS``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def flat(text: str, chars: int = 100) -> str:
    """Return ``text`` on one line (whitespace runs collapsed), cut to ``chars`` with ``…``."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= chars else one_line[: chars - 1] + "…"


def bar(share: float, width: int = BAR_WIDTH) -> str:
    """Return a text bar of ``share`` (0–1, clamped) in eighths of a character, padded to width.

    A share above zero always shows at least a sliver, so a small item is not mistaken for
    an empty one.
    """
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    if share > 0 and eighths == 0:
        eighths = 1
    full, rest = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[rest] if rest else ""
    return ("█" * full + partial).ljust(width)
