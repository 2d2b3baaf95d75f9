"""The drop-in `acompletion`: the app's System blocks keep their provider options, and every
provider failure leaves as litellm's own exception — checked on what the local
OpenAI-compatible server received through litellm, and on what the caller caught.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from harness import ContextPolicy, acompletion, completion
from harness.errors import ContextOverflowError, HarnessError
from harness.types import Middleware
from middleware import Compaction, OverflowRetry, PairValidation

from .openai_server import (
    OpenAIServer,
    context_length_exceeded,
    reply,
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


# ------------------------------------------------------------- litellm's exceptions (item 2)
def _is_litellms(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("litellm") and not isinstance(exc, HarnessError)


def _noted(exc: BaseException) -> bool:
    return any(note.startswith("context-harness: ") for note in getattr(exc, "__notes__", ()))


async def test_an_overflow_with_nothing_left_to_compact_raises_litellms_exception(
    openai_server: OpenAIServer,
) -> None:
    from litellm.exceptions import ContextWindowExceededError

    openai_server.default = context_length_exceeded()
    messages = [{"role": "user", "content": "A short question."}]
    with pytest.raises(ContextWindowExceededError) as caught:
        await acompletion(MODEL, messages, **_kw(openai_server))
    assert _is_litellms(caught.value) and _noted(caught.value)
    assert any("nothing more could be compacted" in n for n in caught.value.__notes__)
    assert len(openai_server.requests) == 1  # not resent: nothing changed


def test_the_sync_completion_raises_litellms_exception_too(openai_server: OpenAIServer) -> None:
    from litellm.exceptions import ContextWindowExceededError

    openai_server.default = context_length_exceeded()
    messages = [{"role": "user", "content": "A short question, synchronously."}]
    with pytest.raises(ContextWindowExceededError) as caught:
        completion(MODEL, messages, **_kw(openai_server))
    assert _is_litellms(caught.value) and _noted(caught.value)


async def test_an_overflow_that_a_retry_cannot_fix_raises_litellms_exception(
    openai_server: OpenAIServer,
) -> None:
    from litellm.exceptions import ContextWindowExceededError

    openai_server.default = context_length_exceeded()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(12):
        messages += [
            {"role": "user", "content": f"Question {i}: " + "tell me more " * 30},
            {"role": "assistant", "content": f"Answer {i}: " + "here is more " * 30},
        ]
    messages.append({"role": "user", "content": "And the last one?"})
    kw = _kw(openai_server, stack=[OverflowRetry(), Compaction(), PairValidation()])
    with pytest.raises(ContextWindowExceededError) as caught:
        await acompletion(MODEL, messages, **kw)
    assert _is_litellms(caught.value) and _noted(caught.value)
    agent = [b for b in openai_server.requests if "compacting" not in json.dumps(b)]
    assert len(agent) >= 2  # compacted and resent once


async def test_an_overflow_only_the_stop_reason_shows_raises_litellms_class(
    openai_server: OpenAIServer,
) -> None:
    from litellm.exceptions import ContextWindowExceededError

    openai_server.default = reply("", finish_reason="length", completion_tokens=0)
    messages = [{"role": "user", "content": "Overflow in disguise."}]
    with pytest.raises(ContextWindowExceededError) as caught:
        await acompletion(MODEL, messages, **_kw(openai_server))
    assert _is_litellms(caught.value) and _noted(caught.value)
    assert isinstance(caught.value.__cause__, ContextOverflowError)  # what we saw, kept


async def test_a_model_litellm_cannot_route_raises_litellms_bad_request(
    openai_server: OpenAIServer,
) -> None:
    from litellm.exceptions import BadRequestError

    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(BadRequestError) as caught:  # what litellm.acompletion raises for it
        await acompletion("no-such-model-xyz", messages, **_kw(openai_server))
    assert _is_litellms(caught.value) and _noted(caught.value)
    assert "openai/no-such-model-xyz" in caught.value.__notes__[0]  # what to do next
    assert openai_server.requests == []
