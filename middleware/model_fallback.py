"""ModelFallback: when the provider fails, prepare the round again for another model and send it.

A fallback model has its own window and tokenizer. Sending it the messages prepared for the
primary (what LangChain's ModelFallbackMiddleware does) overflows a smaller window, or wastes
a larger one. So this middleware, like `OverflowRetry`, only calls ``call_next`` again: the
round re-enters the whole preparation below it — sources, offload, budget fitting,
compaction, the pre-send check — with the request's model, input limit and estimator set
for the fallback. No tool is re-run (tools run in the agent loop) and the user's turn is not
re-submitted.

Where it sits: outside the size-control group (right inside Tracing, before OverflowRetry),
so an overflow is first retried on the same model. It states the concern of a retrying
layer, so a compacting middleware placed before it is refused when the stack is built.

The fallback is sent by the same client, so litellm routes it by its name (``provider/model``):
another provider's key comes from its usual environment variable. The window is the one
given (`Fallback.window`), else what the client knows or discovers for that model. Each
fallback tried is recorded as ``model_fallback:<model>`` (and ``model_fallback_failed:<model>``
for one that failed too); when all fail, the last error reaches the caller with the earlier
ones named. The middleware keeps no state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Final

import msgspec

from harness.errors import (
    ConfigurationError,
    ContextOverflowError,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from harness.manifest import Transform, TransformKind
from harness.policy import discovered_input_limit, requested_output
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler

MODEL_FALLBACK: Final = TransformKind("model_fallback")
"""A round prepared again and sent to a fallback model: ``model_fallback:<model>``."""

MODEL_FALLBACK_FAILED: Final = TransformKind("model_fallback_failed")
"""A fallback model that failed as well: ``model_fallback_failed:<model>``."""

DEFAULT_ON: Final[tuple[type[ProviderError], ...]] = (
    ProviderUnavailable,
    ProviderRateLimited,
    ContextOverflowError,
)
"""Failures that move to the next model: the provider is down or busy (after the client's
own retries), or the input still overflows after `OverflowRetry`. An authentication error or
a bad request is the caller's to fix, so it is raised, not hidden behind another model."""


class Fallback(msgspec.Struct, frozen=True):
    """A model to fall back to, and its window when the client cannot know it."""

    model: str
    """The litellm model name, e.g. ``anthropic/claude-haiku-4-5`` or ``openai/<name>``."""
    window: int | None = None
    """Its context window in tokens (``None``: the client's map or the server's metadata)."""


class ModelFallback:
    """Prepare a failed round again for each fallback model in turn, and send it.

    Args:
        *models: the fallbacks, tried in order: model names or `Fallback` values.
        on: the failures that move to the next model (default `DEFAULT_ON`).

    Raises:
        ConfigurationError: no fallback is given, a name is empty, a window is not a
            positive int, or ``on`` names something that is not a `ProviderError` class.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.RETRIES_OVERFLOW})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self, *models: str | Fallback, on: Iterable[type[ProviderError]] = DEFAULT_ON
    ) -> None:
        fallbacks = tuple(m if isinstance(m, Fallback) else Fallback(m) for m in models)
        if not fallbacks:
            raise ConfigurationError("ModelFallback needs at least one fallback model")
        for fallback in fallbacks:
            if not isinstance(fallback.model, str) or not fallback.model.strip():
                raise ConfigurationError(
                    f"a fallback model name must be a non-empty string, got {fallback.model!r}"
                )
            window = fallback.window
            if window is not None and (
                not isinstance(window, int) or isinstance(window, bool) or window <= 0
            ):
                raise ConfigurationError(
                    f"the window of fallback {fallback.model!r} must be a positive int or "
                    f"None, got {window!r}"
                )
        errors = tuple(on)
        if not errors or not all(
            isinstance(e, type) and issubclass(e, ProviderError) for e in errors
        ):
            raise ConfigurationError(
                f"on= must name ProviderError classes (e.g. ProviderUnavailable), got {errors!r}"
            )
        self.fallbacks = fallbacks
        self.on = errors

    def __repr__(self) -> str:
        names = ", ".join(repr(f.model) for f in self.fallbacks)
        return f"ModelFallback({names})"

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Send ``request``; on a failure in ``on``, send it prepared for each fallback.

        Raises:
            ProviderError: the last fallback's failure (or a failure not in ``on``), its
                message naming the models tried before.
        """
        try:
            return await call_next(request)
        except ProviderError as exc:
            if not isinstance(exc, self.on):
                raise
            last: ProviderError = exc
        tried = [f"{request.model or '(the client model)'}: {type(last).__name__}"]
        record: tuple[Transform, ...] = ()
        for fallback in self.fallbacks:
            retry = await self._prepared_for(request, fallback)
            record += (Transform(MODEL_FALLBACK, fallback.model),)
            try:
                return await call_next(retry.with_transforms(*record))
            except ProviderError as exc:
                if not isinstance(exc, self.on):
                    raise
                last = exc
                tried.append(f"{fallback.model}: {type(exc).__name__}")
                record += (Transform(MODEL_FALLBACK_FAILED, fallback.model),)
        raise _all_failed(last, tried) from last

    async def _prepared_for(self, request: ModelRequest, fallback: Fallback) -> ModelRequest:
        """Return ``request`` with the model, estimator and input limit of ``fallback``."""
        from harness.tokens import estimator_for

        policy = request.policy.replace(estimator=estimator_for(fallback.model))
        output = requested_output(request.settings)
        run = request.run
        client = run.client if run is not None else None
        if fallback.window is not None or client is None:
            limit = policy.input_limit(fallback.window, max_output=output)
            extra: tuple[Transform, ...] = ()
        else:
            limit, extra = await discovered_input_limit(
                policy, client, fallback.model, max_output=output
            )
        changes: dict[str, Any] = {"model": fallback.model, "policy": policy, "input_limit": limit}
        if run is not None and client is not None:
            # Summary requests of this round go to the fallback too (the primary is down);
            # the run's slots are shared, so the round's own state carries over.
            changes["run"] = msgspec.structs.replace(run, client=_Rebound(client, fallback))
        return request.replace(**changes).with_transforms(*extra)


class _Rebound:
    """The agent's client, answering for a fallback model (what the round's summaries use)."""

    def __init__(self, client: Any, fallback: Fallback) -> None:
        self._client = client
        self._fallback = fallback
        self.model = fallback.model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response: ModelResponse = await self._client.complete(request)
        return response

    def context_window(self, model: str | None = None) -> int | None:
        if self._fallback.window is not None and model in (None, self.model):
            return self._fallback.window
        window: int | None = self._client.context_window(model or self.model)
        return window


def _all_failed(last: ProviderError, tried: list[str]) -> ProviderError:
    message = (
        f"{last.message} — ModelFallback tried {len(tried)} models and each failed "
        f"({'; '.join(tried)}). Check the providers' status and keys, or add a fallback."
    )
    return type(last)(message, **last.context)
