"""ToolResultOffload through the real agent loop: files, previews, read-back, retention, isolation."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import (
    ContentPart,
    HarnessAgent,
    Message,
    ModelRequest,
    RuntimeContext,
    ToolCall,
    ToolContext,
    Workspace,
)
from harness.errors import ConfigurationError
from harness.policy import ContextPolicy
from harness.request import ModelResponse, RequestIds, RunScope
from harness.sessions import SessionKey
from harness.state import AgentState
from middleware import tool_result_offload
from middleware.tool_result_offload import (
    DEFAULT_EXEMPT_TOOLS,
    ToolResultOffload,
    offload_path,
    purge_session,
    sweep,
)
from middleware.tool_result_offload._read_file import session_key
from providers import ScriptedModel

HEADER = re.compile(r"^\[[^\]]+; (?P<where>end of file|next offset: (?P<next>\d+))\]\n")
DAY = 24 * 3600


def big_text(size: int, seed: str = "") -> str:
    """Text whose every slice is distinct, with some non-ASCII characters."""
    out = "".join(f"{seed}row {i:07d} — ok\n" for i in range(size // 10))
    return out[:size]


def dump(size: int, seed: str = "") -> str:
    """Return a long tool output.

    Args:
        size: characters.
        seed: a prefix making outputs distinct.
    """
    return big_text(size, seed)


def offloaded(request: ModelRequest) -> list[Message]:
    return [m for m in request.history if m.meta("offloaded") is not None]


def read_all(
    path: str | None = None, *, limit: int = 100_000
) -> Callable[[ModelRequest], Message | str]:
    """A scripted reply that pages through ``path`` with read_file, then says done.

    Without ``path``, the file named by the request's newest offload preview.
    """

    def reply(request: ModelRequest) -> Message | str:
        target = path or str(offloaded(request)[-1].meta("offloaded"))
        last = request.history[-1]
        if last.role == "tool" and last.name == "read_file":
            match = HEADER.match(last.text)
            assert match is not None, last.text[:300]
            if match["next"] is None:
                return "done"
            offset = int(match["next"])
        else:
            offset = 0
        return ScriptedModel.tool_call(
            "read_file", {"path": target, "offset": offset, "limit": limit}
        )

    return reply


def pages(request: ModelRequest) -> str:
    text = ""
    for m in request.history:
        if m.role == "tool" and m.name == "read_file":
            match = HEADER.match(m.text)
            assert match is not None
            text += m.text[match.end() :]
    return text


async def test_large_result_is_written_whole_previewed_and_read_back(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    original = big_text(200_000)
    model = ScriptedModel(
        [ScriptedModel.tool_call("dump", {"size": 200_000}, id="call-1")], default=read_all()
    )
    agent = HarnessAgent(model=model, tools=[dump], stack=[ToolResultOffload()], workspace=ws)
    ctx = RuntimeContext(user_id="u1", session_id="s1")
    assert (await agent.call("run the tests", ctx)).text == "done"

    second = model.agent_requests[1]
    (preview,) = offloaded(second)
    path = preview.meta("offloaded")
    result = (await agent.history(ctx))[2]
    assert path == offload_path(result, session_id="s1", user_id="u1")
    assert path.startswith(f"large_tool_results/{session_key('s1', 'u1')}/")
    assert path.endswith(".txt")
    assert "tool_result_offload:call-1" in second.transforms
    text = preview.text
    assert original[:2_000] in text and original[-2_000:] in text
    assert original[2_000:2_100] not in text and original[-2_100:-2_000] not in text
    assert len(text) < 4_000 + 600
    assert f'read_file(path="{path}"' in text and "200,000 characters" in text
    # The file holds the exact original bytes.
    assert (tmp_path / "ws" / path).read_bytes() == original.encode("utf-8")
    # read_file pages (100,000 characters each, over the threshold: read_file is exempt).
    final = model.agent_requests[-1]
    assert pages(final) == original
    assert all(m.meta("offloaded") is None for m in final.history if m.name == "read_file")
    assert [t for t in final.transforms if t.startswith("tool_result_offload")] == []
    # The full history keeps the original; the working history the preview.
    assert any(m.text == original for m in await agent.history(ctx))
    assert all(m.text != original for m in agent.state(ctx).working_history)


async def test_results_under_the_threshold_and_exempt_tools_are_untouched(tmp_path: Path) -> None:
    def memory_search(size: int) -> str:
        """Search memory.

        Args:
            size: characters.
        """
        return big_text(size, "m")

    model = ScriptedModel(
        [
            Message.assistant(
                None,
                tool_calls=[
                    ToolCall(id="small", name="dump", arguments='{"size": 80000}'),
                    ToolCall(id="exempt", name="memory_search", arguments='{"size": 120000}'),
                    ToolCall(id="custom", name="listing", arguments='{"size": 90000}'),
                ],
            ),
            "ok",
        ],
        window=1_000_000,  # 290,000 characters stay in the history, without compaction
    )

    def listing(size: int) -> str:
        """List.

        Args:
            size: characters.
        """
        return big_text(size, "l")

    offload = ToolResultOffload(
        exempt_tools=DEFAULT_EXEMPT_TOOLS | {"listing"}, max_result_share=None
    )
    agent = HarnessAgent(
        model=model,
        tools=[dump, memory_search, listing],
        stack=[offload],
        workspace=Workspace(tmp_path),
    )
    await agent.call("go")
    last = model.agent_requests[-1]
    sizes = {m.tool_call_id: len(m.text) for m in last.history if m.role == "tool"}
    assert sizes == {"small": 80_000, "exempt": 120_000, "custom": 90_000}
    assert offloaded(last) == [] and last.transforms == ()
    assert not (tmp_path / "large_tool_results").exists()


async def test_exemption_uses_the_call_name_when_the_result_has_none(tmp_path: Path) -> None:
    big = big_text(100_000)
    history = [
        Message.user("earlier"),
        Message.assistant(
            None, tool_calls=[ToolCall(id="r", name="read_file"), ToolCall(id="x", name="execute")]
        ),
        Message.tool("r", big),  # no name: looked up from the call
        Message.tool("x", big),
    ]
    states = {
        SessionKey("", "agent", "s"): AgentState(
            session_id="s", working_history=list(history), full_history=list(history)
        )
    }
    model = ScriptedModel(["ok"])
    agent = HarnessAgent(
        model=model, stack=[ToolResultOffload()], workspace=Workspace(tmp_path), states=states
    )
    await agent.call("go on", RuntimeContext(session_id="s"))
    (request,) = model.agent_requests
    results = {m.tool_call_id: m for m in request.history if m.role == "tool"}
    assert results["r"].text == big
    assert results["x"].meta("offloaded") == offload_path(
        history[3], session_id="s", agent_id="agent"
    )
    assert request.transforms == ("tool_result_offload:x",)


async def test_non_text_results_are_left_alone(tmp_path: Path) -> None:
    parts = (
        ContentPart(type="text", text=big_text(100_000)),
        ContentPart(type="image_url", data={"image_url": {"url": "x"}}),
    )
    history = [
        Message.assistant(None, tool_calls=[ToolCall(id="img", name="screenshot")]),
        Message(role="tool", tool_call_id="img", name="screenshot", content=parts),
    ]
    states = {
        SessionKey("", "agent", "s"): AgentState(
            working_history=list(history), full_history=list(history)
        )
    }
    model = ScriptedModel(["ok"])
    agent = HarnessAgent(
        model=model, stack=[ToolResultOffload()], workspace=Workspace(tmp_path), states=states
    )
    await agent.call("go", RuntimeContext(session_id="s"))
    assert model.agent_requests[0].history[1].content == parts


async def test_a_huge_provider_call_id_gives_a_short_file_name(tmp_path: Path) -> None:
    call_id = "call_" + "Zx9/..\\:" * 190  # ~1.5 KB, with path characters
    assert len(call_id) > 1_500
    model = ScriptedModel([ScriptedModel.tool_call("dump", {"size": 90_000}, id=call_id), "ok"])
    agent = HarnessAgent(
        model=model, tools=[dump], stack=[ToolResultOffload()], workspace=Workspace(tmp_path)
    )
    await agent.call("go", RuntimeContext(session_id="../../etc"))
    request = model.agent_requests[1]
    (preview,) = offloaded(request)
    path = preview.meta("offloaded")
    folder, session, name = path.split("/")
    assert folder == "large_tool_results"
    assert re.fullmatch(r"[0-9a-f]{32}", session) and re.fullmatch(r"[0-9a-f]{32}\.txt", name)
    assert (tmp_path / path).read_text() == big_text(90_000)
    (transform,) = request.transforms
    assert transform.startswith("tool_result_offload:call_") and len(transform) < 80


async def test_offloaded_once_across_rounds(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    runs: list[str] = []

    def remove_offloads(ctx: ToolContext) -> str:
        """Delete the offload folder (to prove nothing writes it again)."""
        assert ctx.workspace is not None
        ctx.workspace.remove("large_tool_results", recursive=True)
        runs.append("removed")
        return "removed"

    model = ScriptedModel(
        [
            ScriptedModel.tool_call("dump", {"size": 150_000}, id="A"),
            ScriptedModel.tool_call("remove_offloads"),
            ScriptedModel.tool_call("remove_offloads"),
            "done",
        ]
    )
    agent = HarnessAgent(
        model=model, tools=[dump, remove_offloads], stack=[ToolResultOffload()], workspace=ws
    )
    await agent.call("go")
    requests = model.agent_requests
    assert [sum(t.startswith("tool_result_offload") for t in r.transforms) for r in requests] == [
        0,
        1,
        0,
        0,
    ]
    first = offloaded(requests[1])[0]
    assert [m.id for m in offloaded(requests[3])] == [first.id]  # the committed preview, unchanged
    assert runs == ["removed", "removed"]
    assert not ws.exists(first.meta("offloaded"))  # deleted in round 2 and never rewritten


async def test_a_result_already_on_disk_is_not_rewritten(tmp_path: Path) -> None:
    from harness.errors import ProviderUnavailable

    ws = Workspace(tmp_path)
    model = ScriptedModel(
        [
            ScriptedModel.tool_call("dump", {"size": 120_000}, id="A"),
            ProviderUnavailable("provider down; try again", provider="scripted"),
            "recovered",
        ]
    )
    agent = HarnessAgent(model=model, tools=[dump], stack=[ToolResultOffload()], workspace=ws)
    ctx = RuntimeContext(session_id="s")
    with pytest.raises(ProviderUnavailable):
        await agent.call("go", ctx)
    (path,) = ws.list("large_tool_results", recursive=True)
    hour_ago = time.time() - 3600
    os.utime(tmp_path / path, (hour_ago, hour_ago))
    # The failed round was not committed: the next call sees the original result again.
    assert any(len(m.text) == 120_000 for m in agent.state(ctx).working_history)
    assert (await agent.call("again", ctx)).text == "recovered"
    assert "tool_result_offload:A" in model.agent_requests[-1].transforms
    assert abs(ws.modified(path) - hour_ago) < 1  # found on disk, not written again
    assert (tmp_path / path).read_text() == big_text(120_000)


async def test_purge_session_removes_only_that_session(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    model = ScriptedModel(default=ScriptedModel.tool_call("dump", {"size": 90_000}))
    model.add(ScriptedModel.tool_call("dump", {"size": 90_000}, id="a1"), "ok")
    model.add(ScriptedModel.tool_call("dump", {"size": 90_000}, id="b1"), "ok")
    agent = HarnessAgent(model=model, tools=[dump], stack=[ToolResultOffload()], workspace=ws)
    await agent.call("one", RuntimeContext(session_id="alice"))
    await agent.call("two", RuntimeContext(session_id="bob"))
    (alice,) = ws.list(f"large_tool_results/{session_key('alice', '', 'agent')}")
    (bob,) = ws.list(f"large_tool_results/{session_key('bob', '', 'agent')}")
    purge_session(ws, "alice", agent_id="agent")
    assert not ws.exists(alice) and ws.exists(bob)
    assert ws.list("large_tool_results", recursive=True) == [bob]
    purge_session(ws, "nobody")  # nothing to remove is fine


async def test_old_files_are_swept_once_per_agent_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool_result_offload, "SWEEP_INTERVAL_S", 0.0)  # every call may sweep
    ws = Workspace(tmp_path)
    old, fresh, planted = (
        f"large_tool_results/{session_key('other')}/{n}.txt" for n in ("old", "fresh", "planted")
    )
    ws.write_text(old, "old")
    ws.write_text(fresh, "fresh")
    eight_days_ago = time.time() - 8 * DAY
    os.utime(tmp_path / old, (eight_days_ago, eight_days_ago))

    def plant(ctx: ToolContext) -> str:
        """Write an already-expired file in the middle of the call."""
        assert ctx.workspace is not None
        ctx.workspace.write_text(planted, "planted")
        os.utime(tmp_path / planted, (eight_days_ago, eight_days_ago))
        return "planted"

    model = ScriptedModel(
        [ScriptedModel.tool_call("plant"), ScriptedModel.tool_call("plant"), "ok", "ok"]
    )
    agent = HarnessAgent(model=model, tools=[plant], stack=[ToolResultOffload()], workspace=ws)
    await agent.call("first")
    assert not ws.exists(old) and ws.exists(fresh)
    assert ws.exists(planted)  # rounds 2 and 3 of the same call did not sweep again
    await agent.call("second")
    assert not ws.exists(planted) and ws.exists(fresh)


async def test_no_sweep_when_max_age_is_none(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    old = f"large_tool_results/{session_key('x')}/old.txt"
    ws.write_text(old, "old")
    os.utime(tmp_path / old, (0, 0))
    agent = HarnessAgent(
        model=ScriptedModel(["ok"]), stack=[ToolResultOffload(max_age_s=None)], workspace=ws
    )
    await agent.call("go")
    assert ws.exists(old)


async def test_works_on_a_memory_filesystem() -> None:
    ws = Workspace(f"memory://offload-{uuid.uuid4().hex}")
    original = big_text(130_000, "mem")
    model = ScriptedModel(
        [ScriptedModel.tool_call("dump", {"size": 130_000, "seed": "mem"}, id="M")],
        default=read_all(limit=50_000),
    )
    agent = HarnessAgent(model=model, tools=[dump], stack=[ToolResultOffload()], workspace=ws)
    assert (await agent.call("go", RuntimeContext(session_id="m"))).text == "done"
    path = offloaded(model.agent_requests[1])[0].meta("offloaded")
    assert ws.read_bytes(path) == original.encode("utf-8")
    assert pages(model.agent_requests[-1]) == original
    # The age sweep works there too (memory files have a creation time).
    assert sweep(ws, max_age_s=60) == 0 and ws.exists(path)
    assert sweep(ws, max_age_s=60, now=time.time() + 120) == 1 and not ws.exists(path)


async def test_agents_without_workspace_each_offload_to_their_own_private_one() -> None:
    """Two agents, no workspace, same (default) session and call id: each reads its own."""
    agents, models = [], []
    for fill in ("A", "B"):

        def shout(fill: str = fill) -> str:
            """Return a long line."""
            return fill * 100_000

        model = ScriptedModel(
            [ScriptedModel.tool_call("shout", {}, id="same-id")], default=read_all()
        )
        agents.append(HarnessAgent(model=model, tools=[shout], stack=[ToolResultOffload()]))
        models.append(model)
    for agent in agents:
        assert (await agent.call("go")).text == "done"
    for fill, agent, model in zip("AB", agents, models, strict=True):
        assert agent.workspace.is_private
        assert pages(model.agent_requests[-1]) == fill * 100_000
        (path,) = agent.workspace.list("large_tool_results", recursive=True)
        assert agent.workspace.read_text(path) == fill * 100_000
    assert agents[0].workspace.root != agents[1].workspace.root


async def test_a_repeated_call_id_never_reuses_or_overwrites_a_file(tmp_path: Path) -> None:
    """Same call id, same size, different content: two files, each preview its own."""
    ws = Workspace(tmp_path)

    def shout(fill: str) -> str:
        """Return a long line.

        Args:
            fill: the character.
        """
        return fill * 90_000

    model = ScriptedModel(
        [
            ScriptedModel.tool_call("shout", {"fill": "A"}, id="dup"),
            ScriptedModel.tool_call("shout", {"fill": "B"}, id="dup"),
            "ok",
        ]
    )
    agent = HarnessAgent(model=model, tools=[shout], stack=[ToolResultOffload()], workspace=ws)
    await agent.call("go")
    previews = offloaded(model.agent_requests[-1])
    assert len(previews) == 2
    paths = [str(m.meta("offloaded")) for m in previews]
    assert len(set(paths)) == 2
    for fill, message, path in zip("AB", previews, paths, strict=True):
        assert (
            fill * 2_000 in message.text and ("B" if fill == "A" else "A") * 10 not in message.text
        )
        assert (tmp_path / path).read_text() == fill * 90_000
    assert sorted(ws.list("large_tool_results", recursive=True)) == sorted(paths)


TRICKY = "ä€𝄞😀\r\n\t\x00\u200b\ufeffmixed\rline\n日本語\U0010fffd"


async def test_offload_is_byte_exact_for_any_text(tmp_path: Path) -> None:
    """Non-ASCII, astral characters, CR/LF, NUL and BOM come back exactly."""
    original = "".join(f"{i:05d}{TRICKY}" for i in range(9_000))
    assert len(original) > 80_000

    def tricky() -> str:
        """Return tricky text."""
        return original

    ws = Workspace(tmp_path)
    model = ScriptedModel(
        [ScriptedModel.tool_call("tricky", {}, id="t")],
        default=read_all(limit=33_333),
        window=1_000_000,  # every page read stays in the history, without compaction
    )
    agent = HarnessAgent(model=model, tools=[tricky], stack=[ToolResultOffload()], workspace=ws)
    assert (await agent.call("go")).text == "done"
    path = offloaded(model.agent_requests[1])[0].meta("offloaded")
    assert (tmp_path / path).read_bytes() == original.encode("utf-8")
    assert pages(model.agent_requests[-1]) == original
    (preview,) = offloaded(model.agent_requests[1])
    assert original[:2_000] in preview.text and original[-2_000:] in preview.text


async def test_offloads_are_scoped_by_user_and_session(tmp_path: Path) -> None:
    """Two users with the same session id: separate folders, neither reads the other's."""
    ws = Workspace(tmp_path)
    secret = {"alice": "alice-secret " * 8_000, "bob": "bob-secret " * 9_000}

    def fetch(ctx: ToolContext) -> str:
        """Return the caller's large data."""
        return secret[ctx.user_id]

    found: dict[str, str] = {}

    def steal(request: ModelRequest) -> Message | str:
        last = request.history[-1]
        if last.role == "tool" and last.name == "read_file":
            return "done"
        return ScriptedModel.tool_call("read_file", {"path": found["alice"]})

    model = ScriptedModel(
        [ScriptedModel.tool_call("fetch", {}, id="c"), "ok"],
    )
    agent = HarnessAgent(model=model, tools=[fetch], stack=[ToolResultOffload()], workspace=ws)
    await agent.call("go", RuntimeContext(user_id="alice", session_id="same"))
    found["alice"] = str(offloaded(model.agent_requests[1])[0].meta("offloaded"))
    model.add(ScriptedModel.tool_call("fetch", {}, id="c"), steal, steal)
    await agent.call("go", RuntimeContext(user_id="bob", session_id="other"))
    bob_requests = model.agent_requests[2:]
    bob_path = str(offloaded(bob_requests[1])[0].meta("offloaded"))
    assert bob_path.split("/")[1] != found["alice"].split("/")[1]
    refused = bob_requests[-1].history[-1].text
    assert refused.startswith("Error: PathEscapeError:") and "alice-secret" not in refused
    assert all("alice-secret" not in m.text for r in bob_requests for m in r.history)


