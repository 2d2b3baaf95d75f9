"""The drop-in `acompletion` through litellm and HTTP to the local OpenAI-compatible server.

Every check is on what the server received (the exact JSON litellm sent) or on what the
caller got back (litellm's own answer objects), never on our own classes' internals.
"""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import ContextPolicy, Message, ToolSchema, acompletion, completion, manifest_of
from harness.sessions import ManifestEvent, MessageEvent, SessionKey, open_store

from .openai_server import (
    INVALID_API_KEY,
    OpenAIServer,
    Raw,
    Reply,
    context_length_exceeded,
    count_prompt_tokens,
    error,
    reply,
    tool_call,
)

pytestmark = pytest.mark.integration

MODEL = "openai/test-model"
LIMIT = 2_000
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def _kw(server: OpenAIServer, **extra: Any) -> dict[str, Any]:
    return {
        "api_base": server.base_url,
        "api_key": "test",
        "policy": ContextPolicy(max_input_tokens=LIMIT),
        **extra,
    }


def _long_history(user: str = "") -> list[dict[str, Any]]:
    """Two system dicts and 30 turns: questions, answers and tool calls with their results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": f"{user}Plan my trip through ten cities."},
    ]
    for i in range(7):
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": f'{{"city": "c{i}"}}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": ("sunny and mild " * 40) if i else "x" * 100_000,
            },
            {"role": "assistant", "content": f"City {i} looks fine. " * 20},
            {"role": "user", "content": f"Next city please, number {i + 1}. " * 10},
        ]
    messages.insert(5, {"role": "system", "content": "Answer in metric units."})
    return messages


def _is_summary_request(body: dict[str, Any]) -> bool:
    if body.get("tool_choice") == "none":  # asked in place, over the agent's own prefix
        return True
    text = json.dumps(body["messages"])
    return "compacting the conversation" in text or "summarise consecutive parts" in text


def _agent_requests(server: OpenAIServer) -> list[dict[str, Any]]:
    return [b for b in server.requests if not _is_summary_request(b)]


def _pairs_are_valid(messages: list[dict[str, Any]]) -> bool:
    calls = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    results = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    if calls != results:
        return False
    waiting: set[str] = set()
    for m in messages:  # every result right after its call's assistant turn
        if m["role"] == "tool":
            if m["tool_call_id"] not in waiting:
                return False
            waiting.discard(m["tool_call_id"])
        else:
            if waiting:
                return False
            waiting = {c["id"] for c in m.get("tool_calls") or ()}
    return not waiting


async def test_a_long_history_arrives_fitted_with_valid_pairs_and_the_callers_list_unchanged(
    openai_server: OpenAIServer,
) -> None:
    messages = _long_history()
    before = copy.deepcopy(messages)
    response = await acompletion(MODEL, messages, [WEATHER], **_kw(openai_server))
    assert messages == before  # not mutated
    assert response.choices[0].message.content == "ok"  # litellm's own ModelResponse
    sent = _agent_requests(openai_server)[-1]
    assert count_prompt_tokens(sent) <= LIMIT
    assert _pairs_are_valid(sent["messages"])
    assert len(sent["messages"]) < len(messages)
    assert all(len(json.dumps(m)) < 20_000 for m in sent["messages"])  # the 100k result is gone
    manifest = manifest_of(response)
    assert manifest is not None and manifest.validation == "passed"
    assert manifest.input_limit == LIMIT and 0 < manifest.estimated_input_tokens <= LIMIT
    assert any(t.startswith("history_compaction:") for t in manifest.transforms)
    assert any(t.startswith("offload") for t in manifest.transforms)


async def test_system_dicts_become_the_system_message_and_are_never_summarised(
    openai_server: OpenAIServer,
) -> None:
    # Its own conversation: the same opening as another test's would continue that one's
    # session, already compacted in this process, and send no summary request.
    history = _long_history(user="System dicts. ")
    await acompletion(MODEL, history, [WEATHER], **_kw(openai_server))
    for body in _agent_requests(openai_server):
        roles = [m["role"] for m in body["messages"]]
        assert roles.count("system") == 1 and roles[0] == "system"
        system = body["messages"][0]["content"]
        assert "You are a weather assistant." in system and "Answer in metric units." in system
    summaries = [b for b in openai_server.requests if _is_summary_request(b)]
    assert summaries
    for body in summaries:
        # Asked in place, System is the request's own System message (the cached prefix), not
        # text to summarise; a transcript summary request holds no System text at all.
        to_summarise = (
            body["messages"][1:] if body.get("tool_choice") == "none" else body["messages"]
        )
        assert "weather assistant" not in json.dumps(to_summarise)


async def test_openai_tool_dicts_with_strict_are_sent_as_given(
    openai_server: OpenAIServer,
) -> None:
    assert ToolSchema.from_openai(WEATHER).name == "get_weather"
    openai_server.push(tool_call("get_weather", {"city": "Paris"}))
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    response = await acompletion(MODEL, messages, [WEATHER], **_kw(openai_server))
    assert openai_server.last_request["tools"] == [WEATHER]
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # The app runs the tool and sends litellm's message object back, as apps do.
    messages += [
        response.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "18 °C, sunny"},
    ]
    again = await acompletion(MODEL, messages, [WEATHER], **_kw(openai_server))
    assert again.choices[0].message.content == "ok"
    sent = openai_server.last_request["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call.id


async def test_the_same_growing_history_reuses_its_summary(openai_server: OpenAIServer) -> None:
    messages = _long_history(user="[reuse] ")
    first = await acompletion(MODEL, messages, [WEATHER], **_kw(openai_server))
    summaries = sum(map(_is_summary_request, openai_server.requests))
    assert summaries >= 1
    for turn in range(3):  # the app appends the reply and a new turn, and calls again
        messages += [first.choices[0].message, {"role": "user", "content": f"And turn {turn}?"}]
        first = await acompletion(MODEL, messages, [WEATHER], **_kw(openai_server))
        assert sum(map(_is_summary_request, openai_server.requests)) == summaries
        sent = _agent_requests(openai_server)[-1]
        assert _pairs_are_valid(sent["messages"]) and count_prompt_tokens(sent) <= LIMIT
        assert f"And turn {turn}?" in json.dumps(sent)
        assert "[Summary of the earlier conversation" in json.dumps(sent)


def _summaries_say(text: str) -> Any:
    """A server behaviour: summary requests are answered ``text``, the rest ``ok``."""
    return lambda body: reply(text if _is_summary_request(body) else "ok")


async def test_one_model_name_on_two_servers_never_shares_a_cached_summary(
    openai_server: OpenAIServer,
) -> None:
    # The same model name at another api_base is another model: its summary is its own.
    openai_server.default = _summaries_say("FIRST-SERVER-SUMMARY")
    messages = _long_history(user="[two servers] ")
    await acompletion(MODEL, messages, [WEATHER], **_kw(openai_server))
    assert sum(map(_is_summary_request, openai_server.requests)) >= 1
    with OpenAIServer(default=_summaries_say("SECOND-SERVER-SUMMARY")) as second:
        await acompletion(MODEL, messages, [WEATHER], **_kw(second))
        assert sum(map(_is_summary_request, second.requests)) >= 1  # summarised there
        sent = json.dumps(_agent_requests(second)[-1])
        assert "SECOND-SERVER-SUMMARY" in sent and "FIRST-SERVER-SUMMARY" not in sent


async def test_two_users_never_share_a_cached_summary(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    for store in (None, f"sqlite:///{tmp_path}/cache.db"):
        openai_server.requests.clear()
        openai_server.default = _summaries_say("ALICE-SUMMARY")
        messages = _long_history(user=f"[isolation {store}] ")
        kw = _kw(openai_server, store=store)
        await acompletion(MODEL, messages, [WEATHER], user_id="alice", **kw)
        alice = sum(map(_is_summary_request, openai_server.requests))
        assert alice >= 1
        grown = [
            *messages,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "more"},
        ]
        openai_server.default = _summaries_say("BOB-SUMMARY")
        await acompletion(MODEL, grown, [WEATHER], user_id="bob", **kw)
        assert sum(map(_is_summary_request, openai_server.requests)) > alice  # bob's own
        sent = json.dumps(_agent_requests(openai_server)[-1])
        assert "BOB-SUMMARY" in sent and "ALICE-SUMMARY" not in sent
        # Alice's grown history reuses her summary, from the LRU or the store.
        before = sum(map(_is_summary_request, openai_server.requests))
        await acompletion(MODEL, grown, [WEATHER], user_id="alice", **kw)
        assert sum(map(_is_summary_request, openai_server.requests)) == before
        sent = json.dumps(_agent_requests(openai_server)[-1])
        assert "ALICE-SUMMARY" in sent and "BOB-SUMMARY" not in sent


async def test_a_session_id_keeps_the_record_in_a_sqlite_store_across_calls(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    kw = _kw(openai_server, session_id="trip", user_id="alice", store=url)
    openai_server.push(tool_call("get_weather", {"city": "Oslo"}), reply("Take a coat."))
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
    ]
    first = await acompletion(MODEL, messages, [WEATHER], **kw)
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "2 °C, rain"},
    ]
    second = await acompletion(MODEL, messages, [WEATHER], **kw)
    assert second.choices[0].message.content == "Take a coat."
    store = open_store(url)  # a new store object: what another process would read
    try:
        key = SessionKey("alice", "acompletion", "trip")
        events = await store.events(key, limit=100)
        record = [e.event.message for e in events if isinstance(e.event, MessageEvent)]
        assert [(m.role, m.text) for m in record] == [
            ("user", "Weather in Oslo?"),
            ("assistant", ""),
            ("tool", "2 °C, rain"),
            ("assistant", "Take a coat."),
        ]  # each once, the system text not in the history
        manifests = [e.event.manifest for e in events if isinstance(e.event, ManifestEvent)]
        assert len(manifests) == 2 and all(m.session_id == "trip" for m in manifests)
        assert await store.events(SessionKey("bob", "acompletion", "trip")) == []
    finally:
        await store.aclose()
    # Only the new turn works too: the record supplies the rest.
    third = await acompletion(
        MODEL, [{"role": "user", "content": "And tomorrow?"}], [WEATHER], **kw
    )
    assert third.choices[0].message.content == "ok"
    assert [m["role"] for m in openai_server.last_request["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


async def test_streaming_returns_litellms_chunks_with_the_manifest(
    openai_server: OpenAIServer,
) -> None:
    openai_server.push(reply("streamed answer"))
    stream = await acompletion(
        MODEL, [{"role": "user", "content": "hi"}], stream=True, **_kw(openai_server)
    )
    assert manifest_of(stream) is not None
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 2 and text == "streamed answer"
    assert openai_server.last_request["stream"] is True


async def test_provider_failures_raise_litellms_own_exceptions(openai_server: OpenAIServer) -> None:
    from litellm.exceptions import AuthenticationError

    openai_server.push(error(401, INVALID_API_KEY))
    with pytest.raises(AuthenticationError) as caught:
        await acompletion(MODEL, [{"role": "user", "content": "hi"}], **_kw(openai_server))
    assert any("context-harness" in note for note in caught.value.__notes__)


async def test_a_provider_overflow_is_compacted_and_retried_once(
    openai_server: OpenAIServer,
) -> None:
    openai_server.default = _agent_script([context_length_exceeded(), reply("fitted")])
    kw = _kw(openai_server, policy=ContextPolicy(max_input_tokens=60_000))
    response = await acompletion(MODEL, _long_history(user="[overflow] "), [WEATHER], **kw)
    assert response.choices[0].message.content == "fitted"
    first, retried = _agent_requests(openai_server)
    assert len(retried["messages"]) < len(first["messages"])
    assert _pairs_are_valid(retried["messages"])


def test_the_sync_completion_is_the_same_call(openai_server: OpenAIServer) -> None:
    openai_server.push(reply("sync answer"))
    response = completion(MODEL, [{"role": "user", "content": "hi"}], **_kw(openai_server))
    assert response.choices[0].message.content == "sync answer"
    assert manifest_of(response) is not None


async def test_a_cached_summary_is_reused_only_under_the_same_model_and_stack(
    openai_server: OpenAIServer,
) -> None:
    from middleware import OverflowRetry, default_stack

    messages = _long_history(user="[scope] ")
    kw = _kw(openai_server)

    def summaries() -> int:
        return sum(map(_is_summary_request, openai_server.requests))

    await acompletion(MODEL, messages, [WEATHER], stack=default_stack(), **kw)
    first = summaries()
    assert first >= 1
    # A fresh stack of the same configuration is the same setup: its summary is reused.
    await acompletion(MODEL, messages, [WEATHER], stack=default_stack(), **kw)
    assert summaries() == first
    # Another model, or a differently configured stack, gets its own summary.
    await acompletion("openai/other-model", messages, [WEATHER], stack=default_stack(), **kw)
    assert summaries() > first
    second = summaries()
    other_stack = default_stack(overflow=OverflowRetry(max_retries=2))
    await acompletion(MODEL, messages, [WEATHER], stack=other_stack, **kw)
    assert summaries() > second


async def test_the_store_prefix_cache_keeps_few_labelled_entries_per_user(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    import anyio

    from harness.adapters.prefix_cache import CACHE_TITLE, StorePrefixCache

    store = open_store(f"sqlite:///{tmp_path}/cache.db")
    try:
        cache = StorePrefixCache(store, max_entries=2)
        kw = _kw(openai_server, prefix_cache=cache)
        for i in range(4):  # four different conversations of one user
            await acompletion(MODEL, _long_history(user=f"[retention {i}] "), [WEATHER], **kw)
        entries = await store.sessions("", "acompletion:prefix-cache")
        assert len(entries) == 2 and all(e.title == CACHE_TITLE for e in entries)
        # The newest conversation is still cached: growing it needs no new summary.
        before = sum(map(_is_summary_request, openai_server.requests))
        grown = [*_long_history(user="[retention 3] "), {"role": "assistant", "content": "ok"}]
        await acompletion(MODEL, [*grown, {"role": "user", "content": "more"}], [WEATHER], **kw)
        assert sum(map(_is_summary_request, openai_server.requests)) == before

        # Expired entries are neither used nor kept.
        short = StorePrefixCache(store, ttl_s=0.5)
        kw = _kw(openai_server, prefix_cache=short, user_id="carol")
        messages = _long_history(user="[ttl] ")
        await acompletion(MODEL, messages, [WEATHER], **kw)
        assert len(await store.sessions("carol", "acompletion:prefix-cache")) == 1
        await anyio.sleep(0.6)
        before = sum(map(_is_summary_request, openai_server.requests))
        grown = [*messages, {"role": "assistant", "content": "ok"}]
        await acompletion(MODEL, [*grown, {"role": "user", "content": "more"}], [WEATHER], **kw)
        assert sum(map(_is_summary_request, openai_server.requests)) > before
        assert len(await store.sessions("carol", "acompletion:prefix-cache")) == 1  # the new one
    finally:
        await store.aclose()


async def test_concurrent_calls_sharing_one_stack_each_get_their_own_answer(
    openai_server: OpenAIServer,
) -> None:
    import anyio

    from middleware import default_stack

    stack = default_stack()  # composed once, shared by every call below
    openai_server.default = lambda body: reply(
        "echo " + body["messages"][-1]["content"], delay_s=0.2
    )
    answers: dict[str, Any] = {}

    async def ask(word: str) -> None:
        messages = [{"role": "user", "content": word}]
        answers[word] = await acompletion(MODEL, messages, stack=stack, **_kw(openai_server))

    async with anyio.create_task_group() as group:
        for word in ("alpha", "beta", "gamma"):
            group.start_soon(ask, word)
    for word, answer in answers.items():
        assert answer.choices[0].message.content == f"echo {word}"
    manifests = [manifest_of(a) for a in answers.values()]
    assert len({m.call_id for m in manifests if m is not None}) == 3


async def test_the_client_steps_are_public_and_check_before_sending(
    openai_server: OpenAIServer,
) -> None:
    from harness import ModelRequest
    from harness.errors import ProviderBadRequest
    from providers.litellm_client import LiteLLMClient, response_from
    from providers.passthrough import PassthroughClient

    request = ModelRequest(
        model=MODEL,
        history=(Message.user("hi"),),
        tools=(ToolSchema.from_openai(WEATHER),),
    )
    client = PassthroughClient(
        MODEL, api_base=openai_server.base_url, api_key="test", tool_dicts={"get_weather": WEATHER}
    )
    prepared = client.prepare(request)
    assert prepared.provider == "openai" and prepared.kwargs["tools"] == [WEATHER]
    openai_server.push(reply("stepwise"))
    response = response_from(await client.send_prepared(prepared), prepared, latency_s=0.0)
    assert response.message.text == "stepwise"
    assert openai_server.last_request["tools"][0]["function"]["strict"] is True
    sent = len(openai_server.requests)
    with pytest.raises(ProviderBadRequest) as refused:
        LiteLLMClient("no-such-provider-model").prepare(request.replace(model=""))
    assert refused.value.status is None and len(openai_server.requests) == sent


# The app a new user already has: a litellm tool loop, 34 lines.
EXISTING_APP = """
import asyncio
import json
from litellm import acompletion

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}]


