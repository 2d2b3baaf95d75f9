"""The proxy hook stores a session request's usage when litellm reports its answer.

No proxy process (`test_proxy_process` runs the real one): the hook's pre-call hook prepares
the request as the proxy calls it, then the request goes through real ``litellm.acompletion``
to the local OpenAI-compatible server with the hook registered as litellm's callback — so
litellm's own logging worker calls `HarnessProxyHook.async_log_success_event` with its own
``kwargs`` (the metadata the pre-call hook left, ``response_cost``), streamed and not.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness import ContextPolicy
from harness.sessions import (
    ManifestEvent,
    SessionKey,
    SessionStore,
    SessionUsage,
    UsageEvent,
    open_store,
)
from harness.sessions.manifest_log import resolve
from providers import LiteLLMClient
from providers.litellm_client import load_litellm
from providers.proxy_hook import HarnessProxyHook

from .openai_server import OpenAIServer, Reply, reply

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODEL = "openai/gpt-4o-mini"
"""A model litellm's price table knows, so every answer has a ``response_cost``."""
AGENT = "litellm-proxy"


def priced(prompt: int, output: int) -> float:
    """litellm's own price of these figures."""
    a, b = load_litellm().cost_per_token(
        model="gpt-4o-mini", prompt_tokens=prompt, completion_tokens=output
    )
    return float(a) + float(b)


def auth(user_id: str) -> Any:
    from litellm.proxy._types import UserAPIKeyAuth

    return UserAPIKeyAuth(user_id=user_id, token=f"hashed-{user_id}")


def data(messages: list[dict[str, Any]], session: str | None, **metadata: Any) -> dict[str, Any]:
    """A chat request as the proxy hands it to the pre-call hook."""
    headers = {"content-type": "application/json"}
    if session is not None:
        headers["x-harness-session-id"] = session
    return {
        "model": MODEL,
        "messages": messages,
        "metadata": {"user_api_key_hash": "hashed", **metadata},
        "proxy_server_request": {"url": "/v1/chat/completions", "headers": headers},
    }


