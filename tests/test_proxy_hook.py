"""The litellm proxy hook, called as the proxy calls it: real `UserAPIKeyAuth`, real request data.

No proxy process: the hook's contract with the proxy is its two methods, and these tests
give them what litellm's proxy gives them (the request body with ``proxy_server_request``
and ``metadata``, the key's auth object) and check what they return.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness import ContextPolicy, Message
from harness.sessions import ManifestEvent, MessageEvent, SessionKey, open_store
from providers import ScriptedModel

pytestmark = pytest.mark.integration  # SQLite, and litellm's proxy types

LIMIT = 2_000


def _auth(user_id: str | None, token: str | None = "hashed-key-1") -> Any:
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
        from providers.proxy_hook import user_of

        key_2 = SessionKey(user_of(_auth(None, "key-2")), "litellm-proxy", "s1")
        bob = await store.events(key_2, limit=100)
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
    assert user_of(_auth("bob")) == "bob" and user_of(_auth(None, None)) == ""
    derived = user_of(_auth(None, "tok"))
    assert derived.startswith("key:") and "tok" not in derived and len(derived) == 4 + 64


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


RAW_KEYS = ("sk-raw-" + "7f3a9c1e5b2d4086", "team-key-" + "c41d9e2b77a05f13")


@pytest.mark.parametrize("how", ["token", "api_key"])
async def test_no_raw_key_reaches_the_store(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A custom auth may hand the raw key over: as the token, or as an api_key litellm does
    # not hash (no sk- prefix); the store must hold neither.
    from litellm.proxy._types import UserAPIKeyAuth

    monkeypatch.delenv("HARNESS_PROXY_USER_SECRET", raising=False)
    raw = RAW_KEYS[0] if how == "token" else RAW_KEYS[1]
    auth = UserAPIKeyAuth(token=raw) if how == "token" else UserAPIKeyAuth(api_key=raw)
    assert raw in (auth.token, auth.api_key)  # the raw key does arrive
    url = f"sqlite:///{tmp_path}/proxy.db"
    hook = _hook(store=url)
    for text in ("Remember: the code is 7.", "What is the code?"):
        data = _data([{"role": "user", "content": text}], "s1")
        await hook.async_pre_call_hook(auth, None, data, "acompletion")
    with contextlib.closing(sqlite3.connect(tmp_path / "proxy.db")) as conn:
        rows = conn.execute("SELECT user_id, session_id, n_messages FROM sessions").fetchall()
    ((user, session, count),) = rows  # one user: the key's, recorded once per round
    assert session == "s1" and count == 2 and user.startswith("key:") and raw not in user
    contents = file_bytes(tmp_path, "proxy.db*")
    assert contents and all(raw.encode() not in data for data in contents.values()), contents.keys()
    assert all(raw.encode("utf-16-le") not in data for data in contents.values())


def file_bytes(folder: Path, pattern: str) -> dict[str, bytes]:
    """Return the bytes of the files in ``folder`` matching ``pattern`` (the store, -wal …)."""
    return {path.name: path.read_bytes() for path in sorted(folder.glob(pattern))}


def user_of_hook(hook: Any, auth: Any) -> str:
    from providers.proxy_hook import user_of

    return user_of(auth, secret=hook._user_secret)


async def test_hooks_with_one_secret_map_a_key_to_one_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from providers.proxy_hook import HarnessProxyHook, ProxyHookSettings

    url = f"sqlite:///{tmp_path}/shared.db"
    auth = _auth(None, RAW_KEYS[0])

    def replica(**settings: Any) -> Any:
        made = HarnessProxyHook.from_settings(
            ProxyHookSettings.parse({"store": url, "max_input_tokens": LIMIT, **settings})
        )
        made.summary_model = ScriptedModel(summary="S", model="gpt-4o-mini")
        return made

    first, second = replica(user_secret="team-secret-1"), replica(user_secret="team-secret-1")
    other = replica(user_secret="another-secret")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Remember: the code is 7."}]
    await first.async_pre_call_hook(auth, None, _data(list(messages), "s1"), "acompletion")
    messages += [
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What is the code?"},
    ]
    # The next round on another replica continues the same user's session (no conflict) …
    await second.async_pre_call_hook(auth, None, _data(list(messages), "s1"), "acompletion")
    user = user_of_hook(first, auth)
    assert user == user_of_hook(second, auth) != user_of_hook(other, auth)
    store = open_store(url)
    try:
        events = await store.events(SessionKey(user, "litellm-proxy", "s1"), limit=100)
        texts = [e.event.message.text for e in events if isinstance(e.event, MessageEvent)]
        assert texts == ["Remember: the code is 7.", "Noted.", "What is the code?"]
    finally:
        await store.aclose()
    # … and the environment variable is the same configuration for every replica.
    monkeypatch.setenv("HARNESS_PROXY_USER_SECRET", "team-secret-1")
    assert user_of_hook(replica(), auth) == user
    monkeypatch.delenv("HARNESS_PROXY_USER_SECRET")
    assert user_of_hook(replica(), auth) == user_of_hook(replica(), auth) != user


@pytest.fixture
def team_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy's router with one alias, ``team-model``, where the hook finds it.

    The router is litellm's own; only the proxy server module around it is absent (no
    proxy process here), so a namespace holds it under the module's name.
    """
    import sys
    import types

    from litellm.router import Router

    router = Router(
        model_list=[
            {
                "model_name": "team-model",
                "litellm_params": {
                    "model": "openai/gpt-4o-mini",
                    "api_base": "http://127.0.0.1:9/v1",
                    "api_key": "sk-upstream",
                },
                "model_info": {"max_input_tokens": 9_000},
            }
        ]
    )
    server = types.ModuleType("litellm.proxy.proxy_server")
    server.llm_router = router  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "litellm.proxy.proxy_server", server)