async def test_preview_without_head_and_tail(tmp_path: Path) -> None:
    model = ScriptedModel([ScriptedModel.tool_call("dump", {"size": 1_000}, id="p"), "ok"])
    stack = [ToolResultOffload(max_result_chars=500, preview_chars=0)]
    agent = HarnessAgent(model=model, tools=[dump], stack=stack, workspace=Workspace(tmp_path))
    await agent.call("go")
    (preview,) = offloaded(model.agent_requests[1])
    assert big_text(1_000)[:20] not in preview.text and "read_file(" in preview.text


async def test_read_file_is_provided_to_the_agent(tmp_path: Path) -> None:
    agent = HarnessAgent(
        model=ScriptedModel(["ok"]), stack=[ToolResultOffload()], workspace=Workspace(tmp_path)
    )
    assert "read_file" in agent.tools
    await agent.call("go")
    assert agent.client.requests[0].tools == ()  # type: ignore[attr-defined]  # nothing to read yet
    always = HarnessAgent(
        model=ScriptedModel(["ok"]),
        stack=[ToolResultOffload(always_offer_read_file=True)],
        workspace=Workspace(tmp_path),
    )
    await always.call("go")
    assert [t.name for t in always.client.requests[0].tools] == ["read_file"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_result_chars": 0},
        {"max_result_chars": True},
        {"preview_chars": -1},
        {"max_result_chars": 1_000, "preview_chars": 500},
        {"exempt_tools": "read_file"},
        {"exempt_tools": [1]},
        {"folder": "../out"},
        {"folder": "/abs"},
        {"max_age_s": 0},
        {"max_age_s": "week"},
        {"workspace": "/tmp/ws"},
    ],
)
def test_bad_configuration_is_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        ToolResultOffload(**kwargs)  # type: ignore[arg-type]


