"""Tracing: one OpenTelemetry trace per agent call, one span per model request and layer.

Place in the stack: outermost, so its span covers the whole preparation, every retry and
the provider call, and sees every error.

The tree of one `HarnessAgent` call, in the GenAI semantic conventions' names::

    invoke_agent <agent id>                 the whole call (the agent asks for it: `watch_call`),
                                            with the usage of its requests added up
    ├── chat <model>                        one per model request of the loop
    │   └── OverflowRetry … BudgetFit …     one per middleware, nested as they run
    │       └── Compaction
    │           └── chat <summariser>       a summary request (purpose ``summary``)
    └── execute_tool <tool>                 one per tool run

Request spans carry ``gen_ai.operation.name``, ``gen_ai.provider.name`` (when the client
names its provider: `harness.types.NamesProvider`, else the model's ``provider/`` prefix),
``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons``, ``gen_ai.conversation.id``,
``gen_ai.agent.id`` and the request settings, plus our ``context_harness.*`` attributes from
the manifest (estimated input tokens, input limit, validation, counting method, purpose).
Each transform of the manifest is a span event — ``context_harness.omission`` for material
left out (``omitted_for_budget:<id>`` …), ``context_harness.transform`` for the rest — with
its kind and target; a compaction of the round adds ``context_harness.compaction_started``
and ``context_harness.compaction_finished`` (reason, messages and tokens before and after,
what was summarised, trimmed and truncated, the summary's id: `ModelResponse.compactions`),
and the reported cached tokens and cost are ``context_harness.usage.*``. No prompt text is
recorded.

Per-middleware spans are opened by the chain itself (`harness.chain.LAYER_WATCHER`), and
summary requests by `harness.chain.send_watched` (`REQUEST_WATCHER`): this middleware sets
both only while its request span is recording, so with no SDK configured (OpenTelemetry's
default no-op provider) a request costs one look at the provider — no span, attributes or
events are built — and a layer one context-variable lookup. Errors are recorded on
the spans and set their status to ERROR; a tool's error result sets its span's status.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, cast

from opentelemetry import trace
from opentelemetry.trace import (
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
)

from harness.chain import LAYER_WATCHER, REQUEST_WATCHER
from harness.errors import ConfigurationError, ContextBuildError, validation_of
from harness.events import CompactionReport
from harness.manifest import Transform
from harness.messages import ToolCall
from harness.request import ModelRequest, ModelResponse, RequestIds
from harness.types import Handler, ModelClient, NamesProvider

INSTRUMENTATION_NAME = "context_harness"
"""The instrumentation scope name of our tracer."""

PROVIDER_NAMES = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "gemini": "gcp.gemini",
    "deepseek": "deepseek",
    "groq": "groq",
    "mistral": "mistral_ai",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "perplexity": "perplexity",
    "xai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
}
"""litellm's provider names mapped to ``gen_ai.provider.name`` values; others pass as they are."""

_NO_OP_PROVIDERS = frozenset({ProxyTracerProvider, NoOpTracerProvider})
"""Providers whose spans never record (exact types: an SDK provider subclasses neither)."""

_SETTING_ATTRIBUTES = {
    "max_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
}


