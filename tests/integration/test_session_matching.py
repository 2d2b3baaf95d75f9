"""Session mode matches a resent conversation against its record: each message stored once.

Issue 23: a client that resends its history in a form that differs from the record at one
point (a reply sent back as content parts, an old message rewritten, its own history
trimmed, one turn sent twice) made the record append the whole conversation again, and
every later resend again (14,429 stored messages for 241; 1,600 upstream requests for 120).
Each client here talks to the local OpenAI-compatible server through litellm, either with
the drop-in `acompletion` in session mode or through the proxy hook (its pre-call hook
prepares the request, and the test forwards it as the proxy does); the checks are on the
SQLite store's record and on what the server received.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from harness import ContextPolicy, acompletion, manifest_of
from harness.sessions import MessageEvent, SessionKey, open_store

from .openai_server import OpenAIServer, Reply, ToolCallSpec

pytestmark = pytest.mark.integration

MODEL = "openai/test-model"
LIMIT = 3_000
ROUNDS = 20
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run_tests",
        "description": "Run one shard of the tests.",
        "parameters": {"type": "object", "properties": {"shard": {"type": "integer"}}},
    },
}
_answers = itertools.count(1)
Send = Callable[[list[dict[str, Any]]], Awaitable[tuple[dict[str, Any], list[str]]]]
"""Sends the client's messages in its session; returns the reply as an OpenAI dict and the
request's manifest transforms."""


def _is_summary(body: dict[str, Any]) -> bool:
    if body.get("tool_choice") == "none":
        return True
    text = json.dumps(body["messages"])
    return "compacting the conversation" in text or "summarise consecutive parts" in text


def _answer(body: dict[str, Any]) -> Reply:
    """The server: summaries for summary requests; a tool call when asked for one; else text."""
    if _is_summary(body):
        return Reply(text="SUMMARY: shards run so far, failures found, next shard to run.")
    last = body["messages"][-1]
    text = last.get("content") if isinstance(last.get("content"), str) else ""
    if last.get("role") == "user" and "run the tool" in text:
        shard = text.split(":")[0].split()[-1]
        return Reply(tool_calls=(ToolCallSpec(name="run_tests", arguments={"shard": int(shard)}),))
    return Reply(text=f"Answer {next(_answers)}: " + "looked at it, " * 12)


def _key(message: dict[str, Any] | Any) -> tuple[Any, ...]:
    """A message's identity for counting: role, text, call ids, result id."""
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        calls = tuple(c["id"] for c in message.get("tool_calls") or ())
        return (message["role"], content or "", calls, message.get("tool_call_id") or "")
    calls = tuple(c.id for c in message.tool_calls)
    return (message.role, message.text, calls, message.tool_call_id or "")


class Client:
    """An agent that keeps its own history and talks to one session in one of four ways.

    ``parts``: sends every reply back as content parts, its tool-call arguments re-encoded
    (the whole history each turn, compacted on the other side many times); ``mutate``: also
    rewrites an old message now and then; ``trim``: keeps only its newest messages;
    ``retry``: sends some turns twice, keeping only the second answer.
    """

    def __init__(self, kind: str, send: Send) -> None:
        self.kind = kind
        self.send = send
        self.history: list[dict[str, Any]] = [{"role": "system", "content": "You fix tests."}]
        self.sent: list[dict[str, Any]] = []
        """Every message this client ever sent (each version of an edited one)."""
        self.requests = 0
        self.discarded: list[dict[str, Any]] = []
        self.transforms: list[str] = []
        self.upstream: Callable[[], list[dict[str, Any]]] = list
        self.last_sent_upstream: list[dict[str, Any]] = []

    async def ask(self) -> dict[str, Any]:
        self.requests += 1
        for message in self.history[1:]:
            if _key(message) not in {_key(m) for m in self.sent}:
                self.sent.append(dict(message))
        answer, transforms = await self.send([dict(m) for m in self.history])
        self.transforms.extend(transforms)
        self.last_sent_upstream = self.upstream()
        return self._as_client_keeps(answer)

    def _as_client_keeps(self, answer: dict[str, Any]) -> dict[str, Any]:
        kept: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
        if self.kind in ("parts", "mutate") and kept["content"]:
            kept["content"] = [{"type": "text", "text": kept["content"]}]
        calls = []
        for call in answer.get("tool_calls") or ():
            arguments = call["function"]["arguments"]
            if self.kind in ("parts", "mutate"):  # re-encoded: other spacing, same JSON
                arguments = json.dumps(json.loads(arguments), separators=(",", ":"))
            calls.append({**call, "function": {**call["function"], "arguments": arguments}})
        if calls:
            kept["tool_calls"] = calls
        return kept

    async def round(self, i: int) -> None:
        ask_tool = i % 3 == 0
        text = f"round {i}: " + ("please run the tool. " if ask_tool else "") + f"log {i} " * 12
        self.history.append({"role": "user", "content": text})
        if self.kind == "mutate" and i % 5 == 4:
            first_user = next(m for m in self.history if m["role"] == "user")
            first_user["content"] = f"{first_user['content']} (edited at {i})"
        if self.kind == "retry" and i % 4 == 1:
            self.discarded.append(await self.ask())  # sent again below: a retry
        reply = await self.ask()
        self.history.append(reply)
        for call in reply.get("tool_calls") or ():
            result = f"shard {i} result: " + "ok " * 30
            self.history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            self.history.append(await self.ask())
        if self.kind == "trim" and len(self.history) > 14:
            keep = len(self.history) - 10
            while self.history[keep]["role"] != "user":
                keep += 1  # never cut between a call and its result
            self.history = [self.history[0], *self.history[keep:]]


