"""A LangChain tool's large image through `HarnessMiddleware`: offloaded, then read back as an image.

A real ``create_agent`` agent with LangChain's own fake chat model: a screenshot tool returns
OpenAI-style content blocks with a 6 MB PNG; the model sees a placeholder, calls the
middleware's ``read_file`` with the path it names, and gets the image back as a block.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from harness.adapters.langchain import HarnessMiddleware
from tests._langchain_fakes import with_script
from tests.middleware.test_tool_image_offload import png

DATA = png(1920, 1080)
URL = "data:image/png;base64," + base64.b64encode(DATA).decode()
POINTER = re.compile(r'read_file\(path="([^"]+)"\)')


@tool
def screenshot(page: str) -> list[dict[str, Any]]:
    """Take a screenshot of a page.

    Args:
        page: the page's name.
    """
    return [
        {"type": "text", "text": f"screenshot of {page}"},
        {"type": "image_url", "image_url": {"url": URL}},
    ]


def _call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": f"{name}-1", "name": name, "args": args}])


def _images(message: BaseMessage) -> list[str]:
    content = message.content
    if isinstance(content, str):
        return []
    return [
        b["image_url"]["url"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "image_url"
    ]


def script(messages: list[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return _call("screenshot", page="login")
    if isinstance(last, ToolMessage) and last.name == "screenshot":
        found = POINTER.search(last.text)
        return _call("read_file", path=found.group(1) if found else "missing")
    return AIMessage("done")


async def test_a_large_image_is_offloaded_and_read_back_as_an_image() -> None:
    model = with_script(script)
    agent = create_agent(model, tools=[screenshot], middleware=[HarnessMiddleware()])
    out = await agent.ainvoke({"messages": [HumanMessage("look at the login page")]})
    second = model.agent_requests()[1]
    (shot,) = [m for m in second if isinstance(m, ToolMessage)]
    assert _images(shot) == []
    assert "screenshot of login" in shot.text
    assert f"1920×1080 PNG image ({len(DATA):,} bytes)" in shot.text
    final = model.agent_requests()[-1]
    reread = next(m for m in final if isinstance(m, ToolMessage) and m.name == "read_file")
    assert _images(reread) == [URL]
    assert out["messages"][-1].content == "done"
