"""When a model client retries a failed request, how long it waits, and the record it keeps.

Rate limits (HTTP 429) and transient server failures (500, 502, 503, 504, 529) usually
pass within seconds, so `LiteLLMClient` retries them itself — by default up to 3 times —
waiting what the provider asked for in ``retry-after-ms`` / ``retry-after`` or, when it
asked for nothing, an exponential back-off with jitter. Every wait is bounded by
``max_wait``; a provider that asks for longer is not retried at all (the error says what
it asked for), because waiting the cap and trying again would only fail again later.

Never retried: a context overflow (compaction's job: `OverflowRetry`), a request that was
never sent (no HTTP status: an encoding failure, an unknown model, a missing key), an
auth or malformed-request error, a timeout (the request already waited its full timeout),
a refused connection (usually a wrong ``api_base``), and a rate limit that waiting will
not lift (an exhausted quota, or one request over the per-minute token limit on its own).

Each retry is recorded as a `ProviderRetry`; the caller sees them on the response (see
`LiteLLMClient`) or on the error that ends the attempts (``error.provider_retries``).
"""

from __future__ import annotations

import math
import random
from typing import NamedTuple

import msgspec

from harness.errors import (
    ConfigurationError,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from harness.request import ProviderRetry
from providers.errors import is_lasting_limit_text, retry_after_of

__all__ = ["RETRIED_STATUSES", "ProviderRetry", "RetryDecision", "RetryPolicy"]

RETRIED_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504, 529})
"""HTTP statuses worth retrying: rate limits and transient server failures."""


class RetryDecision(NamedTuple):
    """Whether to retry a failed attempt, and how long to wait first."""

    wait_s: float | None
    """Seconds to wait before retrying; ``None``: do not retry."""
    retry_after_s: float | None
    """What the provider asked for, when it asked."""
    reason: str = ""
    """Why not, when the error was retryable but is not retried (said in the error)."""


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a client retries rate limits and transient server failures.

    Raises:
        ConfigurationError: when a value is out of range.
    """

    max_retries: int = 3
    """Retries after the first attempt (``0`` turns retrying off)."""
    max_wait: float = 30.0
    """The longest wait before one retry, in seconds."""
    base_delay: float = 0.5
    """The first back-off when the provider gives no ``retry-after``; doubles each retry."""

    def __post_init__(self) -> None:
        if (
            not isinstance(self.max_retries, int)
            or isinstance(self.max_retries, bool)
            or self.max_retries < 0
        ):
            raise ConfigurationError(
                f"max_retries must be an int ≥ 0 (0 turns retrying off), got {self.max_retries!r}"
            )
        if not _seconds(self.max_wait) or self.max_wait <= 0:
            raise ConfigurationError(
                "the longest retry wait (max_retry_wait) must be a positive number of "
                f"seconds, got {self.max_wait!r}"
            )
        if not _seconds(self.base_delay):
            raise ConfigurationError(
                "the first back-off (retry_base_delay) must be a number of seconds ≥ 0, "
                f"got {self.base_delay!r}"
            )

    def decide(self, error: ProviderError, *, attempt: int) -> RetryDecision:
        """Return whether to retry after ``error`` and how long to wait.

        Args:
            error: the translated failure of the last attempt (its ``__cause__`` is the
                SDK exception that carries the answer's headers).
            attempt: the number of the retry being considered (1 for the first).
        """
        retry_after = retry_after_of(error.__cause__)
        if attempt > self.max_retries or not _retryable(error):
            return RetryDecision(None, retry_after)
        if retry_after is not None:
            if retry_after > self.max_wait:
                return RetryDecision(
                    None,
                    retry_after,
                    f"the provider asked to wait {retry_after:g} s, longer than "
                    f"max_retry_wait ({self.max_wait:g} s), so the client did not retry: "
                    "call again later or raise max_retry_wait",
                )
            return RetryDecision(retry_after, retry_after)
        backoff = self.base_delay * 2 ** (attempt - 1)
        return RetryDecision(min(self.max_wait, backoff * (0.5 + random.random() / 2)), None)


def _retryable(error: ProviderError) -> bool:
    if error.status not in RETRIED_STATUSES:
        return False
    if isinstance(error, ProviderRateLimited):
        detail = str(error.detail or error.message)
        return not is_lasting_limit_text(detail)
    return isinstance(error, ProviderUnavailable)


def _seconds(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
