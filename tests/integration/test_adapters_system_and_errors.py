"""The drop-in `acompletion`: the app's System blocks keep their provider options, and every
provider failure leaves as litellm's own exception — checked on what the local
OpenAI-compatible server received through litellm, and on what the caller caught.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness import ContextPolicy, acompletion
from harness.types import Middleware
from middleware import PairValidation

from .openai_server import (
    OpenAIServer,
)

pytestmark = pytest.mark.integration

MODEL = "openai/test-model"
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}


def _kw(server: OpenAIServer, **extra: Any) -> dict[str, Any]:
    return {
        "api_base": server.base_url,
        "api_key": "test",
        "policy": ContextPolicy(max_input_tokens=4_000),
        **extra,
    }


def _cached_system(text: str) -> dict[str, Any]:
    return {
        "role": "system",
        "content": [{"type": "text", "text": text, "cache_control": EPHEMERAL}],
    }


# ------------------------------------------------------------------ System blocks (item 1)
async def test_a_system_block_with_cache_control_reaches_the_provider_as_a_block(
    openai_server: OpenAIServer,
) -> None:
    messages = [
        _cached_system("You are a careful DBA. " * 20),
        {"role": "user", "content": "Which index should I add?"},
    ]
    before = copy.deepcopy(messages)
    await acompletion(MODEL, messages, **_kw(openai_server))
    assert messages == before
    system = openai_server.last_request["messages"][0]
    assert system["role"] == "system"
    assert system["content"] == before[0]["content"]  # the block, its cache_control with it


async def test_system_blocks_keep_their_options_beside_plain_and_message_level_ones(
    openai_server: OpenAIServer,
) -> None:
    messages = [
        _cached_system("Rules: be brief."),
        {"role": "system", "content": "Answer in metric units."},
        {"role": "developer", "content": "Tenant acme.", "cache_control": EPHEMERAL},
        {"role": "user", "content": "Weather?"},
    ]
    await acompletion(MODEL, messages, **_kw(openai_server))
    sent = openai_server.last_request["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[0]["content"] == [
        {"type": "text", "text": "Rules: be brief.", "cache_control": EPHEMERAL},
        {"type": "text", "text": "Answer in metric units."},
        {"type": "text", "text": "Tenant acme.", "cache_control": EPHEMERAL},
    ]


async def test_system_text_the_stack_adds_comes_as_further_blocks(
    openai_server: OpenAIServer, tmp_path: Any
) -> None:
    from harness import Workspace
    from middleware import WorkspaceMaterials

    (tmp_path / "AGENTS.md").write_text("Run the tests before you answer.")
    stack: list[Middleware] = [WorkspaceMaterials(workspace=Workspace(tmp_path)), PairValidation()]
    messages = [_cached_system("You are a careful DBA."), {"role": "user", "content": "hi"}]
    await acompletion(MODEL, messages, stack=stack, **_kw(openai_server))
    content = openai_server.last_request["messages"][0]["content"]
    assert content[0] == messages[0]["content"][0]
    assert any("Run the tests" in b["text"] and "cache_control" not in b for b in content[1:])
