"""Long-term memory: facts worth keeping beyond one conversation.

Compaction calls a `MemoryStore` on the part of the history it is about to summarise,
*before* summarising it: a summary serves "keep working", memory serves "remember later".
Both can miss details; neither replaces the full session record.

The default store, `WorkspaceMemory`, appends to the workspace's ``MEMORY.md`` (which the
workspace-materials middleware loads as reference material at the start of the next agent
call). It uses a cheap, predictable heuristic instead of a model call, so compaction costs
no extra model request and an offline test script is not consumed by it:

- lines of **user** messages that state something lasting — they contain *remember*,
  *always*, *never*, *prefer*, *from now on*, *make sure* or *note that*;
- lines of **assistant** messages that start with ``Remember:``, ``Note:``,
  ``Decision:`` or ``Lesson:``;
- the **files the agent changed**: the ``path`` / ``file_path`` / ``filename`` argument of
  calls to tools whose name contains ``write``, ``edit``, ``create``, ``patch`` or ``replace``.

Facts already present in the file are not appended again, so a compaction that is redone
(after a failed request) does not duplicate them. Pass ``extract=`` for your own
heuristic, or implement `MemoryStore` (for example with a model call) for anything richer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import anyio.to_thread

from harness.errors import ConfigurationError
from harness.messages import Message

if TYPE_CHECKING:
    from harness.request import ModelRequest
    from harness.workspace import Workspace

Extractor = Callable[[Sequence[Message]], list[str]]
"""A function from messages to short fact strings (one line each)."""


@runtime_checkable
class MemoryStore(Protocol):
    """Where long-term facts go before early messages are summarised away."""

    async def record(self, messages: Sequence[Message], request: ModelRequest) -> int:
        """Extract and store the lasting facts of ``messages``.

        Args:
            messages: the messages about to be compacted, oldest first.
            request: the request being prepared (ids, workspace and client via ``request.run``).

        Returns:
            How many facts were stored (0 when nothing was worth keeping).
        """
        ...


_USER_CUES = re.compile(
    r"\b(remember|always|never|prefer|from now on|make sure|note that)\b", re.IGNORECASE
)
_ASSISTANT_PREFIXES = re.compile(r"^\s*(remember|note|decision|lesson)\s*:", re.IGNORECASE)
_CHANGING_TOOLS = re.compile(r"write|edit|create|patch|replace", re.IGNORECASE)
_PATH_KEYS = ("path", "file_path", "filename")
_MAX_FACT_CHARS = 300


def extract_facts(messages: Sequence[Message]) -> list[str]:
    """Return the facts the default heuristic finds in ``messages`` (see the module docstring)."""
    facts: list[str] = []
    changed: list[str] = []
    for message in messages:
        if message.role == "user" and not message.meta("summary"):
            facts.extend(
                _clip(line) for line in message.text.splitlines() if _USER_CUES.search(line)
            )
        elif message.role == "assistant":
            facts.extend(
                _clip(line) for line in message.text.splitlines() if _ASSISTANT_PREFIXES.match(line)
            )
            for call in message.tool_calls:
                if _CHANGING_TOOLS.search(call.name):
                    path = _path_argument(call.arguments)
                    if path and path not in changed:
                        changed.append(path)
    if changed:
        facts.append("Files changed: " + ", ".join(f"`{p}`" for p in changed[:20]))
    return _unique(facts)


class WorkspaceMemory:
    """Append extracted facts to a Markdown file in the workspace (``MEMORY.md``).

    Args:
        path: the workspace-relative file to append to.
        workspace: the workspace to write to (default: the agent's, ``request.run.workspace``;
            without one, nothing is recorded).
        extract: the fact extractor (default: `extract_facts`).
        max_facts: the most facts appended by one compaction.

    Raises:
        ConfigurationError: when ``path`` is empty or ``max_facts`` is not a positive int.
    """

    def __init__(
        self,
        *,
        path: str = "MEMORY.md",
        workspace: Workspace | None = None,
        extract: Extractor | None = None,
        max_facts: int = 20,
    ) -> None:
        if not isinstance(path, str) or not path.strip():
            raise ConfigurationError(f"path must be a workspace-relative file name, got {path!r}")
        if isinstance(max_facts, bool) or not isinstance(max_facts, int) or max_facts < 1:
            raise ConfigurationError(f"max_facts must be a positive int, got {max_facts!r}")
        if extract is not None and not callable(extract):
            raise ConfigurationError(f"extract must be a function of messages, got {extract!r}")
        self.path = path
        self.workspace = workspace
        self.extract: Extractor = extract or extract_facts
        self.max_facts = max_facts

    def __repr__(self) -> str:
        return f"WorkspaceMemory(path={self.path!r}, max_facts={self.max_facts})"

    async def record(self, messages: Sequence[Message], request: ModelRequest) -> int:
        """Append the new facts of ``messages`` to the memory file; return how many.

        Raises:
            WorkspaceError: when the file cannot be read or written.
        """
        workspace = self.workspace or (request.run.workspace if request.run else None)
        if workspace is None:
            return 0
        facts = self.extract(messages)[: self.max_facts]
        if not facts:
            return 0
        session = request.ids.session_id or "default"
        return await anyio.to_thread.run_sync(self._append, workspace, facts, session)

    def _append(self, workspace: Workspace, facts: list[str], session: str) -> int:
        existing = workspace.read_text(self.path) if workspace.exists(self.path) else ""
        new = [f for f in facts if f"- {f}" not in existing]
        if not new:
            return 0
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        lead = (
            ""
            if not existing or existing.endswith("\n\n")
            else ("\n" if existing.endswith("\n") else "\n\n")
        )
        section = f"{lead}## From session {session} ({stamp})\n" + "".join(f"- {f}\n" for f in new)
        workspace.write_text(self.path, existing + section)
        return len(new)


DEFAULT_MEMORY: Final = WorkspaceMemory()
"""The store Compaction uses unless told otherwise: ``MEMORY.md`` in the agent's workspace."""


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= _MAX_FACT_CHARS else line[: _MAX_FACT_CHARS - 1] + "…"


def _unique(items: list[str]) -> list[str]:
    return [x for x in dict.fromkeys(items) if x]


def _path_argument(arguments: str) -> str | None:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    for key in _PATH_KEYS:
        value = parsed.get(key)
        if isinstance(value, str) and value:
            return value
    return None
