"""One error hierarchy for context-harness.

Every message says what went wrong *and what to do next*. The facts a caller branches on
are typed attributes (``error.limit``, ``error.reason``, ``error.status`` …); every keyword
is also kept in ``error.context``, so an error can be re-raised with a longer message as
``type(error)(message, **error.context)``.

    HarnessError
    ├── ConfigurationError (ValueError)        a stack, policy or source is set up wrongly
    ├── InvalidInputError (ValueError)         user data (a dict, JSON, a file) is malformed
    ├── ContextBuildError                      preparing one model request failed
    │   ├── SourceError                        a context source failed or timed out
    │   ├── ContextBudgetExceeded              fixed material alone exceeds the input budget
    │   ├── InvalidToolPairs                   a tool call and its result are not paired
    │   └── StateConflict                      the agent state changed while preparing
    │       ├── DuplicateTurn                  a caller's turn is stored already
    │       └── SessionBusy                    another writer runs the session's tool calls
    ├── WorkspaceError                         a workspace file operation failed
    │   ├── PathEscapeError (PermissionError)  a path leaves the workspace or its scope
    │   └── StoreFileLost                      a SQLite store's file vanished under it
    ├── ProviderError                          the model provider failed
    │   ├── ContextOverflowError               the provider says the input is too long
    │   ├── ProviderAuthError                  the key is missing or rejected
    │   ├── ProviderRateLimited                too many requests
    │   ├── ProviderBadRequest                 the provider rejected the request
    │   └── ProviderUnavailable                timeout, connection or 5xx failure
    └── MaxRoundsExceeded (RuntimeError)       the agent loop hit its round limit

Outside the core, one provider adds its own: ``providers.ScriptExhausted`` (a `HarnessError`
and `RuntimeError`), raised when the offline ``ScriptedModel`` has no reply left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from harness.manifest import Transform

Validation = Literal[
    "passed",
    "budget_exceeded",
    "invalid_tool_pairs",
    "state_conflict",
    "history_conflict",
    "build_failed",
]


class HarnessError(Exception):
    """Raised for every failure that context-harness itself reports."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context


class ConfigurationError(HarnessError, ValueError):
    """Raised when a stack, policy, middleware or source is configured wrongly."""


class InvalidInputError(HarnessError, ValueError):
    """Raised when user-supplied data (a message dict, JSON, a file) is malformed."""


class ContextBuildError(HarnessError):
    """Raised when preparing one model request fails; the model is not called."""

    validation: Validation = "build_failed"

    def __init__(
        self, message: str, *, transforms: tuple[Transform, ...] = (), **context: Any
    ) -> None:
        super().__init__(message, transforms=transforms, **context)
        self.transforms = tuple(transforms)
        """What the middleware before the failure had changed (for the failed manifest)."""


class SourceError(ContextBuildError):
    """Raised when a context source fails, times out or returns malformed blocks."""

    def __init__(self, message: str, *, source: str, reason: str = "", **context: Any) -> None:
        super().__init__(message, source=source, reason=reason, **context)
        self.source = source
        self.reason = reason


class ContextBudgetExceeded(ContextBuildError):
    """Raised when the material that may not be dropped does not fit the input budget."""

    validation: Validation = "budget_exceeded"

    def __init__(
        self,
        message: str,
        *,
        required_tokens: int,
        limit: int,
        protected_results: tuple[str, ...] = (),
        **context: Any,
    ) -> None:
        super().__init__(
            message,
            required_tokens=required_tokens,
            limit=limit,
            protected_results=protected_results,
            **context,
        )
        self.required_tokens = required_tokens
        self.limit = limit
        self.protected_results = tuple(protected_results)
        """The message ids of the tool results among what could not be dropped (the newest
        ones): a middleware that can make them smaller (ToolResultOffload) may try again."""


class InvalidToolPairs(ContextBuildError):
    """Raised when a tool call lacks its result or a tool result lacks its call."""

    validation: Validation = "invalid_tool_pairs"

    def __init__(
        self,
        message: str,
        *,
        dangling_calls: tuple[str, ...] = (),
        orphan_results: tuple[str, ...] = (),
        misplaced_results: tuple[str, ...] = (),
        **context: Any,
    ) -> None:
        super().__init__(
            message,
            dangling_calls=dangling_calls,
            orphan_results=orphan_results,
            misplaced_results=misplaced_results,
            **context,
        )
        self.dangling_calls = dangling_calls
        self.orphan_results = orphan_results
        self.misplaced_results = misplaced_results


