"""Asking for a compaction: the state a caller sets and Compaction honours once.

A request is a fresh token in the session's state (``compaction/requested``) and, optionally,
what the summary should focus on (``compaction/focus``). Anyone who holds the session's state
can ask — the model's ``compact_conversation`` tool (`middleware.SessionTools`, or Compaction's
own with ``compact_tool=True``), `harness.agent.HarnessAgent.compact`, and ``harness sessions
compact`` through the store — and the next request of the session compacts: its summary
carries the token (`harness.markers.SUMMARY_REQUEST`), so a request is honoured exactly once,
in whichever process serves the session next.
"""

from __future__ import annotations

from typing import Any, Final

from harness.messages import new_id
from harness.state import AgentState, StateKey

REQUEST_KEY: Final = StateKey("compaction/requested", str, former=("compaction.requested",))
"""The pending request's token (a fresh one per request)."""
FOCUS_KEY: Final = StateKey("compaction/focus", str)
"""What the requested summary should focus on (empty: nothing in particular)."""
FOCUS_CHARS: Final = 1_000
"""A focus is cut to this many characters (it goes into the summary request)."""


def request_compaction(state: AgentState, focus: str | None = None) -> str:
    """Ask for a compaction of ``state``'s history before its next request; return the token."""
    token = new_id()
    state.set(REQUEST_KEY, token)
    state.set(FOCUS_KEY, clean_focus(focus))
    return token


def requested_extensions(extensions: dict[str, Any], focus: str | None = None) -> list[str]:
    """Ask for a compaction in stored ``extensions`` (builtins, as a store keeps them).

    For writers without an `AgentState` (the CLI on the store). Returns the keys changed.
    """
    extensions[REQUEST_KEY.name] = new_id()
    for old in REQUEST_KEY.former:
        extensions.pop(old, None)
    extensions[FOCUS_KEY.name] = clean_focus(focus)
    return [REQUEST_KEY.name, FOCUS_KEY.name]


def clean_focus(focus: str | None) -> str:
    """Return ``focus`` as one line of at most `FOCUS_CHARS` characters ("" for none)."""
    if not focus:
        return ""
    return " ".join(focus.split())[:FOCUS_CHARS]
