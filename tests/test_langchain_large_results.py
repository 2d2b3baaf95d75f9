"""Large and trimmed tool results through `HarnessMiddleware`: the pointer is one the agent can read.

Real ``create_agent`` agents with LangChain's own fake chat model, scripted by a function of
what it receives: it calls a tool whose result is too long, then calls the ``read_file``
the middleware gives the agent with the path the preview names. Nothing of ours is mocked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypedDict

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from harness import ContextPolicy
from harness.adapters.langchain import HarnessMiddleware
from middleware import Compaction, ToolResultOffload, default_stack
from tests._langchain_fakes import FunctionChat, Script, with_script

LOG = "".join(f"line {i:06d}: build step {i % 97} finished in {i % 13} ms\n" for i in range(1_850))
"""A tool result of ~82,000 characters (over the 80,000 that are offloaded)."""
PAGE = 60_000


class Who(TypedDict, total=False):
    """The agent's runtime context: whose run it is."""

    user: str


POINTER = re.compile(r'read_file\(path="([^"]+)"')


@tool
def fetch_log(job: str) -> str:
    """Fetch a CI job's whole log.

    Args:
        job: the job's name.
    """
    return LOG


def _call(name: str, **args: Any) -> AIMessage:
    """A call whose id depends on what it asks only: two runs alike send alike messages."""
    key = "-".join(f"{k}={v}" for k, v in sorted(args.items()))
    return AIMessage("", tool_calls=[{"id": f"{name}-{key}"[:60], "name": name, "args": args}])


def _reader(path: str | None = None) -> Script:
    """Fetch the log, then read back the file its preview names (or ``path``), then stop."""

    def script(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            return _call("fetch_log", job="build")
        if isinstance(last, ToolMessage) and last.name == "fetch_log":
            found = POINTER.search(last.text)
            target = path or (found.group(1) if found else "missing")
            return _call("read_file", path=target, offset=0, limit=PAGE)
        if isinstance(last, ToolMessage) and last.name == "read_file":
            return _call("read_file", path=_path_of(messages), offset=PAGE, limit=PAGE)
        return AIMessage("done")

    def _path_of(messages: list[BaseMessage]) -> str:
        return str(
            next(
                c["args"]["path"]
                for m in reversed(messages)
                if isinstance(m, AIMessage)
                for c in m.tool_calls
                if c["name"] == "read_file"
            )
        )

    issued: dict[str, int] = {}  # read_file calls made for each user turn (by its text)

    def once(messages: list[BaseMessage]) -> AIMessage:
        # Counted by the script itself: a compaction may fold earlier reads into a summary.
        turn = [
            m
            for m in messages
            if isinstance(m, HumanMessage)
            and m.additional_kwargs.get("lc_source") != "summarization"
        ][-1].text
        reads = issued.get(turn, 0)
        if reads >= 2 or (reads == 1 and "Error" in messages[-1].text):
            return AIMessage("done")
        answer = script(messages)
        if any(c["name"] == "read_file" for c in answer.tool_calls):
            issued[turn] = reads + 1
        return answer

    return once


def _agent(
    script: Script, harness: HarnessMiddleware, *, saver: InMemorySaver | None = None
) -> tuple[Any, FunctionChat]:
    model = with_script(script)
    layers: list[Any] = [harness]
    agent = create_agent(
        model, tools=[fetch_log], middleware=layers, checkpointer=saver, context_schema=Who
    )
    return agent, model


def _reads(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage) and m.name == "read_file"]


def _by_user() -> HarnessMiddleware:
    return HarnessMiddleware(user_of=lambda request: request.runtime.context["user"])


def _body(page: str) -> str:
    return page.split("\n", 1)[1]  # after the header line


async def test_a_large_result_is_offloaded_and_read_back_byte_for_byte() -> None:
    agent, model = _agent(_reader(), _by_user())
    out = await agent.ainvoke(
        {"messages": [HumanMessage("Why is CI slow?")]}, context={"user": "a"}
    )
    preview = next(m for m in model.agent_requests()[1] if isinstance(m, ToolMessage))
    assert "Tool result offloaded" in preview.text and len(preview.text) < 10_000
    first, second = _reads(out["messages"])
    assert _body(first.text) + _body(second.text) == LOG  # every byte, in two pages
    assert "end of file" in second.text.split("\n", 1)[0]
    assert out["messages"][-1].content == "done"


def test_the_read_tool_works_from_a_sync_agent() -> None:
    agent, _ = _agent(_reader(), HarnessMiddleware())
    out = agent.invoke({"messages": [HumanMessage("Why is CI slow?")]}, context={})
    first, second = _reads(out["messages"])
    assert _body(first.text) + _body(second.text) == LOG


async def test_another_user_or_conversation_cannot_read_the_file() -> None:
    harness, saver = _by_user(), InMemorySaver()
    agent, model = _agent(_reader(), harness, saver=saver)
    alice = {"configurable": {"thread_id": "t1"}}
    await agent.ainvoke({"messages": [HumanMessage("Why?")]}, alice, context={"user": "alice"})
    path = POINTER.search(
        next(m for m in model.agent_requests()[1] if isinstance(m, ToolMessage)).text
    )
    assert path is not None
    for user, thread in (("bob", "t1"), ("bob", "t9"), ("alice", "t2")):
        thief, _ = _agent(_reader(path.group(1)), harness, saver=saver)
        config = {"configurable": {"thread_id": thread}}
        out = await thief.ainvoke(
            {"messages": [HumanMessage("Go")]}, config, context={"user": user}
        )
        refused = _reads(out["messages"])[-1]
        assert refused.text.startswith("Error: PathEscapeError"), (user, thread, refused.text)
        assert "line 000001" not in refused.text
    # and Alice's own conversation, resumed, still reads it
    again, _ = _agent(_reader(path.group(1)), harness, saver=saver)
    out = await again.ainvoke(
        {"messages": [HumanMessage("Again")]}, alice, context={"user": "alice"}
    )
    assert _reads(out["messages"])[-1].text.split("\n", 1)[1] == LOG[PAGE:]


