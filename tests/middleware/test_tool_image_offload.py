"""ToolResultOffload's images: big ones go to the session's folder, read_file brings them back."""

from __future__ import annotations

import base64
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from harness import ContentPart, HarnessAgent, Message, ModelRequest, RuntimeContext, Workspace
from harness.errors import ConfigurationError
from harness.policy import ContextPolicy
from harness.tokens import OPENAI_MAX_IMAGE, image_tokens
from harness.tools import Tool
from middleware.tool_result_offload import ToolResultOffload
from middleware.tool_result_offload._images import media_type
from middleware.tool_result_offload._read_file import session_key
from providers import ScriptedModel


def png(width: int, height: int, *, noise: bool = True) -> bytes:
    """Return a real PNG of ``width`` × ``height`` RGB pixels (noise compresses badly)."""
    row = width * 3
    if noise:
        raw = b"".join(b"\x00" + os.urandom(row) for _ in range(height))
    else:
        raw = (b"\x00" + b"\x80" * row) * height

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 1))
        + chunk(b"IEND", b"")
    )


def jpeg(size: int) -> bytes:
    """Return bytes that start like a JPEG of 640 × 480 (a SOF0 header), ``size`` long."""
    sof = b"\xff\xc0\x00\x11\x08" + struct.pack(">HH", 480, 640) + b"\x03" + b"\x00" * 9
    head = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + sof
    return head + os.urandom(size - len(head))


def image_part(data: bytes, media: str = "image/png") -> ContentPart:
    url = f"data:{media};base64,{base64.b64encode(data).decode()}"
    return ContentPart(type="image_url", data={"image_url": {"url": url}})


def screenshot_tool(parts: tuple[ContentPart, ...]) -> Tool:
    def screenshot() -> tuple[ContentPart, ...]:
        """Take a screenshot of the page."""
        return parts

    return Tool(screenshot)


def images_in(message: Message) -> list[ContentPart]:
    content = message.content
    return [p for p in content if p.type == "image_url"] if isinstance(content, tuple) else []


def url_of(part: ContentPart) -> str:
    assert part.data is not None
    url = part.data["image_url"]["url"]
    assert isinstance(url, str)
    return url


def reads_back(request: ModelRequest) -> Message | str:
    """A scripted reply: read_file the path the newest placeholder names, then say done."""
    last = request.history[-1]
    if last.name == "read_file":
        return "done"
    (path,) = last.meta("images_offloaded")
    return ScriptedModel.tool_call("read_file", {"path": path})


def agent_with(
    ws: Workspace | str, parts: tuple[ContentPart, ...], *, default: Any = "done", **options: Any
) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel([ScriptedModel.tool_call("screenshot", {}, id="c1")], default=default)
    agent = HarnessAgent(
        model=model,
        tools=[screenshot_tool(parts)],
        stack=[ToolResultOffload(**options)],
        workspace=ws,
    )
    return agent, model


async def test_a_big_image_is_written_decoded_and_read_back_as_an_image(tmp_path: Path) -> None:
    data = png(1920, 1080)
    assert len(data) > 6_000_000
    parts = (ContentPart(type="text", text="the page"), image_part(data))
    agent, model = agent_with(str(tmp_path), parts, default=reads_back)
    ctx = RuntimeContext(user_id="u1", session_id="s1")
    assert (await agent.call("look at the page", ctx)).text == "done"

    second = model.agent_requests[1]
    result = second.history[-1]
    assert images_in(result) == []
    (path,) = result.meta("images_offloaded")
    assert path.startswith(f"large_tool_results/{session_key('s1', 'u1')}/")
    assert path.endswith(".png")
    assert (tmp_path / path).read_bytes() == data  # the decoded bytes, byte-exact
    assert "tool_image_offload:c1:1" in second.transforms
    assert "read_file" in [t.name for t in second.tools]  # offered once there is a file
    text = result.text
    assert "the page" in text  # the text part stays
    assert f"1920×1080 PNG image ({len(data):,} bytes)" in text
    assert f'read_file(path="{path}")' in text
    # The placeholder costs < 100 tokens; the image 1,105 (OpenAI's tiles) to 1,600.
    assert second.estimator.count(text) < 100
    assert image_tokens(parts[1], "openai") == 1_105
    assert image_tokens(parts[1], "anthropic") == 1_600
    # read_file attaches the image itself, not its base64 as text.
    final = model.agent_requests[-1]
    reread = final.history[-1]
    assert reread.name == "read_file"
    (image,) = images_in(reread)
    assert url_of(image) == "data:image/png;base64," + base64.b64encode(data).decode()
    assert "tool_image_offload" not in " ".join(final.transforms)  # read_file is exempt
    # The session's full record keeps the original image.
    full = await agent.history(ctx)
    assert any(url_of(p) == url_of(parts[1]) for m in full for p in images_in(m))


