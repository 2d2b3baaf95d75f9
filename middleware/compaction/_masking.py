"""Compaction's stage 0 (no model): observation masking and superseded reads.

Both run only in a round that rewrites the history anyway (compaction is due), so the
provider's cached prefix survives the rounds between: masking a little every round would
break it every round. Both change only the working history and mark what they rewrote
(`harness.markers.MASKED`, `SUPERSEDED`), so a message is never rewritten twice.

- **Observation masking** (``mask_observations=M``): every tool output but the newest ``M``
  becomes one line naming how to read it back — ``read_file`` with the path when
  ToolResultOffload put it in a file, else its message id in the session record
  (``session_history`` of SessionTools). SWE-agent's masking of old observations ("The
  Complexity Trap", 2025) cut cost by half at the solve rate of LLM summaries.
- **Superseded reads** (``supersede_reads=True``): a file read or listing that a later call
  repeats with the same arguments, or that a later write to the same path made stale,
  becomes a one-line pointer to that call (Pydantic AI Harness' ``DeduplicateFileReads``).
"""

from __future__ import annotations

import json
import shlex
from typing import Final

from harness.markers import MASKED, OFFLOADED, OFFLOADED_CHARS, SUPERSEDED
from harness.messages import Message, ToolCall
from middleware.compaction._settings import CompactionSettings

MASK_MIN_CHARS: Final = 200
"""A tool output this short stays: its placeholder would be about as long."""
READ_TOOLS: Final = frozenset(
    {
        "read_file",
        "open",
        "open_file",
        "view",
        "view_file",
        "cat",
        "read",
        "ls",
        "list_dir",
        "list_files",
        "list_directory",
        "find_file",
    }
)
"""Tool names that read a file or list a folder (their output is a snapshot of the target)."""
WRITE_TOOLS: Final = frozenset(
    {"write_file", "edit_file", "create", "create_file", "write", "str_replace", "apply_patch"}
)
"""Tool names that change the file their path argument names."""
PATH_KEYS: Final = ("path", "file_path", "filename", "file", "file_name", "dir", "directory")
SHELL_READS: Final = frozenset({"cat", "ls", "head", "tail", "nl"})
"""Shell commands (the ``bash``/``shell`` tool's first word) that read their one argument."""


def mask_observations(
    settings: CompactionSettings, history: tuple[Message, ...]
) -> tuple[tuple[Message, ...], list[str]]:
    """Replace every tool output but the newest ``settings.mask_observations`` by one line.

    The results the model has not answered yet (the trailing run) are never masked.
    Returns the new history and the ids of the masked originals.
    """
    keep = settings.mask_observations
    if keep is None:
        return history, []
    tail = len(history)
    while tail > 0 and history[tail - 1].role == "tool":
        tail -= 1
    tools = [i for i, m in enumerate(history) if m.role == "tool"]
    old = [i for i in tools[: max(0, len(tools) - keep)] if i < tail]
    out: list[Message] | None = None
    masked: list[str] = []
    for i in old:
        message = history[i]
        content = message.content
        if (
            not isinstance(content, str)
            or len(content) < MASK_MIN_CHARS
            or message.meta(MASKED)
            or message.meta(SUPERSEDED)
        ):
            continue
        if out is None:
            out = list(history)
        origin = str(message.meta("origin_id") or message.id)
        out[i] = message.revise("mask", metadata={MASKED: True}, content=_placeholder(message))
        masked.append(origin)
    return (tuple(out), masked) if out is not None else (history, [])


def _placeholder(message: Message) -> str:
    text = message.text
    chars = int(message.meta(OFFLOADED_CHARS) or len(text))
    lines = len(text.splitlines())
    what = f"[old {message.name or 'tool'} output masked: {lines} lines, {chars:,} characters; "
    path = message.meta(OFFLOADED)
    if isinstance(path, str) and path:
        return what + f'read it back with read_file(path="{path}") if you need it]'
    origin = message.meta("origin_id") or message.id
    return what + f"the original is message {origin} in the session record if you need it]"


def supersede_reads(
    history: tuple[Message, ...],
) -> tuple[tuple[Message, ...], list[str]]:
    """Replace each read or listing that a later call repeats or makes stale by a pointer.

    Returns the new history and the ids of the replaced originals. The trailing run of
    results (not yet answered) is never replaced; the later call may be anywhere after.
    """
    calls: list[tuple[int, ToolCall, str | None, bool]] = []  # index, call, target, is write
    for i, message in enumerate(history):
        for call in message.tool_calls:
            target, write = _target(call)
            calls.append((i, call, target, write))
    if not calls:
        return history, []
    tail = len(history)
    while tail > 0 and history[tail - 1].role == "tool":
        tail -= 1
    later_read: dict[tuple[str, str], str] = {}  # (name, arguments) → the latest call id
    later_write: dict[str, str] = {}  # target → the latest write's call id
    stale: dict[str, tuple[str, str]] = {}  # call id of a read → (why, the later call id)
    for _, call, target, write in reversed(calls):
        if write:
            if target is not None:
                later_write[target] = call.id
            continue
        if target is None:
            continue
        key = (call.name, _normal(call.arguments))
        if target in later_write:
            stale[call.id] = ("changed by a later write", later_write[target])
        elif key in later_read:
            stale[call.id] = ("read again later", later_read[key])
        later_read.setdefault(key, call.id)
    if not stale:
        return history, []
    out: list[Message] | None = None
    done: list[str] = []
    for i, message in enumerate(history[:tail]):
        if message.role != "tool" or message.tool_call_id not in stale:
            continue
        if message.meta(SUPERSEDED) or len(message.text) < MASK_MIN_CHARS:
            continue
        why, later = stale[message.tool_call_id or ""]
        if out is None:
            out = list(history)
        out[i] = message.revise(
            "superseded",
            metadata={SUPERSEDED: later},
            content=f"[superseded: this {message.name or 'tool'} output was {why} "
            f"(call {later}); see that call's result]",
        )
        done.append(str(message.meta("origin_id") or message.id))
    return (tuple(out), done) if out is not None else (history, [])


def _normal(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except ValueError:
        return arguments


def _target(call: ToolCall) -> tuple[str | None, bool]:
    """Return the path a call reads or writes (``None``: not a file call) and if it writes."""
    name = call.name.lower()
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return None, False
    if not isinstance(arguments, dict):
        return None, False
    if name in ("bash", "shell", "run", "execute", "terminal"):
        command = arguments.get("command") or arguments.get("cmd")
        if not isinstance(command, str) or any(c in command for c in "|;&><`$"):
            return None, False
        try:
            words = shlex.split(command)
        except ValueError:
            return None, False
        if len(words) == 2 and words[0] in SHELL_READS:
            return words[1], False
        return None, False
    path = next((arguments[k] for k in PATH_KEYS if isinstance(arguments.get(k), str)), None)
    if path is None:
        return None, False
    if name in WRITE_TOOLS:
        return path, True
    if name in READ_TOOLS:
        return path, False
    return None, False