async def test_without_a_checkpointer_each_run_is_its_own_conversation() -> None:
    harness = HarnessMiddleware()
    agent, model = _agent(_reader(), harness)
    await agent.ainvoke({"messages": [HumanMessage("Why?")]}, context={})
    path = POINTER.search(
        next(m for m in model.agent_requests()[1] if isinstance(m, ToolMessage)).text
    )
    assert path is not None
    other, _ = _agent(_reader(path.group(1)), harness)
    out = await other.ainvoke({"messages": [HumanMessage("Why?")]}, context={})
    assert _reads(out["messages"])[-1].text.startswith("Error: PathEscapeError")


async def test_a_repeated_conversation_gets_a_pointer_of_its_own() -> None:
    # The same messages in two conversations: the second finds the first's prepared version
    # in the prefix cache, and its preview must still name a file it may read.
    harness = HarnessMiddleware()
    for _ in range(2):
        agent, _ = _agent(_reader(), harness)
        out = await agent.ainvoke({"messages": [HumanMessage("Why is CI slow?")]}, context={})
        first, second = _reads(out["messages"])
        assert _body(first.text) + _body(second.text) == LOG


async def test_a_trimmed_result_names_a_file_that_holds_its_original() -> None:
    results = [f"result {i}: " + "detail of the query plan. " * 45 for i in range(6)]
    history: list[Any] = [HumanMessage("Check the tables.")]
    for i, text in enumerate(results):
        history += [
            AIMessage("", tool_calls=[{"id": f"t{i}", "name": "fetch_log", "args": {"job": "x"}}]),
            ToolMessage(text, tool_call_id=f"t{i}", name="fetch_log"),
            HumanMessage(f"And table {i + 1}?"),
        ]
    trimming = Compaction(
        trim_protect_tokens=50, trim_min_tokens=50, trigger_messages=14, keep_tokens=0,
        keep_messages=9,
    )  # fmt: skip
    manifests: list[Any] = []
    harness = HarnessMiddleware(
        stack=default_stack(compaction=trimming, offload=ToolResultOffload(max_result_share=None)),
        policy=ContextPolicy(max_input_tokens=2_000, observer=manifests.append),
    )

    def script(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage) and messages[-1].name == "read_file":
            return AIMessage("done")
        trimmed = [m for m in messages if isinstance(m, ToolMessage) and "trimmed" in m.text]
        found = POINTER.search(trimmed[0].text) if trimmed else None
        if found is None:
            return AIMessage("no pointer")
        offset = re.search(r"offset=(\d+)", trimmed[0].text)
        assert offset is not None
        return _call("read_file", path=found.group(1), offset=int(offset.group(1)))

    agent, model = _agent(script, harness)
    out = await agent.ainvoke({"messages": history}, context={})
    sent = model.agent_requests()[0]
    trimmed = [m for m in sent if isinstance(m, ToolMessage) and "trimmed" in m.text]
    assert trimmed and all("session log" not in m.text for m in trimmed)
    read = _reads(out["messages"])[0]
    head = trimmed[0].text.split("\n[…")[0]
    assert head + _body(read.text) in results  # the head and what read_file gives: the whole
    assert all(m.estimated_input_tokens <= m.input_limit for m in manifests)


async def test_read_tool_false_gives_no_tool_and_no_dangling_pointer() -> None:
    model = with_script(
        lambda ms: (
            _call("fetch_log", job="b") if isinstance(ms[-1], HumanMessage) else AIMessage("ok")
        )
    )
    harness = HarnessMiddleware(read_tool=False)
    assert harness.tools == []
    agent = create_agent(model, tools=[fetch_log], middleware=[harness])
    await agent.ainvoke({"messages": [HumanMessage("Why?")]})
    preview = next(m for m in model.agent_requests()[1] if isinstance(m, ToolMessage))
    assert "read_file" not in preview.text and "is not available" in preview.text


@tool("read_file")
def own_read_file(path: str) -> str:
    """Read one of the app's own files.

    Args:
        path: the file's path.
    """
    return f"the app's own {path}"


async def test_an_agents_own_read_file_keeps_large_results_inline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # LangChain keeps one tool per name (the agent's): ours is not offered, so no preview may
    # point to it.
    model = with_script(
        lambda ms: (
            _call("fetch_log", job="b") if isinstance(ms[-1], HumanMessage) else AIMessage("ok")
        )
    )
    layers: list[Any] = [HarnessMiddleware()]
    agent = create_agent(model, tools=[fetch_log, own_read_file], middleware=layers)
    await agent.ainvoke({"messages": [HumanMessage("Why?")]})
    preview = next(m for m in model.agent_requests()[1] if isinstance(m, ToolMessage))
    assert "read_file" not in preview.text and "is not available" in preview.text
    assert "do not offer HarnessMiddleware's read_file" in caplog.text