def long_chat(n: int, last: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(n):
        messages += [
            {"role": "user", "content": f"question {i} " * 60},
            {"role": "assistant", "content": f"answer {i} " * 60},
        ]
    return [*messages, {"role": "user", "content": last}]


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = open_store(f"sqlite:///{tmp_path}/proxy.db")
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
def hook(server: OpenAIServer, store: SessionStore) -> Iterator[HarnessProxyHook]:
    """The hook, registered as litellm's callback (as ``litellm_settings.callbacks`` does)."""
    made = HarnessProxyHook(
        store=store,
        policy=ContextPolicy(max_input_tokens=1_500),
        summary_model=LiteLLMClient(MODEL, api_base=server.base_url, api_key="sk-test"),
    )
    litellm = load_litellm()
    before = list(litellm.callbacks)
    litellm.callbacks = [*before, made]
    try:
        yield made
    finally:
        litellm.callbacks = before


async def send(
    hook: HarnessProxyHook, server: OpenAIServer, user: str, body: dict[str, Any], stream: bool
) -> dict[str, Any]:
    """Prepare ``body`` with the hook, then send it through litellm as the proxy would."""
    prepared = await hook.async_pre_call_hook(auth(user), None, body, "acompletion")
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
    answer = await load_litellm().acompletion(
        model=MODEL,
        messages=prepared["messages"],
        metadata=prepared["metadata"],
        api_base=server.base_url,
        api_key="sk-test",
        stream=stream,
        **extra,
    )
    if stream:
        async for _ in answer:
            pass
    return prepared


async def usage_once(store: SessionStore, key: SessionKey, rows: int) -> SessionUsage:
    """The session's usage once it has ``rows`` rows (litellm logs after the answer)."""
    for _ in range(600):  # 30 s
        found = await store.usage(key)
        if len(found.requests) >= rows:
            return found
        await anyio.sleep(0.05)
    raise AssertionError(f"{key.session_id}: {len(found.requests)} usage rows, not {rows}")


def reported(server: OpenAIServer, last: str) -> tuple[int, int]:
    """The prompt and completion tokens the server reported for the request ending in ``last``."""
    (index,) = [
        i for i, body in enumerate(server.requests) if body["messages"][-1]["content"] == last
    ]
    behaviour = server.default
    assert isinstance(behaviour, Reply)
    usage = server.usage(server.requests[index], behaviour)
    return server.prompt_tokens[index], int(usage["completion_tokens"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_an_answered_session_request_gets_its_usage_row(
    hook: HarnessProxyHook, server: OpenAIServer, store: SessionStore, stream: bool
) -> None:
    server.default = reply("Done: the tests pass now. " * 3)
    key = SessionKey("alice", AGENT, "s1")
    question = "what now?"
    prepared = await send(hook, server, "alice", data(long_chat(12, question), "s1"), stream)
    call_id = prepared["metadata"]["harness_usage"]["call_id"]
    summaries = len(server.requests) - 1
    assert summaries >= 1  # the history was compacted: the hook asked for a summary first

    found = await usage_once(store, key, summaries + 1)
    prompt, output = reported(server, question)
    (row,) = [r for r in found.requests if r.purpose == "agent"]
    assert row.call_id == call_id == prepared["metadata"]["harness_manifest"]["x-harness-call-id"]
    assert (row.usage.prompt_tokens, row.usage.completion_tokens) == (prompt, output)
    assert (row.usage.cost_usd or 0) > 0
    assert row.usage.cost_usd == pytest.approx(priced(prompt, output))
    # The summaries are recorded once, as they were answered — not again by the callback.
    assert [r.purpose for r in found.requests].count("summary") == summaries
    await anyio.sleep(0.5)  # any late callback has run by now
    assert len((await store.usage(key)).requests) == summaries + 1
    assert hook.usage_recorded == 1 and hook.usage_failures == 0

    # Readers see the proxy call's usage on its manifest, like an agent call's.
    logged = await store.events(key, kinds=("manifest", "usage"), limit=100)
    manifests = resolve(e.event for e in logged if isinstance(e.event, ManifestEvent | UsageEvent))
    (manifest,) = [m for m in manifests if m.call_id == call_id]
    assert manifest.usage is not None and manifest.usage.prompt_tokens == prompt
    if stream:
        return
    where = ("--store", store.url, "--user", "alice", "--agent", AGENT, "--session", "s1")
    shown, _ = await harness_cli("sessions", "show", *where, "--usage", "--json")
    lines = [json.loads(line) for line in shown.splitlines()]
    assert [x["kind"] for x in lines] == ["request"] * (summaries + 1) + ["total"]
    (listed,) = [x for x in lines if x.get("call_id") == call_id]
    assert (listed["usage"]["prompt_tokens"], listed["usage"]["completion_tokens"]) == (
        prompt,
        output,
    )
    assert lines[-1]["cost_usd"] == pytest.approx(found.total.cost_usd)
    context, _ = await harness_cli("context", "show", *where, "--call", call_id, "--json")
    call = json.loads(context.splitlines()[0])
    assert call["call_id"] == call_id and call["usage"]["prompt_tokens"] == prompt


async def harness_cli(*args: str) -> tuple[str, str]:
    """Run ``python -m harness ARGS`` from the checkout; return its stdout and stderr."""
    done = await anyio.run_process([sys.executable, "-m", "harness", *args], cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode(), done.stderr.decode()


async def test_stateless_requests_and_forged_stashes_bill_no_session(
    hook: HarnessProxyHook, server: OpenAIServer, store: SessionStore
) -> None:
    alice = SessionKey("alice", AGENT, "s1")
    first = await send(hook, server, "alice", data(long_chat(1, "hi"), "s1"), stream=False)
    stash = dict(first["metadata"]["harness_usage"])
    await usage_once(store, alice, 1)

    # Bob sends Alice's stash (with a new call id) in his own metadata: the hook drops it.
    forged = {**stash, "call_id": "forged-1"}
    body = data(long_chat(1, "bob"), "s1", harness_usage=forged)
    own = (await send(hook, server, "bob", body, stream=False))["metadata"]["harness_usage"]
    # A stash with a bad signature, straight to litellm (a route the hook never saw).
    await load_litellm().acompletion(
        model=MODEL,
        messages=[{"role": "user", "content": "no hook"}],
        metadata={"harness_usage": {**stash, "call_id": "forged-2"}},
        api_base=server.base_url,
        api_key="sk-test",
    )
    # A stateless request: no session, no row anywhere.
    await send(hook, server, "alice", data(long_chat(1, "stateless"), None), stream=False)

    bob = SessionKey("bob", AGENT, "s1")
    found = await usage_once(store, bob, 1)
    await anyio.sleep(0.5)
    assert [r.call_id for r in (await store.usage(alice)).requests] == [stash["call_id"]]
    assert [r.call_id for r in found.requests] == [own["call_id"]] != ["forged-1"]
    assert hook.usage_recorded == 2 and hook.usage_failures == 0


async def test_a_store_that_fails_is_counted_never_raised_into_litellm(
    hook: HarnessProxyHook, server: OpenAIServer, store: SessionStore, caplog: Any
) -> None:
    body = data(long_chat(1, "hi"), "s1")
    prepared = await hook.async_pre_call_hook(auth("alice"), None, body, "acompletion")
    await store.aclose()  # the answer arrives after the store went away
    answer = await load_litellm().acompletion(
        model=MODEL,
        messages=prepared["messages"],
        metadata=prepared["metadata"],
        api_base=server.base_url,
        api_key="sk-test",
    )
    assert answer.choices[0].message.content == "ok"  # the caller got its answer
    for _ in range(600):  # litellm logs after the answer
        if hook.usage_failures:
            break
        await anyio.sleep(0.05)
    assert hook.usage_recorded == 0 and hook.usage_failures == 1
    assert "was not recorded" in caplog.text and "closed" in caplog.text
    assert json.dumps(prepared["metadata"]["harness_usage"])  # plain JSON for litellm's logs