@pytest.mark.usefixtures("team_model")
async def test_an_alias_is_counted_and_windowed_as_its_deployments_model(tmp_path: Path) -> None:
    from providers.proxy_hook import HarnessProxyHook

    url = f"sqlite:///{tmp_path}/proxy.db"
    hook = HarnessProxyHook(store=url)  # no cap: the window is the deployment's model_info
    data = _data([{"role": "user", "content": "héllo wörld " * 50}], "s1")
    data["model"] = "team-model"
    out = await hook.async_pre_call_hook(_auth("alice"), None, data, "acompletion")
    assert out["model"] == "team-model"  # the proxy still routes by the alias
    headers = await hook.async_post_call_response_headers_hook(out, _auth("alice"), None, {})
    assert headers is not None
    # the default reserves, scaled to the 9,000 window (a quarter for output at most)
    assert headers["x-harness-input-limit"] == str(ContextPolicy().input_limit(9_000))
    assert not any("guessed" in t for t in json.loads(headers["x-harness-transforms"]))
    store = open_store(url)
    try:
        events = await store.events(SessionKey("alice", "litellm-proxy", "s1"), limit=100)
    finally:
        await store.aclose()
    (manifest,) = [e.event.manifest for e in events if isinstance(e.event, ManifestEvent)]
    assert manifest.model == "openai/gpt-4o-mini"  # counted with its tokenizer, not the alias's
    assert "o200k" in manifest.counting_method, manifest.counting_method


@pytest.mark.parametrize("call_type", ["aresponses", "anthropic_messages"])
async def test_an_api_the_hook_does_not_prepare_is_refused_naming_chat_completions(
    call_type: str,
) -> None:
    from fastapi import HTTPException

    data = {"model": "gpt-4o-mini", "input": "hello " * 5_000, "metadata": {}}
    with pytest.raises(HTTPException) as refused:
        await _hook().async_pre_call_hook(_auth("alice"), None, dict(data), call_type)
    assert refused.value.status_code == 400
    detail = str(refused.value.detail)
    assert "Chat Completions" in detail and "unprepared_apis: pass" in detail
    passed = await _hook(unprepared_apis="pass").async_pre_call_hook(
        _auth("alice"), None, dict(data), call_type
    )
    assert passed == data  # forwarded as sent only when the operator says so


async def test_a_refusal_names_what_the_proxy_operator_sets() -> None:
    from fastapi import HTTPException

    huge = _data([{"role": "user", "content": "word " * 5_000}])  # one turn over the cap
    with pytest.raises(HTTPException) as refused:
        await _hook().async_pre_call_hook(_auth("alice"), None, huge, "acompletion")
    detail: Any = refused.value.detail  # fastapi types it str; the hook gives a dict
    assert isinstance(detail, dict) and detail["type"] == "ContextBudgetExceeded"
    assert "ContextPolicy" not in detail["error"]  # no Python API for an HTTP client
    assert "callback_settings.harness.max_input_tokens" in detail["error"]
    assert "model_info.max_input_tokens" in detail["fix"]


async def test_a_dot_relative_sqlite_url_is_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HARNESS_STORE=sqlite:///./harness-sessions.db (the example's) is beside the proxy, as
    # SQLAlchemy reads it, not /harness-sessions.db at the filesystem root.
    from harness.sessions.sqlite._url import parse

    monkeypatch.chdir(tmp_path)
    assert parse("sqlite:///./sessions.db")[0] == tmp_path / "sessions.db"
    assert parse("sqlite:///../up.db")[0] == tmp_path / ".." / "up.db"
    assert parse("sqlite:///tmp/abs.db")[0] == Path("/tmp/abs.db")  # absolute stays absolute
    hook = _hook(store="sqlite:///./proxy.db")
    data = _data([{"role": "user", "content": "hi"}], "s1")
    await hook.async_pre_call_hook(_auth("alice"), None, data, "acompletion")
    assert (tmp_path / "proxy.db").is_file()


@pytest.mark.usefixtures("team_model")
async def test_a_summary_model_does_not_lend_the_request_its_window() -> None:
    # Summaries go to a cheap model; the request's budget is still the deployment's window.
    hook = _hook()
    hook.policy = ContextPolicy()  # no cap
    data = _data([{"role": "user", "content": "hello"}])
    data["model"] = "team-model"
    out = await hook.async_pre_call_hook(_auth("alice"), None, data, "acompletion")
    headers = await hook.async_post_call_response_headers_hook(out, _auth("alice"), None, {})
    assert headers is not None
    # the default reserves, scaled to the 9,000 window (a quarter for output at most)
    assert headers["x-harness-input-limit"] == str(ContextPolicy().input_limit(9_000))
