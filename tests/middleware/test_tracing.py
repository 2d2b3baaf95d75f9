"""Tracing with the OpenTelemetry SDK's in-memory exporter: the span tree and its attributes."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import ProxyTracerProvider, StatusCode
from opentelemetry.util._once import Once

from harness import (
    ContextBlock,
    ContextBudgetExceeded,
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    ModelResponse,
    RuntimeContext,
)
from harness.accounting import estimate_request
from harness.agent import WatchesCalls
from harness.chain import LAYER_WATCHER
from harness.errors import ConfigurationError
from harness.types import Handler
from middleware.budget_fit import BudgetFit
from middleware.compaction import Compaction
from middleware.context_sources import ContextRequest, ContextSources, context_source
from middleware.task_state import TaskState
from middleware.tracing import Tracing
from middleware.workspace_materials import WorkspaceMaterials, instruction
from providers import ScriptedModel


def tracer() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def build_status(request: ContextRequest) -> list[ContextBlock]:
    return [ContextBlock.runtime("latest", "green")]


def traced_agent(
    provider: TracerProvider | None,
    replies: Sequence[str | Message] = ("ok",),
    *,
    limit: int | None = None,
    manifests: list[ContextManifest] | None = None,
) -> tuple[HarnessAgent, ScriptedModel]:
    # The provider counts 1.5× what we estimate, so its usage is told apart from our estimate.
    model = ScriptedModel(list(replies), model="gpt-4o", usage_factor=1.5)

    def noop() -> str:
        """Do nothing."""
        return "done"

    agent = HarnessAgent(
        model=model,
        system_prompt="You help.",
        tools=[noop],
        stack=[
            Tracing(tracer_provider=provider),
            WorkspaceMaterials(instructions=[instruction("a", "Rule A.")]),
            ContextSources(sources=[context_source("build", build_status)]),
            TaskState(task_list=True),
            BudgetFit(),
        ],
        settings={"temperature": 0.2, "max_tokens": 500},
        policy=ContextPolicy(
            max_input_tokens=limit, observer=manifests.append if manifests is not None else None
        ),
    )
    return agent, model


LAYERS = ["WorkspaceMaterials", "ContextSources", "TaskState", "BudgetFit"]


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


async def test_one_request_span_per_model_request_with_a_nested_span_per_middleware() -> None:
    provider, exporter = tracer()
    agent, model = traced_agent(provider, [ScriptedModel.tool_call("noop"), "done"])
    await agent.call("x")
    spans = exporter.get_finished_spans()
    requests = [s for s in spans if s.name == "chat gpt-4o"]
    assert len(requests) == len(model.agent_requests) == 2
    (call_span,) = [s for s in spans if s.name == "invoke_agent agent"]
    for request_span in requests:
        assert request_span.parent is not None and call_span.context is not None
        assert request_span.parent.span_id == call_span.context.span_id
        chain = [request_span]
        for name in LAYERS:  # each layer's span is the child of the layer around it
            (child,) = children(spans, chain[-1])
            assert child.name == name
            assert child.attributes is not None
            assert child.attributes["context_harness.middleware"] == name
            chain.append(child)
        assert children(spans, chain[-1]) == []
        assert len({s.context.trace_id for s in chain if s.context is not None}) == 1
    assert len(spans) == 2 * (1 + len(LAYERS)) + 2  # and invoke_agent, execute_tool


async def test_the_request_span_carries_genai_and_harness_attributes() -> None:
    provider, exporter = tracer()
    manifests: list[ContextManifest] = []
    agent, model = traced_agent(provider, manifests=manifests)
    await agent.call("x")
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "chat gpt-4o"]
    attributes = dict(span.attributes or {})
    (manifest,) = manifests
    (request,) = model.agent_requests
    usage = model.estimator.count("ok")
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "gpt-4o"
    assert attributes["gen_ai.response.model"] == "gpt-4o"
    reported = round(estimate_request(request, model.estimator) * 1.5)
    assert attributes["gen_ai.usage.input_tokens"] == reported  # the provider's count
    assert reported != manifest.estimated_input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == usage
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["gen_ai.request.temperature"] == 0.2
    assert attributes["gen_ai.request.max_tokens"] == 500
    assert attributes["context_harness.estimated_input_tokens"] == manifest.estimated_input_tokens
    assert attributes["context_harness.input_limit"] == request.input_limit
    assert attributes["context_harness.validation"] == "passed"
    assert attributes["context_harness.transforms"] == len(manifest.transforms)
    assert attributes["context_harness.call_id"] == manifest.call_id
    assert span.status.status_code is not StatusCode.ERROR


async def test_a_failed_preparation_is_recorded_on_the_spans() -> None:
    provider, exporter = tracer()
    agent, model = traced_agent(provider, limit=10)
    with pytest.raises(ContextBudgetExceeded):
        await agent.call("x")
    assert model.requests == []
    spans = exporter.get_finished_spans()
    (request_span,) = [s for s in spans if s.name == "chat gpt-4o"]
    assert request_span.status.status_code is StatusCode.ERROR
    attributes = dict(request_span.attributes or {})
    assert attributes["context_harness.validation"] == "budget_exceeded"
    assert attributes["error.type"] == "ContextBudgetExceeded"
    assert [e.name for e in request_span.events] == ["exception"]
    (budget_span,) = [s for s in spans if s.name == "BudgetFit"]
    assert budget_span.status.status_code is StatusCode.ERROR
    assert [e.name for e in budget_span.events] == ["exception"]


class SeesLayerSpans:
    """Records whether per-layer spans were switched on when it ran."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        self.seen.append(LAYER_WATCHER.get() is not None)
        return await call_next(request)