class Tracing:
    """Trace each model request and each middleware layer with OpenTelemetry.

    Args:
        tracer_provider: the provider to trace with (default: the global one, which is a
            no-op until an SDK is configured).

    Raises:
        ConfigurationError: when ``tracer_provider`` has no ``get_tracer``.
    """

    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None) -> None:
        if tracer_provider is not None and not callable(
            getattr(tracer_provider, "get_tracer", None)
        ):
            raise ConfigurationError(
                f"tracer_provider must be an OpenTelemetry TracerProvider, got {tracer_provider!r}"
            )
        self.tracer_provider = tracer_provider

    def __repr__(self) -> str:
        return f"Tracing(tracer_provider={self.tracer_provider!r})"

    def _tracer(self) -> Tracer:
        # Looked up per use so that a global provider set later is honoured.
        return trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=self.tracer_provider)

    def _silent(self) -> bool:
        """Whether no span of ours can record: the provider is OpenTelemetry's no-op one.

        That is the global default (a `ProxyTracerProvider` while no SDK provider is set) or
        a `NoOpTracerProvider`; asked per request, so a provider set later is honoured.
        """
        provider = self.tracer_provider
        if provider is None or type(provider) is ProxyTracerProvider:
            provider = _global_provider()
        return type(provider) in _NO_OP_PROVIDERS

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Run the rest of the chain inside a request span (straight on when none records)."""
        provider = self.tracer_provider  # `_silent`, inline: this runs before every request
        if provider is None or type(provider) is ProxyTracerProvider:
            provider = _global_provider()
        if type(provider) in _NO_OP_PROVIDERS:
            return await call_next(request)
        return await self._traced(request, call_next)

    async def _traced(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Run the rest of the chain inside the request's span, each layer in a child span.

        Apart from `__call__`, whose silent path then makes no closure cell and a small frame.
        """
        tracer = self._tracer()
        client = request.run.client if request.run is not None else None
        with _chat_span(tracer, request) as span:
            if not span.is_recording():
                return await call_next(request)
            _set_provider(span, request.model, client)

            def open_layer(name: str) -> contextlib.AbstractContextManager[object]:
                return tracer.start_as_current_span(
                    name, attributes={"context_harness.middleware": name}
                )

            async def send_summary(summary: ModelRequest, summariser: ModelClient) -> ModelResponse:
                return await _traced_request(tracer, summary, summariser)

            layers = LAYER_WATCHER.set(open_layer)
            requests = REQUEST_WATCHER.set(send_summary)
            try:
                response = await call_next(request)
            except BaseException as exc:
                _record_failure(span, exc)
                raise
            finally:
                REQUEST_WATCHER.reset(requests)
                LAYER_WATCHER.reset(layers)
            _record_response(span, response)
            return response

    def watch_call(self, ids: RequestIds, client: ModelClient) -> _CallSpan:
        """Open the ``invoke_agent`` span of one agent call (`harness.agent.WatchesCalls`)."""
        tracer = self._tracer()
        if self._silent():  # no span can record: no attributes, a span that does nothing
            return _CallSpan(tracer, trace.INVALID_SPAN)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": ids.agent_id,
            "gen_ai.agent.name": ids.agent_id,
            "gen_ai.request.model": client.model,
            "context_harness.run_id": ids.run_id,
        }
        if ids.session_id:
            attributes["gen_ai.conversation.id"] = ids.session_id
        span = tracer.start_span(
            f"invoke_agent {ids.agent_id}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        if span.is_recording():
            _set_provider(span, client.model, client)
        return _CallSpan(tracer, span)


class _CallSpan:
    """The ``invoke_agent`` span of one agent call, made current around each of its steps."""

    __slots__ = ("input_tokens", "output_tokens", "span", "tracer")

    def __init__(self, tracer: Tracer, span: Span) -> None:
        self.tracer = tracer
        self.span = span
        self.input_tokens = 0
        self.output_tokens = 0

    def active(self) -> contextlib.AbstractContextManager[object]:
        """Return a context in which the call's span is the current span."""
        if not self.span.is_recording():
            return contextlib.nullcontext()
        return trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    @contextlib.contextmanager
    def tool(self, call: ToolCall) -> Iterator[_ToolSpan]:
        """Run one tool inside an ``execute_tool`` span."""
        if not self.span.is_recording():
            yield _ToolSpan(None)
            return
        with self.tracer.start_as_current_span(
            f"execute_tool {call.name}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "gen_ai.tool.type": "function",
            },
        ) as span:
            yield _ToolSpan(span)

    def answered(self, response: ModelResponse) -> None:
        """Add the usage of one of the call's requests to the call's totals."""
        if response.usage is not None:
            self.input_tokens += response.usage.prompt_tokens
            self.output_tokens += response.usage.completion_tokens

    def end(self, error: BaseException | None) -> None:
        """End the span with the call's token totals, recording the error it ended with."""
        if self.span.is_recording():
            self.span.set_attribute("gen_ai.usage.input_tokens", self.input_tokens)
            self.span.set_attribute("gen_ai.usage.output_tokens", self.output_tokens)
        if error is not None:
            _record_failure(self.span, error)
        self.span.end()


class _ToolSpan:
    """The ``execute_tool`` span of one tool run (``None`` when not recording)."""

    __slots__ = ("span",)

    def __init__(self, span: Span | None) -> None:
        self.span = span

    def outcome(self, *, error: bool, denied: bool) -> None:
        """Mark an error result (or a denied call) on the span."""
        if self.span is None:
            return
        if denied:
            self.span.set_attribute("context_harness.tool.denied", True)
        if error:
            self.span.set_status(Status(StatusCode.ERROR, "the tool gave an error result"))
            self.span.set_attribute("error.type", "denied" if denied else "tool_error")


async def _traced_request(
    tracer: Tracer, request: ModelRequest, client: ModelClient
) -> ModelResponse:
    """Send a request from outside the stack (a summary) inside a ``chat`` span of its own."""
    with _chat_span(tracer, request) as span:
        _set_provider(span, request.model, client)
        try:
            response = await client.complete(request)
        except BaseException as exc:
            _record_failure(span, exc)
            raise
        _record_response(span, response)
        return response


def _chat_span(tracer: Tracer, request: ModelRequest) -> contextlib.AbstractContextManager[Span]:
    """Open the ``chat <model>`` span of a model request (the agent's or a summary's)."""
    return tracer.start_as_current_span(
        f"chat {request.model}",
        kind=SpanKind.CLIENT,
        attributes=_request_attributes(request),
        record_exception=False,
        set_status_on_exception=False,
    )


