"""The real agent runs in ``../shared/data/swe-agent-trajectories``, read as messages.

The one reader of SWE-agent ``.traj`` files for the benchmarks, the estimator fit and the
tests. Each file's ``history`` holds OpenAI-style messages whose ``content`` is a string or
a list of parts and whose ``tool_calls`` / ``tool_call_ids`` are lists or JSON /
Python-literal strings; both are parsed, and SWE-agent's own keys (``thought``, ``action``,
``agent``, ``message_type`` …) are dropped.

Two views of a file:

- `read_history`: every chat message as recorded, system messages included (what the
  token-estimation workloads count);
- `load_trajectory`: a `Trajectory` — the system text split off (it becomes an agent's
  system prompt) and the tool pairs repaired with `paired` (what a replay feeds an agent).

A user's clone has no ``../shared``: `load_trajectories` then returns ``[]`` and callers fall
back to the generated runs of `benchmarks.generators`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.messages import Message, ToolCall

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED = PROJECT_ROOT.parent / "shared"
"""The shared data folder next to the project root (absent in a user's clone)."""
TRAJECTORY_DIR = SHARED / "data" / "swe-agent-trajectories"
NO_OUTPUT = "(no output recorded)"
"""The text of the tool result `paired` adds for a call the recording never answered."""


@dataclass(frozen=True)
class Trajectory:
    """One recorded (or generated) agent run: its system prompt and its messages."""

    name: str
    system: str
    messages: tuple[Message, ...]


def parse_listish(value: Any) -> list[Any]:
    """Return a list from a list, a JSON string or a Python-literal string (``[]`` for none)."""
    if value is None or value == "":
        return []
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                return [value]
        return list(parsed) if isinstance(parsed, list | tuple) else [parsed]
    return [value]


def _content(raw: Any) -> str | list[dict[str, Any]] | None:
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        parts = []
        for part in raw:
            if isinstance(part, dict) and isinstance(part.get("type"), str):
                parts.append(part)
            elif isinstance(part, str):
                parts.append({"type": "text", "text": part})
        return parts
    return str(raw)


def normalise(raw: dict[str, Any]) -> dict[str, Any] | None:
    """Return a clean OpenAI chat-message dict for one trajectory entry (``None``: skip it)."""
    role = raw.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        return None
    out: dict[str, Any] = {"role": role, "content": _content(raw.get("content"))}
    if role == "assistant":
        calls = []
        for i, call in enumerate(parse_listish(raw.get("tool_calls"))):
            if not isinstance(call, dict):
                continue
            raw_function = call.get("function")
            function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
            name = str(function.get("name") or call.get("name") or "tool")
            arguments = function.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            calls.append(
                {
                    "id": str(call.get("id") or f"call_{i}"),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        if calls:
            out["tool_calls"] = calls
    if role == "tool":
        ids = parse_listish(raw.get("tool_call_ids"))
        call_id = raw.get("tool_call_id") or (str(ids[0]) if ids else None)
        out["tool_call_id"] = str(call_id) if call_id else "call_unknown"
    return out


def read_history(path: Path) -> list[Message]:
    """Return every chat message of one ``.traj`` file's ``history``, as recorded."""
    data = json.loads(path.read_text(encoding="utf-8"))
    messages = []
    for raw in data.get("history", []):
        clean = normalise(raw) if isinstance(raw, dict) else None
        if clean is not None:
            messages.append(Message.from_openai(clean))
    return messages


def paired(messages: Sequence[Message]) -> list[Message]:
    """Return ``messages`` with every tool call answered and no orphan tool result.

    A call without a recorded result gets a `NO_OUTPUT` result; a tool message that answers
    no call of the assistant message before it is dropped. Tool results are named after
    their call, as the agent names them when it runs a tool.
    """
    out: list[Message] = []
    open_calls: dict[str, ToolCall] = {}

    def close() -> None:
        for call in open_calls.values():
            out.append(Message.tool(call.id, NO_OUTPUT, name=call.name))
        open_calls.clear()

    for message in messages:
        if message.role == "tool":
            call = open_calls.pop(message.tool_call_id or "", None)
            if call is not None:
                out.append(message.replace(name=call.name))
            continue
        close()
        out.append(message)
        if message.role == "assistant":
            open_calls.update((c.id, c) for c in message.tool_calls)
    close()
    return out


def load_trajectory(path: Path) -> Trajectory:
    """Return one ``.traj`` file as a `Trajectory`: system text split off, pairs repaired."""
    history = read_history(path)
    system = [m.text for m in history if m.role == "system"]
    rest = [m for m in history if m.role != "system"]
    return Trajectory(path.stem, "\n\n".join(system), tuple(paired(rest)))


def trajectory_files(directory: Path = TRAJECTORY_DIR) -> list[Path]:
    """Return the ``.traj`` files in ``directory``, sorted by name (``[]`` when absent)."""
    return sorted(directory.glob("*.traj")) if directory.is_dir() else []


def load_trajectories(directory: Path = TRAJECTORY_DIR) -> list[Trajectory]:
    """Return every trajectory in ``directory``, sorted by file name (``[]`` when absent)."""
    return [load_trajectory(p) for p in trajectory_files(directory)]
