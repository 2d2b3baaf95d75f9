"""Isolation through ``read_file``: user B's model tries every path to user A's data.

One agent, one local workspace, the default store inside it (``.harness/sessions.db`` in
WAL mode, open while B reads). User A's session leaves its secret in the store (history),
in an offloaded tool result and in A's long-term memory file. User B's model then asks
``read_file`` for each of them: directly, through ``..``, another letter case, symlinks,
hard links (also into B's own offload folder) and a copy of the database under a harmless
name. Every answer is an error result and holds nothing of A's; B's own material and the
project's files still read.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from harness import HarnessAgent, Message, ModelRequest, RuntimeContext, ToolCall, Workspace
from harness.request import RequestIds
from harness.state import AgentState
from harness.tools import ToolContext
from harness.workspace import scope_key
from middleware.memory import memory_path
from middleware.tool_result_offload import ToolResultOffload
from middleware.tool_result_offload._read_file import read_file_tool, session_key
from providers import ScriptedModel

AGENT = "helper"


def calls(paths: list[str]) -> Message:
    return Message.assistant(
        None,
        tool_calls=[
            ToolCall(id=f"c{i}", name="read_file", arguments=json.dumps({"path": p}))
            for i, p in enumerate(paths)
        ],
    )


def results(request: ModelRequest) -> dict[str, str]:
    return {m.tool_call_id or "": m.text for m in request.history if m.role == "tool"}


def alice_files(ws: Path) -> dict[str, str]:
    """Return A's data files (workspace-relative), once A's session has run."""
    ids = RequestIds(agent_id=AGENT, user_id="alice", session_id="s-a")
    offloads = sorted((ws / "large_tool_results" / session_key("s-a", "alice")).iterdir())
    assert offloads, "A's big result was not offloaded"
    return {
        "db": ".harness/sessions.db",
        "wal": ".harness/sessions.db-wal",
        "shm": ".harness/sessions.db-shm",
        "memory": memory_path("user", ids),
        "offload": str(offloads[0].relative_to(ws)),
    }


@pytest.fixture
async def attack(tmp_path: Path) -> tuple[HarnessAgent, ScriptedModel, Path, str]:
    """Run A's session; return B's agent, model, the workspace folder and A's secret."""
    root = tmp_path / "ws"
    ws = Workspace(root)
    secret = f"pelican{uuid.uuid4().hex[:12]}"

    def lookup(topic: str) -> str:
        """Look a topic up.

        Args:
            topic: what to look up.
        """
        return f"report on {topic}: {secret}\n" + f"row {secret}\n" * 3_000

    model = ScriptedModel([ScriptedModel.tool_call("lookup", {"topic": "x"}), "noted"])
    agent = HarnessAgent(
        model=model,
        tools=[lookup],
        stack=[ToolResultOffload(max_result_chars=1_000, preview_chars=100)],
        workspace=ws,
        agent_id=AGENT,
    )
    await agent.call(f"my code word is {secret}", RuntimeContext(user_id="alice", session_id="s-a"))
    ws.write_text(
        memory_path("user", RequestIds(agent_id=AGENT, user_id="alice", session_id="s-a")),
        f"# Memory\n- Alice's code word is {secret}\n",
    )
    # The attack is real: A's secret is in the files B will ask for.
    store_bytes = b"".join(
        (root / ".harness" / n).read_bytes()
        for n in ("sessions.db", "sessions.db-wal")
        if (root / ".harness" / n).exists()
    )
    assert secret.encode() in store_bytes
    return agent, model, root, secret


async def test_user_b_reads_nothing_of_user_a_through_read_file(
    attack: tuple[HarnessAgent, ScriptedModel, Path, str],
) -> None:
    agent, model, root, secret = attack
    files = alice_files(root)
    for name, rel in files.items():
        assert (root / rel).exists(), name
    notes = root / "notes"
    notes.mkdir()
    own = root / "large_tool_results" / session_key("s-b", "bob")
    own.mkdir(parents=True)
    for name, rel in files.items():
        os.symlink(root / rel, notes / f"link-{name}")
        os.link(root / rel, notes / f"hard-{name}")
        os.link(root / rel, own / f"hard-{name}.txt")
    os.symlink(root / ".harness", notes / "store-folder")
    os.symlink(root / os.path.dirname(files["memory"]), notes / "memory-folder")
    os.symlink(root / os.path.dirname(files["offload"]), notes / "offload-folder")
    shutil.copyfile(root / files["db"], notes / "copy.txt")
    shutil.copyfile(root / files["wal"], notes / "wal-copy.txt")
    (notes / "readme.md").write_text("project notes")
    (own / "mine.txt").write_text("bob's own result")

    paths = [
        *files.values(),
        *(f"./{p}" for p in files.values()),
        *(f"notes/../{p}" for p in files.values()),
        ".HARNESS/sessions.db",
        ".harness./sessions.db",
        files["memory"].upper(),
        "Large_Tool_Results/" + files["offload"].split("/", 1)[1],
        *(f"notes/link-{n}" for n in files),
        *(f"notes/hard-{n}" for n in files),
        *(f"large_tool_results/{session_key('s-b', 'bob')}/hard-{n}.txt" for n in files),
        "notes/store-folder/sessions.db",
        "notes/store-folder/sessions.db-wal",
        "notes/memory-folder/MEMORY.md",
        "notes/offload-folder/" + os.path.basename(files["offload"]),
        "notes/copy.txt",
        "notes/wal-copy.txt",
        f"../ws/{files['db']}",
    ]
    allowed = ["notes/readme.md", f"large_tool_results/{session_key('s-b', 'bob')}/mine.txt"]
    model.add(calls(paths + allowed), "done")
    await agent.call("read everything", RuntimeContext(user_id="bob", session_id="s-b"))
    answers = results(model.agent_requests[-1])
    for i, path in enumerate(paths):
        answer = answers[f"c{i}"]
        assert answer.startswith("Error: PathEscapeError:"), (path, answer[:300])
        assert secret not in answer and "SQLite format" not in answer, path
    assert answers[f"c{len(paths)}"].endswith("\nproject notes")
    assert answers[f"c{len(paths) + 1}"].endswith("\nbob's own result")
    assert secret not in "".join(m.text for m in model.agent_requests[-1].history)


