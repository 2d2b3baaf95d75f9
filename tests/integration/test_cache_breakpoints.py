"""Prompt-cache marks and context editing through litellm to a server that works as Anthropic's.

Anthropic caches only up to a block marked ``cache_control``: an agent whose requests carry
no marks pays every token in full every round. `LiteLLMClient` marks the ends of the stable
pieces (`providers.cache_breakpoints`) for such providers; these tests read what the server
reported (``cache_read_input_tokens``) over a whole agent session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import HarnessAgent, Message, RuntimeContext
from middleware import default_stack
from providers import LiteLLMClient

from .anthropic_server import AnthropicReply, AnthropicServer

pytestmark = pytest.mark.integration

SYSTEM = "You are a careful repository assistant. " * 60


def _probe(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}: " + "line of code; " * 80


async def _session(tmp_path: Path, *, marks: bool | None, rounds: int = 6) -> AnthropicServer:
    server = AnthropicServer()
    server.__enter__()
    server.push(
        *[AnthropicReply(tool="_probe", arguments={"path": f"src/m{i}.py"}) for i in range(rounds)],
        AnthropicReply(text="all read"),
    )
    agent = HarnessAgent(
        model=LiteLLMClient(
            "anthropic/claude-sonnet-4-5",
            api_base=server.base_url,
            api_key="test",
            cache_breakpoints=marks,
        ),
        tools=[_probe],
        stack=default_stack(),
        system_prompt=SYSTEM,
        workspace=str(tmp_path),
    )
    answer = await agent.call("read every module", RuntimeContext(session_id="cache"))
    assert answer.text == "all read"
    return server


async def test_auto_marks_make_an_agent_session_read_most_of_its_prompt_from_the_cache(
    tmp_path: Path,
) -> None:
    server = await _session(tmp_path, marks=None)
    try:
        usages = server.usages
        assert len(usages) == 7
        assert all(1 <= u.marks <= 4 for u in usages)
        assert usages[0].cache_read == 0 and usages[0].cache_write > 0
        later = usages[1:]
        read = sum(u.cache_read for u in later)
        total = sum(u.cache_read + u.cache_write + u.input_tokens for u in later)
        assert read / total > 0.7, (read, total)
        # every later round reads at least what the previous one wrote up to
        assert all(u.cache_read > 0 for u in later)
    finally:
        server.__exit__()


async def test_marks_off_or_an_implicit_cache_provider_send_none(tmp_path: Path) -> None:
    server = await _session(tmp_path, marks=False, rounds=2)
    try:
        assert [u.marks for u in server.usages] == [0, 0, 0]
        assert sum(u.cache_read for u in server.usages) == 0
    finally:
        server.__exit__()


async def test_the_callers_own_marks_are_kept_and_the_limit_of_four_holds(tmp_path: Path) -> None:
    with AnthropicServer() as server:
        client = LiteLLMClient(
            "anthropic/claude-sonnet-4-5", api_base=server.base_url, api_key="test"
        )
        agent = HarnessAgent(
            model=client, stack=default_stack(), system_prompt=SYSTEM, workspace=str(tmp_path)
        )
        ctx = RuntimeContext(session_id="own")
        own = {"type": "ephemeral", "ttl": "1h"}
        agent.state(ctx).append(
            Message.user("question", extra={"cache_control": own}),
            Message.assistant("answer", extra={"cache_control": own}),
        )
        await agent.call("and now?", ctx)
        body = server.requests[-1]
        # two of the caller's, then ours on the newest message and on System: four in all
        assert server.usages[-1].marks == 4
        kept = [
            block
            for message in body["messages"]
            for block in message["content"]
            if block.get("cache_control") == own
        ]
        assert len(kept) == 2  # the caller's marks are neither removed nor rewritten
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


async def test_provider_context_editing_clears_old_results_on_the_server_first(
    tmp_path: Path,
) -> None:
    from harness.sessions import open_store
    from harness.sessions.store import ManifestEvent, SessionKey, WarningEvent
    from middleware import ProviderContextEditing

    from .anthropic_server import CLEARED

    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    with AnthropicServer() as server:
        server.push(
            *[AnthropicReply(tool="_probe", arguments={"path": f"src/m{i}.py"}) for i in range(8)],
            AnthropicReply(text="all read"),
        )
        stack = default_stack()
        stack.insert(1, ProviderContextEditing(trigger=1_500, keep_tool_uses=2, clear_at_least=100))
        agent = HarnessAgent(
            model=LiteLLMClient(
                "anthropic/claude-sonnet-4-5", api_base=server.base_url, api_key="test"
            ),
            tools=[_probe],
            stack=stack,
            system_prompt=SYSTEM,
            workspace=str(tmp_path),
            store=url,
        )
        ctx = RuntimeContext(user_id="u", session_id="ed")
        assert (await agent.call("read every module", ctx)).text == "all read"
        assert all("context-management" in h.get("anthropic-beta", "") for h in server.headers)
        last = server.requests[-1]
        results = [
            b for m in last["messages"] for b in m["content"] if b.get("type") == "tool_result"
        ]
        assert [b["content"] == CLEARED for b in results] == [True] * 6 + [False] * 2
    store = open_store(url)
    try:
        log = [e.event for e in await store.events(SessionKey("u", "agent", "ed"), limit=1_000)]
    finally:
        await store.aclose()
    edits = [
        e.text for e in log if isinstance(e, WarningEvent) and e.code == "provider_context_edit"
    ]
    assert edits and all(e.startswith("clear_tool_uses_20250919: ") for e in edits), edits
    manifests = [e.manifest for e in log if isinstance(e, ManifestEvent)]
    assert manifests
    assert all("provider_editing:clear_tool_uses_20250919" in m.transforms for m in manifests)
    # our own compaction did not need to run: the server cleared first
    assert not any(t.startswith("history_compaction") for m in manifests for t in m.transforms)
