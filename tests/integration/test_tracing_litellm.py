"""Tracing a streamed agent call through litellm to the local server: one trace, named provider."""

from __future__ import annotations

from contextlib import aclosing

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness import HarnessAgent
from middleware.tracing import Tracing
from providers import LiteLLMClient

from .openai_server import OpenAIServer, reply, tool_call


def lookup(city: str) -> str:
    """Look up a city.

    Args:
        city: its name.
    """
    return f"{city} is sunny"


async def test_a_streamed_call_through_litellm_is_one_trace(openai_server: OpenAIServer) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    openai_server.push(tool_call("lookup", {"city": "Oslo"}), reply("Oslo is sunny today."))
    agent = HarnessAgent(
        model=LiteLLMClient("openai/trace-model", api_base=openai_server.base_url, api_key="t"),
        tools=[lookup],
        stack=[Tracing(tracer_provider=provider)],
    )
    async with aclosing(agent.stream_events("weather?")) as events:
        kinds = [e.kind async for e in events]
    assert "text_delta" in kinds
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_agent agent" and root.context is not None
    children = [s for s in spans if s.parent is not None]
    assert sorted(s.name for s in children) == [
        "chat openai/trace-model",
        "chat openai/trace-model",
        "execute_tool lookup",
    ]
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in children)
    chats = [s for s in children if s.name.startswith("chat ")]
    for span in [root, *chats]:
        assert dict(span.attributes or {})["gen_ai.provider.name"] == "openai"