async def test_a_dense_result_under_the_character_limit_is_offloaded_by_tokens(
    tmp_path: Path,
) -> None:
    """20,000 Hangul characters are far under 80,000 but cost ~45,000 tokens."""
    import random

    from harness import ContextPolicy
    from harness.accounting import estimate_request
    from harness.tokens import shared_exact

    rng = random.Random(1)
    hangul = "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(20_000))

    def notes() -> str:
        """Read the notes."""
        return hangul

    model = ScriptedModel([ScriptedModel.tool_call("notes", id="n1"), "done"], model="gpt-4o")
    agent = HarnessAgent(
        model=model,
        tools=[notes],
        stack=[ToolResultOffload()],
        workspace=Workspace(tmp_path),
        policy=ContextPolicy(max_input_tokens=16_000),
    )
    assert (await agent.call("read the notes")).text == "done"
    last = model.agent_requests[-1]
    (result,) = [m for m in last.history if m.role == "tool"]
    assert result.meta("offloaded") and last.transforms == ("tool_result_offload:n1",)
    exact = shared_exact("o200k")
    assert exact.count(result.text) <= 0.25 * 16_000 / 4 + 200  # the preview is bounded too
    assert estimate_request(last, exact) <= 16_000
    stored = (tmp_path / result.meta("offloaded")).read_text(encoding="utf-8")
    assert stored == hangul  # byte-exact