async def test_images_under_the_threshold_stay_and_the_extension_follows_the_media_type(
    tmp_path: Path,
) -> None:
    small, big = png(64, 64, noise=False), jpeg(1_200_000)
    parts = (image_part(small), image_part(big, "image/jpeg"))
    agent, model = agent_with(str(tmp_path), parts)
    await agent.call("look", RuntimeContext(session_id="s"))
    result = model.agent_requests[1].history[-1]
    (kept,) = images_in(result)
    assert kept == parts[0]
    (path,) = result.meta("images_offloaded")
    assert path.endswith(".jpg") and (tmp_path / path).read_bytes() == big
    assert "640×480 JPEG image (1,200,000 bytes)" in result.text
    assert "tool_image_offload:c1:1" in model.agent_requests[1].transforms


async def test_anthropic_parts_and_line_wrapped_base64_are_offloaded_byte_exact(
    tmp_path: Path,
) -> None:
    data = jpeg(1_100_000)
    wrapped = base64.encodebytes(data).decode()  # MIME style: a newline every 76 characters
    source = {"type": "base64", "media_type": "image/jpeg", "data": wrapped}
    part = ContentPart(type="image", data={"source": source})
    agent, model = agent_with(str(tmp_path), (part,))
    await agent.call("look", RuntimeContext(session_id="anthropic"))
    result = model.agent_requests[1].history[-1]
    assert isinstance(result.content, tuple)
    assert [p.type for p in result.content] == ["text"]
    (path,) = result.meta("images_offloaded")
    assert path.endswith(".jpg") and (tmp_path / path).read_bytes() == data


async def test_a_small_window_offloads_an_image_by_its_tokens(tmp_path: Path) -> None:
    small = png(768, 2048, noise=False)  # a tall page: OpenAI's largest count
    assert len(small) < 100_000
    part = image_part(small)
    assert image_tokens(part, "openai") == OPENAI_MAX_IMAGE == 1_445  # over ¼ of 4,000
    model = ScriptedModel([ScriptedModel.tool_call("screenshot", {}, id="c1")], default="done")
    agent = HarnessAgent(
        model=model,
        tools=[screenshot_tool((part,))],
        stack=[ToolResultOffload()],
        workspace=str(tmp_path),
        policy=ContextPolicy(max_input_tokens=4_000),
    )
    await agent.call("look", RuntimeContext(session_id="w"))
    assert images_in(model.agent_requests[1].history[-1]) == []
    # With a large window the same image stays.
    agent, model = agent_with(str(tmp_path), (part,))
    await agent.call("look", RuntimeContext(session_id="w2"))
    assert images_in(model.agent_requests[1].history[-1]) == [part]


