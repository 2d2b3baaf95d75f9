"""A model litellm's map does not know: its window from the server, or from its overflow error.

Everything goes through litellm to the real local server (`openai_server`), which enforces
an 8k window, exposes it (or not) the way vLLM, llama.cpp, Ollama and LM Studio do, and
words its overflow answer like them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from harness import ContextPolicy, acompletion, manifest_of
from harness.accounting import estimate_request
from harness.errors import ContextOverflowError, ProviderBadRequest
from harness.messages import Message
from harness.policy import forget_window_warnings
from harness.request import ModelRequest
from providers.litellm_client import LiteLLMClient
from providers.windows import forget_windows

from .openai_server import OpenAIServer

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh_process_caches() -> Iterator[None]:
    """Windows and warnings are kept per (api_base, model); a port may be reused."""
    forget_windows()
    forget_window_warnings()
    yield
    forget_windows()
    forget_window_warnings()


WINDOW = 8192
MODEL = "openai/mystery-coder-8k"
"""A model of no known tokenizer family, absent from litellm's map."""
MAX_TOKENS = 256
TURN = "We need to check the river gauge readings against the flood model again. " * 8
"""About 120 tokens (o200k) of user text per turn."""


def _conversation(turns: int, size: int = 1, tag: str = "") -> list[dict[str, Any]]:
    """A conversation; ``tag`` keeps the drop-in's summary cache of other tests out of it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"{tag}turn {n}: {TURN * size}"})
        messages.append({"role": "assistant", "content": f"noted {n}: {TURN * size}"})
    messages.append({"role": "user", "content": "and now?"})
    return messages


async def _drive(server: OpenAIServer, requests: int, **kwargs: Any) -> list[Any]:
    """Send ``requests`` drop-in calls of a growing conversation; return their manifests."""
    manifests = []
    for n in range(requests):
        response = await acompletion(
            model=MODEL,
            messages=_conversation(4 * n + 4),
            api_base=server.base_url,
            api_key="test",
            max_tokens=MAX_TOKENS,
            **kwargs,
        )
        manifests.append(manifest_of(response))
    return manifests


async def test_an_unknown_model_uses_the_window_the_server_reports() -> None:
    # The acceptance: 20 requests of a conversation that grows past the window.
    with OpenAIServer(model="mystery-coder-8k", window=WINDOW, metadata="vllm") as server:
        manifests = await _drive(server, 20)

    assert server.over_window == []  # 0 requests over the window
    limits = {m.input_limit for m in manifests if m.purpose == "agent"}
    assert limits == {WINDOW - MAX_TOKENS - 1024}
    assert min(limits) + MAX_TOKENS >= 0.8 * WINDOW  # ≥ 80 % of the window usable
    assert max(server.prompt_tokens) > WINDOW // 4  # the conversation did fill the budget
    assert server.metadata_requests == ["/v1/models"]  # asked once per process
    assert not any("input_limit_guessed" in t for m in manifests for t in m.transforms)


@pytest.mark.parametrize("metadata", ["vllm", "llama.cpp", "ollama", "lm_studio"])
async def test_the_window_is_read_from_each_servers_metadata(metadata: str) -> None:
    with OpenAIServer(model="mystery-coder-8k", window=WINDOW, metadata=metadata) as server:
        client = LiteLLMClient(MODEL, api_base=server.base_url, api_key="test")
        assert client.context_window() is None  # litellm's map does not know it

        assert await client.discover_context_window() == WINDOW
        assert await client.discover_context_window() == WINDOW

        assert client.context_window() == WINDOW
        again = LiteLLMClient(MODEL, api_base=server.base_url, api_key="test")
        assert again.context_window() == WINDOW  # cached for the process, not per client
        info = client.window_info()
        assert info is not None and info.source.startswith("server:")
        asked = len(server.metadata_requests)
        await again.discover_context_window()
        assert len(server.metadata_requests) == asked  # not asked again


async def test_a_guessed_window_warns_once_and_marks_the_manifest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with OpenAIServer(model="mystery-coder-8k") as server, caplog.at_level(logging.WARNING):
        manifests = await _drive(server, 2)
        base_url = server.base_url

    warnings = [r for r in caplog.records if r.name == "harness.policy"]
    assert len(warnings) == 1
    said = warnings[0].getMessage()
    assert MODEL in said and base_url in said
    assert "ContextPolicy(max_input_tokens=" in said and "context_window=" in said
    for manifest in manifests:
        assert manifest.input_limit == 64_000
        assert "input_limit_guessed:64000" in manifest.transforms
    # Metadata was asked once, found nothing, and was not asked again.
    assert server.metadata_requests == ["/v1/models", "/props", "/api/show"]


async def test_no_warning_when_the_caller_sets_the_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with OpenAIServer(model="mystery-coder-8k") as server, caplog.at_level(logging.WARNING):
        manifests = await _drive(server, 1, policy=ContextPolicy(max_input_tokens=6_000))
        configured = await _drive(server, 1, context_window=WINDOW)

    assert not [r for r in caplog.records if r.name == "harness.policy"]
    assert manifests[0].input_limit == 6_000
    assert configured[0].input_limit == WINDOW - MAX_TOKENS - 1024


@pytest.mark.parametrize("style", ["vllm", "llama.cpp", "lm_studio", "openai"])
async def test_the_window_an_overflow_states_is_used_by_the_retry_and_after(style: str) -> None:
    # No metadata: the first request is budgeted at the 64,000 guess and overflows; the
    # error's number becomes the window for the retry and for every later request.
    with OpenAIServer(model="mystery-coder-8k", window=WINDOW, overflow_style=style) as server:
        first = await _drive(server, 1)  # a short conversation fits
        assert len(server.over_window) == 0
        response = await acompletion(
            model=MODEL,
            # 20 messages of about 600 tokens: over the window, within the guessed budget,
            # under the compaction trigger (50 messages)
            messages=_conversation(10, size=5, tag=style),
            api_base=server.base_url,
            api_key="test",
            max_tokens=MAX_TOKENS,
        )
        retried = manifest_of(response)
        later = await _drive(server, 3)
        base_url = server.base_url

    assert retried is not None
    assert first[0].input_limit == 64_000
    assert len(server.over_window) == 1  # only the first over-long request
    assert "overflow_retry:1" in retried.transforms
    assert f"input_limit_from_overflow:{WINDOW - MAX_TOKENS - 1024}" in retried.transforms
    assert {m.input_limit for m in later} == {WINDOW - MAX_TOKENS - 1024}
    assert LiteLLMClient(MODEL, api_base=base_url).context_window() == WINDOW


def _request(turns: int) -> ModelRequest:
    history = tuple(
        Message(role="user" if n % 2 == 0 else "assistant", content=f"{n}: {TURN}")
        for n in range(turns)
    )
    policy = ContextPolicy().resolve(MODEL)
    return ModelRequest(model=MODEL, history=history, policy=policy)


async def test_an_unexplained_400_near_the_budget_is_an_overflow_far_from_it_not() -> None:
    with OpenAIServer(model="mystery-coder-8k", window=WINDOW, overflow_style="bare") as server:
        client = LiteLLMClient(MODEL, api_base=server.base_url, api_key="test", max_retries=0)
        request = _request(80)  # about 10,000 tokens: over the server's window
        estimated = estimate_request(request)

        with pytest.raises(ContextOverflowError) as raised:
            await client.complete(request.replace(input_limit=estimated))
        assert raised.value.reason == "suspected_overflow"
        assert raised.value.status == 400

        with pytest.raises(ProviderBadRequest):  # the request used a third of its budget
            await client.complete(request.replace(input_limit=3 * estimated))
    assert len(server.over_window) == 2


async def test_a_discovered_window_is_asked_again_once_it_expires_or_overflows() -> None:
    # A server behind one URL can be restarted with another model length: what it said is
    # trusted for WINDOW_TTL_S, and an overflow that states no window drops it at once.
    from providers.windows import discover_window, forget_window, known_window

    with OpenAIServer(model="mystery-coder-8k", window=WINDOW, metadata="vllm") as server:
        found = await discover_window(MODEL, server.base_url)
        assert found is not None and found.tokens == WINDOW
        assert await discover_window(MODEL, server.base_url) == found  # cached
        assert len(server.metadata_requests) == 1
        assert known_window(MODEL, server.base_url, ttl_s=0) is None  # expired: dropped
        assert (await discover_window(MODEL, server.base_url)).tokens == WINDOW  # type: ignore[union-attr]
        assert len(server.metadata_requests) == 2  # asked again
        forget_window(MODEL, server.base_url)  # what the client does on such an overflow
        await discover_window(MODEL, server.base_url)
        assert len(server.metadata_requests) == 3
