"""The proxy hook inside real litellm proxy processes, run from ``examples/proxy/config.yaml``.

Two proxies start once for the module (together: each takes ~20 s or more to start) and
share one store — a database of the real PostgreSQL server the tests start, or a SQLite
file when this machine has no PostgreSQL binaries. They forward to the local
OpenAI-compatible server, which records what it receives. Clients are the plain ``openai``
package, users come from the proxy's own auth (``examples/proxy/team_auth.py``, the proxy's
``custom_auth``), sessions from the ``x-harness-session-id`` header.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from harness.sessions import (
    ManifestEvent,
    MessageEvent,
    SessionKey,
    SessionUsage,
    UsageEvent,
    open_store,
)
from tests.integration.litellm_proxy import EXAMPLE_CONFIG, ProxyProcess, start_proxies
from tests.integration.openai_server import OpenAIServer, Reply, count_prompt_tokens
from tests.sessions.pg_server import PostgresServer, find_bindir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(600),  # the first test pays for starting the proxies
    pytest.mark.xdist_group("litellm-proxy"),  # one worker starts them (--dist loadgroup)
]

LIMIT = 3_000
"""The hook's input cap (``HARNESS_MAX_INPUT_TOKENS``)."""
AGENT = "litellm-proxy"
"""The agent id the example config records sessions under."""
UPSTREAM = "openai/gpt-4o-mini"
"""The deployment's model: one litellm's price table knows (the server answers any name)."""
KEYS = {"alice": "sk-alice-test", "bob": "sk-bob-test"}
"""Each user's key (``HARNESS_PROXY_KEYS``)."""
_sessions = itertools.count(1)


@dataclass(frozen=True)
class Proxies:
    """The running proxies, the server behind them and their shared store's URL."""

    urls: tuple[str, str]
    server: OpenAIServer
    store_url: str


@pytest.fixture(scope="session")
def proxies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxies]:
    """Start the server, the store and two proxies (together) once per test process.

    Session scope, not module: under xdist a worker may run other modules between this
    module's tests, and a module fixture would then start the proxies again.
    """
    bindir = find_bindir()
    pg = PostgresServer(bindir) if bindir is not None else None
    with OpenAIServer() as server:
        try:
            if pg is not None:
                pg.start()
                pg.sql("CREATE DATABASE proxies")
                store_url = pg.database("proxies")
            else:
                store_url = f"sqlite:///{tmp_path_factory.mktemp('proxy')}/sessions.db"
            anyio.run(_create_schema, store_url)  # before two processes race to create it
            env = {
                "HARNESS_UPSTREAM_MODEL": UPSTREAM,  # priced: answers carry a cost
                "HARNESS_UPSTREAM_BASE": server.base_url,
                "HARNESS_UPSTREAM_KEY": "sk-upstream-test",
                "HARNESS_PROXY_KEYS": ",".join(f"{k}={user}" for user, k in KEYS.items()),
                "HARNESS_STORE": store_url,
                "HARNESS_MAX_INPUT_TOKENS": str(LIMIT),
            }
            running = [ProxyProcess(EXAMPLE_CONFIG, env=env, name=f"proxy-{i}") for i in (1, 2)]
            start_proxies(running)
            try:
                yield Proxies(
                    urls=(running[0].base_url, running[1].base_url),
                    server=server,
                    store_url=store_url,
                )
            finally:
                for proxy in running:
                    proxy.stop()
        finally:
            if pg is not None:
                pg.stop()


async def _create_schema(url: str) -> None:
    store = open_store(url)
    try:
        await store.sessions("nobody")
    finally:
        await store.aclose()


def _client(base_url: str, user: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=KEYS[user], max_retries=0)


def _ask(base_url: str, user: str, messages: list[dict[str, Any]], session: str) -> Any:
    """Send one chat request as ``user``; return the raw response (headers + parsed body)."""
    return _client(base_url, user).chat.completions.with_raw_response.create(
        model="team-model",
        messages=messages,
        extra_headers={"x-harness-session-id": session},
        timeout=60,
    )