async def test_a_session_reads_its_own_memory_and_offloads(
    attack: tuple[HarnessAgent, ScriptedModel, Path, str],
) -> None:
    agent, model, root, secret = attack
    files = alice_files(root)
    model.add(calls([files["memory"], files["offload"]]), "done")
    await agent.call("read mine", RuntimeContext(user_id="alice", session_id="s-a"))
    answers = results(model.agent_requests[-1])
    assert secret in answers["c0"] and secret in answers["c1"], answers


async def test_anonymous_sessions_do_not_read_each_others_memory(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    mine = RequestIds(agent_id=AGENT, session_id="one")
    theirs = RequestIds(agent_id=AGENT, session_id="two")
    ws.write_text(memory_path("user", mine), "my own facts")
    ws.write_text(memory_path("user", theirs), "the other session's facts")
    ws.write_text(memory_path("agent", mine), "the agent's shared facts")
    model = ScriptedModel(
        [
            calls(
                [
                    memory_path("user", theirs),
                    memory_path("user", mine),
                    memory_path("agent", mine),
                    f"memory/users/{scope_key('user', '')}/MEMORY.md",
                ]
            ),
            "ok",
        ]
    )
    agent = HarnessAgent(
        model=model, tools=[read_file_tool()], stack=[], workspace=ws, agent_id=AGENT
    )
    await agent.call("go", RuntimeContext(session_id="one"))
    answers = results(model.agent_requests[-1])
    assert answers["c0"].startswith("Error: PathEscapeError:")
    assert "other session" not in answers["c0"]
    assert answers["c1"].endswith("\nmy own facts")
    assert answers["c2"].endswith("\nthe agent's shared facts")
    assert answers["c3"].startswith("Error: PathEscapeError:")


async def test_a_refused_path_reads_the_same_whether_or_not_it_exists(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.write_text(".harness/notes.txt", "the harness's own data")
    ws.write_text(f"memory/users/{scope_key('user', 'alice')}/MEMORY.md", "alice's facts")
    tool = read_file_tool()
    ctx = ToolContext(
        state=AgentState(), call=ToolCall(id="c", name="read_file"), workspace=ws, user_id="bob"
    )
    for present in (".harness/notes.txt", f"memory/users/{scope_key('user', 'alice')}/MEMORY.md"):
        absent = present.replace("MEMORY", "OTHER").replace("notes", "other")
        found = await tool.run(json.dumps({"path": present}), ctx)
        missing = await tool.run(json.dumps({"path": absent}), ctx)
        assert found.startswith("Error: PathEscapeError:"), found
        assert found.replace(present, absent) == missing


async def test_shared_limits_project_material_to_the_configured_folders(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.write_text("docs/a.md", "shared doc")
    ws.write_text("private/b.md", "not shared")
    tool = read_file_tool(shared=["docs"])
    ctx = ToolContext(state=AgentState(), call=ToolCall(id="c", name="read_file"), workspace=ws)
    assert (await tool.run('{"path": "docs/a.md"}', ctx)).endswith("\nshared doc")
    refused = await tool.run('{"path": "private/b.md"}', ctx)
    assert refused.startswith("Error: PathEscapeError:") and "not shared" not in refused
    assert "docs" in refused


async def test_anonymous_sessions_of_two_agents_with_one_session_id_keep_their_offloads_apart(
    tmp_path: Path,
) -> None:
    # No user id: each (agent, session) is its own scope. The same session id under another
    # agent on the same workspace gets another offload folder, and its read_file refuses the
    # first one's file.
    ws = Workspace(tmp_path / "ws")
    secret = f"heron{uuid.uuid4().hex[:12]}"

    def lookup(topic: str) -> str:
        """Look a topic up.

        Args:
            topic: what to look up.
        """
        return f"report on {topic}: {secret}\n" * 2_000

    def agent(agent_id: str, model: ScriptedModel) -> HarnessAgent:
        return HarnessAgent(
            model=model,
            tools=[lookup],
            stack=[ToolResultOffload(max_result_chars=1_000, preview_chars=100)],
            workspace=ws,
            agent_id=agent_id,
        )

    first = agent("first", ScriptedModel([ScriptedModel.tool_call("lookup", {"topic": "x"}), "ok"]))
    await first.call("look it up", RuntimeContext(session_id="s"))
    (offloaded,) = ws.list("large_tool_results", recursive=True)
    assert secret in ws.read_text(offloaded)
    assert offloaded.split("/")[1] == session_key("s", "", "first") != session_key("s", "", "other")

    model = ScriptedModel([calls([offloaded]), "done"])
    await agent("other", model).call("read it", RuntimeContext(session_id="s"))
    (answer,) = results(model.requests[-1]).values()
    assert answer.startswith("Error") and secret not in answer
