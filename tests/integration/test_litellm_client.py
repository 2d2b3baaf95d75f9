"""LiteLLMClient against a real OpenAI-compatible HTTP server, through litellm.

Nothing here is mocked: the client renders the request, litellm encodes it and sends it
over HTTP to `OpenAIServer`, which answers like OpenAI (or DeepSeek in thinking mode) and
records exactly what arrived. So these tests pin what a real provider sees and how its
real answers — replies, tool calls, streams, usage and error bodies — come back.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from harness.errors import (
    ConfigurationError,
    ContextOverflowError,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from harness.messages import Message, ToolCall, ToolSchema
from harness.request import ModelRequest, SystemPart
from harness.types import ModelClient, StreamChunk
from providers.litellm_client import LiteLLMClient

from .openai_server import (
    INVALID_API_KEY,
    SERVER_ERROR,
    OpenAIServer,
    Reply,
    ToolCallSpec,
    context_length_exceeded,
    count_prompt_tokens,
    error,
    reply,
    tool_call,
)

pytestmark = pytest.mark.integration

MODEL = "openai/gpt-4o"
WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TABLE = json.loads((Path(__file__).parents[1] / "data" / "overflow_bodies.json").read_text())
EXPECT: dict[str, type[ProviderError]] = {
    "overflow": ContextOverflowError,
    "rate_limited": ProviderRateLimited,
    "auth": ProviderAuthError,
    "bad_request": ProviderBadRequest,
    "unavailable": ProviderUnavailable,
}


def client_for(server: OpenAIServer, **settings: Any) -> LiteLLMClient:
    return LiteLLMClient(MODEL, api_base=server.base_url, api_key="test", timeout=5, **settings)


def make_request(
    *history: Message, tools: tuple[ToolSchema, ...] = (), settings: dict[str, Any] | None = None
) -> ModelRequest:
    return ModelRequest(
        model=MODEL,
        system=(SystemPart(name="prompt", text="You are terse."),),
        history=history,
        tools=tools,
        settings=settings,
    )


async def collect(client: LiteLLMClient, request: ModelRequest) -> list[StreamChunk]:
    return [chunk async for chunk in client.stream(request)]


# ----------------------------------------------------------------------------- replies
async def test_reply_comes_back_with_usage_and_latency(openai_server: OpenAIServer) -> None:
    openai_server.push(reply("Hello there."))
    client = client_for(openai_server)
    assert isinstance(client, ModelClient)

    response = await client.complete(make_request(Message.user("hi")))

    assert response.message.role == "assistant"
    assert response.message.text == "Hello there."
    assert response.message.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.model == "test-model"
    assert response.latency_s > 0
    sent = openai_server.last_request
    assert openai_server.paths[-1] == "/v1/chat/completions"
    assert sent["model"] == "gpt-4o"
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
    ]
    assert "stream" not in sent and "tools" not in sent
    assert "num_retries" not in sent and "max_retries" not in sent
    assert response.usage is not None
    assert response.usage.prompt_tokens == count_prompt_tokens(sent)
    assert response.usage.completion_tokens > 0
    assert (
        response.usage.total_tokens
        == response.usage.prompt_tokens + response.usage.completion_tokens
    )
    assert response.usage.cached_tokens == 0


async def test_api_base_without_v1_reaches_chat_completions(openai_server: OpenAIServer) -> None:
    client = LiteLLMClient(MODEL, api_base=f"http://127.0.0.1:{openai_server.port}", api_key="test")

    response = await client.complete(make_request(Message.user("hi")))

    assert response.message.text == "ok"
    assert openai_server.paths == ["/chat/completions"]


async def test_settings_reach_the_provider_and_the_request_wins(
    openai_server: OpenAIServer,
) -> None:
    client = client_for(openai_server, temperature=0.5, max_tokens=64)

    await client.complete(make_request(Message.user("hi"), settings={"temperature": 0.0}))

    sent = openai_server.last_request
    assert sent["temperature"] == 0.0
    assert sent["max_tokens"] == 64


async def test_cached_tokens_and_token_factor_are_reported(openai_server: OpenAIServer) -> None:
    openai_server.token_factor = 1.2
    openai_server.push(reply("Cached.", cached_tokens=12))

    response = await client_for(openai_server).complete(make_request(Message.user("a " * 50)))

    assert response.usage is not None
    assert response.usage.cached_tokens == 12
    counted = count_prompt_tokens(openai_server.last_request)
    assert response.usage.prompt_tokens > counted
    assert response.usage.prompt_tokens == -(-counted * 12 // 10)


async def test_tool_call_round_trip(openai_server: OpenAIServer) -> None:
    client = client_for(openai_server)
    openai_server.push(
        tool_call("get_weather", {"city": "Paris"}, id="call_1"), reply("Sunny in Paris.")
    )
    question = Message.user("Weather in Paris?")

    first = await client.complete(make_request(question, tools=(WEATHER,)))

    assert first.finish_reason == "tool_calls"
    (call,) = first.message.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "call_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert openai_server.last_request["tools"] == [WEATHER.to_openai()]

    result = Message.tool("call_1", "sunny, 24°C", name="get_weather")
    second = await client.complete(make_request(question, first.message, result, tools=(WEATHER,)))

    assert second.message.text == "Sunny in Paris."
    sent = openai_server.last_request["messages"]
    assert sent[2]["role"] == "assistant"
    assert sent[2]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": call.arguments},
        }
    ]
    assert sent[3] == {
        "role": "tool",
        "content": "sunny, 24°C",
        "tool_call_id": "call_1",
        "name": "get_weather",
    }


# --------------------------------------------------------------------------- streaming
async def test_stream_text_then_final_response(openai_server: OpenAIServer) -> None:
    openai_server.push(reply("Streaming works, piece by piece."))

    chunks = await collect(client_for(openai_server), make_request(Message.user("stream please")))

    *pieces, last = chunks
    assert len(pieces) > 2
    assert all(c.response is None for c in pieces)
    assert "".join(c.text for c in pieces) == "Streaming works, piece by piece."
    assert last.response is not None
    assert last.response.message.text == "Streaming works, piece by piece."
    assert last.response.finish_reason == "stop"
    assert last.usage is not None and last.usage == last.response.usage
    sent = openai_server.last_request
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert last.usage.prompt_tokens == count_prompt_tokens(sent)


async def test_stream_can_be_left_early(openai_server: OpenAIServer) -> None:
    openai_server.push(reply("One two three four five six seven eight nine ten."), reply("Next."))
    client = client_for(openai_server)

    stream = client.stream(make_request(Message.user("count")))
    first = await anext(stream)
    await stream.aclose()

    assert first.text
    assert (await client.complete(make_request(Message.user("again")))).message.text == "Next."


async def test_stream_tool_calls_arrive_complete(openai_server: OpenAIServer) -> None:
    openai_server.push(
        Reply(
            text="Checking both.",
            tool_calls=(
                ToolCallSpec(name="get_weather", arguments={"city": "Paris"}, id="call_a"),
                ToolCallSpec(name="get_weather", arguments={"city": "Oslo"}, id="call_b"),
            ),
        )
    )

    chunks = await collect(
        client_for(openai_server), make_request(Message.user("Paris and Oslo?"), tools=(WEATHER,))
    )

    calls = [c.tool_call for c in chunks if c.tool_call is not None]
    assert calls == [
        ToolCall(id="call_a", name="get_weather", arguments='{"city": "Paris"}'),
        ToolCall(id="call_b", name="get_weather", arguments='{"city": "Oslo"}'),
    ]
    final = chunks[-1].response
    assert final is not None
    assert final.finish_reason == "tool_calls"
    assert final.message.tool_calls == tuple(calls)
    assert final.message.text == "Checking both."


async def test_stream_assembles_reasoning(openai_server: OpenAIServer) -> None:
    openai_server.thinking = True
    openai_server.push(Reply(text="Hi!", reasoning="The user greets me; greet back briefly."))

    chunks = await collect(client_for(openai_server), make_request(Message.user("hello")))

    assert "".join(c.reasoning for c in chunks) == "The user greets me; greet back briefly."
    final = chunks[-1].response
    assert final is not None
    assert final.message.reasoning_content == "The user greets me; greet back briefly."
    assert final.message.text == "Hi!"


# ----------------------------------------------------------- reasoning_content round trip
async def test_reasoning_content_is_passed_back_to_a_thinking_model(
    openai_server: OpenAIServer,
) -> None:
    openai_server.thinking = True
    openai_server.push(
        Reply(text="Hello!", reasoning="A greeting; answer in kind."), reply("Fine, thanks.")
    )
    client = client_for(openai_server)
    first_question = Message.user("hello")

    first = await client.complete(make_request(first_question))
    assert first.message.reasoning_content == "A greeting; answer in kind."

    second = await client.complete(
        make_request(first_question, first.message, Message.user("how are you?"))
    )

    assert second.message.text == "Fine, thanks."
    assistant = openai_server.last_request["messages"][2]
    assert assistant == {
        "role": "assistant",
        "content": "Hello!",
        "reasoning_content": "A greeting; answer in kind.",
    }


async def test_thinking_server_rejects_a_turn_without_reasoning(
    openai_server: OpenAIServer,
) -> None:
    """The check above is real: drop reasoning_content and the server answers DeepSeek's 400."""
    openai_server.thinking = True
    history = (Message.user("hello"), Message.assistant("Hello!"), Message.user("how are you?"))

    with pytest.raises(ProviderBadRequest) as caught:
        await client_for(openai_server).complete(make_request(*history))

    assert caught.value.status == 400
    assert "reasoning_content" in str(caught.value)
    assert "reasoning_content" not in openai_server.last_request["messages"][1]


