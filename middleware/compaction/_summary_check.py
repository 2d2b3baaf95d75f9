"""A summary that keeps the files: before it replaces the early history, check it names them.

A summary may forget the files the agent read and changed, which its next actions name
again. With ``summary_keeps_files=True``, Compaction lists the files the summarised actions
touched (paths in the assistant's tool-call arguments and text, newest first, at most
`MAX_FILES`) that the summary text does not name, and attaches them verbatim under
`FILES_HEADER`; the list of an earlier summary is carried into the next one. The current
task (the newest user message) is always kept word for word after the summary, and task
state (todos, plan) travels as blocks outside the history, so the files are what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from harness.messages import Message

FILES_HEADER: Final = "## Files touched (listed verbatim: the summary did not name them)"
MAX_FILES: Final = 40
"""The most file names attached to one summary (the newest first)."""
_PATH = re.compile(
    r"(?:[\w.-]+/)+[\w-]+\.[A-Za-z]\w{0,5}\b|\b[\w-]+\.(?:py|pyi|js|ts|tsx|go|rs|java|c|h|cpp"
    r"|rb|php|md|rst|txt|json|toml|ya?ml|cfg|ini|sh|sql|html|css)\b"
)


def files_touched(messages: Sequence[Message]) -> list[str]:
    """Return the file paths the assistant's actions in ``messages`` name, newest first."""
    seen: dict[str, None] = {}
    for message in reversed(messages):
        if message.role != "assistant":
            continue
        texts = [message.text, *(c.arguments for c in message.tool_calls)]
        for text in texts:
            for match in reversed(_PATH.findall(text)):
                seen.setdefault(match.strip("./") if match.startswith("./") else match, None)
    return list(seen)


def attached(summary: str | None) -> list[str]:
    """Return the files an earlier summary attached (``[]`` when it attached none)."""
    if not summary or FILES_HEADER not in summary:
        return []
    tail = summary.split(FILES_HEADER, 1)[1].strip().splitlines()
    return [name.strip() for name in tail[0].split(",") if name.strip()] if tail else []


def keep_files(
    text: str, early: Sequence[Message], previous: str | None, *, max_chars: int
) -> tuple[str, list[str]]:
    """Return ``text`` with the files it does not name attached, and those files.

    Files come from the summarised actions (newest first), then from the earlier summary's
    list; at most `MAX_FILES`, and at most ``max_chars`` characters of names.
    """
    names = list(dict.fromkeys([*files_touched(early), *attached(previous)]))
    missing: list[str] = []
    used = len(FILES_HEADER) + 2
    for name in names:
        if name in text or len(missing) == MAX_FILES:
            continue
        used += len(name) + 2
        if used > max_chars:
            break
        missing.append(name)
    if not missing:
        return text, []
    return f"{text.rstrip()}\n\n{FILES_HEADER}\n{', '.join(missing)}", missing
