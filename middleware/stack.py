"""The default stack: the list the agent uses when given none (copy it, reorder it, extend it)."""

from __future__ import annotations

from harness.types import Middleware


def default_stack() -> list[Middleware]:
    """Return the default middleware list, outermost first."""
    return []