def _long_conversation(rounds: int, secret: str = "") -> list[dict[str, Any]]:
    """A coding conversation with tool calls, far over `LIMIT` tokens."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding assistant."},
        {"role": "user", "content": f"Fix the failing tests. {secret}".strip()},
    ]
    for i in range(rounds):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "run_tests", "arguments": json.dumps({"shard": i})},
        }
        messages += [
            {"role": "assistant", "content": f"Running shard {i}.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"shard {i} log " * 60},
            {"role": "assistant", "content": f"Shard {i}: one failure in test_{i}. " * 8},
            {"role": "user", "content": f"Go on with shard {i + 1}."},
        ]
    return messages


def _received(server: OpenAIServer, last_user_text: str) -> list[dict[str, Any]]:
    """The agent requests the server received whose last message is ``last_user_text``."""
    return [
        body
        for body in server.requests
        if body.get("messages") and body["messages"][-1].get("content") == last_user_text
    ]


def _assert_pairs_valid(messages: list[dict[str, Any]]) -> None:
    calls: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            calls.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in calls, f"result without its call: {message}"
            answered.add(message["tool_call_id"])
    assert calls == answered, f"calls without results: {sorted(calls - answered)}"


async def _log(store_url: str, key: SessionKey) -> list[Any]:
    store = open_store(store_url)
    try:
        return [e.event for e in await store.events(key, limit=10_000)]
    finally:
        await store.aclose()


def test_a_long_conversation_arrives_fitted_with_its_manifest(proxies: Proxies) -> None:
    session = f"fitted-{next(_sessions)}"
    messages = _long_conversation(40)
    assert count_prompt_tokens({"messages": messages}) > 3 * LIMIT
    raw = _ask(proxies.urls[0], "alice", messages, session)
    assert raw.parse().choices[0].message.content == "ok"

    (sent,) = _received(proxies.server, messages[-1]["content"])
    assert count_prompt_tokens(sent) <= LIMIT < count_prompt_tokens({"messages": messages})
    assert [m["role"] for m in sent["messages"]].count("system") == 1
    assert sent["messages"][0]["role"] == "system"
    _assert_pairs_valid(sent["messages"])

    headers = raw.headers
    assert headers["x-harness-validation"] == "passed"
    assert headers["x-harness-input-limit"] == str(LIMIT)
    assert 0 < int(headers["x-harness-estimated-tokens"]) <= LIMIT
    assert any(
        t.startswith("history_compaction") for t in json.loads(headers["x-harness-transforms"])
    )
    log = anyio.run(_log, proxies.store_url, SessionKey("alice", AGENT, session))
    manifests = [e.manifest for e in log if isinstance(e, ManifestEvent)]
    (manifest,) = [m for m in manifests if m.purpose == "agent"]  # the rest: summaries
    assert manifest.call_id == headers["x-harness-call-id"]
    assert manifest.estimated_input_tokens == int(headers["x-harness-estimated-tokens"])
    assert manifest.validation == "passed" and manifest.input_limit == LIMIT
    assert headers["x-harness-cache-break"] == (manifest.cache_break or "none")
    assert headers["x-harness-cache-expected"] == str(manifest.cache_expected)
    assert headers["x-harness-cache-verdict"] == (manifest.cache_verdict or "none")


def test_two_proxies_serve_alternating_rounds_of_one_session(proxies: Proxies) -> None:
    session = f"shared-{next(_sessions)}"
    messages = _long_conversation(20)
    rounds = 6
    for i in range(rounds):
        messages.append({"role": "user", "content": f"round {i}: what next?"})
        raw = _ask(proxies.urls[i % 2], "alice", messages, session)  # A, B, A, B …
        reply = raw.parse().choices[0].message
        messages.append({"role": "assistant", "content": reply.content})
        (sent,) = _received(proxies.server, f"round {i}: what next?")
        assert count_prompt_tokens(sent) <= LIMIT
        _assert_pairs_valid(sent["messages"])

    log = anyio.run(_log, proxies.store_url, SessionKey("alice", AGENT, session))
    recorded = [e.message for e in log if isinstance(e, MessageEvent)]
    # Every message the client sent, once and in order; the last reply is recorded when
    # the next round sends it back (the hook sees requests, not answers).
    expected = [m for m in messages[:-1] if m["role"] != "system"]
    assert [(m.role, m.text) for m in recorded] == [(m["role"], m["content"]) for m in expected]
    assert len({m.id for m in recorded}) == len(recorded)
    manifests = [e.manifest for e in log if isinstance(e, ManifestEvent)]
    assert sum(m.purpose == "agent" for m in manifests) == rounds
    assert all(m.validation == "passed" for m in manifests)


def test_a_session_compacted_many_times_is_recorded_once_and_summarised_rarely(
    proxies: Proxies,
) -> None:
    # A real agent resends its whole conversation every round. Each round adds ~110
    # tokens, so over 60 rounds the history outgrows the 3,000-token cap again and again:
    # the working history is compacted several times, while the record stays each
    # message once and upstream sees one request per round plus the few summaries.
    session = f"long-{next(_sessions)}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding assistant."}
    ]
    rounds = 60
    before = len(proxies.server.requests)
    for i in range(rounds):
        question = f"round {i}: here is the log of shard {i}. " + f"trace line {i} " * 25
        messages.append({"role": "user", "content": question})
        raw = _ask(proxies.urls[i % 2], "alice", messages, session)
        assert raw.headers["x-harness-validation"] == "passed"
        messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
        (sent,) = _received(proxies.server, question)
        assert count_prompt_tokens(sent) <= LIMIT
    upstream = len(proxies.server.requests) - before
    log = anyio.run(_log, proxies.store_url, SessionKey("alice", AGENT, session))
    recorded = [e.message for e in log if isinstance(e, MessageEvent)]
    expected = [m for m in messages[:-1] if m["role"] != "system"]
    numbers = {"upstream": upstream, "rounds": rounds, "recorded": len(recorded)}
    assert count_prompt_tokens({"messages": messages}) > 2 * LIMIT
    assert len(recorded) == len(expected), numbers  # each message once (was 14,429 for 241)
    assert [(m.role, m.text) for m in recorded] == [(m["role"], m["content"]) for m in expected]
    assert rounds + 2 <= upstream <= 1.1 * rounds, numbers  # a few summaries, not one a round


def test_another_users_key_gets_its_own_empty_session(proxies: Proxies) -> None:
    session = f"private-{next(_sessions)}"
    alice = _long_conversation(3, secret="The deploy password is PELICAN-42.")
    alice.append({"role": "user", "content": "alice: what next?"})
    _ask(proxies.urls[0], "alice", alice, session)
    key = SessionKey("alice", AGENT, session)
    before = anyio.run(_log, proxies.store_url, key)

    question = "bob: what was the deploy password?"
    raw = _ask(proxies.urls[1], "bob", [{"role": "user", "content": question}], session)
    assert raw.parse().choices[0].message.content == "ok"  # answered, from his own session
    (sent,) = _received(proxies.server, question)
    assert "PELICAN" not in json.dumps(sent)
    assert [m["role"] for m in sent["messages"]] == ["user"]
    bob = anyio.run(_log, proxies.store_url, SessionKey("bob", AGENT, session))
    assert [e.message.text for e in bob if isinstance(e, MessageEvent)] == [question]
    assert anyio.run(_log, proxies.store_url, key) == before  # Alice's session untouched


def test_the_responses_api_is_refused_naming_chat_completions(proxies: Proxies) -> None:
    import openai

    before = len(proxies.server.requests)
    with pytest.raises(openai.BadRequestError) as refused:
        _client(proxies.urls[0], "alice").responses.create(
            model="team-model", input="Fix the failing tests.", timeout=60
        )
    message = str(refused.value)
    assert "Chat Completions" in message and "unprepared_apis" in message
    assert len(proxies.server.requests) == before  # nothing passed unprepared


def test_an_unknown_key_is_refused_by_the_proxys_auth(proxies: Proxies) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{proxies.urls[0]}/v1", api_key="sk-nobody", max_retries=0)
    before = len(proxies.server.requests)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(
            model="team-model", messages=[{"role": "user", "content": "hi"}], timeout=30
        )
    assert len(proxies.server.requests) == before


def test_a_message_the_stack_refuses_is_a_400_that_says_what_to_fix(proxies: Proxies) -> None:
    import openai

    before = len(proxies.server.requests)
    with pytest.raises(openai.BadRequestError) as refused:
        _ask(proxies.urls[0], "alice", [{"role": "tool", "content": "orphan"}], "refused")
    message = str(refused.value)
    assert "context-harness: messages[0]" in message and "tool_call_id" in message
    assert len(proxies.server.requests) == before  # nothing reached the model


def test_a_client_that_reencodes_trims_and_retries_is_recorded_once(proxies: Proxies) -> None:
    # Issue 23: a client whose resends differ from the record at one point (replies sent back
    # as content parts, its own history trimmed, a turn sent twice) made the record append
    # the whole conversation on every resend. Each message must be stored once, and
    # upstream see one request per client request plus the few summaries.
    session = f"messy-{next(_sessions)}"
    system = {"role": "system", "content": "You are a careful coding assistant."}
    history: list[dict[str, Any]] = []
    sent: list[str] = []
    rounds, requests = 40, 0
    before = len(proxies.server.requests)
    for i in range(rounds):
        question = f"round {i}: here is the log of shard {i}. " + f"trace line {i} " * 25
        history.append({"role": "user", "content": question})
        sent.append(question)
        for _ in range(2 if i % 7 == 3 else 1):  # now and then the same turn twice
            raw = _ask(proxies.urls[i % 2], "alice", [system, *history], session)
            requests += 1
            assert raw.headers["x-harness-validation"] == "passed"
            assert "client_history_diverged" not in raw.headers["x-harness-transforms"]
        text = raw.parse().choices[0].message.content
        history.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        sent.append(text)
        if len(history) > 30:  # the client keeps its newest 20 messages only
            history = history[-20:]
        for body in _received(proxies.server, question):
            assert count_prompt_tokens(body) <= LIMIT
    upstream = len(proxies.server.requests) - before
    log = anyio.run(_log, proxies.store_url, SessionKey("alice", AGENT, session))
    recorded = [e.message for e in log if isinstance(e, MessageEvent)]
    numbers = {"upstream": upstream, "requests": requests, "recorded": len(recorded)}
    # Every message the client sent, once and in order (the last reply is never sent back).
    assert [m.text for m in recorded] == sent[:-1], numbers
    assert len({m.id for m in recorded}) == len(recorded)
    assert requests < upstream <= 1.1 * requests, numbers


async def _usage_once(
    store_url: str, rows: dict[SessionKey, int]
) -> dict[SessionKey, SessionUsage]:
    """Each session's usage once it has its number of rows (litellm logs after the answer)."""
    store = open_store(store_url)
    try:
        for _ in range(600):  # 60 s
            found = {key: await store.usage(key) for key in rows}
            if all(len(found[key].requests) >= n for key, n in rows.items()):
                return found
            await anyio.sleep(0.1)
        raise AssertionError(f"usage rows {[len(u.requests) for u in found.values()]}, not {rows}")
    finally:
        await store.aclose()


