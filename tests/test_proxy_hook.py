"""The litellm proxy hook, called as the proxy calls it: real `UserAPIKeyAuth`, real request data.

No proxy process: the hook's contract with the proxy is its two methods, and these tests
give them what litellm's proxy gives them (the request body with ``proxy_server_request``
and ``metadata``, the key's auth object) and check what they return.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import ContextPolicy, Message
from harness.sessions import ManifestEvent, MessageEvent, SessionKey, open_store
from providers import ScriptedModel

pytestmark = pytest.mark.integration  # SQLite, and litellm's proxy types

LIMIT = 2_000


def _auth(user_id: str | None, token: str = "hashed-key-1") -> Any:
    from litellm.proxy._types import UserAPIKeyAuth

    return UserAPIKeyAuth(user_id=user_id, token=token)


def _data(messages: list[dict[str, Any]], session: str | None = None) -> dict[str, Any]:
    headers = {"content-type": "application/json", "authorization": "Bearer sk-..."}
    if session is not None:
        headers["X-Harness-Session-Id"] = session
    return {
        "model": "gpt-4o-mini",
        "messages": messages,
        "metadata": {"user_api_key_hash": "hashed-key-1"},
        "proxy_server_request": {
            "url": "http://127.0.0.1:4000/v1/chat/completions",
            "method": "POST",
            "headers": headers,
            "body": None,
        },
    }


def _history() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(15):
        messages += [
            {"role": "user", "content": f"question {i} " * 40},
            {"role": "assistant", "content": f"answer {i} " * 40},
        ]
    return [*messages, {"role": "user", "content": "what now?"}]


def _hook(**kw: Any) -> Any:
    from providers.proxy_hook import HarnessProxyHook

    return HarnessProxyHook(
        policy=ContextPolicy(max_input_tokens=LIMIT),
        summary_model=ScriptedModel(summary="SUMMARY-OF-EARLY-TURNS", model="gpt-4o-mini"),
        **kw,
    )


async def test_the_pre_call_hook_rewrites_a_long_chat_and_returns_manifest_headers() -> None:
    hook = _hook()
    messages = _history()
    data = _data(list(messages))
    out = await hook.async_pre_call_hook(_auth("alice"), None, data, "acompletion")
    sent = out["messages"]
    assert out is data and len(sent) < len(messages)
    assert sent[0] == {"role": "system", "content": "You are terse."}
    assert [m["role"] for m in sent].count("system") == 1
    assert "SUMMARY-OF-EARLY-TURNS" in json.dumps(sent) and sent[-1]["content"] == "what now?"
    headers = await hook.async_post_call_response_headers_hook(out, _auth("alice"), None, {})
    assert headers is not None
    assert 0 < int(headers["x-harness-estimated-tokens"]) <= LIMIT
    assert headers["x-harness-input-limit"] == str(LIMIT)
    assert headers["x-harness-validation"] == "passed"
    assert any(
        t.startswith("history_compaction") for t in json.loads(headers["x-harness-transforms"])
    )


async def test_other_call_types_pass_untouched() -> None:
    data = {"model": "text-embedding-3-small", "input": ["hello"]}
    out = await _hook().async_pre_call_hook(_auth("alice"), None, dict(data), "aembedding")
    assert out == data


async def test_sessions_follow_the_header_and_the_proxys_users(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/proxy.db"
    hook = _hook(store=url)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Remember: the code is 7."}]
    await hook.async_pre_call_hook(_auth("alice"), None, _data(list(messages), "s1"), "acompletion")
    messages += [
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What is the code?"},
    ]
    await hook.async_pre_call_hook(_auth("alice"), None, _data(list(messages), "s1"), "acompletion")
    # A key without a user id is its own user: the same session id reaches nothing of Alice's.
    other = _data([{"role": "user", "content": "What is the code?"}], "s1")
    sent = (await hook.async_pre_call_hook(_auth(None, "key-2"), None, other, "acompletion"))[
        "messages"
    ]
    assert "7" not in json.dumps(sent)
    store = open_store(url)
    try:
        events = await store.events(SessionKey("alice", "litellm-proxy", "s1"), limit=100)
        record = [e.event.message for e in events if isinstance(e.event, MessageEvent)]
        assert [m.text for m in record] == [
            "Remember: the code is 7.",
            "Noted.",
            "What is the code?",
        ]
        assert sum(isinstance(e.event, ManifestEvent) for e in events) == 2
        bob = await store.events(SessionKey("key:key-2", "litellm-proxy", "s1"), limit=100)
        assert [e.event.message.text for e in bob if isinstance(e.event, MessageEvent)] == [
            "What is the code?"
        ]
    finally:
        await store.aclose()


async def test_the_session_can_come_from_metadata() -> None:
    from providers.proxy_hook import session_of, user_of

    data = _data([Message.user("hi").to_openai()])
    data["metadata"]["session_id"] = "from-metadata"
    assert session_of(data) == "from-metadata"
    assert session_of(_data([], "from-header")) == "from-header"
    assert user_of(_auth(None, "tok")) == "key:tok" and user_of(_auth("bob")) == "bob"


def test_settings_come_from_the_proxy_config_and_bad_ones_are_named() -> None:
    from harness.errors import ConfigurationError
    from providers.litellm_client import LiteLLMClient
    from providers.proxy_hook import HarnessProxyHook, ProxyHookSettings

    settings = ProxyHookSettings.parse(
        {"store": "sqlite://", "max_input_tokens": "3000", "summary_model": "openai/cheap"}
    )  # numbers arrive as strings from os.environ/ references
    hook = HarnessProxyHook.from_settings(settings)
    assert hook.policy is not None and hook.policy.max_input_tokens == 3000
    assert (
        isinstance(hook.summary_model, LiteLLMClient) and hook.summary_model.model == "openai/cheap"
    )
    with pytest.raises(ConfigurationError, match="max_input_tokns"):
        ProxyHookSettings.parse({"max_input_tokns": 3000})
    with pytest.raises(ConfigurationError, match=r"cannot import 'no_such_module\.build'"):
        HarnessProxyHook.from_settings(ProxyHookSettings(stack="no_such_module.build"))


async def test_a_request_the_stack_refuses_becomes_an_http_error() -> None:
    from fastapi import HTTPException

    orphan = _data([{"role": "tool", "content": "no call id"}])
    with pytest.raises(HTTPException) as refused:
        await _hook().async_pre_call_hook(_auth("alice"), None, orphan, "acompletion")
    assert refused.value.status_code == 400
    assert "tool_call_id" in str(refused.value.detail)
