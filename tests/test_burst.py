"""Many sessions starting at once: their first rounds do not queue behind one another.

The workspace snapshot and the offload sweep used to run in a worker thread per call, so
with many calls at once every first round waited for a thread behind all the others. Now
the workspace files are checked by stat on the event loop (read only when changed) and the
sweep runs once per folder per interval: a round that needs no read prepares without
yielding to another session. Shown without clocks: every request's preparation is logged as
an enter and a leave event, and no other session's event may fall in between.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from harness import HarnessAgent, ModelRequest, ModelResponse, RequestIds, RuntimeContext
from harness.types import Handler
from harness.workspace import Workspace
from middleware import tool_result_offload
from middleware.memory import memory_path
from middleware.tool_result_offload import ToolResultOffload
from middleware.workspace_materials import WorkspaceMaterials
from providers import ScriptedModel

SESSIONS = 200


class Log:
    """Logs when each session's preparation enters the stack and reaches its end."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def enter(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        self.events.append(("enter", request.ids.session_id))
        return await call_next(request)

    async def leave(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        self.events.append(("leave", request.ids.session_id))
        return await call_next(request)

    def interrupted(self) -> set[str]:
        """Return the sessions whose preparation let another session's run in between."""
        found: set[str] = set()
        for i, (kind, session) in enumerate(self.events):
            if kind == "enter" and self.events[i + 1] != ("leave", session):
                found.add(session)
        return found


def small_workspace(root: Path) -> None:
    files = {
        "AGENTS.md": "Run the tests before you answer.\n",
        "MEMORY.md": "- the project uses pytest\n",
        "knowledge/style.md": "Short functions.\n",
        "knowledge/api/errors.md": "Errors say what to do next.\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


async def test_first_rounds_of_a_burst_prepare_without_waiting_for_each_other(
    tmp_path: Path,
) -> None:
    small_workspace(tmp_path)
    remembered = {f"s{i:03d}" for i in range(0, SESSIONS, 20)}  # these users have a memory file
    for session in remembered:
        path = tmp_path / memory_path("user", RequestIds(user_id=f"u-{session}", agent_id="agent"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"MEMORY-OF-u-{session}")
    log = Log()
    model = ScriptedModel(default="Done.")
    agent = HarnessAgent(
        model=model,
        stack=[log.enter, WorkspaceMaterials(), ToolResultOffload(), log.leave],
        workspace=str(tmp_path),
        store="sqlite://",
    )
    await agent.call("warm up", RuntimeContext(user_id="warm", session_id="warm"))
    log.events.clear()

    async with anyio.create_task_group() as group:
        for i in range(SESSIONS):
            session = f"s{i:03d}"
            context = RuntimeContext(user_id=f"u-{session}", session_id=session)
            group.start_soon(agent.call, f"task {i}", context)

    assert len(log.events) == 2 * SESSIONS
    # Only a user whose memory file must be read waits (for a worker thread).
    assert log.interrupted() <= remembered
    for request in model.agent_requests[1:]:
        session = request.ids.session_id
        memory = [b.text for b in request.blocks if b.text.startswith("MEMORY-OF-")]
        assert memory == ([f"MEMORY-OF-u-{session}"] if session in remembered else [])
        assert request.system[-1].text.startswith("Run the tests")


async def test_the_offload_folder_is_swept_once_per_interval_by_any_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = Workspace(tmp_path)
    expired = time.time() - 30 * 24 * 3600

    def plant(name: str) -> Path:
        path = tmp_path / "large_tool_results" / "someone" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("old result")
        os.utime(path, (expired, expired))
        return path

    def agent() -> HarnessAgent:  # a fresh agent and stack each time: the interval is per folder
        return HarnessAgent(
            model=ScriptedModel(default="ok"),
            stack=[ToolResultOffload()],
            workspace=workspace,
            store="sqlite://",
        )

    first = plant("first.txt")
    await agent().call("one")
    assert not first.exists()
    second = plant("second.txt")
    await agent().call("two")
    assert second.exists()  # swept less than SWEEP_INTERVAL_S ago: not again
    monkeypatch.setattr(tool_result_offload, "SWEEP_INTERVAL_S", 0.0)
    await agent().call("three")
    assert not second.exists()
