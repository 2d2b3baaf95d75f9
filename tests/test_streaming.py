"""Streaming through `HarnessAgent.stream_events`, offline with the scripted model.

What a consumer sees: the manifest before the model is called, the text in pieces as the
model streams it, the round's whole text after, and — when a stream fails after some text
and the round is retried — a ``stream_discarded`` warning before the retry's pieces.
"""

from __future__ import annotations

from contextlib import aclosing

import anyio
import pytest

from harness import AgentEvent, ContextOverflowError, HarnessAgent, Message, ModelRequest
from harness.request import ModelResponse
from harness.types import StreamingClient
from middleware.compaction import Compaction
from middleware.overflow_retry import OverflowRetry
from providers import ScriptedModel
from providers.scripted import BrokenStream

ANSWER = "The answer is four, since two plus two makes four."


def deltas(events: list[AgentEvent], round_no: int | None = None) -> str:
    return "".join(
        e.text or ""
        for e in events
        if e.kind == "text_delta" and (round_no is None or e.round == round_no)
    )


async def test_text_arrives_in_pieces_that_join_to_the_rounds_text() -> None:
    agent = HarnessAgent(model=ScriptedModel([ANSWER]), stack=[])
    events = [e async for e in agent.stream_events("2+2?")]
    pieces = [e for e in events if e.kind == "text_delta"]
    assert len(pieces) == len(ANSWER.split())  # word by word
    assert deltas(events) == ANSWER
    kinds = [e.kind for e in events]
    assert kinds.index("context_build") < kinds.index("text_delta")
    assert kinds[-2:] == ["text", "final"]
    assert events[-2].text == ANSWER
    assert max(i for i, k in enumerate(kinds) if k == "text_delta") < kinds.index("text")


async def test_the_manifest_reaches_the_consumer_before_the_model_is_called() -> None:
    order: list[str] = []

    def answer(request: ModelRequest) -> str:
        order.append(f"model:{request.ids.call_id}")
        return "hello"

    agent = HarnessAgent(model=ScriptedModel([answer]), stack=[])
    async for event in agent.stream_events("hi"):
        if event.kind == "context_build" and event.manifest is not None:
            order.append(f"consumer:{event.manifest.call_id}")
    (call_id,) = {entry.split(":")[1] for entry in order}
    assert order == [f"consumer:{call_id}", f"model:{call_id}"]


async def test_call_gets_the_same_reply_without_streaming() -> None:
    agent = HarnessAgent(model=ScriptedModel([ANSWER]), stack=[])
    reply = await agent.call("2+2?")
    assert reply.text == ANSWER


async def test_a_retried_round_says_its_streamed_text_is_void() -> None:
    overflow = ContextOverflowError("input too long", provider="scripted", status=400)
    model = ScriptedModel(["one", "two", "three", BrokenStream("Half an ans", overflow), ANSWER])
    agent = HarnessAgent(
        model=model,
        stack=[
            OverflowRetry(),
            Compaction(trigger_messages=1_000, keep_tokens=0, keep_messages=2, memory=None),
        ],
    )
    for turn in ("first", "second", "third"):
        await agent.call(turn)
    events = [e async for e in agent.stream_events("fourth")]

    kinds = [e.kind for e in events]
    discarded = [e for e in events if e.code == "stream_discarded"]
    assert len(discarded) == 1 and "11 characters" in (discarded[0].text or "")
    cut = kinds.index("warning")
    assert deltas(events[:cut]) == "Half an ans"  # the broken stream's pieces came first
    assert kinds[cut + 1 :].count("context_build") >= 2  # the summary and the retried request
    assert deltas(events[cut:]) == ANSWER == events[-1].message.text  # type: ignore[union-attr]
    assert [e.text for e in events if e.kind == "text"] == [ANSWER]
    assert any(r.ids.purpose == "summary" for r in model.requests)


async def test_a_failed_stream_with_no_retry_reaches_the_caller_after_the_warning() -> None:
    overflow = ContextOverflowError("input too long", provider="scripted", status=400)
    agent = HarnessAgent(model=ScriptedModel([BrokenStream("Half", overflow)]), stack=[])
    events: list[AgentEvent] = []
    with pytest.raises(ContextOverflowError):
        async for event in agent.stream_events("hi"):
            events.append(event)
    assert [(e.kind, e.code) for e in events] == [
        ("context_build", None),
        ("text_delta", None),
        ("warning", "stream_discarded"),
    ]


class CompleteOnly:
    """A model client without ``stream``: the agent sends the whole text as one piece."""

    def __init__(self, text: str) -> None:
        self.model = "scripted"
        self.text = text

    def context_window(self, model: str | None = None) -> int | None:
        return 128_000

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(message=Message.assistant(self.text), model=self.model)