def _global_provider() -> trace.TracerProvider:
    """Return the global tracer provider (`trace.get_tracer_provider`), cheaply.

    While none is set, the public call looks up ``OTEL_PYTHON_TRACER_PROVIDER`` in
    ``os.environ`` every time (~2 µs, most of a silent request's cost). The API keeps the
    provider once set in ``trace._TRACER_PROVIDER``; the public call is made once per
    process first, so a provider named by that variable is loaded as the API would.
    """
    global _ASKED
    if not _ASKED:
        _ASKED = True
        return trace.get_tracer_provider()
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None:
        return _PROXY
    if provider is _UNKNOWN:  # an API that keeps it elsewhere: ask the public way
        return trace.get_tracer_provider()
    return cast(trace.TracerProvider, provider)


_ASKED = False
"""Whether `_global_provider` asked the public API once (it loads an environment provider)."""
_UNKNOWN = object()
_PROXY = ProxyTracerProvider()


def _set_provider(span: Span, model: str, client: object) -> None:
    name = client.provider_name(model) if isinstance(client, NamesProvider) else None
    if name is None and "/" in model:
        name = model.split("/", 1)[0]
    if name:
        span.set_attribute("gen_ai.provider.name", PROVIDER_NAMES.get(name, name))


def _request_attributes(request: ModelRequest) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": request.model,
        "context_harness.call_id": request.ids.call_id,
        "context_harness.purpose": request.ids.purpose,
        "context_harness.input_limit": request.input_limit,
    }
    if request.ids.session_id:
        attributes["gen_ai.conversation.id"] = request.ids.session_id
    if request.ids.agent_id:
        attributes["gen_ai.agent.id"] = request.ids.agent_id
    for key, name in _SETTING_ATTRIBUTES.items():
        value = (request.settings or {}).get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[name] = value
    return attributes


def _record_response(span: Span, response: ModelResponse) -> None:
    if response.model:
        span.set_attribute("gen_ai.response.model", response.model)
    if response.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", (response.finish_reason,))
    if response.usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", response.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", response.usage.completion_tokens)
        span.set_attribute("context_harness.usage.cached_tokens", response.usage.cached_tokens)
        if response.usage.cost_usd is not None:
            span.set_attribute("context_harness.usage.cost_usd", response.usage.cost_usd)
    for report in response.compactions:
        _add_compaction_events(span, report)
    manifest = response.manifest
    if manifest is not None:
        span.set_attribute(
            "context_harness.estimated_input_tokens", manifest.estimated_input_tokens
        )
        span.set_attribute("context_harness.input_limit", manifest.input_limit)
        span.set_attribute("context_harness.validation", manifest.validation)
        span.set_attribute("context_harness.transforms", len(manifest.transforms))
        span.set_attribute("context_harness.counting_method", manifest.counting_method)
        _add_transform_events(span, manifest.transforms)


def _add_compaction_events(span: Span, report: CompactionReport) -> None:
    """Add the ``compaction_started`` and ``compaction_finished`` events of one compaction."""
    started: dict[str, Any] = {
        "context_harness.compaction.reason": report.reason,
        "context_harness.compaction.messages_before": report.messages_before,
        "context_harness.compaction.tokens_before": report.tokens_before,
    }
    span.add_event("context_harness.compaction_started", started)
    finished = {
        **started,
        "context_harness.compaction.messages_after": report.messages_after,
        "context_harness.compaction.tokens_after": report.tokens_after,
        "context_harness.compaction.summarised": report.summarised,
        "context_harness.compaction.trimmed": report.trimmed,
        "context_harness.compaction.truncated": report.truncated,
    }
    if report.summary_id is not None:
        finished["context_harness.compaction.summary_id"] = report.summary_id
    if report.failure is not None:
        finished["context_harness.compaction.failure"] = report.failure
    span.add_event("context_harness.compaction_finished", finished)


def _add_transform_events(span: Span, transforms: Sequence[Transform]) -> None:
    """Add one event per transform: an omission (material left out) or another change."""
    for transform in transforms:
        name = "context_harness.omission" if transform.omitted else "context_harness.transform"
        span.add_event(
            name,
            {
                "context_harness.transform.kind": str(transform.kind),
                "context_harness.transform.target": transform.target,
            },
        )


def _record_failure(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.set_attribute("error.type", type(error).__name__)
    if isinstance(error, Exception):
        span.set_attribute("context_harness.validation", _validation(error))
        if isinstance(error, ContextBuildError):
            span.set_attribute("context_harness.transforms", len(error.transforms))
            _add_transform_events(span, error.transforms)


def _validation(error: Exception) -> str:
    # Only a failed preparation has a validation; a provider error happened after it passed.
    return validation_of(error) if isinstance(error, ContextBuildError) else "passed"
