"""Usage and cost per request, stored with the session, through litellm to a real local server.

The server reports usage as OpenAI does (``prompt_tokens_details.cached_tokens`` from its
automatic prefix cache, ``completion_tokens_details.reasoning_tokens``) and Anthropic's cache
writes as litellm passes them; the cost is litellm's price table for the model named. Both
stores (SQLite and the real PostgreSQL server the session tests start) keep it per request.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple

import anyio
import pytest

from harness import HarnessAgent, RuntimeContext
from harness.sessions import SessionKey, UsageEvent, open_store
from harness.sessions.manifest_log import resolve
from harness.sessions.store import ManifestEvent
from middleware import Compaction
from providers import LiteLLMClient
from tests.sessions.conftest import backend, pg_server, store_url

from .openai_server import OpenAIServer, reply

__all__ = ["backend", "pg_server", "store_url"]  # the session suite's store fixtures

ROOT = Path(__file__).resolve().parents[2]


async def harness_cli(*args: str) -> Completed:
    """Run ``python -m harness ARGS`` from the checkout; return its status and text output."""
    done = await anyio.run_process([sys.executable, "-m", "harness", *args], cwd=ROOT, check=False)
    return Completed(done.returncode, done.stdout.decode(), done.stderr.decode())


class Completed(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: be exact." for i in range(300))
"""Long enough (> 1,024 tokens) that the server's prefix cache serves it from round two."""
CTX = RuntimeContext(session_id="u1", user_id="alice")
KEY = SessionKey("alice", "agent", "u1")


def priced(model: str, prompt: int, output: int, cached: int) -> float:
    """litellm's own price for these figures (what the stored cost must be)."""
    from providers.litellm_client import load_litellm

    a, b = load_litellm().cost_per_token(
        model=model, prompt_tokens=prompt, completion_tokens=output, cache_read_input_tokens=cached
    )
    return float(a) + float(b)


async def test_every_request_usage_and_cost_is_stored_with_the_session(store_url: str) -> None:
    with OpenAIServer(prefix_cache=True) as server:
        server.default = reply("Done.", reasoning_tokens=3)
        client = LiteLLMClient("openai/gpt-4o-mini", api_base=server.base_url, api_key="test")
        agent = HarnessAgent(
            model=client,
            system_prompt=SYSTEM,
            store=store_url,
            stack=[Compaction(trigger_messages=6, keep_tokens=0, keep_messages=2, memory=None)],
        )
        events = [e async for e in agent.stream_events("first", CTX)]
        for turn in ("second", "third", "fourth"):
            await agent.call(turn, CTX)
        assert agent.store is not None
        await agent.store.aclose()
    live = [e for e in events if e.kind == "usage"]
    assert len(live) == 1 and live[0].usage is not None and live[0].purpose == "agent"

    store = open_store(store_url)
    try:
        found = await store.usage(KEY)
        logged = await store.events(KEY, kinds=("usage",), limit=100)
        manifests = resolve(
            e.event
            for e in await store.events(KEY, kinds=("manifest",), limit=100)
            if isinstance(e.event, ManifestEvent)
        )
    finally:
        await store.aclose()
    purposes = [r.purpose for r in found.requests]
    assert purposes.count("agent") == 4 and "summary" in purposes  # the summary's bill too
    assert len(server.prompt_tokens) == len(found.requests) == len(logged)
    assert [r.usage.prompt_tokens for r in found.requests] == server.prompt_tokens
    agent_rows = [r for r in found.requests if r.purpose == "agent"]
    assert agent_rows[0].usage.cached_tokens == 0  # the first request: nothing cached yet
    assert all(r.usage.cached_tokens >= 1024 for r in agent_rows[1:])  # System and tools cached
    for r in found.requests:
        assert r.usage.reasoning_tokens == 3
        expected = priced("gpt-4o-mini", r.usage.prompt_tokens, r.usage.completion_tokens,
                          r.usage.cached_tokens)  # fmt: skip
        assert r.usage.cost_usd == pytest.approx(expected)
    total = found.total
    assert total.prompt_tokens == sum(server.prompt_tokens)
    assert total.cost_usd == pytest.approx(sum(r.usage.cost_usd or 0 for r in found.requests))
    # cached input costs less: the bill is below the same tokens all at the input price
    assert (total.cost_usd or 0) < sum(
        priced("gpt-4o-mini", r.usage.prompt_tokens, r.usage.completion_tokens, 0)
        for r in found.requests
    )
    # the stored manifest of each answered request carries its usage
    by_call = {m.call_id: m for m in manifests}
    for event in logged:
        assert isinstance(event.event, UsageEvent)
        manifest = by_call[event.event.call_id]
        assert manifest.usage == event.event.usage and manifest.purpose == event.event.purpose

    # the CLI shows it per request and in total
    if store_url.startswith("sqlite"):
        shown = await harness_cli(
            "sessions",
            "show",
            "--store",
            store_url,
            "--user",
            "alice",
            "--session",
            "u1",
            "--usage",
            "--json",
        )
        assert shown.returncode == 0, shown.stderr
        lines = [json.loads(line) for line in shown.stdout.splitlines()]
        assert [x["kind"] for x in lines] == ["request"] * len(found.requests) + ["total"]
        assert lines[-1]["prompt_tokens"] == total.prompt_tokens
        assert lines[-1]["cost_usd"] == pytest.approx(total.cost_usd)
        table = await harness_cli(
            "sessions",
            "show",
            "--store",
            store_url,
            "--user",
            "alice",
            "--session",
            "u1",
            "--usage",
        )
        assert table.returncode == 0 and "CACHED" in table.stdout
        assert f"{total.prompt_tokens:,}" in table.stdout.splitlines()[-1]


async def test_cache_writes_and_an_unpriced_model(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 's.db'}"
    with OpenAIServer() as server:
        server.push(reply("ok", cached_tokens=0, cache_write_tokens=40))
        client = LiteLLMClient("openai/no-such-model", api_base=server.base_url, api_key="test")
        agent = HarnessAgent(model=client, store=url, stack=[])
        await agent.call("hello", CTX)
        assert agent.store is not None
        await agent.store.aclose()
    store = open_store(url)
    try:
        found = await store.usage(KEY)
    finally:
        await store.aclose()
    (row,) = found.requests
    assert row.usage.cache_write_tokens == 40 and row.usage.cost_usd is None  # not in the table
    assert found.total.cost_usd is None and found.total.prompt_tokens == row.usage.prompt_tokens


async def test_the_drop_in_call_records_usage_in_its_session(tmp_path: Path) -> None:
    from harness.adapters import acompletion, manifest_of

    url = f"sqlite://{tmp_path / 'd.db'}"
    with OpenAIServer() as server:
        server.push(reply("ok", cached_tokens=0))
        response = await acompletion(
            model="openai/gpt-4o-mini",
            messages=[{"role": "user", "content": "hello"}],
            api_base=server.base_url,
            api_key="test",
            session_id="d1",
            user_id="alice",
            store=url,
        )
    manifest = manifest_of(response)
    assert manifest is not None and manifest.usage is not None
    assert manifest.usage.prompt_tokens == server.prompt_tokens[0]
    store = open_store(url)
    try:
        found = await store.usage(SessionKey("alice", "acompletion", "d1"))
        listed = await store.sessions("alice")
    finally:
        await store.aclose()
    assert [i.agent_id for i in listed] and found.requests  # the round's bill, stored
    assert found.total.prompt_tokens == server.prompt_tokens[0]
