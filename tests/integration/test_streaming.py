"""Streaming through litellm to the local server: pieces reach the consumer as they are sent.

The server holds each stream in the middle of its text until the test, having received a
piece, lets it go on (`Reply.pause`); had anything buffered the answer, the pause would run
out first and the test would fail.
"""

from __future__ import annotations

import threading

import pytest

from harness import AgentEvent, ContextOverflowError, ContextPolicy, HarnessAgent, acompletion
from providers import LiteLLMClient

from .openai_server import OpenAIServer, reply

TEXT = "Streaming arrives piece by piece, long before the whole answer has been written."


def client(server: OpenAIServer) -> LiteLLMClient:
    return LiteLLMClient("openai/stream-model", api_base=server.base_url, api_key="test")


async def test_the_agent_yields_text_while_the_server_is_still_sending(
    openai_server: OpenAIServer,
) -> None:
    pause = threading.Event()
    answer = reply(TEXT, pause=pause)
    openai_server.push(answer)
    agent = HarnessAgent(model=client(openai_server), stack=[])
    events: list[AgentEvent] = []
    async for event in agent.stream_events("hello"):
        events.append(event)
        if event.kind == "text_delta":
            pause.set()  # only reachable while the server holds the rest
    assert answer.paused_out == [False]
    pieces = [e.text or "" for e in events if e.kind == "text_delta"]
    assert len(pieces) > 2 and "".join(pieces) == TEXT
    assert [e.text for e in events if e.kind == "text"] == [TEXT]
    assert openai_server.last_request["stream"] is True


async def test_a_thinking_models_reasoning_arrives_in_pieces_before_its_text(
    openai_server: OpenAIServer,
) -> None:
    thinking = "The user says hello; a short greeting back is enough here."
    openai_server.push(reply(TEXT, reasoning=thinking))
    agent = HarnessAgent(model=client(openai_server), stack=[])
    events = [e async for e in agent.stream_events("hello")]
    kinds = [e.kind for e in events]
    thoughts = [e.text or "" for e in events if e.kind == "reasoning_delta"]
    assert len(thoughts) > 1 and "".join(thoughts) == thinking
    assert max(i for i, k in enumerate(kinds) if k == "reasoning_delta") < kinds.index("text_delta")
    assert "".join(e.text or "" for e in events if e.kind == "text_delta") == TEXT
    final = next(e for e in events if e.kind == "final")
    assert final.message is not None and final.message.reasoning_content == thinking


async def test_an_overflow_reported_at_the_end_of_a_stream_voids_its_pieces(
    openai_server: OpenAIServer,
) -> None:
    # "length" with 0 output tokens: the window was full, whatever text came before.
    openai_server.push(reply("Some words first", finish_reason="length", completion_tokens=0))
    agent = HarnessAgent(model=client(openai_server), stack=[])
    events: list[AgentEvent] = []
    with pytest.raises(ContextOverflowError):
        async for event in agent.stream_events("hello"):
            events.append(event)
    kinds = [(e.kind, e.code) for e in events]
    assert kinds[0] == ("context_build", None) and kinds[-1] == ("warning", "stream_discarded")
    assert "".join(e.text or "" for e in events if e.kind == "text_delta") == "Some words first"


async def test_the_drop_in_call_hands_over_chunks_while_the_server_is_still_sending(
    openai_server: OpenAIServer,
) -> None:
    pause = threading.Event()
    answer = reply(TEXT, pause=pause)
    openai_server.push(answer)
    stream = await acompletion(
        "openai/stream-model",
        [{"role": "user", "content": "hi"}],
        stream=True,
        api_base=openai_server.base_url,
        api_key="test",
        policy=ContextPolicy(max_input_tokens=2_000),
    )
    text = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
            pause.set()
    assert answer.paused_out == [False]
    assert text == TEXT