def test_plain_and_streamed_answers_get_usage_rows_and_users_stay_apart(
    proxies: Proxies,
) -> None:
    # Issue 25: the answer never passes through the hook's code; litellm reports it to the
    # hook's async_log_success_event, which stores the usage by the request's call id.
    from providers.litellm_client import load_litellm

    session = f"usage-{next(_sessions)}"
    before = len(proxies.server.requests)
    messages = _long_conversation(40)  # over the cap: the hook asks for summaries first
    raw = _ask(proxies.urls[0], "alice", messages, session)
    messages += [
        {"role": "assistant", "content": raw.parse().choices[0].message.content},
        {"role": "user", "content": "usage: and now streamed?"},
    ]
    stream = _client(proxies.urls[1], "alice").chat.completions.create(
        model="team-model",
        messages=messages,
        stream=True,
        extra_headers={"x-harness-session-id": session},
        timeout=60,
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "ok"
    bob_asks = "usage: bob's own question"
    _ask(proxies.urls[0], "bob", [{"role": "user", "content": bob_asks}], session)
    upstream = proxies.server.requests[before:]

    alice, bob = SessionKey("alice", AGENT, session), SessionKey("bob", AGENT, session)
    found = anyio.run(_usage_once, proxies.store_url, {alice: len(upstream) - 1, bob: 1})
    time.sleep(1.0)  # a late, doubled callback would have landed by now
    again = anyio.run(_usage_once, proxies.store_url, {alice: 0, bob: 0})
    assert again == found  # nothing recorded twice

    agent_rows = {key: [r for r in found[key].requests if r.purpose == "agent"] for key in found}
    summaries = [r for r in found[alice].requests if r.purpose == "summary"]
    assert len(agent_rows[alice]) == 2 and len(agent_rows[bob]) == 1
    assert summaries and len(found[alice].requests) + len(found[bob].requests) == len(upstream)
    # Each agent row: the tokens the server reported for that request, at litellm's price.
    behaviour = proxies.server.default
    assert isinstance(behaviour, Reply)
    for row, last in zip(
        [*agent_rows[alice], *agent_rows[bob]],
        [messages[-3]["content"], messages[-1]["content"], bob_asks],
        strict=True,
    ):
        (body,) = [b for b in upstream if b["messages"][-1].get("content") == last]
        served = proxies.server.usage(body, behaviour)
        assert (row.usage.prompt_tokens, row.usage.completion_tokens) == (
            served["prompt_tokens"],
            served["completion_tokens"],
        )
        a, b = load_litellm().cost_per_token(
            model="gpt-4o-mini",
            prompt_tokens=served["prompt_tokens"],
            completion_tokens=served["completion_tokens"],
        )
        assert (row.usage.cost_usd or 0) > 0
        assert row.usage.cost_usd == pytest.approx(float(a) + float(b))
    # The rows belong to the calls their manifests name, each in its own user's session.
    for key in (alice, bob):
        log = anyio.run(_log, proxies.store_url, key)
        agent_calls = [e.manifest.call_id for e in log if isinstance(e, ManifestEvent)
                       and e.manifest.purpose == "agent"]  # fmt: skip
        assert [r.call_id for r in agent_rows[key]] == agent_calls
        usage_calls = [e.call_id for e in log if isinstance(e, UsageEvent) and e.purpose == "agent"]
        assert usage_calls == agent_calls
    assert raw.headers["x-harness-call-id"] == agent_rows[alice][0].call_id
