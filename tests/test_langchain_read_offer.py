"""`HarnessMiddleware` sends ``read_file``'s schema only once a conversation has a file to read.

``create_agent`` fixes the agent's tools when it is made, so the middleware keeps its
``read_file`` registered (the agent runs it) and leaves it out of the model call until the
conversation has an offloaded (or readable trimmed) result; from then on every call of that
conversation sends it. Real ``create_agent`` agents with LangChain's fake chat model.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from harness.adapters.langchain import HarnessMiddleware
from tests._langchain_fakes import FunctionChat, with_script

LOG = "".join(f"line {i:06d}: step {i % 97} took {i % 13} ms\n" for i in range(2_400))
"""~82,000 characters: over the 80,000 that are offloaded."""
POINTER = re.compile(r'read_file\(path="([^"]+)"')


@tool
def fetch(job: str) -> str:
    """Fetch a job's output (``big`` is a whole log).

    Args:
        job: the job's name.
    """
    return LOG if job == "big" else f"{job}: 3 tests passed"


def _call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": call_id, "name": name, "args": args}])


def _script(messages: list[BaseMessage]) -> AIMessage:
    """A human turn names the job to fetch; a big result is read back once, from offset 100."""
    last = messages[-1]
    turns = sum(isinstance(m, HumanMessage) for m in messages)
    if isinstance(last, HumanMessage):
        return _call("fetch", f"f{turns}", job=last.text)
    if isinstance(last, ToolMessage) and last.name == "fetch":
        found = POINTER.search(last.text)
        if found is not None:
            return _call("read_file", f"r{turns}", path=found.group(1), offset=100, limit=40)
    return AIMessage(f"done {turns}")


def _run(jobs: list[str]) -> tuple[FunctionChat, list[list[BaseMessage]]]:
    model = with_script(_script)
    agent = create_agent(
        model, tools=[fetch], middleware=[HarnessMiddleware()], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    outs = [agent.invoke({"messages": [HumanMessage(job)]}, config)["messages"] for job in jobs]
    return model, outs


def test_a_conversation_that_fits_never_sends_the_schema() -> None:
    model, outs = _run(["lint", "unit", "docs"])
    assert outs[-1][-1].text == "done 3"
    assert len(model.bound) == 6
    assert all(names == ["fetch"] for names in model.bound)


def test_after_the_first_offload_it_is_sent_every_call_and_reads_back() -> None:
    model, outs = _run(["lint", "big", "unit", "docs"])
    # lint: 2 calls without it; big: the first call has no preview yet, then it stays.
    assert model.bound[:3] == [["fetch"]] * 3
    assert model.bound[3:] == [["read_file", "fetch"]] * (len(model.bound) - 3)
    assert len(model.bound) == 9
    page = next(m for m in outs[1] if isinstance(m, ToolMessage) and m.name == "read_file")
    assert page.text.split("\n", 1)[1] == LOG[100:140]


@tool("read_file")
def own_read_file(path: str) -> str:
    """Read one of the app's own files.

    Args:
        path: the file's path.
    """
    return f"the app's own {path}"


def test_an_agents_own_read_file_is_always_sent() -> None:
    model = with_script(
        lambda ms: _call("fetch", "f", job="lint") if len(ms) == 1 else AIMessage("ok")
    )
    agent = create_agent(model, tools=[fetch, own_read_file], middleware=[HarnessMiddleware()])
    agent.invoke({"messages": [HumanMessage("go")]})
    assert model.bound == [["read_file", "fetch"]] * 2
