"""The read_file tool: paging, path-escape refusal, per-session private folders."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import pytest

from harness import HarnessAgent, Message, ModelRequest, RuntimeContext, ToolCall, Workspace
from harness.errors import ConfigurationError
from harness.state import AgentState
from harness.tools import ToolContext
from middleware.tool_result_offload._read_file import (
    MAX_PAGE_CHARS,
    page,
    read_file_tool,
    session_key,
)
from providers import ScriptedModel

HEADER = re.compile(
    r"^\[(?P<path>[^\]:]+): characters (?P<start>[\d,]+)–(?P<end>[\d,]+) "
    r"of (?P<total>[\d,]+); (?P<where>[^\]]+)\]\n"
)


def tool_results(request: ModelRequest) -> dict[str, str]:
    """Tool results of a request by call id (what the model received)."""
    return {m.tool_call_id or "": m.text for m in request.history if m.role == "tool"}


def calls(*items: tuple[str, dict[str, object]]) -> Message:
    return Message.assistant(
        None,
        tool_calls=[
            ToolCall(id=f"c{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(items)
        ],
    )


def text_of(size: int) -> str:
    # Distinct lines, so a wrong slice cannot accidentally match.
    out = "".join(f"line {i:06d} ümlaut\n" for i in range(size // 10))
    assert len(out) >= size
    return out[:size]


async def test_pages_return_the_whole_file_with_sizes_and_next_offsets(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    original = text_of(50_000)
    ws.write_text("logs/run.txt", original)

    def next_page(request: ModelRequest) -> Message | str:
        tools = [m for m in request.history if m.role == "tool"]
        if not tools:
            offset = 0
        else:
            match = HEADER.match(tools[-1].text)
            assert match is not None, tools[-1].text[:200]
            if match["where"] == "end of file":
                return "done"
            offset = int(match["where"].removeprefix("next offset: "))
        return ScriptedModel.tool_call(
            "read_file", {"path": "logs/run.txt", "offset": offset, "limit": 12_000}
        )

    model = ScriptedModel(default=next_page)
    agent = HarnessAgent(model=model, tools=[read_file_tool()], stack=[], workspace=ws)
    assert (await agent.call("read the log")).text == "done"

    pages = [m.text for m in model.agent_requests[-1].history if m.role == "tool"]
    assert len(pages) == 5  # 4 full pages of 12,000 and one of 2,000
    rebuilt = ""
    for text in pages:
        match = HEADER.match(text)
        assert match is not None
        assert match["path"] == "logs/run.txt"
        assert int(match["total"].replace(",", "")) == len(original)
        assert int(match["start"].replace(",", "")) == len(rebuilt)
        rebuilt += text[match.end() :]
    assert rebuilt == original


def test_page_edges() -> None:
    assert page("", "a.txt", offset=0, limit=10) == "[a.txt: characters 0–0 of 0; end of file]\n"
    assert (
        page("abcdef", "a.txt", offset=2, limit=3)
        == "[a.txt: characters 2–5 of 6; next offset: 5]\ncde"
    )
    assert (
        page("abcdef", "a.txt", offset=4, limit=30)
        == "[a.txt: characters 4–6 of 6; end of file]\nef"
    )
    past = page("abcdef", "a.txt", offset=6, limit=3)
    assert "past the end" in past and "6 characters" in past and "abc" not in past


async def test_limit_is_capped_by_max_limit(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.write_text("big.txt", "x" * 500)
    tool = read_file_tool(max_limit=100)
    ctx = ToolContext(state=AgentState(), call=ToolCall(id="c", name="read_file"), workspace=ws)
    answer = await tool.run('{"path": "big.txt", "limit": 400}', ctx)
    assert answer.startswith("[big.txt: characters 0–100 of 500; next offset: 100]\n")
    assert answer.endswith("\n" + "x" * 100)


@pytest.fixture
def escape_setup(tmp_path: Path) -> tuple[Workspace, str]:
    secret = "TOP-SECRET-" + uuid.uuid4().hex
    (tmp_path / "outside.txt").write_text(secret)
    ws = Workspace(tmp_path / "ws")
    ws.write_text("inside.txt", "fine")
    os.symlink(tmp_path / "outside.txt", tmp_path / "ws" / "link.txt")
    os.symlink(tmp_path, tmp_path / "ws" / "up")
    return ws, secret


@pytest.mark.parametrize(
    "path",
    [
        "../outside.txt",
        "sub/../../outside.txt",
        "..",
        "/etc/passwd",
        "ABSOLUTE",  # replaced by the absolute path of outside.txt
        "link.txt",  # a symlink to a file outside
        "up/outside.txt",  # through a symlinked folder
        "C:/Windows/win.ini",
        "..\\outside.txt",
    ],
)
async def test_paths_that_leave_the_workspace_are_refused(
    escape_setup: tuple[Workspace, str], path: str
) -> None:
    ws, secret = escape_setup
    if path == "ABSOLUTE":
        path = str(Path(ws.root).parent / "outside.txt")
    model = ScriptedModel(
        [calls(("read_file", {"path": path}), ("read_file", {"path": "inside.txt"})), "ok"]
    )
    agent = HarnessAgent(model=model, tools=[read_file_tool()], stack=[], workspace=ws)
    await agent.call("try it")
    results = tool_results(model.agent_requests[-1])
    assert results["c0"].startswith("Error: PathEscapeError:"), results["c0"]
    assert secret not in results["c0"]
    assert results["c1"].endswith("\nfine")  # the same tool still reads inside


async def test_missing_file_folder_and_bad_arguments_are_errors_for_the_model(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path)
    ws.write_text("dir/a.txt", "a")
    model = ScriptedModel(
        [
            calls(
                ("read_file", {"path": "nope.txt"}),
                ("read_file", {"path": "dir"}),
                ("read_file", {"path": "dir/a.txt", "offset": -1}),
                ("read_file", {"path": "dir/a.txt", "limit": 0}),
            ),
            "ok",
        ]
    )
    agent = HarnessAgent(model=model, tools=[read_file_tool()], stack=[], workspace=ws)
    await agent.call("go")
    results = tool_results(model.agent_requests[-1])
    assert results["c0"].startswith("Error: WorkspaceError:") and "does not exist" in results["c0"]
    assert results["c1"].startswith("Error: WorkspaceError:") and "folder" in results["c1"]
    assert results["c2"].startswith("Error: invalid arguments")
    assert results["c3"].startswith("Error: invalid arguments")


async def test_agent_without_workspace_reads_only_its_own_private_workspace() -> None:
    model = ScriptedModel([ScriptedModel.tool_call("read_file", {"path": "a.txt"}), "ok"])
    agent = HarnessAgent(model=model, tools=[read_file_tool()], stack=[])
    other = HarnessAgent(model=ScriptedModel(["ok"]), stack=[])
    other.workspace.write_text("a.txt", "the other agent's file")
    assert agent.workspace.is_private and agent.workspace.root != other.workspace.root
    await agent.call("go")
    (result,) = tool_results(model.agent_requests[-1]).values()
    assert result.startswith("Error: WorkspaceError:") and "does not exist" in result


async def test_the_memory_folder_is_never_read(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.write_text("memory/users/abc/MEMORY.md", "someone's facts")
    ws.write_text("memory.txt", "not the folder")
    model = ScriptedModel(
        [
            calls(
                ("read_file", {"path": "memory/users/abc/MEMORY.md"}),
                ("read_file", {"path": "./memory//users/abc/MEMORY.md"}),
                ("read_file", {"path": "memory.txt"}),
            ),
            "ok",
        ]
    )
    agent = HarnessAgent(model=model, tools=[read_file_tool()], stack=[], workspace=ws)
    await agent.call("go", RuntimeContext(user_id="abc"))
    results = tool_results(model.agent_requests[-1])
    for key in ("c0", "c1"):
        assert results[key].startswith("Error: PathEscapeError:"), results[key]
        assert "someone's facts" not in results[key]
    assert results["c2"].endswith("\nnot the folder")


async def test_private_folder_is_readable_only_by_its_own_session(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    mine, theirs = session_key("alice", "", "agent"), session_key("bob", "", "agent")
    ws.write_text(f"store/{mine}/r.txt", "alice's result")
    ws.write_text(f"store/{theirs}/r.txt", "bob's result")
    os.symlink(tmp_path / "store" / theirs, tmp_path / "sneaky")
    model = ScriptedModel(
        [
            calls(
                ("read_file", {"path": f"store/{mine}/r.txt"}),
                ("read_file", {"path": f"store/{theirs}/r.txt"}),
                ("read_file", {"path": "sneaky/r.txt"}),
                ("read_file", {"path": f"./store//{theirs}/r.txt"}),
            ),
            "ok",
        ]
    )
    agent = HarnessAgent(
        model=model, tools=[read_file_tool(private_folder="store")], stack=[], workspace=ws
    )
    await agent.call("go", RuntimeContext(session_id="alice"))
    results = tool_results(model.agent_requests[-1])
    assert results["c0"].endswith("\nalice's result")
    for key in ("c1", "c2", "c3"):
        assert results[key].startswith("Error: PathEscapeError:"), results[key]
        assert "bob's result" not in results[key]


async def test_same_session_id_of_two_users_is_two_private_folders(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    assert session_key("s", "alice") != session_key("s", "bob") != session_key("s")
    assert session_key("ab", "c") != session_key("b", "ac")  # no ambiguity in the split
    ws.write_text(f"store/{session_key('s', 'alice')}/r.txt", "alice's result")
    model = ScriptedModel(
        [
            ScriptedModel.tool_call(
                "read_file", {"path": f"store/{session_key('s', 'alice')}/r.txt"}
            ),
            "ok",
        ]
    )
    agent = HarnessAgent(
        model=model, tools=[read_file_tool(private_folder="store")], stack=[], workspace=ws
    )
    await agent.call("go", RuntimeContext(user_id="bob", session_id="s"))
    (result,) = tool_results(model.agent_requests[-1]).values()
    assert result.startswith("Error: PathEscapeError:") and "alice's result" not in result


async def test_reads_a_memory_filesystem_workspace() -> None:
    ws = Workspace(f"memory://file-tools-{uuid.uuid4().hex}")
    ws.write_text("notes/a.md", "hello from memory")
    model = ScriptedModel([ScriptedModel.tool_call("read_file", {"path": "notes/a.md"}), "ok"])
    agent = HarnessAgent(model=model, tools=[read_file_tool()], stack=[], workspace=ws)
    await agent.call("go")
    (result,) = tool_results(model.agent_requests[-1]).values()
    assert result == "[notes/a.md: characters 0–17 of 17; end of file]\nhello from memory"
    assert ws.exists("notes/a.md")


def test_schema_and_configuration() -> None:
    schema = read_file_tool().schema
    assert schema.name == "read_file"
    assert set(schema.parameters["properties"]) == {"path", "offset", "limit"}
    assert schema.parameters["required"] == ["path"]
    assert schema.parameters["properties"]["offset"]["minimum"] == 0
    assert "next page" in schema.description
    assert MAX_PAGE_CHARS >= 20_000
    for bad in (0, -5, True, 1.5):
        with pytest.raises(ConfigurationError):
            read_file_tool(max_limit=bad)  # type: ignore[arg-type]
    for folder in ("", "/abs", "../up", "a/../b", "C:/x"):
        with pytest.raises(ConfigurationError):
            read_file_tool(private_folder=folder)
