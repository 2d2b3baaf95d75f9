"""A request the stack refuses leaves a session usable: the drop-in call and the proxy hook.

`acompletion` goes through litellm and HTTP to the local OpenAI-compatible server; the proxy
hook is called as litellm's proxy calls it. Each refused request must leave the stored history
as it was (read by a new store object, as another process would), be logged as a
`RefusalEvent`, and the next valid request on the same session must work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import ContextBudgetExceeded, ContextPolicy, InvalidToolPairs, acompletion
from harness.sessions import MessageEvent, RefusalEvent, SessionKey, open_store
from providers import ScriptedModel

from .openai_server import OpenAIServer, reply

pytestmark = pytest.mark.integration

MODEL = "openai/test-model"
LIMIT = 2_000
ORPHAN = {"role": "tool", "tool_call_id": "call_gone", "content": "a result without its call"}
OVERSIZED = {"role": "user", "content": "word " * 5_000}


async def logged(url: str, key: SessionKey) -> tuple[list[tuple[str, str]], list[RefusalEvent]]:
    """Return the session's history (role, text) and its refusals, read by a new store."""
    store = open_store(url)
    try:
        events = [e.event for e in await store.events(key, limit=1_000)]
    finally:
        await store.aclose()
    history: list[tuple[str, str]] = [
        (e.message.role, e.message.text) for e in events if isinstance(e, MessageEvent)
    ]
    return history, [e for e in events if isinstance(e, RefusalEvent)]


@pytest.mark.parametrize(
    ("bad", "error"), [(ORPHAN, InvalidToolPairs), (OVERSIZED, ContextBudgetExceeded)]
)
async def test_a_refused_acompletion_turn_is_not_stored_and_the_next_works(
    openai_server: OpenAIServer, tmp_path: Path, bad: dict[str, Any], error: type[Exception]
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    kw: dict[str, Any] = {
        "api_base": openai_server.base_url,
        "api_key": "test",
        "policy": ContextPolicy(max_input_tokens=LIMIT),
        "session_id": "s1",
        "user_id": "alice",
        "store": url,
    }
    openai_server.push(reply("first"), reply("second"))
    messages: list[Any] = [{"role": "user", "content": "hello"}]
    await acompletion(MODEL, messages, **kw)
    messages.append({"role": "assistant", "content": "first"})
    with pytest.raises(error):
        await acompletion(MODEL, [*messages, bad], **kw)
    assert len(openai_server.requests) == 1  # the refused request was never sent

    # The caller's corrected conversation, in this process and from a new store object.
    messages.append({"role": "user", "content": "next"})
    kw["store"] = open_store(url)
    try:
        answer = await acompletion(MODEL, messages, **kw)
    finally:
        await kw["store"].aclose()
    assert answer.choices[0].message.content == "second"
    sent = openai_server.last_request["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "hello"),
        ("assistant", "first"),
        ("user", "next"),
    ]
    history, refusals = await logged(url, SessionKey("alice", "acompletion", "s1"))
    assert history == [
        ("user", "hello"),
        ("assistant", "first"),
        ("user", "next"),
        ("assistant", "second"),
    ]
    (refusal,) = refusals
    assert refusal.error == error.__name__
    assert [m.text for m in refusal.messages] == [bad["content"]]


async def test_the_proxy_hook_answers_400_once_and_the_session_stays_usable(
    tmp_path: Path,
) -> None:
    from fastapi import HTTPException
    from litellm.proxy._types import UserAPIKeyAuth

    from providers.proxy_hook import HarnessProxyHook

    def data(messages: list[dict[str, Any]]) -> dict[str, Any]:
        headers = {"X-Harness-Session-Id": "s1"}
        return {
            "model": "gpt-4o-mini",
            "messages": messages,
            "proxy_server_request": {"url": "http://proxy/v1/chat/completions", "headers": headers},
        }

    url = f"sqlite:///{tmp_path}/proxy.db"
    auth = UserAPIKeyAuth(user_id="alice", token="hashed-key-1")

    def hook() -> HarnessProxyHook:  # a new hook and store: another proxy replica
        return HarnessProxyHook(
            store=url,
            summary_model=ScriptedModel(summary="S", model="gpt-4o-mini"),
            policy=ContextPolicy(max_input_tokens=LIMIT),
        )

    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    await hook().async_pre_call_hook(auth, None, data(list(messages)), "acompletion")
    messages.append({"role": "assistant", "content": "hi"})
    with pytest.raises(HTTPException) as refused:
        await hook().async_pre_call_hook(auth, None, data([*messages, ORPHAN]), "acompletion")
    assert refused.value.status_code == 400
    messages.append({"role": "user", "content": "next"})
    out = await hook().async_pre_call_hook(auth, None, data(list(messages)), "acompletion")
    assert [m["content"] for m in out["messages"]] == ["hello", "hi", "next"]
    history, refusals = await logged(url, SessionKey("alice", "litellm-proxy", "s1"))
    assert history == [("user", "hello"), ("assistant", "hi"), ("user", "next")]
    assert [r.error for r in refusals] == ["InvalidToolPairs"]
