"""ResponsesClient against a real local server speaking OpenAI's Responses API, through litellm.

The client renders a `ModelRequest` as Responses input items, ``litellm.aresponses`` sends
them over HTTP to `OpenAIServer`'s ``/v1/responses`` route, which records what arrived and
answers with output items and usage as OpenAI does. So these tests pin what a Responses
provider sees (instructions, items, function tools, ``max_output_tokens``) and how its
answers — text, tool calls, reasoning, usage, compaction items, errors — come back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.errors import ContextOverflowError, ProviderBadRequest, ProviderUnavailable
from harness.messages import Message, ToolSchema
from harness.request import ModelRequest, SystemPart
from harness.types import CompactsNatively, ModelClient
from providers.responses_client import RESPONSES_ITEM, ResponsesClient

from .openai_server import (
    SERVER_ERROR,
    OpenAIServer,
    Reply,
    context_length_exceeded,
    count_responses_tokens,
    error,
    reply,
    tool_call,
    unknown_parameter,
)

pytestmark = pytest.mark.integration

MODEL = "openai/gpt-4o"
WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def client_for(server: OpenAIServer, **settings: Any) -> ResponsesClient:
    return ResponsesClient(MODEL, api_base=server.base_url, api_key="test", timeout=5, **settings)


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


async def test_text_answer_comes_back_with_usage(openai_server: OpenAIServer) -> None:
    openai_server.push(reply("Hello there.", cached_tokens=0, reasoning_tokens=3))
    client = client_for(openai_server, max_tokens=64)
    assert isinstance(client, ModelClient) and isinstance(client, CompactsNatively)
    assert repr(client).startswith("ResponsesClient(")

    response = await client.complete(make_request(Message.user("hi")))

    assert openai_server.paths == ["/v1/responses"]
    sent = openai_server.last_request
    assert sent["model"] == "gpt-4o"
    assert sent["instructions"] == "You are terse."
    assert sent["input"] == [{"role": "user", "content": "hi"}]
    assert sent["store"] is False
    assert sent["max_output_tokens"] == 64
    assert "messages" not in sent and "max_tokens" not in sent and "tools" not in sent
    assert response.message.role == "assistant"
    assert response.message.text == "Hello there."
    assert response.finish_reason == "stop"
    assert response.model == "test-model"
    assert response.provider_edits == ()
    usage = response.usage
    assert usage is not None
    assert usage.prompt_tokens == count_responses_tokens(sent) == openai_server.input_tokens[-1]
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.reasoning_tokens == 3
    assert usage.cache_reported and usage.cached_tokens == 0


async def test_reasoning_effort_is_sent_the_responses_way(openai_server: OpenAIServer) -> None:
    client = ResponsesClient(
        "openai/o4-mini", api_base=openai_server.base_url, api_key="test", reasoning_effort="low"
    )
    await client.complete(ModelRequest(model="openai/o4-mini", history=(Message.user("hi"),)))

    sent = openai_server.last_request
    assert sent["reasoning"] == {"effort": "low"}
    assert "reasoning_effort" not in sent


async def test_reasoning_summary_and_cached_tokens(openai_server: OpenAIServer) -> None:
    openai_server.push(Reply(text="42", reasoning="Add them up.", cached_tokens=1024))

    response = await client_for(openai_server).complete(make_request(Message.user("6 x 7?")))

    assert response.message.text == "42"
    assert response.message.reasoning_content == "Add them up."
    assert response.usage is not None and response.usage.cached_tokens == 1024


async def test_tool_calls_round_trip_as_function_items(openai_server: OpenAIServer) -> None:
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
    assert openai_server.last_request["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": WEATHER.parameters,
        }
    ]

    result = Message.tool("call_1", "sunny, 24°C", name="get_weather")
    answer = Message.assistant("Let me look.", tool_calls=first.message.tool_calls)
    second = await client.complete(make_request(question, answer, result, tools=(WEATHER,)))

    assert second.message.text == "Sunny in Paris."
    assert second.finish_reason == "stop"
    assert openai_server.last_request["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 24°C"},
    ]
    assert second.usage is not None
    assert second.usage.prompt_tokens == count_responses_tokens(openai_server.last_request)


async def test_a_compaction_item_comes_back_as_a_provider_edit(
    openai_server: OpenAIServer,
) -> None:
    ask = {"context_management": [{"type": "compaction", "compact_threshold": 1_000}]}
    long = Message.user("tell me about the repository layout " * 200)

    response = await client_for(openai_server).complete(make_request(long, settings=ask))

    assert openai_server.last_request["context_management"] == ask["context_management"]
    (edit,) = response.provider_edits
    assert edit["type"] == "compaction"
    assert edit["id"] in openai_server.compacted
    assert edit["encrypted_content"].startswith("gAAAA")
    assert response.message.text == "ok"

    # sent back in place of what it stands for, it costs a fraction of it
    stand_in = Message.user("[compacted]", extra={RESPONSES_ITEM: edit})
    again = await client_for(openai_server).complete(make_request(stand_in, Message.user("next")))

    assert openai_server.last_request["input"][0] == edit
    assert again.usage is not None and response.usage is not None
    assert again.usage.prompt_tokens < response.usage.prompt_tokens / 5


async def test_below_the_threshold_nothing_is_compacted(openai_server: OpenAIServer) -> None:
    ask = {"context_management": [{"type": "compaction", "compact_threshold": 1_000}]}

    response = await client_for(openai_server).complete(
        make_request(Message.user("hi"), settings=ask)
    )

    assert response.provider_edits == ()
    assert openai_server.compacted == {}


async def test_an_item_the_server_did_not_make_is_refused(openai_server: OpenAIServer) -> None:
    forged = {"type": "compaction", "id": "cmp_x", "encrypted_content": "gAAAAforged"}
    stand_in = Message.user("[compacted]", extra={RESPONSES_ITEM: forged})

    with pytest.raises(ProviderBadRequest) as caught:
        await client_for(openai_server).complete(make_request(stand_in, Message.user("next")))

    assert caught.value.status == 400
    assert "encrypted content" in str(caught.value)


async def test_an_unknown_option_is_a_bad_request(openai_server: OpenAIServer) -> None:
    openai_server.compaction = False
    ask = {"context_management": [{"type": "compaction", "compact_threshold": 1_000}]}

    with pytest.raises(ProviderBadRequest) as caught:
        await client_for(openai_server).complete(make_request(Message.user("hi"), settings=ask))

    assert caught.value.status == 400
    assert "context_management" in str(caught.value)
    assert openai_server.input_tokens == []  # refused before answering


async def test_context_length_exceeded_is_an_overflow(openai_server: OpenAIServer) -> None:
    openai_server.push(context_length_exceeded())

    with pytest.raises(ContextOverflowError) as caught:
        await client_for(openai_server).complete(make_request(Message.user("a long story")))

    assert caught.value.status == 400
    assert len(openai_server.requests) == 1


async def test_the_window_is_enforced_on_responses_too(openai_server: OpenAIServer) -> None:
    openai_server.window = 200

    with pytest.raises(ContextOverflowError):
        await client_for(openai_server).complete(make_request(Message.user("word " * 400)))

    assert openai_server.over_window and openai_server.over_window[0] > 200


async def test_server_errors_are_retried_then_unavailable(openai_server: OpenAIServer) -> None:
    openai_server.push(error(500, SERVER_ERROR), reply("second time lucky"))

    response = await client_for(openai_server).complete(make_request(Message.user("hi")))

    assert response.message.text == "second time lucky"
    assert [r.status for r in response.retries] == [500]

    openai_server.push(error(500, SERVER_ERROR))
    with pytest.raises(ProviderUnavailable) as caught:
        await client_for(openai_server, max_retries=0).complete(make_request(Message.user("hi")))
    assert caught.value.status == 500


async def test_output_cut_at_max_output_tokens_is_length(openai_server: OpenAIServer) -> None:
    openai_server.push(Reply(text="A long answer cut sh", finish_reason="length"))

    response = await client_for(openai_server).complete(make_request(Message.user("go on")))

    assert response.finish_reason == "length"
    assert response.message.text == "A long answer cut sh"


async def test_stream_yields_the_text_then_the_response(openai_server: OpenAIServer) -> None:
    openai_server.push(reply("Streamed whole."))

    chunks = [c async for c in client_for(openai_server).stream(make_request(Message.user("hi")))]

    assert [c.text for c in chunks if c.text] == ["Streamed whole."]
    final = chunks[-1].response
    assert final is not None and final.message.text == "Streamed whole."
    assert "stream" not in openai_server.last_request


def test_only_openai_and_azure_compact_natively() -> None:
    client = ResponsesClient(MODEL, api_key="test")
    assert client.native_compaction()
    assert client.native_compaction("azure/gpt-4o")
    assert not client.native_compaction("anthropic/claude-sonnet-4-5")


def test_the_refusal_body_names_the_option() -> None:
    assert "'context_management'" in unknown_parameter("context_management")["error"]["message"]
