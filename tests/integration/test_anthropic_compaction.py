"""Anthropic's server-side compaction (``compact_20260112``) through litellm, in agent sessions.

`ProviderContextEditing(compact=…)` asks for it; `AnthropicServer` compacts as Anthropic
documents it (a ``compaction`` block starts the answer past the trigger; every block before
the newest one in a request is dropped). These tests read what the server received and what
the model read, the usage it billed over a whole session, and the session's log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import HarnessAgent, RuntimeContext
from harness.sessions import open_store
from harness.sessions.store import ManifestEvent, SessionKey, WarningEvent
from middleware import ProviderContextEditing, default_stack
from middleware.provider_context_editing import COMPACT
from providers import LiteLLMClient

from .anthropic_server import AnthropicReply, AnthropicServer

pytestmark = pytest.mark.integration

MODEL = "anthropic/claude-sonnet-4-5"
SYSTEM = "You are a careful repository assistant."
TRIGGER = 1_500


def _probe(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}: " + "line of code; " * 80


def _agent(
    tmp_path: Path, server: AnthropicServer, editing: ProviderContextEditing | None
) -> HarnessAgent:
    stack = default_stack()
    if editing is not None:
        stack.insert(1, editing)
    return HarnessAgent(
        model=LiteLLMClient(
            MODEL, api_base=server.base_url, api_key="test", cache_breakpoints=False
        ),
        tools=[_probe],
        stack=stack,
        system_prompt=SYSTEM,
        workspace=str(tmp_path),
        store=f"sqlite:///{tmp_path / 'sessions.db'}",
    )


async def _run(
    tmp_path: Path, server: AnthropicServer, editing: ProviderContextEditing | None, rounds: int
) -> str:
    server.push(
        *[AnthropicReply(tool="_probe", arguments={"path": f"src/m{i}.py"}) for i in range(rounds)],
        AnthropicReply(text="all read"),
    )
    answer = await _agent(tmp_path, server, editing).call(
        "read every module", RuntimeContext(user_id="u", session_id="ac")
    )
    return answer.text


def _compaction_at(body: dict[str, object]) -> list[int]:
    messages = body["messages"]
    assert isinstance(messages, list)
    return [
        n
        for n, m in enumerate(messages)
        if isinstance(m["content"], list)
        and any(b.get("type") == "compaction" for b in m["content"])
    ]


async def test_the_server_compacts_and_reads_nothing_before_its_block(tmp_path: Path) -> None:
    editing = ProviderContextEditing(trigger=100_000, compact=TRIGGER)
    with AnthropicServer() as server:
        assert await _run(tmp_path, server, editing, rounds=12) == "all read"
    assert len(server.compactions) >= 2
    assert all("compact-2026-01-12" in h.get("anthropic-beta", "") for h in server.headers)
    asked = server.requests[0]["context_management"]["edits"]
    assert {"type": COMPACT, "trigger": {"type": "input_tokens", "value": TRIGGER}} in asked
    # after the first compaction every request the model read starts at the newest block
    first = next(n for n, b in enumerate(server.requests) if _compaction_at(b))
    assert first > 0
    for body in server.requests[first:]:
        assert _compaction_at(body) == [0]
        assert body["messages"][0]["role"] == "assistant"
        assert body["messages"][0]["content"][0]["type"] == "compaction"
        assert not any(
            b.get("text") == "read every module"
            for m in body["messages"]
            for b in m["content"]
            if isinstance(b, dict)
        )
    log_store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    try:
        log = [e.event for e in await log_store.events(SessionKey("u", "agent", "ac"), limit=1_000)]
    finally:
        await log_store.aclose()
    warnings = [
        e.text for e in log if isinstance(e, WarningEvent) and e.code == "provider_context_edit"
    ]
    assert len(warnings) == len(server.compactions)
    assert all(
        w.startswith(f"{COMPACT}: the history before this turn was summarised") for w in warnings
    )
    manifests = [e.manifest.transforms for e in log if isinstance(e, ManifestEvent)]
    assert all(f"provider_editing:{COMPACT}" in t for t in manifests)
    assert not any(x.startswith("history_compaction") for t in manifests for x in t)


async def test_a_long_session_is_billed_fewer_input_tokens(tmp_path: Path) -> None:
    rounds = 12
    with AnthropicServer() as plain:
        assert await _run(tmp_path / "plain", plain, None, rounds) == "all read"
    with AnthropicServer() as server:
        editing = ProviderContextEditing(trigger=100_000, compact=TRIGGER)
        assert await _run(tmp_path / "compact", server, editing, rounds) == "all read"
    without = sum(u.input_tokens for u in plain.usages)
    with_ = sum(u.input_tokens for u in server.usages)
    print(f"billed input over {rounds + 1} requests: without {without:,}, with {with_:,}")
    assert len(plain.usages) == len(server.usages) == rounds + 1
    assert with_ < 0.6 * without, (with_, without)


async def test_a_resumed_session_sends_the_block_its_log_kept(tmp_path: Path) -> None:
    editing = ProviderContextEditing(trigger=100_000, compact=TRIGGER)
    with AnthropicServer() as server:
        await _run(tmp_path, server, editing, rounds=8)
        assert server.compactions
        server.push(AnthropicReply(text="resumed"))
        agent = _agent(tmp_path, server, ProviderContextEditing(trigger=100_000, compact=TRIGGER))
        answer = await agent.call("and now?", RuntimeContext(user_id="u", session_id="ac"))
    assert answer.text == "resumed"
    read = server.requests[-1]
    assert _compaction_at(read) == [0]
    assert read["messages"][0]["content"][0]["content"] == server.compactions[-1]


def test_the_compact_trigger_is_checked_and_placed_last() -> None:
    from harness.errors import ConfigurationError

    edits = ProviderContextEditing(compact=0.7, clear_thinking=True).edits(100_000)
    assert [e["type"] for e in edits] == [
        "clear_thinking_20251015",
        "clear_tool_uses_20250919",
        COMPACT,
    ]
    assert edits[-1]["trigger"] == {"type": "input_tokens", "value": 70_000}
    assert all(e["type"] != COMPACT for e in ProviderContextEditing().edits(100_000))
    for bad in (0.0, 1.5, 0, True, "70%"):
        with pytest.raises(ConfigurationError):
            ProviderContextEditing(compact=bad)  # type: ignore[arg-type]