async def test_without_an_sdk_tracing_is_a_no_op_and_layers_open_no_spans() -> None:
    probe = SeesLayerSpans()
    model = ScriptedModel(["ok"])
    agent = HarnessAgent(model=model, stack=[Tracing(), probe, BudgetFit()])
    assert (await agent.call("x")).text == "ok"
    assert probe.seen == [False]


@pytest.mark.parametrize("given", [None, "proxy"])
async def test_a_global_provider_set_after_silent_requests_is_honoured(
    given: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The global provider can be set once per process: let this test set it, then undo that.
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    tracing = Tracing(tracer_provider=ProxyTracerProvider() if given else None)
    probe = SeesLayerSpans()
    agent = HarnessAgent(model=ScriptedModel(["ok", "ok"]), stack=[tracing, probe])
    await agent.call("x")  # no SDK yet: nothing records, the layers run bare
    provider, exporter = tracer()
    trace.set_tracer_provider(provider)
    await agent.call("y")
    assert probe.seen == [False, True]
    assert [s.name for s in exporter.get_finished_spans()] == [
        "SeesLayerSpans",
        "chat scripted",
        "invoke_agent agent",
    ]


async def test_a_no_op_provider_traces_nothing_even_under_a_recording_global() -> None:
    provider, exporter = tracer()
    probe = SeesLayerSpans()
    agent = HarnessAgent(
        model=ScriptedModel(["ok"]),
        stack=[Tracing(tracer_provider=trace.NoOpTracerProvider()), probe],
    )
    with provider.get_tracer("outer").start_as_current_span("outer"):
        await agent.call("x")
    assert probe.seen == [False]
    assert [s.name for s in exporter.get_finished_spans()] == ["outer"]


async def test_an_unsampled_request_opens_no_layer_spans() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    probe = SeesLayerSpans()
    agent = HarnessAgent(
        model=ScriptedModel(["ok"]), stack=[Tracing(tracer_provider=provider), probe]
    )
    await agent.call("x")
    assert probe.seen == [False]
    assert exporter.get_finished_spans() == ()


async def test_layer_spans_are_only_on_inside_a_traced_request() -> None:
    provider, exporter = tracer()
    probe = SeesLayerSpans()
    agent = HarnessAgent(
        model=ScriptedModel(["ok"]), stack=[Tracing(tracer_provider=provider), probe]
    )
    await agent.call("x")
    assert probe.seen == [True]
    assert LAYER_WATCHER.get() is None  # reset once the request is done
    untraced = SeesLayerSpans()
    await HarnessAgent(model=ScriptedModel(["ok"]), stack=[untraced]).call("x")
    assert untraced.seen == [False]
    assert [s.name for s in exporter.get_finished_spans()] == [
        "SeesLayerSpans",
        "chat scripted",
        "invoke_agent agent",
    ]


def test_a_bad_tracer_provider_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="TracerProvider"):
        Tracing(tracer_provider="jaeger")  # type: ignore[arg-type]