THINKING = "Two plus two: count on from two, three, four."


async def test_a_thinking_models_reasoning_streams_before_its_text() -> None:
    answer = Message.assistant(ANSWER, reasoning_content=THINKING)
    agent = HarnessAgent(model=ScriptedModel([answer]), stack=[])
    events = [e async for e in agent.stream_events("2+2?")]
    kinds = [e.kind for e in events]
    thoughts = [e.text or "" for e in events if e.kind == "reasoning_delta"]
    assert len(thoughts) > 1 and "".join(thoughts) == THINKING  # in pieces, as it comes
    assert max(i for i, k in enumerate(kinds) if k == "reasoning_delta") < kinds.index("text_delta")
    assert deltas(events) == ANSWER  # the text deltas hold no reasoning


class Unstreamed:
    """A scripted model without ``stream``: each answer comes whole."""

    def __init__(self, script: ScriptedModel) -> None:
        self.model = script.model
        self.script = script

    def context_window(self, model: str | None = None) -> int | None:
        return 128_000

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.script.complete(request)


async def test_a_client_without_stream_gives_reasoning_and_text_whole_in_their_round() -> None:
    script = ScriptedModel(
        [
            ScriptedModel.tool_call("noop", {}),
            Message.assistant(ANSWER, reasoning_content=THINKING),
        ]
    )
    agent = HarnessAgent(model=Unstreamed(script), tools=[noop], stack=[])
    events = [e async for e in agent.stream_events("go")]
    pieces = [(e.kind, e.round, e.text) for e in events if e.kind.endswith("_delta")]
    assert pieces == [("reasoning_delta", 1, THINKING), ("text_delta", 1, ANSWER)]


async def test_a_client_without_stream_gives_its_text_as_one_piece() -> None:
    agent = HarnessAgent(model=CompleteOnly(ANSWER), stack=[])
    events = [e async for e in agent.stream_events("2+2?")]
    assert [e.text for e in events if e.kind == "text_delta"] == [ANSWER]


async def test_leaving_at_the_manifest_cancels_the_request_and_keeps_the_session() -> None:
    model = ScriptedModel(["never sent", "second answer"])
    agent = HarnessAgent(model=model, stack=[])
    async for event in agent.stream_events("hi"):  # left without closing the generator
        assert event.kind == "context_build"
        break
    await anyio.sleep(0.01)  # asyncio closes the abandoned generator from another task
    assert model.requests == []  # the request waited for the consumer, who left
    reply = await agent.call("again")
    assert reply.text == "never sent"
    assert [m.text for m in model.requests[0].history] == ["hi", "again"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_closing_early_on_trio_cancels_the_request(anyio_backend: str) -> None:
    # trio itself warns about an abandoned generator: its consumers close them.
    model = ScriptedModel(["never sent", "second answer"])
    agent = HarnessAgent(model=model, stack=[])
    async with aclosing(agent.stream_events("hi")) as events:
        async for event in events:
            assert event.kind == "context_build"
            break
    assert model.requests == []  # the request waited for the consumer, who left
    reply = await agent.call("again")
    assert reply.text == "never sent"
    assert [m.text for m in model.requests[0].history] == ["hi", "again"]


async def test_a_consumer_cancelled_mid_request_cancels_the_request() -> None:
    ended: list[str] = []

    async def slow(request: ModelRequest) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            ended.append("cancelled")
        return "never"  # pragma: no cover

    agent = HarnessAgent(model=ScriptedModel([slow, "later"]), stack=[])
    seen: list[str] = []
    with anyio.move_on_after(0.2):
        async with aclosing(agent.stream_events("hi")) as events:
            async for event in events:
                seen.append(event.kind)
    assert seen == ["context_build"] and ended == ["cancelled"]
    assert (await agent.call("again")).text == "later"


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_streaming_runs_on_trio(anyio_backend: str) -> None:
    agent = HarnessAgent(
        model=ScriptedModel([ScriptedModel.tool_call("noop", {}), ANSWER]),
        tools=[noop],
        stack=[],
    )
    events = [e async for e in agent.stream_events("go")]
    assert deltas(events, 1) == ANSWER
    assert [e.kind for e in events].count("context_build") == 2


def noop() -> str:
    """Do nothing."""
    return "done"


def test_our_clients_stream_as_the_agent_reads_them() -> None:
    from providers import LiteLLMClient

    clients: list[StreamingClient] = [ScriptedModel(), LiteLLMClient("openai/x")]  # mypy checks
    assert all(isinstance(c, StreamingClient) for c in clients)
    assert not isinstance(CompleteOnly("x"), StreamingClient)
