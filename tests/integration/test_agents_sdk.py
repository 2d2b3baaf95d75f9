"""An Agents SDK ``Runner`` with `HarnessSession`, against a real OpenAI-compatible server.

The acceptance of issue 23: a conversation run with our Session resumes in a new process
(one turn, exit, a new process continues it, and the model receives the earlier turns) on
SQLite. Then, in this process through ``LitellmModel`` (litellm and HTTP, as the README's
preparation route uses it): a tool-using turn comes back whole in the next run (the call with
its result), and the SDK's ``RunConfig(session_settings=…)`` limit holds through our Session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.extensions.models.litellm_model import LitellmModel
from agents.memory import SessionSettings

from harness.adapters import HarnessSession
from harness.sessions import MessageEvent, SessionKey, open_store

from .openai_server import OpenAIServer, reply, tool_call

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent.parent
CHILD = Path(__file__).with_name("agents_sdk_child.py")


def child_turn(server: OpenAIServer, store_url: str, text: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    out = subprocess.run(
        [sys.executable, str(CHILD), server.base_url, store_url, "trip", text],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    final: str = json.loads(out.stdout.strip().splitlines()[-1])["final_output"]
    return final


def chat(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The (role, text) of each message a chat request carried."""
    found: list[tuple[str, str]] = []
    for m in body["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        found.append((m["role"], content or ""))
    return found


@pytest.mark.timeout(300)
def test_a_runner_resumes_the_session_in_a_new_process(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    store_url = f"sqlite://{tmp_path / 'sessions.db'}"
    openai_server.push(reply("Noted: 42."))
    assert child_turn(openai_server, store_url, "Remember the number 42.") == "Noted: 42."
    openai_server.push(reply("It was 42."))
    assert child_turn(openai_server, store_url, "Which number did I give you?") == "It was 42."

    assert len(openai_server.requests) == 2
    assert chat(openai_server.requests[1]) == [
        ("system", "Answer briefly."),
        ("user", "Remember the number 42."),
        ("assistant", "Noted: 42."),
        ("user", "Which number did I give you?"),
    ]

    async def logged() -> list[str]:
        store = open_store(store_url)
        try:
            events = await store.events(SessionKey("alice", "agents-sdk", "trip"))
        finally:
            await store.aclose()
        return [e.event.message.text for e in events if isinstance(e.event, MessageEvent)]

    assert anyio.run(logged) == [
        "Remember the number 42.",
        "Noted: 42.",
        "Which number did I give you?",
        "It was 42.",
    ]


@function_tool
def get_weather(city: str) -> str:
    """Return the weather in a city."""
    return f"sunny in {city}"


def litellm_agent(server: OpenAIServer) -> Agent[Any]:
    model = LitellmModel(model="openai/test-model", base_url=server.base_url, api_key="test-key")
    return Agent(name="assistant", instructions="Answer briefly.", model=model, tools=[get_weather])


NO_TRACES = RunConfig(tracing_disabled=True)


async def test_a_tool_turn_comes_back_whole_through_litellm(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    store_url = f"sqlite://{tmp_path / 'sessions.db'}"
    agent = litellm_agent(openai_server)
    openai_server.push(tool_call("get_weather", {"city": "Paris"}, id="call_w1"), reply("Sunny."))
    async with HarnessSession("tools", store=store_url, user_id="alice") as session:
        result = await Runner.run(agent, "Weather in Paris?", session=session, run_config=NO_TRACES)
        assert result.final_output == "Sunny."
    openai_server.push(reply("You asked about Paris."))
    async with HarnessSession("tools", store=store_url, user_id="alice") as session:
        await Runner.run(agent, "Which city?", session=session, run_config=NO_TRACES)
        stored = await session.get_items()
    sent = openai_server.requests[-1]["messages"]
    calls = [m for m in sent if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in sent if m["role"] == "tool"]
    assert [c["tool_calls"][0]["id"] for c in calls] == ["call_w1"]
    assert [r["tool_call_id"] for r in results] == ["call_w1"]
    assert "sunny in Paris" in results[0]["content"]
    assert chat(openai_server.requests[-1])[-1] == ("user", "Which city?")
    kinds = [dict(i).get("type", "message") for i in stored]
    assert kinds.count("function_call") == 1 and kinds.count("function_call_output") == 1


async def test_the_run_configs_session_limit_holds(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    agent = litellm_agent(openai_server)
    async with HarnessSession("limit", store=f"sqlite://{tmp_path / 's.db'}") as session:
        for i in (1, 2, 3):
            openai_server.push(reply(f"Reply {i}"))
            await Runner.run(agent, f"Message {i}", session=session, run_config=NO_TRACES)
        assert len(await session.get_items()) == 6
        openai_server.push(reply("Reply 4"))
        limited = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=2))
        await Runner.run(agent, "Message 4", session=session, run_config=limited)
    assert chat(openai_server.requests[-1]) == [
        ("system", "Answer briefly."),
        ("user", "Message 3"),
        ("assistant", "Reply 3"),
        ("user", "Message 4"),
    ]
