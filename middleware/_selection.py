"""Selection policies: the order in which optional blocks are left out when the budget is short.

A policy only orders the *optional* blocks; it never sees System parts, required blocks or
task-state blocks, so it cannot remove them. `BudgetFit` drops blocks from the front of the
order until the rest fits, so the blocks it omits are always the first ones in the order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError

DROP_FIRST_CATEGORIES: tuple[str, ...] = ("memory", "knowledge")
"""Categories the default policy leaves out before any other optional material."""


@runtime_checkable
class SelectionPolicy(Protocol):
    """Orders optional blocks for dropping: the first block returned is dropped first."""

    def drop_order(self, blocks: Sequence[ContextBlock]) -> Sequence[ContextBlock]:
        """Return ``blocks`` (the same objects, each exactly once) in drop order."""
        ...


class DefaultSelection:
    """Drop memory and knowledge first, then other optional material; lowest priority first.

    Within one group, a lower ``priority`` is dropped first. Ties are broken towards the
    larger block (more text), then towards the later one, so the order is deterministic and
    one sort gives it (O(n log n)).

    Args:
        drop_first: categories dropped before all others (default: memory, knowledge).
    """

    def __init__(self, *, drop_first: Iterable[str] = DROP_FIRST_CATEGORIES) -> None:
        if isinstance(drop_first, str):
            raise ConfigurationError(
                f"drop_first must be a collection of category names, not the string "
                f"{drop_first!r}; write drop_first=({drop_first!r},)"
            )
        self.drop_first = frozenset(drop_first)

    def __repr__(self) -> str:
        return f"DefaultSelection(drop_first={sorted(self.drop_first)!r})"

    def drop_order(self, blocks: Sequence[ContextBlock]) -> list[ContextBlock]:
        """Return ``blocks`` in the order they are dropped."""
        first = self.drop_first
        keys = [
            (0 if b.category in first else 1, b.priority, -len(b.text), -i)
            for i, b in enumerate(blocks)
        ]
        keys.sort()
        return [blocks[-key[3]] for key in keys]
