"""The `harness` command and its sub-commands.

The names of `harness.cli.main`, at the path they had before the wing was a package.
"""

from __future__ import annotations

from harness.cli.main import (
    main,
)

__all__ = [
    "main",
]