async def test_an_in_memory_workspace_holds_the_bytes(tmp_path: Path) -> None:
    ws = Workspace("memory://image-offload-test")
    data = png(800, 600)
    agent, model = agent_with(ws, (image_part(data),), default=reads_back)
    await agent.call("look", RuntimeContext(user_id="u", session_id="m"))
    (path,) = model.agent_requests[1].history[-1].meta("images_offloaded")
    assert ws.read_bytes(path) == data
    (image,) = images_in(model.agent_requests[-1].history[-1])
    assert url_of(image).endswith(base64.b64encode(data).decode())


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("data:image/png;base64," + "@@not base64!" * 200_000, "bad_base64"),
        ("data:image/svg+xml;base64," + base64.b64encode(b"<svg/>" * 200_000).decode(),
         "unknown_type"),
    ],
)  # fmt: skip
async def test_an_image_that_cannot_be_offloaded_stays_in_place_with_a_reason(
    tmp_path: Path, url: str, reason: str
) -> None:
    part = ContentPart(type="image_url", data={"image_url": {"url": url}})
    agent, model = agent_with(str(tmp_path), (part,))
    await agent.call("look", RuntimeContext(session_id="bad"))
    request = model.agent_requests[1]
    assert images_in(request.history[-1]) == [part]  # nothing lost
    assert f"tool_image_offload_failed:c1:1:{reason}" in request.transforms
    assert not (tmp_path / "large_tool_results").exists()


async def test_a_failed_write_keeps_the_image(tmp_path: Path) -> None:
    (tmp_path / "large_tool_results").write_text("a file where the folder should be")
    part = image_part(png(800, 600))
    agent, model = agent_with(str(tmp_path), (part,))
    await agent.call("look", RuntimeContext(session_id="ro"))
    request = model.agent_requests[1]
    assert images_in(request.history[-1]) == [part]
    (failed,) = [t for t in request.transforms if t.startswith("tool_image_offload_failed")]
    assert failed.startswith("tool_image_offload_failed:c1:1:")


async def test_two_sessions_images_never_share_a_folder_or_a_read(tmp_path: Path) -> None:
    data = png(800, 600)
    agent, model = agent_with(str(tmp_path), (image_part(data),))
    model.script.extend(["done", ScriptedModel.tool_call("screenshot", {}, id="c1")])
    first, second = (
        RuntimeContext(user_id="a", session_id="s"),
        RuntimeContext(user_id="b", session_id="s"),
    )
    await agent.call("look", first)
    (path_a,) = model.agent_requests[1].history[-1].meta("images_offloaded")
    await agent.call("look", second)
    (path_b,) = model.agent_requests[-1].history[-1].meta("images_offloaded")
    assert path_a.split("/")[1] == session_key("s", "a")
    assert path_b.split("/")[1] == session_key("s", "b")
    assert (tmp_path / path_a).read_bytes() == (tmp_path / path_b).read_bytes() == data
    # User b's session cannot read user a's image.
    model.script.append(ScriptedModel.tool_call("read_file", {"path": path_a}))
    await agent.call("show me the other one", second)
    refused = model.agent_requests[-1].history[-1]
    assert refused.name == "read_file" and images_in(refused) == []
    assert refused.text.startswith("Error: PathEscapeError")


async def test_the_same_result_is_offloaded_once_and_max_image_bytes_none_keeps_it(
    tmp_path: Path,
) -> None:
    data = png(800, 600)
    agent, model = agent_with(str(tmp_path), (image_part(data),))
    ctx = RuntimeContext(session_id="once")
    await agent.call("look", ctx)
    await agent.call("and now?", ctx)
    last = model.agent_requests[-1]
    assert not [t for t in last.transforms if t.startswith("tool_image_offload")]
    assert sum(1 for m in last.history if m.meta("images_offloaded")) == 1
    agent, model = agent_with(str(tmp_path), (image_part(data),), max_image_bytes=None)
    await agent.call("look", RuntimeContext(session_id="off"))
    assert len(images_in(model.agent_requests[1].history[-1])) == 1


def test_media_types_come_from_the_bytes_and_bad_settings_are_refused() -> None:
    assert media_type(png(2, 2, noise=False)) == "image/png"
    assert media_type(jpeg(100)) == "image/jpeg"
    assert media_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert media_type(b"\x89PNG but really text") is None
    assert media_type(b"<svg/>") is None
    with pytest.raises(ConfigurationError, match="max_image_bytes"):
        ToolResultOffload(max_image_bytes=0)