SIGNED = (
    {
        "type": "thinking",
        "thinking": "The user wants the weather; call the tool.",
        "signature": "sig-1",
    },
    {"type": "redacted_thinking", "data": "opaque=="},
)


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_signed_thinking_blocks_round_trip(
    openai_server: OpenAIServer, streaming: bool
) -> None:
    """Anthropic-style signed thinking (through a compatible proxy) is kept and sent back whole."""
    openai_server.push(Reply(text="Checking.", thinking_blocks=SIGNED), reply("Done."))
    client, question = client_for(openai_server), Message.user("weather?")

    if streaming:
        final = (await collect(client, make_request(question)))[-1].response
        assert final is not None
        answer = final.message
    else:
        answer = (await client.complete(make_request(question))).message
    assert answer.extra == {"thinking_blocks": [dict(b) for b in SIGNED]}

    await client.complete(make_request(question, answer, Message.user("and tomorrow?")))
    assert openai_server.last_request["messages"][2]["thinking_blocks"] == [dict(b) for b in SIGNED]


# ------------------------------------------------------------------------------ errors
async def test_context_length_exceeded_is_an_overflow(openai_server: OpenAIServer) -> None:
    openai_server.push(context_length_exceeded())

    with pytest.raises(ContextOverflowError) as caught:
        await client_for(openai_server).complete(make_request(Message.user("a long story")))

    error_ = caught.value
    assert error_.status == 400
    assert error_.provider == "openai"
    assert "maximum context length is 128000 tokens" in str(error_)
    assert "compact" in str(error_)  # says what to do next
    assert len(openai_server.requests) == 1  # no hidden retries


