"""Long-term memory: facts worth keeping beyond one conversation, scoped to who may see them.

Compaction calls a `MemoryStore` on the part of the history it is about to summarise,
*before* summarising it: a summary serves "keep working", memory serves "remember later".
Both can miss details; neither replaces the full session record.

**Scopes.** What one user's session writes must never reach another user's requests, so
the default store, `WorkspaceMemory`, writes **per user**. Shared memory exists only when
configured (``WorkspaceMemory(scope=...)``). `memory_path` is the one layout, used by the
store that writes and by the workspace-materials middleware that loads:

- ``user`` (the default): ``memory/users/<key of the user id>/MEMORY.md``, seen by that
  user only; a request without a user id uses ``memory/sessions/<key of agent and
  session id>/MEMORY.md``, seen by that session only;
- ``agent``: ``memory/agents/<key of the agent id>/MEMORY.md``, seen by every user of the
  agent;
- ``project``: ``MEMORY.md`` at the workspace root, seen by every user of the workspace.

Keys are 128-bit hashes (`harness.workspace.scope_key`), so no id — however hostile —
becomes part of a path, escapes the folder or collides with another. The workspace's own
``MEMORY.md`` is *project* material: written by the project's owner and loaded for every
user, like ``AGENTS.md``; the store writes to it only with ``scope="project"``. An agent
without a workspace (it gets a private scratch one) records nothing.

**Writes** are read-merge-write updates of one file (`Workspace.aupdate_text`): serialised
per file in the process and by ``flock`` across processes, written through a uniquely
named temporary file, so concurrent compactions lose no fact.

The default heuristic costs no model request, so an offline test script is not consumed:

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
from typing import TYPE_CHECKING, Final, Literal, Protocol, get_args, runtime_checkable

from harness.errors import ConfigurationError
from harness.messages import Message
from harness.workspace import Workspace, scope_key

if TYPE_CHECKING:
    from harness.request import ModelRequest, RequestIds

MemoryScope = Literal["user", "agent", "project"]
"""Who shares a memory file: one user (default), every user of an agent, or the project."""
MEMORY_SCOPES: Final[tuple[MemoryScope, ...]] = get_args(MemoryScope)
MEMORY_FOLDER: Final = "memory"
"""The workspace folder of user- and agent-scoped memory files."""
MEMORY_FILE: Final = "MEMORY.md"
"""The memory file's name; at the workspace root it is the project's memory."""

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
_CUE_WORDS = ("remember", "always", "never", "prefer", "from now on", "make sure", "note that")
_PREFIX_WORDS = ("remember", "note", "decision", "lesson")
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile("\r\n|[" + _LINE_BREAKS + "]")
"""What `str.splitlines` splits on (``\\r\\n`` is one break)."""
_CHANGING_TOOLS = re.compile(r"write|edit|create|patch|replace", re.IGNORECASE)
_PATH_KEYS = ("path", "file_path", "filename")
_MAX_FACT_CHARS = 300


def extract_facts(messages: Sequence[Message]) -> list[str]:
    """Return the facts the default heuristic finds in ``messages`` (see the module docstring)."""
    facts: list[str] = []
    changed: list[str] = []
    for message in messages:
        if message.role == "user" and not message.meta("summary"):
            facts.extend(_clip(line) for line in _cued_lines(message.text, _USER_CUES, _CUE_WORDS))
        elif message.role == "assistant":
            facts.extend(
                _clip(line)
                for line in _cued_lines(
                    message.text, _ASSISTANT_PREFIXES, _PREFIX_WORDS, match=True
                )
            )
            for call in message.tool_calls:
                if _CHANGING_TOOLS.search(call.name):
                    path = _path_argument(call.arguments)
                    if path and path not in changed:
                        changed.append(path)
    if changed:
        facts.append("Files changed: " + ", ".join(f"`{p}`" for p in changed[:20]))
    return _unique(facts)


def memory_path(
    scope: MemoryScope,
    ids: RequestIds,
    *,
    folder: str = MEMORY_FOLDER,
    project_file: str = MEMORY_FILE,
) -> str:
    """Return the workspace path of the ``scope`` memory file for a request's ``ids``.

    Args:
        scope: ``user``, ``agent`` or ``project`` (see the module docstring).
        ids: the request's ids (user, agent and session id are used).
        folder: the folder of scoped memory files.
        project_file: the project's memory file at the workspace root.

    Raises:
        ConfigurationError: for an unknown scope.
    """
    if scope == "project":
        return project_file
    if scope == "agent":
        return f"{folder}/agents/{scope_key('agent', ids.agent_id)}/{MEMORY_FILE}"
    if scope == "user":
        if ids.user_id:
            return f"{folder}/users/{scope_key('user', ids.user_id)}/{MEMORY_FILE}"
        # No user id: nothing says two sessions belong to one person, so keep them apart.
        key = scope_key("session", ids.agent_id, ids.session_id)
        return f"{folder}/sessions/{key}/{MEMORY_FILE}"
    raise ConfigurationError(f"memory scope must be one of {MEMORY_SCOPES}, got {scope!r}")


class WorkspaceMemory:
    """Append extracted facts to the scope's Markdown memory file in the workspace.

    Args:
        scope: who shares the file: ``"user"`` (default: each user their own), ``"agent"``
            (every user of the agent) or ``"project"`` (the workspace's ``MEMORY.md``,
            every user). Choose a shared scope only when every user may see every fact.
        folder: the workspace folder of user- and agent-scoped files.
        project_file: the project memory file (written with ``scope="project"`` only).
        workspace: the workspace to write to (default: the agent's, ``request.run.workspace``;
            without one, or with the agent's private scratch workspace, nothing is recorded).
        extract: the fact extractor (default: `extract_facts`).
        max_facts: the most facts appended by one compaction.

    Raises:
        ConfigurationError: for an unknown scope, a bad path or ``max_facts`` that is not
            a positive int.
    """

    def __init__(
        self,
        *,
        scope: MemoryScope = "user",
        folder: str = MEMORY_FOLDER,
        project_file: str = MEMORY_FILE,
        workspace: Workspace | None = None,
        extract: Extractor | None = None,
        max_facts: int = 20,
    ) -> None:
        if scope not in MEMORY_SCOPES:
            raise ConfigurationError(
                f"scope must be one of {MEMORY_SCOPES} ('user' keeps each user's facts "
                f"apart), got {scope!r}"
            )
        for name, value in (("folder", folder), ("project_file", project_file)):
            if not isinstance(value, str) or not value.strip() or value.startswith("/"):
                raise ConfigurationError(f"{name} must be a workspace-relative path, got {value!r}")
        if isinstance(max_facts, bool) or not isinstance(max_facts, int) or max_facts < 1:
            raise ConfigurationError(f"max_facts must be a positive int, got {max_facts!r}")
        if extract is not None and not callable(extract):
            raise ConfigurationError(f"extract must be a function of messages, got {extract!r}")
        if workspace is not None and not isinstance(workspace, Workspace):
            raise ConfigurationError(f"workspace must be a Workspace or None, got {workspace!r}")
        self.scope: MemoryScope = scope
        self.folder = folder
        self.project_file = project_file
        self.workspace = workspace
        self.extract: Extractor = extract or extract_facts
        self.max_facts = max_facts

    def __repr__(self) -> str:
        return f"WorkspaceMemory(scope={self.scope!r}, max_facts={self.max_facts})"

    def path(self, ids: RequestIds) -> str:
        """Return the memory file this store writes for a request's ``ids``."""
        return memory_path(self.scope, ids, folder=self.folder, project_file=self.project_file)

    async def record(self, messages: Sequence[Message], request: ModelRequest) -> int:
        """Append the new facts of ``messages`` to the scope's memory file; return how many.

        Raises:
            WorkspaceError: when the file cannot be read or written.
        """
        workspace = self.workspace or (request.run.workspace if request.run else None)
        if workspace is None or workspace.is_private:
            return 0
        facts = self.extract(messages)[: self.max_facts]
        if not facts:
            return 0
        header = section_header(request.ids.session_id)
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

        def merge(existing: str) -> tuple[str | None, int]:
            present = set(existing.splitlines())
            new = [f for f in facts if f"- {f}" not in present]
            if not new:
                return None, 0
            lead = (
                ""
                if not existing or existing.endswith("\n\n")
                else ("\n" if existing.endswith("\n") else "\n\n")
            )
            section = f"{lead}{header}({stamp})\n" + "".join(f"- {f}\n" for f in new)
            return existing + section, len(new)

        return await workspace.aupdate_text(self.path(request.ids), merge)


DEFAULT_MEMORY: Final = WorkspaceMemory()
"""The store Compaction uses unless told otherwise: per-user memory in the agent's workspace."""


def section_header(session_id: str) -> str:
    """Return how a section that ``session_id``'s compactions appended to a memory file starts."""
    return f"## From session {_clip(session_id or 'default')} "


def visible_memory(text: str, session_id: str) -> str:
    """Return a memory file's text without the sections ``session_id`` itself appended.

    A session's own compactions wrote those facts from messages its summary already covers;
    showing them back would change the stable reference material (rendered before the
    history) right after every compaction, breaking the provider's prompt cache a second
    time for nothing. Other sessions' facts, and anything written by hand, stay.
    """
    header = section_header(session_id)
    if header not in text:
        return text
    kept: list[str] = []
    own = False
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            own = line.startswith(header)
        if not own:
            kept.append(line)
    return "".join(kept).rstrip("\n") + "\n" if kept else ""


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= _MAX_FACT_CHARS else line[: _MAX_FACT_CHARS - 1] + "…"


def _cued_lines(
    text: str, cue: re.Pattern[str], words: tuple[str, ...], *, match: bool = False
) -> list[str]:
    """Return the lines of ``text`` that ``cue`` finds (matches at their start with ``match``).

    Only lines holding a cue word are tested: a substring search on the case-folded text
    finds them (running the regex over every line of a long history cost seconds).
    Case-folding never misses what the ``IGNORECASE`` regex would match (``ſ``, ``K``).
    """
    folded = text.casefold()
    if not any(word in folded for word in words):
        return []
    test = cue.match if match else cue.search
    if len(folded) != len(text):  # a character folded to several: compare line by line
        return [
            line
            for line, low in zip(text.splitlines(), folded.splitlines(), strict=True)
            if any(word in low for word in words) and test(line)
        ]
    # Folding kept every character's place (none grows, so equal lengths mean one for one).
    hits: list[int] = []
    for word in words:
        at = folded.find(word)
        while at >= 0:
            hits.append(at)
            at = folded.find(word, at + 1)
    breaks = [c for c in _LINE_BREAKS if c in text]  # what str.splitlines splits on
    lines: list[str] = []
    done = 0  # where the lines not yet looked at start
    for at in sorted(hits):
        if at < done:
            continue  # on a line already tested
        start = max(text.rfind(c, done, at) for c in breaks) + 1 if breaks else 0
        start = max(start, done)
        found = _LINE_BREAK.search(text, at)
        end = found.start() if found is not None else len(text)
        line = text[start:end]
        if test(line):
            lines.append(line)
        done = found.end() if found is not None else len(text)
    return lines


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
