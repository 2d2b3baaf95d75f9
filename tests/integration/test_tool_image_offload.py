"""A screenshot tool's large image, over real HTTP: offloaded from the request, read back whole.

agent → default stack → LiteLLMClient → litellm → the local OpenAI-compatible server: what
the server receives is what a provider would — a short placeholder instead of megabytes of
base64, then, after ``read_file``, the image again as an ``image_url`` part.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness import ContentPart, HarnessAgent, RuntimeContext
from middleware import default_stack
from providers import LiteLLMClient
from tests.middleware.test_tool_image_offload import image_part, png, screenshot_tool

from .openai_server import OpenAIServer, Reply, reply, tool_call

pytestmark = pytest.mark.integration

# aiohttp (under litellm) warns that a body over 1 MiB sent as bytes may hold up the event
# loop; the read-back request carries the 8 MB image, as the tool's own result did.
PATH = re.compile(r'read_file\(path="([^"]+)"\)')


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


def _image_urls(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


@pytest.mark.filterwarnings("ignore:Sending a large body directly:ResourceWarning")
async def test_the_server_gets_a_placeholder_then_the_image_read_back(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    data = png(1920, 1080)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    parts = (ContentPart(type="text", text="screenshot of the login page"), image_part(data))

    def read_back(body: dict[str, Any]) -> Reply:
        match = PATH.search(_text(_tool_messages(body)[-1]))
        assert match is not None
        return tool_call("read_file", {"path": match[1]}, id="c2")

    openai_server.push(tool_call("screenshot", {}, id="c1"), read_back, reply("I see it"))
    agent = HarnessAgent(
        model=LiteLLMClient("openai/vision-model", api_base=openai_server.base_url, api_key="t"),
        tools=[screenshot_tool(parts)],
        stack=default_stack(),
        workspace=str(tmp_path),
    )
    ctx = RuntimeContext(user_id="u1", session_id="shots")
    assert (await agent.call("check the login page", ctx)).text == "I see it"

    first, second, third = openai_server.requests
    assert len(json.dumps(first)) < 20_000
    (offloaded,) = _tool_messages(second)
    assert _image_urls(offloaded) == []
    assert "screenshot of the login page" in _text(offloaded)
    assert f"1920×1080 PNG image ({len(data):,} bytes)" in _text(offloaded)
    assert len(json.dumps(second)) < 20_000  # not the 8 MB of base64
    path = PATH.search(_text(offloaded))
    assert path is not None and (tmp_path / path[1]).read_bytes() == data
    # read_file's result carries the image itself to the provider. OpenAI's chat API takes
    # no image in a tool message, so litellm moves it into a user message right after.
    messages = third["messages"]
    (at,) = [i for i, m in enumerate(messages) if m.get("tool_call_id") == "c2"]
    assert "1920×1080 PNG image" in _text(messages[at])
    after = messages[at + 1]
    assert after["role"] == "user" and _image_urls(after) == [url]
    images = [u for m in messages for u in _image_urls(m)]
    assert images == [url]  # once: the offloaded result stays a placeholder