async def test_context_length_exceeded_while_streaming(openai_server: OpenAIServer) -> None:
    openai_server.push(context_length_exceeded())

    with pytest.raises(ContextOverflowError):
        await collect(client_for(openai_server), make_request(Message.user("a long story")))


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (Reply(text="", finish_reason="length", completion_tokens=0), ContextOverflowError),
        (Reply(text="Par", finish_reason="model_context_window_exceeded"), ContextOverflowError),
        (Reply(text="A long answer cut sh", finish_reason="length"), None),
    ],
    ids=["length-with-no-output", "anthropic-stop-reason", "ordinary-max-tokens"],
)
@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_overflow_reported_as_a_finish_reason(
    openai_server: OpenAIServer,
    behaviour: Reply,
    expected: type[ProviderError] | None,
    streaming: bool,
) -> None:
    openai_server.push(behaviour)
    client, request = client_for(openai_server), make_request(Message.user("go on"))

    if expected is None:
        response = (
            (await collect(client, request))[-1].response
            if streaming
            else await client.complete(request)
        )
        assert response is not None and response.finish_reason == "length"
        return
    with pytest.raises(expected) as caught:
        await (collect(client, request) if streaming else client.complete(request))
    assert caught.value.status == 200


async def test_rejected_key_is_an_auth_error(openai_server: OpenAIServer) -> None:
    openai_server.push(error(401, INVALID_API_KEY))

    with pytest.raises(ProviderAuthError) as caught:
        await client_for(openai_server).complete(make_request(Message.user("hi")))

    assert caught.value.status == 401
    assert "api_key" in str(caught.value)


