"""The agent wing: the ReAct loop (`HarnessAgent`) and its permissions.

The names of `harness.agent.loop`, at the path they had before the wing was a package.
"""

from __future__ import annotations

from harness.agent.loop import (
    DEFAULT_STORE_PATH,
    MAX_FAILED_TURNS,
    RUNNING_KEY,
    HarnessAgent,
    RuntimeContext,
    interrupted_results,
)

__all__ = [
    "DEFAULT_STORE_PATH",
    "MAX_FAILED_TURNS",
    "RUNNING_KEY",
    "HarnessAgent",
    "RuntimeContext",
    "interrupted_results",
]