def get_weather(city):
    return f"{city}: 18 C, sunny. " * 30


async def chat(messages, question):
    messages.append({"role": "user", "content": question})
    while True:
        response = await acompletion(model=MODEL, messages=messages, tools=TOOLS,
                                     api_base=API_BASE, api_key="test", **EXTRA)
        message = response.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": get_weather(**args)})


async def main():
    messages = [{"role": "system", "content": "You are a travel assistant."}]
    return [await chat(messages, f"Weather in city {i}? " * 20) for i in range(12)]

if __name__ == "__main__": print(asyncio.run(main()))
"""


def _agent_script(script: list[Reply | Raw]) -> Callable[[dict[str, Any]], Reply | Raw]:
    """A server behaviour: the agent's requests get ``script`` in order, summaries a summary."""
    queue = list(script)
    return lambda body: reply("summary") if _is_summary_request(body) else queue.pop(0)


async def _run_app(source: str, server: OpenAIServer, extra: dict[str, Any]) -> list[str]:
    namespace: dict[str, Any] = {"MODEL": MODEL, "API_BASE": server.base_url, "EXTRA": extra}
    exec(compile(source, "existing_app.py", "exec"), namespace)
    answers: list[str] = await namespace["main"]()
    return answers


async def test_an_existing_litellm_app_changes_one_import(openai_server: OpenAIServer) -> None:
    assert len(textwrap.dedent(EXISTING_APP).strip().splitlines()) == 34
    script: list[Reply | Raw] = [
        tool_call("get_weather", {"city": f"c{i}"}) if i % 2 == 0 else reply(f"a{i}")
        for i in range(24)
    ]
    openai_server.default = _agent_script(script)
    # EXTRA is the test's knob, the same source line in both runs: the local server's model
    # has no window in litellm's map (64,000 assumed), so the harnessed run gets a small budget.
    plain = await _run_app(EXISTING_APP, openai_server, {})
    plain_sizes = [count_prompt_tokens(b) for b in openai_server.requests]

    converted = EXISTING_APP.replace(
        "from litellm import acompletion", "from harness import acompletion"
    )
    changed = [
        a for a, b in zip(EXISTING_APP.splitlines(), converted.splitlines(), strict=True) if a != b
    ]
    assert len(changed) == 1
    openai_server.requests.clear()
    openai_server.default = _agent_script(script)
    policy = ContextPolicy(max_input_tokens=LIMIT)
    harnessed = await _run_app(converted, openai_server, {"policy": policy, "user_id": "app"})
    agent = _agent_requests(openai_server)
    assert harnessed == plain  # the same conversation
    assert max(plain_sizes) > LIMIT  # without the harness the app outgrows the budget
    assert all(count_prompt_tokens(b) <= LIMIT for b in agent)
    assert all(_pairs_are_valid(b["messages"]) for b in agent)