# ---------------------------------------------------------------- one trace per call
def by_name(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(spans: Sequence[ReadableSpan], span: ReadableSpan) -> ReadableSpan | None:
    if span.parent is None:
        return None
    (parent,) = [
        s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id
    ]
    return parent


@pytest.mark.parametrize("streaming", [False, True], ids=["call", "stream_events"])
async def test_one_agent_call_is_one_trace_with_its_requests_and_tools(streaming: bool) -> None:
    provider, exporter = tracer()
    agent, _ = traced_agent(provider, [ScriptedModel.tool_call("noop", id="c1"), "done"])
    if streaming:
        async with aclosing(agent.stream_events("x", RuntimeContext(session_id="s9"))) as events:
            async for _ in events:
                pass
    else:
        await agent.call("x", RuntimeContext(session_id="s9"))
    spans = exporter.get_finished_spans()
    (call_span,) = by_name(spans, "invoke_agent agent")
    assert call_span.parent is None
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1
    attributes = dict(call_span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.id"] == "agent"
    assert attributes["gen_ai.conversation.id"] == "s9"
    assert attributes["gen_ai.provider.name"] == "scripted"
    (tool_span,) = by_name(spans, "execute_tool noop")
    requests = by_name(spans, "chat gpt-4o")
    assert len(requests) == 2
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
        per_request = [dict(r.attributes or {})[key] for r in requests]
        assert attributes[key] == sum(t for t in per_request if isinstance(t, int)) > 0
    for child in [*requests, tool_span]:
        assert parent_of(spans, child) is call_span
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "noop",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    assert tool_span.status.status_code is not StatusCode.ERROR
    # In time: the first request, then the tool, then the second request.
    assert requests[0].end_time is not None and tool_span.end_time is not None
    assert requests[0].end_time <= (tool_span.start_time or 0)
    assert tool_span.end_time <= (requests[1].start_time or 0)
    assert dict(requests[0].attributes or {})["gen_ai.provider.name"] == "scripted"


async def test_a_tool_error_and_a_failed_call_are_marked_on_their_spans() -> None:
    provider, exporter = tracer()
    model = ScriptedModel([ScriptedModel.tool_call("missing_tool"), RuntimeError("model broke")])
    agent = HarnessAgent(model=model, stack=[Tracing(tracer_provider=provider)])
    with pytest.raises(RuntimeError, match="model broke"):
        await agent.call("x")
    spans = exporter.get_finished_spans()
    (tool_span,) = by_name(spans, "execute_tool missing_tool")
    assert tool_span.status.status_code is StatusCode.ERROR
    assert dict(tool_span.attributes or {})["error.type"] == "tool_error"
    (call_span,) = by_name(spans, "invoke_agent agent")
    assert call_span.status.status_code is StatusCode.ERROR
    assert dict(call_span.attributes or {})["error.type"] == "RuntimeError"


async def test_summary_requests_are_child_spans_of_the_compaction_layer() -> None:
    provider, exporter = tracer()
    calls = [ScriptedModel.tool_call("noop") for _ in range(6)]
    model = ScriptedModel([*calls, "done"])

    def noop() -> str:
        """Do nothing."""
        return "done"

    agent = HarnessAgent(
        model=model,
        tools=[noop],
        stack=[
            Tracing(tracer_provider=provider),
            Compaction(trigger_messages=8, keep_tokens=0, keep_messages=2, memory=None),
        ],
    )
    await agent.call("x")
    spans = exporter.get_finished_spans()
    summaries = [r for r in model.requests if r.ids.purpose == "summary"]
    assert summaries
    summary_spans = [
        s for s in spans if dict(s.attributes or {}).get("context_harness.purpose") == "summary"
    ]
    assert len(summary_spans) == len(summaries)
    (call_span,) = by_name(spans, "invoke_agent agent")
    for span in summary_spans:
        assert span.name == "chat scripted" and span.kind.name == "CLIENT"
        layer = parent_of(spans, span)
        assert layer is not None and layer.name == "Compaction"
        request_span = parent_of(spans, layer)
        assert request_span is not None and parent_of(spans, request_span) is call_span
        attributes = dict(span.attributes or {})
        tokens = attributes["gen_ai.usage.input_tokens"]
        assert isinstance(tokens, int) and tokens > 0
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1


async def test_transforms_and_omissions_are_span_events() -> None:
    provider, exporter = tracer()
    manifests: list[ContextManifest] = []

    async def big_reference(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.reference("manual", "reference text " * 2_000)]

    agent = HarnessAgent(
        model=ScriptedModel(["ok"]),
        stack=[
            Tracing(tracer_provider=provider),
            ContextSources(sources=[context_source("docs", big_reference)]),
            BudgetFit(),
        ],
        policy=ContextPolicy(max_input_tokens=2_000, observer=manifests.append),
    )
    await agent.call("x")
    (manifest,) = manifests
    assert any(t.startswith("omitted_for_budget:") for t in manifest.transforms)
    (span,) = by_name(exporter.get_finished_spans(), "chat scripted")
    recorded = [
        (
            e.name,
            dict(e.attributes or {})["context_harness.transform.kind"],
            dict(e.attributes or {})["context_harness.transform.target"],
        )
        for e in span.events
    ]
    expected = []
    for transform in manifest.transforms:
        name = "context_harness.omission" if transform.omitted else "context_harness.transform"
        expected.append((name, transform.kind, transform.target))
    assert recorded == expected
    assert ("context_harness.omission", "omitted_for_budget") in {(n, k) for n, k, _ in recorded}


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_streamed_call_is_one_trace_on_trio(anyio_backend: str) -> None:
    provider, exporter = tracer()
    agent, _ = traced_agent(provider, [ScriptedModel.tool_call("noop"), "done"])
    async with aclosing(agent.stream_events("x")) as events:
        async for _ in events:
            pass
    spans = exporter.get_finished_spans()
    (call_span,) = by_name(spans, "invoke_agent agent")
    assert [parent_of(spans, s) for s in by_name(spans, "chat gpt-4o")] == [call_span] * 2


def test_tracing_watches_whole_calls() -> None:
    watcher: WatchesCalls = Tracing()  # mypy checks the protocol; isinstance the runtime
    assert isinstance(watcher, WatchesCalls)
