"""Tracing with the OpenTelemetry SDK's in-memory exporter: the span tree and its attributes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

from harness import (
    ContextBlock,
    ContextBudgetExceeded,
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    ModelResponse,
)
from harness.accounting import estimate_request
from harness.chain import LAYER_WATCHER
from harness.errors import ConfigurationError
from harness.types import Handler
from middleware.budget_fit import BudgetFit
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
    for request_span in requests:
        assert request_span.parent is None
        chain = [request_span]
        for name in LAYERS:  # each layer's span is the child of the layer around it
            (child,) = children(spans, chain[-1])
            assert child.name == name
            assert child.attributes is not None
            assert child.attributes["context_harness.middleware"] == name
            chain.append(child)
        assert children(spans, chain[-1]) == []
        assert len({s.context.trace_id for s in chain if s.context is not None}) == 1
    assert len(spans) == 2 * (1 + len(LAYERS))


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
    assert [s.name for s in exporter.get_finished_spans()] == ["SeesLayerSpans", "chat scripted"]


def test_a_bad_tracer_provider_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="TracerProvider"):
        Tracing(tracer_provider="jaeger")  # type: ignore[arg-type]
