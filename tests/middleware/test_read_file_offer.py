"""``read_file`` is offered only once a session has offloaded something, then on every request.

Its schema rides on every request that offers it, so a session whose results all fit must
not pay for it; once a result is offloaded the tool appears, and it never disappears again
(a tool that comes and goes breaks the provider's cached prefix each time).
"""

from __future__ import annotations

from pathlib import Path

from harness import HarnessAgent, Message, ModelRequest, RuntimeContext, Workspace
from middleware import default_stack
from middleware.tool_result_offload import ToolResultOffload
from middleware.tool_result_offload._read_file import session_key
from providers import ScriptedModel


def dump(size: int) -> str:
    """Return a log of ``size`` characters.

    Args:
        size: characters.
    """
    return "".join(f"row {i:07d} ok\n" for i in range(size // 15 + 1))[:size]


def names(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


def preview_path(request: ModelRequest) -> str:
    paths = [m.meta("offloaded") for m in request.history if m.meta("offloaded")]
    assert paths, "no offloaded result in the request"
    return str(paths[-1])


async def test_a_session_that_fits_never_sends_the_schema(tmp_path: Path) -> None:
    script = [
        ScriptedModel.tool_call("dump", {"size": 300 + 50 * turn}, id=f"c{turn}")
        if step == 0
        else f"answer {turn}"
        for turn in range(3)
        for step in range(2)
    ]
    model = ScriptedModel(script)
    agent = HarnessAgent(
        model=model, tools=[dump], stack=default_stack(), workspace=Workspace(tmp_path)
    )
    ctx = RuntimeContext(user_id="u", session_id="fits")
    for turn in range(3):
        assert (await agent.call(f"turn {turn}", ctx)).text == f"answer {turn}"
    assert "read_file" in agent.tools  # registered: the agent runs it if the model calls it
    requests = model.agent_requests
    assert len(requests) == 6
    assert all(names(r) == ["dump"] for r in requests)
    # One tuple for every round: the accounting's caches keep it by identity.
    assert all(r.tools is requests[0].tools for r in requests)


async def test_after_the_first_offload_it_is_sent_every_round(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)

    def read_back(request: ModelRequest) -> str | Message:
        last = request.history[-1]
        if last.name == "read_file":
            return f"read {len(last.text)}"
        return ScriptedModel.tool_call(
            "read_file", {"path": preview_path(request), "offset": 1_000, "limit": 50}
        )

    model = ScriptedModel(
        [
            ScriptedModel.tool_call("dump", {"size": 200}, id="small"),
            "small ok",
            ScriptedModel.tool_call("dump", {"size": 5_000}, id="big"),
            read_back,
            read_back,
            ScriptedModel.tool_call("dump", {"size": 100}, id="small2"),
            "done",
        ]
    )
    stack = [ToolResultOffload(max_result_chars=2_000, preview_chars=200)]
    agent = HarnessAgent(model=model, tools=[dump], stack=stack, workspace=ws)
    ctx = RuntimeContext(user_id="u", session_id="s")
    await agent.call("one", ctx)
    await agent.call("two", ctx)
    await agent.call("three", ctx)
    requests = model.agent_requests
    assert [names(r) for r in requests[:3]] == [["dump"]] * 3  # nothing offloaded yet
    # From the request that carries the first preview on, every round offers it.
    assert "tool_result_offload:big" in requests[3].transforms
    assert all(names(r) == ["dump", "read_file"] for r in requests[3:])
    assert len(requests) == 7
    # Reading back works: the page is the file's characters 1,000–1,050.
    page = next(m for m in requests[4].history if m.name == "read_file")
    assert page.text.endswith(dump(5_000)[1_000:1_050])
    assert "characters 1,000–1,050 of 5,000" in page.text


async def test_a_resumed_session_offers_it_from_its_first_request(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    store = tmp_path / "sessions.db"
    ctx = RuntimeContext(user_id="u", session_id="resumed")
    first = ScriptedModel([ScriptedModel.tool_call("dump", {"size": 5_000}, id="big"), "ok"])
    stack = [ToolResultOffload(max_result_chars=2_000, preview_chars=200)]
    agent = HarnessAgent(
        model=first, tools=[dump], stack=stack, workspace=ws, store=f"sqlite:///{store}"
    )
    await agent.call("go", ctx)
    assert names(first.agent_requests[-1]) == ["dump", "read_file"]
    # Another process: a new agent and new middleware on the same store and workspace.
    again = ScriptedModel(["still ok"])
    stack = [ToolResultOffload(max_result_chars=2_000, preview_chars=200)]
    later = HarnessAgent(
        model=again, tools=[dump], stack=stack, workspace=ws, store=f"sqlite:///{store}"
    )
    await later.call("and now", ctx)
    assert names(again.agent_requests[0]) == ["dump", "read_file"]


async def test_files_in_the_sessions_folder_count_even_when_the_history_has_no_preview(
    tmp_path: Path,
) -> None:
    """A session whose previews were summarised away still has its files to read."""
    ws = Workspace(tmp_path)
    agent_id = "agent"
    ws.write_text(f"large_tool_results/{session_key('old', 'u', agent_id)}/r.txt", "kept")
    model = ScriptedModel(["a", "b"])
    agent = HarnessAgent(model=model, stack=[ToolResultOffload()], workspace=ws, agent_id=agent_id)
    await agent.call("hi", RuntimeContext(user_id="u", session_id="old"))
    await agent.call("hi", RuntimeContext(user_id="u", session_id="new"))
    assert [names(r) for r in model.agent_requests] == [["read_file"], []]
