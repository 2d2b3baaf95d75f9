"""ImageBudget: the newest images stay, the oldest become placeholders, in batches."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest

from harness import ContextManifest, ContextPolicy, HarnessAgent, Message, RuntimeContext
from harness.errors import ConfigurationError
from harness.messages import ContentPart
from middleware import ImageBudget, default_stack
from providers import ScriptedModel


def _png(width: int, height: int) -> str:
    """Return a data URL whose PNG header says ``width`` × ``height``."""
    header = struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    chunk = b"IHDR" + header
    data = (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(header))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
    )
    return "data:image/png;base64," + base64.b64encode(data).decode()


def _shot(i: int) -> Message:
    return Message(
        role="user",
        content=(
            ContentPart(type="text", text=f"screenshot {i}"),
            ContentPart(type="image_url", data={"image_url": {"url": _png(512, 512)}}),
        ),
    )


def _images(request_history: tuple[Message, ...]) -> int:
    return sum(
        1
        for m in request_history
        if isinstance(m.content, tuple)
        for p in m.content
        if p.type == "image_url"
    )


def _agent(
    tmp_path: Path, budget: ImageBudget, seen: list[ContextManifest]
) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel(default="seen")
    stack = default_stack()
    stack.insert(-3, budget)  # before BudgetFit, Compaction and PairValidation
    agent = HarnessAgent(
        model=model,
        stack=stack,
        workspace=str(tmp_path),
        policy=ContextPolicy(observer=seen.append),
    )
    return agent, model


async def test_past_the_count_the_oldest_go_down_to_the_refill_and_then_the_prefix_holds(
    tmp_path: Path,
) -> None:
    seen: list[ContextManifest] = []
    agent, model = _agent(tmp_path, ImageBudget(max_images=8, max_tokens=10**6), seen)
    ctx = RuntimeContext(session_id="img")
    for i in range(8):
        agent.state(ctx).append(_shot(i), Message.assistant(f"noted {i}"))
    await agent.call(_shot(8), ctx)  # nine images: one over
    first = model.agent_requests[-1].history
    assert _images(first) == 6  # down to ¾ of 8
    assert _images(first[-1:]) == 1  # the newest image stays
    assert "placeholder" not in str(first[-1].content)
    texts = [p.text for m in first[:6] if isinstance(m.content, tuple) for p in m.content]
    assert sum("earlier image was removed" in (t or "") for t in texts) == 3
    omitted = [t for t in seen[-1].transforms if t.kind == "image_omitted"]
    assert len(omitted) == 3 and all(t.omitted for t in omitted)
    # The next two images stay within the count: nothing is rewritten, the prefix holds.
    await agent.call(_shot(9), ctx)
    await agent.call(_shot(10), ctx)
    assert _images(model.agent_requests[-1].history) == 8
    assert [m.cache_break for m in seen[-2:]] == [None, None]
    assert not [t for t in seen[-1].transforms if t.kind == "image_omitted"]


async def test_the_token_budget_counts_each_images_size(tmp_path: Path) -> None:
    seen: list[ContextManifest] = []
    # 512 × 512 is 255 tokens by OpenAI's rule, 350 by Anthropic's: at most 1,000 tokens
    agent, model = _agent(tmp_path, ImageBudget(max_images=100, max_tokens=1_000), seen)
    ctx = RuntimeContext(session_id="tok")
    for i in range(6):
        agent.state(ctx).append(_shot(i), Message.assistant(f"noted {i}"))
    await agent.call("what changed?", ctx)
    kept = _images(model.agent_requests[-1].history)
    assert 1 <= kept <= 3


async def test_the_newest_messages_images_are_never_removed(tmp_path: Path) -> None:
    agent, model = _agent(tmp_path, ImageBudget(max_images=1), [])
    many = Message(
        role="user",
        content=tuple(
            ContentPart(type="image_url", data={"image_url": {"url": _png(64, 64)}})
            for _ in range(3)
        ),
    )
    await agent.call(many, RuntimeContext(session_id="new"))
    assert _images(model.agent_requests[-1].history) == 3


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_images"):
        ImageBudget(max_images=0)
    with pytest.raises(ConfigurationError, match="max_tokens"):
        ImageBudget(max_tokens=-5)
    with pytest.raises(ConfigurationError, match="refill"):
        ImageBudget(refill=0)
