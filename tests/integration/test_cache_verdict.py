"""The cache verdict per request, through litellm to servers that cache as OpenAI and Anthropic do.

Each manifest says what our layout expected the provider to serve from its prompt cache
(``cache_expected``: the prefix shared with the session's previous request) and, once the
provider answered, how its reported cached tokens compare (``cache_verdict``). The OpenAI-style
server reports ``prompt_tokens_details.cached_tokens`` from its automatic prefix cache; the
Anthropic-style one ``cache_read_input_tokens`` at the marks `LiteLLMClient` places. Both can
drop their cache (`drop_cache`), as an expired entry or another replica would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import HarnessAgent, RuntimeContext
from harness.manifest import ContextManifest
from harness.sessions import SessionKey, open_store
from harness.sessions.store import ManifestEvent
from middleware import default_stack
from providers import LiteLLMClient

from .anthropic_server import AnthropicServer
from .openai_server import OpenAIServer

pytestmark = pytest.mark.integration

SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: be exact." for i in range(300))
"""Over 1,024 tokens: both servers' caches serve it from the second request on."""
CTX = RuntimeContext(session_id="v1", user_id="alice")
KEY = SessionKey("alice", "agent", "v1")


async def _manifests(url: str) -> list[ContextManifest]:
    store = open_store(url)
    try:
        log = [e.event for e in await store.events(KEY, limit=1_000)]
    finally:
        await store.aclose()
    return [
        e.manifest for e in log if isinstance(e, ManifestEvent) and e.manifest.purpose == "agent"
    ]


async def _script(
    client: LiteLLMClient, server: OpenAIServer | AnthropicServer, url: str, workspace: Path
) -> None:
    """Three stable rounds, a System change, a stable round, then the server forgets its cache."""
    agent = HarnessAgent(
        model=client, system_prompt=SYSTEM, store=url, stack=default_stack(),
        workspace=str(workspace),
    )  # fmt: skip
    for turn in ("first", "second", "third"):
        await agent.call(turn, CTX)
    agent.system_prompt = SYSTEM + " Answer in French."
    await agent.call("fourth", CTX)
    await agent.call("fifth", CTX)
    server.drop_cache()
    await agent.call("sixth", CTX)
    assert agent.store is not None
    await agent.store.aclose()


def _check(manifests: list[ContextManifest]) -> None:
    assert [m.cache_verdict for m in manifests] == [
        "agree",
        "agree",
        "agree",
        "break_confirmed",
        "agree",
        "provider_miss",
    ]
    first, second, _, changed, after, dropped = manifests
    assert first.cache_expected == 0 and first.usage is not None and first.usage.cached_tokens == 0
    assert second.cache_expected is not None and second.cache_expected > 1_024
    assert second.usage is not None and second.usage.cached_tokens > 1_024
    assert changed.cache_break is not None and changed.cache_break.startswith("system:")
    assert changed.usage is not None and changed.usage.cached_tokens < 1_024
    assert after.cache_break is None and after.usage is not None
    assert after.usage.cached_tokens > 1_024
    assert dropped.cache_break is None and dropped.cache_expected is not None
    assert dropped.cache_expected > 1_024
    assert dropped.usage is not None and dropped.usage.cached_tokens == 0


async def test_openai_style_cached_tokens_agree_confirm_a_break_and_show_a_miss(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    with OpenAIServer(prefix_cache=True) as server:
        client = LiteLLMClient("openai/gpt-4o-mini", api_base=server.base_url, api_key="test")
        await _script(client, server, url, tmp_path)
    manifests = await _manifests(url)
    _check(manifests)
    # the expectation, scaled to the server's count, is what the server served (within a block)
    for m in manifests[1:3]:
        assert m.usage is not None and m.cache_expected is not None
        scaled = m.cache_expected * m.usage.prompt_tokens / m.estimated_input_tokens
        assert abs(m.usage.cached_tokens - scaled) <= 128 + 0.05 * scaled, m


async def test_anthropic_style_cache_reads_agree_confirm_a_break_and_show_a_miss(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    with AnthropicServer() as server:
        client = LiteLLMClient(
            "anthropic/claude-sonnet-4-5", api_base=server.base_url, api_key="test"
        )
        await _script(client, server, url, tmp_path)
    _check(await _manifests(url))


async def test_a_provider_that_reports_no_cached_tokens_gets_no_verdict(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    with OpenAIServer() as server:  # no prefix cache: no prompt_tokens_details at all
        client = LiteLLMClient("openai/gpt-4o-mini", api_base=server.base_url, api_key="test")
        agent = HarnessAgent(model=client, system_prompt=SYSTEM, store=url, stack=default_stack())
        for turn in ("first", "second"):
            await agent.call(turn, CTX)
        assert agent.store is not None
        await agent.store.aclose()
    manifests = await _manifests(url)
    assert [m.cache_verdict for m in manifests] == [None, None]
    assert manifests[1].cache_expected is not None and manifests[1].cache_expected > 1_024
    assert all(m.usage is not None and not m.usage.cache_reported for m in manifests)
