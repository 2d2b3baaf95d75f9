"""The agent wing: the ReAct loop (`HarnessAgent`) and its permissions.

The names of `harness.agent.loop`, at the path they had before the wing was a package, and
the protocols a middleware implements to watch agent calls (`WatchesCalls`).
"""

from __future__ import annotations

from harness.agent._watches import CallWatch, ToolRunWatch, WatchesCalls
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
    "CallWatch",
    "HarnessAgent",
    "RuntimeContext",
    "ToolRunWatch",
    "WatchesCalls",
    "interrupted_results",
]
