"""OverflowRetry: when the provider says the input is too long, compact and retry the round.

Where it sits: outermost of the size-control group (right inside Tracing), so a retry
re-enters the whole preparation — sources, task state, offload, budget fitting and
compaction — with ``force_compaction=True`` set on the round's original request. It only
calls ``call_next`` again: the user's task is not re-submitted and no tool is re-run,
because tools run in the agent loop, outside the chain. A stack that puts a compacting
middleware (`Concern.COMPACTS`) before it is refused when it is built: the retry would not
pass through it.

It catches `ContextOverflowError` and nothing else (no bare ``Exception``, never
cancellation). The error reaches the caller when the retries overflow too, or when a retry
could not shrink anything: a compacting middleware that is forced but has nothing left to
compact raises `ContextOverflowError` with ``reason="nothing_to_compact"`` itself
(Compaction does), and the round ends with the provider's error as the cause. Without a
compacting middleware the retry is sent as it is (a provider that overflowed once may
accept it) and a second overflow ends it. When the error states the model's window
(``ContextOverflowError.window``) and the round's input limit is larger than that window
allows, the retry is prepared with the smaller limit. The middleware keeps no state.
"""

from __future__ import annotations

from typing import ClassVar, Final

from harness.errors import NOTHING_TO_COMPACT, ConfigurationError, ContextOverflowError
from harness.manifest import Transform, TransformKind
from harness.policy import requested_output
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler

OVERFLOW_RETRY: Final = TransformKind("overflow_retry")
LIMIT_FROM_OVERFLOW: Final = TransformKind("input_limit_from_overflow")
"""A request sent again, compacted, after the provider refused it: ``overflow_retry:<n>``."""


class OverflowRetry:
    """Retry a round with forced compaction after the provider reports a context overflow.

    Args:
        max_retries: how many times to retry one round (``0`` turns retrying off).

    Raises:
        ConfigurationError: when ``max_retries`` is not an int ≥ 0.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.RETRIES_OVERFLOW})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(self, *, max_retries: int = 1) -> None:
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise ConfigurationError(f"max_retries must be an int ≥ 0, got {max_retries!r}")
        self.max_retries = max_retries

    def __repr__(self) -> str:
        return f"OverflowRetry(max_retries={self.max_retries})"

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Send ``request``; on an overflow, resend it with ``force_compaction=True``.

        Raises:
            ContextOverflowError: the retries overflowed too, or nothing more could be
                compacted; its ``context`` has ``reason`` and ``retries``.
        """
        if self.max_retries == 0:
            return await call_next(request)
        try:
            return await call_next(request)
        except ContextOverflowError as exc:
            original = exc
        last = original
        for n in range(1, self.max_retries + 1):
            retry = request.replace(force_compaction=True).with_transforms(
                Transform(OVERFLOW_RETRY, n)
            )
            retry = _within_stated_window(retry, last.window)
            try:
                return await call_next(retry)
            except ContextOverflowError as exc:
                if exc.reason == NOTHING_TO_COMPACT:
                    raise _nothing_to_compact(last, n) from last
                last = exc
        raise _still_too_long(original, last, self.max_retries) from last


def _within_stated_window(request: ModelRequest, window: int | None) -> ModelRequest:
    """Return ``request`` with its input limit lowered to fit the window the error stated.

    A provider that says "maximum context length is 8192 tokens" told us the real window;
    a budget computed from a guessed one (64,000) would compact to the wrong size. The
    transform ``input_limit_from_overflow:<limit>`` records the change.
    """
    if window is None:
        return request
    try:
        limit = request.policy.input_limit(window, max_output=requested_output(request.settings))
    except ConfigurationError:  # the reserves alone exceed that window: nothing to fit
        return request
    if 0 <= request.input_limit <= limit:
        return request
    return request.replace(input_limit=limit).with_transforms(Transform(LIMIT_FROM_OVERFLOW, limit))


def _nothing_to_compact(original: ContextOverflowError, retries: int) -> ContextOverflowError:
    return ContextOverflowError(
        f"{original.message} — OverflowRetry forced compaction, but nothing more could be "
        "compacted, so the request was not resent. Shorten "
        "the system prompt, tool schemas or context blocks, lower ContextPolicy.max_input_tokens "
        "so preparation fits earlier, or use a model with a larger window.",
        provider=original.provider,
        status=original.status,
        reason="nothing_to_compact",
        retries=retries - 1,
    )


def _still_too_long(
    original: ContextOverflowError, last: ContextOverflowError, retries: int
) -> ContextOverflowError:
    tries = "1 retry" if retries == 1 else f"{retries} retries"
    return ContextOverflowError(
        f"{last.message} — the provider still reports a context overflow after {tries} with "
        "forced compaction. Lower ContextPolicy.max_input_tokens (or raise safety_margin) so "
        "that preparation leaves more room, or use a model with a larger window.",
        provider=last.provider or original.provider,
        status=last.status,
        reason="retry_overflowed",
        retries=retries,
    )
