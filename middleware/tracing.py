"""Tracing: one OpenTelemetry span per model request, one child span per middleware.

Place in the stack: outermost, so its span covers the whole preparation, every retry and
the provider call, and sees every error.

The request span is named ``chat <model>`` and carries the GenAI semantic-convention
attributes (``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
``gen_ai.response.finish_reasons`` …) plus our own ``context_harness.*`` attributes from the
manifest: the estimated input tokens, the input limit, the validation and the number of
transforms. No prompt text is recorded.

Per-middleware spans are opened by the chain itself (`harness.chain.LAYER_WATCHER`): this
middleware sets the span opener only while its request span is recording, so with no SDK
configured (OpenTelemetry's default no-op provider) the layers pay one context-variable
lookup each. Errors are recorded on the spans and set their status to ERROR.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from harness.chain import LAYER_WATCHER
from harness.errors import ConfigurationError, ContextBuildError, validation_of
from harness.request import ModelRequest, ModelResponse
from harness.types import Handler

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

INSTRUMENTATION_NAME = "context_harness"
"""The instrumentation scope name of our tracer."""

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

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Run the rest of the chain inside a request span."""
        # The tracer is looked up per request so a global provider set later is honoured.
        tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=self.tracer_provider)
        with tracer.start_as_current_span(
            f"chat {request.model}",
            kind=SpanKind.CLIENT,
            attributes=_request_attributes(request),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            if not span.is_recording():
                return await call_next(request)

            def open_layer(name: str) -> AbstractContextManager[object]:
                return tracer.start_as_current_span(
                    name, attributes={"context_harness.middleware": name}
                )

            token = LAYER_WATCHER.set(open_layer)
            try:
                response = await call_next(request)
            except BaseException as exc:
                _record_failure(span, exc)
                raise
            finally:
                LAYER_WATCHER.reset(token)
            _record_response(span, response)
            return response


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
    manifest = response.manifest
    if manifest is not None:
        span.set_attribute(
            "context_harness.estimated_input_tokens", manifest.estimated_input_tokens
        )
        span.set_attribute("context_harness.input_limit", manifest.input_limit)
        span.set_attribute("context_harness.validation", manifest.validation)
        span.set_attribute("context_harness.transforms", len(manifest.transforms))
        span.set_attribute("context_harness.counting_method", manifest.counting_method)


def _record_failure(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.set_attribute("error.type", type(error).__name__)
    if isinstance(error, Exception):
        span.set_attribute("context_harness.validation", _validation(error))
        if isinstance(error, ContextBuildError):
            span.set_attribute("context_harness.transforms", len(error.transforms))


def _validation(error: Exception) -> str:
    # Only a failed preparation has a validation; a provider error happened after it passed.
    return validation_of(error) if isinstance(error, ContextBuildError) else "passed"
