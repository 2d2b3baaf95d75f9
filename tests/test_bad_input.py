"""Bad input is refused before it is stored, and what does enter is clean text.

Through the real agent loop and the ScriptedModel: every refusal is an `InvalidInputError`
raised before anything is appended, and the same session answers the next, valid call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import (
    AgentEvent,
    AgentState,
    ContentPart,
    HarnessAgent,
    InvalidInputError,
    Message,
    RuntimeContext,
    ToolCall,
)
from harness.markers import INTERRUPTED_TEXT as INTERRUPTED_RESULT
from middleware.tool_result_offload import ToolResultOffload
from providers import ScriptedModel

CTX = RuntimeContext(session_id="s1")


def agent_with(*replies: object, tools: list[object] | None = None) -> HarnessAgent:
    model = ScriptedModel(list(replies))  # type: ignore[arg-type]
    return HarnessAgent(model=model, system_prompt="You help.", tools=tools or [], stack=[])  # type: ignore[arg-type]


def sent(agent: HarnessAgent) -> list[Message]:
    model = agent.client
    assert isinstance(model, ScriptedModel)
    return list(model.agent_requests[-1].history)


BAD_INPUTS: list[tuple[object, str]] = [
    (123, "got int"),
    (b"hello", "decode the bytes"),
    (None, "got NoneType"),
    (["hi"], "got list"),
    ({"role": "bogus", "content": "x"}, "unknown message role 'bogus'"),
    ({"content": "no role"}, "unknown message role None"),
    ({"role": "user", "content": None}, "needs content"),
    ({"role": "user", "content": 5}, "content must be"),
    ({"role": "user", "content": [{"text": "no type"}]}, "string 'type'"),
    ({"role": "system", "content": "be terse"}, "system_prompt"),
    ({"role": "assistant", "content": "I said"}, "agent.state"),
    ({"role": "tool", "tool_call_id": "c9", "content": "r"}, "answers no waiting call"),
    ({"role": "tool", "content": "r"}, "tool_call_id"),
    ({"role": "user", "content": "x", "tool_call_id": "c1"}, "only tool messages"),
    (Message(role="bogus", content="x"), "unknown message role"),  # type: ignore[arg-type]
    (Message(role="user", content=3), "content must be"),  # type: ignore[arg-type]
    (Message(role="user"), "needs content"),
    (Message.system("be terse"), "system_prompt"),
    (Message.user("x", metadata={"loop": object()}), "cannot be stored as JSON"),
    (Message.user("x", id="a\ud800"), "not valid Unicode"),
]


@pytest.mark.parametrize(("bad", "says"), BAD_INPUTS)
async def test_bad_input_is_refused_before_anything_is_stored(bad: object, says: str) -> None:
    agent = agent_with("fine")
    with pytest.raises(InvalidInputError, match=says):
        await agent.call(bad, CTX)  # type: ignore[arg-type]
    assert agent.state(CTX).full_history == []  # nothing waits to be logged
    assert await agent.history(CTX) == []  # nor was logged
    assert agent.state(CTX).working_history == []
    reply = await agent.call("hello", CTX)  # the session stays usable
    assert reply.text == "fine"
    assert [m.role for m in await agent.history(CTX)] == ["user", "assistant"]


async def test_a_refused_input_in_a_running_session_leaves_its_history_alone() -> None:
    agent = agent_with("one", "two")
    await agent.call("first", CTX)
    before = await agent.history(CTX)
    working = list(agent.state(CTX).working_history)
    with pytest.raises(InvalidInputError):
        await agent.call({"role": "user", "content": {"not": "text"}}, CTX)
    assert await agent.history(CTX) == before
    assert agent.state(CTX).working_history == working
    assert (await agent.call("second", CTX)).text == "two"
    assert [m.text for m in sent(agent)] == ["first", "one", "second"]


async def test_stream_events_refuses_before_the_first_event() -> None:
    agent = agent_with("fine")
    events: list[AgentEvent] = []
    with pytest.raises(InvalidInputError):
        async for event in agent.stream_events(b"x", CTX):  # type: ignore[arg-type]
            events.append(event)
    assert events == []


@pytest.mark.parametrize(
    "given",
    [
        "hi there",
        Message.user("hi there"),
        {"role": "user", "content": "hi there"},
        {"role": "user", "content": [{"type": "text", "text": "hi there"}]},
    ],
)
async def test_str_message_and_openai_dict_are_all_the_users_turn(given: Any) -> None:
    agent = agent_with("fine")
    await agent.call(given, CTX)
    (user,) = sent(agent)
    assert user.role == "user"
    assert user.text == "hi there"


async def test_a_tool_result_may_answer_a_waiting_call() -> None:
    agent = agent_with("thanks")
    state = agent.state(CTX)
    calls = [ToolCall(id="c1", name="ask_human"), ToolCall(id="c2", name="ask_human")]
    state.append(Message.user("go"), Message.assistant(None, tool_calls=calls))
    await agent.call({"role": "tool", "tool_call_id": "c1", "content": "yes"}, CTX)
    history = sent(agent)
    assert [(m.role, m.tool_call_id, m.text) for m in history[2:]] == [
        ("tool", "c1", "yes"),
        ("tool", "c2", INTERRUPTED_RESULT),
    ]
    with pytest.raises(InvalidInputError, match="answers no waiting call"):
        await agent.call(Message.tool("c1", "twice"), CTX)  # c1 has its result now


async def test_lone_surrogates_in_input_are_replaced_once_where_they_enter() -> None:
    agent = agent_with("fine", "fine")
    await agent.call("bad \ud800 text, pair \ud83d\ude00", CTX)
    stored = (await agent.history(CTX))[0]
    assert stored.text == "bad \ufffd text, pair \U0001f600"
    assert sent(agent)[0].text == stored.text
    parts = Message(role="user", content=(ContentPart(type="text", text="p\udfff"),))
    await agent.call(parts, RuntimeContext(session_id="s2"))
    assert (await agent.history(RuntimeContext(session_id="s2")))[0].text == "p\ufffd"


async def test_a_tool_with_a_lone_surrogate_or_a_cycle_never_crashes_the_loop() -> None:
    def surrogate() -> str:
        """Return broken text."""
        return "out \udc00 put"

    def cycle() -> list[object]:
        """Return a list that contains itself."""
        loop: list[object] = []
        loop.append(loop)
        return loop

    def binary() -> bytes:
        """Return raw bytes."""
        return b"\xff\xd8\xff"

    agent = agent_with(
        ScriptedModel.tool_call("surrogate", id="a"),
        ScriptedModel.tool_call("cycle", id="b"),
        ScriptedModel.tool_call("binary", id="c"),
        "done",
        tools=[surrogate, cycle, binary],
    )
    assert (await agent.call("go", CTX)).text == "done"
    results = {m.tool_call_id: m.text for m in await agent.history(CTX) if m.role == "tool"}
    assert results["a"] == "out \ufffd put"
    assert results["b"].startswith("Error: cycle returned a list that cannot be converted")
    assert results["c"].startswith("Error: binary returned 3 bytes that are not UTF-8 text")


async def test_an_offloaded_result_is_byte_exact_with_the_cleaned_history(tmp_path: Path) -> None:
    big = "h" * 3_000 + "\ud800" + "t" * 3_000

    def dump() -> str:
        """Return a big log with a lone surrogate."""
        return big

    agent = HarnessAgent(
        model=ScriptedModel([ScriptedModel.tool_call("dump", id="d1"), "done"]),
        tools=[dump],
        stack=[ToolResultOffload(max_result_chars=1_000, preview_chars=100)],
        workspace=str(tmp_path),
    )
    await agent.call("go", CTX)
    (result,) = [m for m in await agent.history(CTX) if m.role == "tool"]
    assert result.text == big.replace("\ud800", "\ufffd")
    assert offloaded(tmp_path) == [result.text.encode("utf-8")]


def offloaded(root: Path) -> list[bytes]:
    """Return the bytes of every offloaded result file under ``root``."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and "large_tool_results" in p.parts)
    return [p.read_bytes() for p in files]


def test_agent_state_append_refuses_system_and_malformed_messages_atomically() -> None:
    state = AgentState()
    with pytest.raises(InvalidInputError, match="system_prompt"):
        state.append(Message.user("ok"), Message.system("rules"))
    with pytest.raises(InvalidInputError, match="content must be"):
        state.append(Message(role="assistant", content=b"raw"))  # type: ignore[arg-type]
    assert state.full_history == []
    assert state.version == 0
