"""Long-term memory: scopes and layout, hostile ids, and no fact lost under concurrency."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import anyio
import pytest

from harness import Message, ModelRequest, RequestIds, RunScope, Workspace
from harness.errors import ConfigurationError
from harness.workspace import scope_key
from middleware.memory import MEMORY_SCOPES, WorkspaceMemory, memory_path, visible_memory

HOSTILE_IDS = [
    "",
    "../../etc/passwd",
    "/abs/path",
    "a/b\\c",
    "nul\x00byte",
    "line\nbreak",
    "ünïcödé-用户",
    "x" * 5_000,
    "\ud800lone",
    "MEMORY.md",
    ".",
]


def request(
    ws: Workspace | None, *, user: str = "u", session: str = "s", agent: str = "a"
) -> ModelRequest:
    ids = RequestIds(user_id=user, session_id=session, agent_id=agent)
    return ModelRequest(model="m", ids=ids, run=RunScope(workspace=ws))


def facts(*lines: str) -> list[Message]:
    return [Message.user(f"Remember: {line}") for line in lines]


# ------------------------------------------------------------------ layout
def test_each_scope_has_its_own_file() -> None:
    ids = RequestIds(user_id="alice", session_id="s1", agent_id="helper")
    assert memory_path("project", ids) == "MEMORY.md"
    assert memory_path("agent", ids) == f"memory/agents/{scope_key('agent', 'helper')}/MEMORY.md"
    assert memory_path("user", ids) == f"memory/users/{scope_key('user', 'alice')}/MEMORY.md"
    anonymous = RequestIds(session_id="s1", agent_id="helper")
    assert memory_path("user", anonymous) == (
        f"memory/sessions/{scope_key('session', 'helper', 's1')}/MEMORY.md"
    )
    assert MEMORY_SCOPES == ("user", "agent", "project")
    with pytest.raises(ConfigurationError):
        memory_path("everyone", ids)  # type: ignore[arg-type]


def test_hostile_ids_give_distinct_plain_paths_inside_the_folder() -> None:
    paths = set()
    for user in HOSTILE_IDS:
        path = memory_path("user", RequestIds(user_id=user, session_id="s"))
        assert re.fullmatch(r"memory/(users|sessions)/[0-9a-f]{32}/MEMORY\.md", path), path
        paths.add(path)
    assert len(paths) == len(HOSTILE_IDS)
    # The parts of a key are length-prefixed: no two splits of the same characters meet.
    assert scope_key("session", "ab", "c") != scope_key("session", "a", "bc")
    assert scope_key("user", "x") != scope_key("agent", "x")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scope": "global"},
        {"folder": ""},
        {"folder": "/abs"},
        {"project_file": " "},
        {"max_facts": 0},
        {"max_facts": True},
        {"extract": "not callable"},
        {"workspace": "/tmp/ws"},
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        WorkspaceMemory(**kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------- recording
async def test_default_scope_is_per_user_and_the_project_file_is_untouched(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.write_text("MEMORY.md", "# Project memory\n- hand-written\n")
    store = WorkspaceMemory()
    assert store.scope == "user"
    assert await store.record(facts("alice likes tabs"), request(ws, user="alice")) == 1
    assert await store.record(facts("bob likes spaces"), request(ws, user="bob")) == 1
    alice = ws.read_text(store.path(RequestIds(user_id="alice")))
    bob = ws.read_text(store.path(RequestIds(user_id="bob")))
    assert "alice likes tabs" in alice and "bob" not in alice
    assert "bob likes spaces" in bob and "alice" not in bob
    assert ws.read_text("MEMORY.md") == "# Project memory\n- hand-written\n"
    # The same fact again is not appended twice.
    assert await store.record(facts("alice likes tabs"), request(ws, user="alice")) == 0
    assert ws.read_text(store.path(RequestIds(user_id="alice"))) == alice


async def test_hostile_ids_stay_inside_the_memory_folder(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    store = WorkspaceMemory()
    for n, user in enumerate(HOSTILE_IDS):
        assert await store.record(facts(f"fact {n}"), request(ws, user=user, session=user)) == 1
    written = sorted(
        p.relative_to(tmp_path / "ws") for p in (tmp_path / "ws").rglob("*") if p.is_file()
    )
    assert len(written) == len(HOSTILE_IDS)
    assert all(str(p).startswith("memory/") for p in written)
    assert sorted(os.listdir(tmp_path)) == ["ws"]


async def test_shared_scopes_only_when_configured(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    agent_store = WorkspaceMemory(scope="agent")
    await agent_store.record(
        facts("shared by the agent"), request(ws, user="alice", agent="helper")
    )
    assert "shared by the agent" in ws.read_text(agent_store.path(RequestIds(agent_id="helper")))
    assert not ws.exists("memory/users") and not ws.exists("MEMORY.md")
    project_store = WorkspaceMemory(scope="project")
    ws.write_text("MEMORY.md", "# Memory\n")
    await project_store.record(facts("for the whole project"), request(ws, user="bob"))
    assert ws.read_text("MEMORY.md").startswith("# Memory\n\n## From session s (")
    assert "- Remember: for the whole project\n" in ws.read_text("MEMORY.md")


async def test_no_workspace_or_a_private_one_records_nothing() -> None:
    store = WorkspaceMemory()
    assert await store.record(facts("x"), request(None)) == 0
    private = Workspace.private()
    assert await store.record(facts("x"), request(private)) == 0
    assert private.list("", recursive=True) == []


async def test_a_session_id_cannot_inject_markdown(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    store = WorkspaceMemory()
    await store.record(facts("ok"), request(ws, session="s\n- injected fact\n## x"))
    text = ws.read_text(store.path(RequestIds(user_id="u")))
    assert "\n- injected fact" not in text and text.count("\n## ") == 0


# --------------------------------------------------------------- concurrency
async def test_sixty_concurrent_writers_lose_no_fact(tmp_path: Path) -> None:
    """60 compactions of one user at once: every fact is stored, nothing is left behind."""
    ws = Workspace(tmp_path)
    ws.write_text(
        WorkspaceMemory().path(RequestIds(user_id="u")),
        "# Memory\n" + "".join(f"- old fact {i} {'x' * 200}\n" for i in range(2_000)),
    )
    store = WorkspaceMemory()
    stored: list[int] = []

    async def one(i: int) -> None:
        stored.append(
            await store.record(facts(f"fact number {i:03d}"), request(ws, session=f"s{i}"))
        )

    async with anyio.create_task_group() as tg:
        for i in range(60):
            tg.start_soon(one, i)
    text = ws.read_text(store.path(RequestIds(user_id="u")))
    assert stored == [1] * 60
    assert [i for i in range(60) if f"- Remember: fact number {i:03d}\n" not in text] == []
    assert text.count("- old fact ") == 2_000
    assert ws.list("", recursive=True) == [store.path(RequestIds(user_id="u"))]  # no temp files


def test_writers_in_many_event_loops_and_threads_lose_no_fact(tmp_path: Path) -> None:
    """8 threads, each its own event loop with 10 writers, on one file (the flock path)."""
    ws = Workspace(tmp_path)
    store = WorkspaceMemory(scope="project")
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def thread(t: int) -> None:
        async def writers() -> None:
            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(store.record, facts(f"fact {t}-{i}"), request(ws))

        barrier.wait()
        try:
            anyio.run(writers)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = ws.read_text("MEMORY.md")
    missing = [f"{t}-{i}" for t in range(8) for i in range(10) if f"fact {t}-{i}\n" not in text]
    assert missing == []


def test_concurrent_plain_writes_use_unique_temporary_files(tmp_path: Path) -> None:
    """50 threads replace one file at once: none fails, the file is one writer's whole text."""
    ws = Workspace(tmp_path)
    barrier = threading.Barrier(50)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        barrier.wait()
        try:
            ws.write_text("notes.md", f"writer {i:02d}\n" * 5_000)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = ws.read_text("notes.md")
    assert len(set(text.splitlines())) == 1 and len(text.splitlines()) == 5_000
    assert os.listdir(tmp_path) == ["notes.md"]