class StateConflict(ContextBuildError):
    """Raised when the agent state or history changed while a request was prepared."""

    def __init__(
        self,
        message: str,
        *,
        kind: Literal["state_conflict", "history_conflict"] = "state_conflict",
        expected_version: int | None = None,
        actual_version: int | None = None,
        **context: Any,
    ) -> None:
        super().__init__(
            message,
            kind=kind,
            expected_version=expected_version,
            actual_version=actual_version,
            **context,
        )
        self.validation = kind
        self.kind = kind
        self.expected_version = expected_version
        """The state version the request was prepared from."""
        self.actual_version = actual_version
        """The state version found when it was about to be sent."""


class DuplicateTurn(StateConflict):
    """Raised when a commit would log a caller's turn that the session's log holds already."""

    def __init__(self, message: str, *, turn_ids: tuple[str, ...], **context: Any) -> None:
        super().__init__(message, turn_ids=turn_ids, **context)
        self.turn_ids = turn_ids
        """The turn ids already stored."""


class SessionBusy(StateConflict):
    """Raised when another writer is running tool calls the session is waiting for."""

    def __init__(
        self, message: str, *, call_ids: tuple[str, ...], writer: str, **context: Any
    ) -> None:
        super().__init__(message, call_ids=call_ids, writer=writer, **context)
        self.call_ids = call_ids
        """The calls that writer started and has not answered yet."""
        self.writer = writer
        """The writer running them (``host:pid:agent``)."""


class WorkspaceError(HarnessError):
    """Raised when reading or writing a workspace file fails."""


class PathEscapeError(WorkspaceError, PermissionError):
    """Raised when a path would leave the workspace or the caller's scope (``..``, a symlink …)."""


class StoreFileLost(WorkspaceError):
    """Raised when a SQLite store's database (or its WAL) was deleted or replaced under it."""

    def __init__(
        self,
        message: str,
        *,
        path: str,
        reason: Literal["deleted", "replaced"],
        **context: Any,
    ) -> None:
        super().__init__(message, path=path, reason=reason, **context)
        self.path = path
        """The file that is no longer the one the store opened (the database or its ``-wal``)."""
        self.reason = reason
        """``deleted``: nothing is at the path any more; ``replaced``: another file is."""


class ProviderError(HarnessError):
    """Raised when the model provider fails; ``status`` is the HTTP status when known."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        model: str = "",
        detail: str = "",
        sent: bool = True,
        retry_after: float | None = None,
        provider_retries: tuple[Any, ...] = (),
        **context: Any,
    ) -> None:
        super().__init__(
            message,
            provider=provider,
            status=status,
            model=model,
            detail=detail,
            sent=sent,
            retry_after=retry_after,
            provider_retries=provider_retries,
            **context,
        )
        self.provider = provider
        """The provider litellm routed to (``openai``, ``anthropic`` …), when known."""
        self.status = status
        """The HTTP status of the provider's answer; ``None`` when no answer came."""
        self.model = model
        """The model the request was for."""
        self.detail = detail
        """The provider's own words, when it gave any."""
        self.sent = sent
        """Whether the request left this process (``False``: refused before sending)."""
        self.retry_after = retry_after
        """Seconds the provider asked to wait (``retry-after``), when it asked."""
        self.provider_retries = tuple(provider_retries)
        """The retries the client made before giving up (`harness.request.ProviderRetry`)."""


NOTHING_TO_COMPACT: Final = "nothing_to_compact"
"""`ContextOverflowError.reason` when a forced compaction found nothing left to compact."""


class ContextOverflowError(ProviderError):
    """Raised when the provider reports that the input exceeds the model's context window."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        reason: str = "provider_overflow",
        retries: int = 0,
        window: int | None = None,
        **context: Any,
    ) -> None:
        super().__init__(
            message,
            provider=provider,
            status=status,
            reason=reason,
            retries=retries,
            window=window,
            **context,
        )
        self.reason = reason
        """Why: ``provider_overflow``, ``nothing_to_compact``, ``retry_overflowed`` …"""
        self.retries = retries
        """How many retries with forced compaction were made before giving up."""
        self.window = window
        """The model's context window when the provider's error states it (``None``: not)."""


class ProviderAuthError(ProviderError):
    """Raised when the provider's API key is missing or rejected."""


class ProviderRateLimited(ProviderError):
    """Raised when the provider refuses a request for rate or quota reasons."""


class ProviderBadRequest(ProviderError):
    """Raised when the provider rejects a request as malformed."""


class ProviderUnavailable(ProviderError):
    """Raised on timeouts, connection failures and 5xx answers from the provider."""


class MaxRoundsExceeded(HarnessError, RuntimeError):
    """Raised when the agent loop reaches ``max_rounds`` without a final reply."""


def validation_of(error: BaseException) -> Validation:
    """Map an error raised during preparation to the manifest's validation value."""
    if isinstance(error, ContextBuildError):
        return error.validation
    return "build_failed"
