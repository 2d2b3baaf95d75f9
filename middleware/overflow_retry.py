"""OverflowRetry: when the provider says the input is too long, compact and retry the round.

Where it sits: outermost of the size-control group (right inside Tracing), so a retry
re-enters the whole preparation — sources, task state, offload, budget fitting and
compaction — with ``force_compaction=True`` set on the round's original request. It only
calls ``call_next`` again: the user's task is not re-submitted and no tool is re-run,
because tools run in the agent loop, outside the chain.

It catches `ContextOverflowError` and nothing else (no bare ``Exception``, never
cancellation). The error reaches the caller when the retries overflow too, or when a retry
could not shrink anything: the last middleware before the client (`PairValidation`) calls
`note_attempt`, which records the history each attempt sends and stops a retry whose
history has the same message ids as the attempt that overflowed — resending it could only
overflow again. Without PairValidation in the stack the retry is sent anyway and the
provider's second overflow ends it.

Per-round bookkeeping lives in ``request.run.cache`` for the duration of the round; the
middleware itself keeps no state.
"""

from __future__ import annotations

import msgspec

from harness.errors import ConfigurationError, ContextOverflowError
from harness.request import ModelRequest, ModelResponse
from harness.types import Handler

_KEY = "overflow_retry"


class _Attempts(msgspec.Struct, kw_only=True):
    """What the last middleware before the client saw of one round's attempts."""

    sent: tuple[str, ...] | None = None
    """The history message ids of the last attempt that went to the client."""
    retrying: bool = False
    """Whether the attempt now being prepared is a retry."""
    unchanged: bool = False
    """Set when a retry was stopped because its history equalled the last attempt's."""


class OverflowRetry:
    """Retry a round with forced compaction after the provider reports a context overflow.

    Args:
        max_retries: how many times to retry one round (``0`` turns retrying off).

    Raises:
        ConfigurationError: when ``max_retries`` is not an int ≥ 0.
    """

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
        attempts = _Attempts()
        key = _key(request)
        if request.run is not None:
            request.run.cache[key] = attempts
        try:
            try:
                return await call_next(request)
            except ContextOverflowError as exc:
                original = exc
            last = original
            for n in range(1, self.max_retries + 1):
                attempts.retrying = True
                retry = request.replace(force_compaction=True).with_transforms(
                    f"overflow_retry:{n}"
                )
                try:
                    return await call_next(retry)
                except ContextOverflowError as exc:
                    if attempts.unchanged:
                        raise _nothing_to_compact(original, n) from original
                    last = exc
            raise _still_too_long(original, last, self.max_retries) from last
        finally:
            if request.run is not None:
                request.run.cache.pop(key, None)


def note_attempt(request: ModelRequest) -> None:
    """Record the history about to be sent, for `OverflowRetry` (call it just before the client).

    `PairValidation` calls this after the request passed validation. Outside an
    OverflowRetry round it does nothing.

    Raises:
        ContextOverflowError: when this is a retry whose history has the same message ids
            as the attempt the provider rejected (nothing more could be compacted).
    """
    if request.run is None:
        return
    attempts = request.run.cache.get(_key(request))
    if not isinstance(attempts, _Attempts):
        return
    ids = tuple(m.id for m in request.history)
    if attempts.retrying and ids == attempts.sent:
        attempts.unchanged = True
        raise ContextOverflowError(
            "the retry would resend the same history the provider rejected",
            reason="nothing_to_compact",
        )
    attempts.sent = ids
    attempts.retrying = False


def _key(request: ModelRequest) -> str:
    return f"{_KEY}:{request.ids.call_id}"


def _nothing_to_compact(original: ContextOverflowError, retries: int) -> ContextOverflowError:
    return ContextOverflowError(
        f"{original.message} — OverflowRetry forced compaction, but nothing more could be "
        "compacted (the retry's history was the same), so the request was not resent. Shorten "
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