async def test_two_offload_instances_in_one_stack_each_sweep_their_own_folder(
    tmp_path: Path,
) -> None:
    import os

    ws = Workspace(tmp_path)
    old = time.time() - 10 * 24 * 3600
    for folder in ("results_a", "results_b"):
        ws.write_text(f"{folder}/stale.txt", "old result")
        os.utime(tmp_path / folder / "stale.txt", (old, old))
    from harness import ContextPolicy, ModelRequest, ModelResponse, RunScope, compose

    stack = [ToolResultOffload(folder="results_a"), ToolResultOffload(folder="results_b")]

    async def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(message=Message.assistant("ok"))

    run = RunScope(workspace=ws)
    request = ModelRequest(model="gpt-4o", policy=ContextPolicy().resolve("gpt-4o"), run=run)
    await compose(stack, answer)(request)
    assert not ws.exists("results_a/stale.txt")
    assert not ws.exists("results_b/stale.txt")  # not skipped as "already swept"


async def test_a_kept_decision_follows_the_input_limit_and_the_session() -> None:
    """Results decided small are decided again under a smaller limit, and per session.

    The rounds of one session scan only what is new; a result kept whole under a large
    limit is offloaded by tokens once the limit shrinks, and another session's notes never
    stand for this one's.
    """
    offload = ToolResultOffload(max_result_chars=50_000, preview_chars=100)
    workspace = Workspace("memory://kept-decisions")
    call = Message.assistant(id="a", tool_calls=[ToolCall(id="c", name="sh", arguments="{}")])
    history = (Message.user("go", id="u"), call, Message.tool("c", big_text(8_000), id="t"))
    seen: list[ModelRequest] = []

    async def record(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(message=Message.assistant("ok"))

    def request(limit: int, state: AgentState) -> ModelRequest:
        run = RunScope(workspace=workspace, session=state.scratch)
        return ModelRequest(
            model="gpt-4o",
            history=history,
            policy=ContextPolicy().resolve("gpt-4o"),
            input_limit=limit,
            run=run,
            ids=RequestIds(session_id="s", user_id="u"),
        )

    mine, other = AgentState(), AgentState()
    await offload(request(1_000_000, mine), record)
    assert not seen[-1].transforms
    await offload(request(1_000_000, mine), record)  # nothing new: nothing scanned
    assert not seen[-1].transforms
    await offload(request(4_000, mine), record)
    assert seen[-1].transforms == ("tool_result_offload:c",)
    await offload(request(4_000, other), record)
    assert seen[-1].transforms == ("tool_result_offload:c",)


async def test_only_the_oversized_results_change_and_every_other_message_keeps_its_place() -> None:
    """Two calls answered in one round, the first result oversized: the history keeps its
    order and every message but that result is the very object it was."""
    offload = ToolResultOffload(max_result_chars=5_000, preview_chars=100)
    calls = [ToolCall(id=f"c{i}", name="sh", arguments="{}") for i in (1, 2, 3)]
    history = (
        Message.user("go", id="u"),
        Message.assistant(id="a1", tool_calls=calls[:1]),
        Message.tool("c1", "small", id="t1"),
        Message.assistant(id="a2", tool_calls=calls[1:]),
        Message.tool("c2", big_text(9_000), id="t2"),
        Message.tool("c3", big_text(9_000, "x"), id="t3"),
        Message.user("and now?", id="u2"),
    )
    seen: list[ModelRequest] = []

    async def record(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(message=Message.assistant("ok"))

    request = ModelRequest(
        model="gpt-4o",
        history=history,
        policy=ContextPolicy().resolve("gpt-4o"),
        input_limit=1_000_000,
        run=RunScope(workspace=Workspace("memory://offload-in-place")),
        ids=RequestIds(session_id="s", user_id="u"),
    )
    await offload(request, record)
    sent = seen[-1].history
    assert [(m.role, m.tool_call_id) for m in sent] == [(m.role, m.tool_call_id) for m in history]
    assert [i for i, m in enumerate(sent) if m is not history[i]] == [4, 5]
    assert all(m.meta("offloaded") for m in sent[4:6])
    assert seen[-1].transforms == ("tool_result_offload:c2", "tool_result_offload:c3")