# ------------------------------------------------------- what a session sees
async def test_a_session_does_not_see_its_own_compactions_facts(tmp_path: Path) -> None:
    # A session's own facts are already in its summary; showing them back would change the
    # reference material before the history after each compaction (a prompt-cache break).
    ws = Workspace(tmp_path)
    store = WorkspaceMemory()
    path = store.path(RequestIds(user_id="alice"))
    ws.write_text(path, "# Alice\n- written by hand\n")
    await store.record(facts("tabs, not spaces"), request(ws, user="alice", session="s1"))
    await store.record(facts("run the linter"), request(ws, user="alice", session="s10"))
    await store.record(facts("tests first"), request(ws, user="alice", session="s1"))
    text = ws.read_text(path)

    own = visible_memory(text, "s1")
    assert "written by hand" in own and "run the linter" in own
    assert "tabs" not in own and "tests first" not in own
    other = visible_memory(text, "s10")
    assert "tabs" in other and "tests first" in other and "run the linter" not in other
    assert visible_memory(text, "s2") == text


async def test_the_memory_block_leaves_out_the_sessions_own_facts(tmp_path: Path) -> None:
    from harness import HarnessAgent, RuntimeContext
    from middleware import WorkspaceMaterials
    from providers import ScriptedModel

    ws = Workspace(tmp_path)
    store = WorkspaceMemory()
    await store.record(facts("tabs, not spaces"), request(ws, user="alice", session="s1"))
    await store.record(facts("run the linter"), request(ws, user="alice", session="s2"))
    model = ScriptedModel(["ok"])
    agent = HarnessAgent(model=model, stack=[WorkspaceMaterials()], workspace=ws)
    await agent.call("hi", RuntimeContext(user_id="alice", agent_id="a", session_id="s1"))
    blocks = [b.text for b in model.agent_requests[0].blocks if b.category == "memory"]
    assert len(blocks) == 1 and "run the linter" in blocks[0] and "tabs" not in blocks[0]