async def test_server_error_is_unavailable(openai_server: OpenAIServer) -> None:
    """With retrying off, one 500 ends the call (retries: test_provider_faults.py)."""
    openai_server.push(error(500, SERVER_ERROR))

    with pytest.raises(ProviderUnavailable) as caught:
        await client_for(openai_server, max_retries=0).complete(make_request(Message.user("hi")))

    assert caught.value.status == 500
    assert len(openai_server.requests) == 1


async def test_timeout_is_unavailable(openai_server: OpenAIServer) -> None:
    openai_server.push(Reply(text="too late", delay_s=1.5))
    client = LiteLLMClient(MODEL, api_base=openai_server.base_url, api_key="test", timeout=0.3)

    with pytest.raises(ProviderUnavailable) as caught:
        await client.complete(make_request(Message.user("hi")))

    assert caught.value.status == 408
    assert "timeout" in str(caught.value)


async def test_refused_connection_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = LiteLLMClient(MODEL, api_base=f"http://127.0.0.1:{port}/v1", api_key="test", timeout=2)

    with pytest.raises(ProviderUnavailable) as caught:
        await client.complete(make_request(Message.user("hi")))

    assert caught.value.status is None
    assert "api_base" in str(caught.value)


@pytest.mark.parametrize("case", TABLE["cases"], ids=[c["id"] for c in TABLE["cases"]])
async def test_real_error_bodies_through_litellm(
    openai_server: OpenAIServer, case: dict[str, Any]
) -> None:
    """Each real-shaped body, sent over HTTP and raised by litellm, maps to the right class.

    Retrying is off here: this test is about the class; the provider's exception stays
    the error's cause.
    """
    openai_server.push(error(case["status"], case["body"]))
    expected = EXPECT[case["expect"]]

    with pytest.raises(ProviderError) as caught:
        await client_for(openai_server, max_retries=0).complete(make_request(Message.user("hi")))

    assert type(caught.value) is expected, f"{case['id']}: {caught.value}"
    assert caught.value.status == case["status"]
    assert caught.value.provider == "openai"
    cause = caught.value.__cause__
    assert cause is not None and type(cause).__module__.startswith("litellm")


# -------------------------------------------------------------------- window and config
def test_context_window_known_and_unknown() -> None:
    client = LiteLLMClient(MODEL)

    assert client.context_window() == 128_000
    assert client.context_window("gpt-4o") == 128_000
    assert client.context_window("openai/no-such-model-3000") is None
    assert client.context_window("") == 128_000  # no name: the client's own model


def test_max_output_tokens_known_and_unknown() -> None:
    # The pre-send check keeps max_tokens within it (harness.presend), from litellm's map.
    client = LiteLLMClient("gpt-4o")

    assert client.max_output_tokens() == 16_384
    assert client.max_output_tokens("gpt-4o") == 16_384
    assert client.max_output_tokens("openai/no-such-model-3000") is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": ""},
        {"model": MODEL, "timeout": 0},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "stream": True},
        {"model": MODEL, "max_retries": -1},
        {"model": MODEL, "max_retries": True},
        {"model": MODEL, "max_retry_wait": 0},
        {"model": MODEL, "max_retry_wait": float("inf")},
        {"model": MODEL, "retry_base_delay": -0.1},
    ],
    ids=[
        "empty-model",
        "zero-timeout",
        "messages-setting",
        "stream-setting",
        "negative-retries",
        "bool-retries",
        "zero-retry-wait",
        "infinite-retry-wait",
        "negative-base-delay",
    ],
)
def test_misconfiguration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        LiteLLMClient(**kwargs)