async def _record(url: str, key: SessionKey) -> list[Any]:
    store = open_store(url)
    try:
        events = await store.events(key, limit=100_000)
    finally:
        await store.aclose()
    return [e.event.message for e in events if isinstance(e.event, MessageEvent)]


def _assert_each_message_once(client: Client, record: list[Any], *, replies_recorded: bool) -> None:
    held = Counter(_key(m) for m in record)
    repeated = {k: n for k, n in held.items() if n > 1}
    assert not repeated, f"{sum(repeated.values())} repeated of {len(record)}: {list(repeated)[:3]}"
    sent = {_key(m) for m in client.sent}
    missing = [k for k in sent if k not in held]
    assert not missing, f"{len(missing)} sent messages not in the record: {missing[:3]}"
    extra = [k for k in held if k not in sent]
    # Only replies the client never sent back (a retry's first answer, the last reply) may
    # be in the record without the client having sent them.
    allowed = len(client.discarded) + 1 if replies_recorded else 0
    assert len(extra) <= allowed, (len(extra), allowed, extra[:3])


def _dropin(server: OpenAIServer, url: str, session: str) -> Send:
    async def send(messages: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
        response = await acompletion(
            MODEL, messages, [TOOL], session_id=session, user_id="alice", store=url,
            api_base=server.base_url, api_key="test", policy=ContextPolicy(max_input_tokens=LIMIT),
        )  # fmt: skip
        manifest = manifest_of(response)
        assert manifest is not None
        return _as_dict(response), list(manifest.transforms)

    return send


def _as_dict(response: Any) -> dict[str, Any]:
    message = response.choices[0].message
    calls = [c.model_dump() for c in message.tool_calls or ()]
    return {"role": "assistant", "content": message.content, "tool_calls": calls or None}


def _through_hook(server: OpenAIServer, url: str, session: str) -> Send:
    from litellm.proxy._types import UserAPIKeyAuth

    from providers import LiteLLMClient
    from providers.proxy_hook import HarnessProxyHook

    summaries = LiteLLMClient(MODEL, api_base=server.base_url, api_key="test")
    hook = HarnessProxyHook(
        store=url, policy=ContextPolicy(max_input_tokens=LIMIT), summary_model=summaries
    )

    async def send(messages: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
        import litellm

        data = {
            "model": MODEL,
            "messages": messages,
            "tools": [TOOL],
            "metadata": {},
            "proxy_server_request": {"headers": {"x-harness-session-id": session}},
        }
        auth = UserAPIKeyAuth(user_id="alice", token="hashed-key")
        prepared = await hook.async_pre_call_hook(auth, None, data, "acompletion")
        response = await litellm.acompletion(
            model=MODEL,
            messages=prepared["messages"],
            tools=[TOOL],
            api_base=server.base_url,
            api_key="test",
        )  # fmt: skip  (what the proxy does with the prepared request)
        headers = await hook.async_post_call_response_headers_hook(prepared, auth, response)
        assert headers is not None
        return _as_dict(response), json.loads(headers["x-harness-transforms"])

    return send


@pytest.mark.parametrize("way", ["drop-in", "hook"])
@pytest.mark.parametrize("kind", ["parts", "mutate", "trim", "retry"])
async def test_a_session_stores_each_message_once_whatever_the_client_resends(
    kind: str, way: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    with OpenAIServer(default=_answer) as server:
        make = _dropin if way == "drop-in" else _through_hook
        client = Client(kind, make(server, url, f"s-{kind}"))
        client.upstream = lambda: [b for b in server.requests if not _is_summary(b)][-1]["messages"]
        for i in range(ROUNDS):
            await client.round(i)
            # The request the model got ends with what the client sent last (not a copy).
            assert _key(client.last_sent_upstream[-1]) == _key(client.sent[-1]) or (
                client.kind == "retry"
            )
        assert len([b for b in server.requests if not _is_summary(b)]) == client.requests
        upstream = len(server.requests)
    agent = "acompletion" if way == "drop-in" else "litellm-proxy"
    record = await _record(url, SessionKey("alice", agent, f"s-{kind}"))
    _assert_each_message_once(client, record, replies_recorded=way == "drop-in")
    # A client that rewrote its history is told so in the manifest; the others never are.
    diverged = [t for t in client.transforms if t.startswith("client_history_diverged:")]
    if kind == "mutate" or (kind == "retry" and way == "drop-in"):
        assert diverged
    else:
        assert not diverged, diverged
    assert upstream > client.requests, "the conversation never outgrew the budget: too small"
    assert upstream <= 1.1 * client.requests, (upstream, client.requests)
