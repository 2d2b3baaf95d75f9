"""PairValidation: the last check before the client — pairs, budget, and state conflicts.

Where it sits: innermost, directly before the model client, so it sees the request exactly
as it will be sent, after every other middleware rewrote it. Nothing is sent unless:

1. the agent state did not change while the request was prepared (else `StateConflict`);
2. it passes the kernel's pre-send check (`harness.presend.checked`) in this layer's pair
   mode, which it states on the request (`ModelRequest.pairs`) for the one check that runs
   where the request leaves the stack (`harness.chain.compose`), with the client's window
   and output limit — so its refusals are raised from ``call_next``, and the check runs
   once per request, not twice (called with a bare handler, outside a chain, it runs the
   check itself): every assistant tool call has exactly one result and every result its call,
   directly after the assistant message (`harness.presend.pairs`) — in ``"fail"`` mode a violation
   raises `InvalidToolPairs`, in ``"repair"`` mode dangling calls get a synthetic ``no
   result: interrupted`` result, misplaced results are moved next to their call and orphan
   results are dropped, each recorded as a ``pair_repair:…`` transform — and the request
   fits ``request.input_limit``, estimated far from it, counted with the family's exact
   tokenizer near it (else `ContextBudgetExceeded`). The same check runs on every summary
   request.

Conflict rule (cheap, O(1)): when ``state.version`` differs from the version the request
started from, the kind is ``history_conflict`` if the working history no longer ends with
the message the request's history ends with (compared by origin id, so an offloaded or
trimmed copy still matches its original), and ``state_conflict`` otherwise (e.g. todos or
other structured state changed). The agent does not commit a request that failed here.

Incremental: the pre-send check reads only the units the previous valid history did not
share, and the session's running totals for the budget (see `harness.presend`), so
a warm round costs O(new messages) here.
"""

from __future__ import annotations

from typing import ClassVar

from msgspec.structs import replace

from harness.accounting import count_off_loop
from harness.chain import checks_before_sending
from harness.errors import ConfigurationError, StateConflict
from harness.markers import INTERRUPTED_TEXT, ORIGIN_ID
from harness.messages import Message
from harness.presend import checked
from harness.request import ModelRequest, ModelResponse, PairHandling, PairMode
from harness.types import Concern, Handler

Mode = PairMode


class PairValidation:
    """Refuse (or repair) a request whose tool pairs, budget or state are not sound.

    Args:
        mode: ``"fail"`` raises `InvalidToolPairs` on broken pairs; ``"repair"`` fixes them.
        interrupted_text: the content of the synthetic result of a dangling call (repair).

    Raises:
        ConfigurationError: when ``mode`` is neither ``"fail"`` nor ``"repair"``.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.VALIDATES})
    after: ClassVar[frozenset[Concern]] = frozenset(
        {Concern.ADDS_CONTEXT, Concern.SHRINKS_TOOL_RESULTS, Concern.FITS_BUDGET, Concern.COMPACTS}
    )

    def __init__(self, *, mode: Mode = "fail", interrupted_text: str = INTERRUPTED_TEXT) -> None:
        if mode not in ("fail", "repair"):
            raise ConfigurationError(f"mode must be 'fail' or 'repair', got {mode!r}")
        if not isinstance(interrupted_text, str) or not interrupted_text:
            raise ConfigurationError("interrupted_text must be a non-empty string")
        self.mode: Mode = mode
        self.interrupted_text = interrupted_text
        self._pairs = PairHandling(mode=mode, interrupted_text=interrupted_text)

    def __repr__(self) -> str:
        return f"PairValidation(mode={self.mode!r})"

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Validate ``request`` (repairing pairs in repair mode) and send it.

        Raises:
            StateConflict: the agent state or working history changed during preparation.
            InvalidToolPairs: tool calls and results are not paired (``"fail"`` mode).
            ContextBudgetExceeded: the request does not fit ``request.input_limit``.
        """
        if request.state is not None:  # no state, no conflict: no call
            _check_state(request)
        await count_off_loop(request)  # big new texts counted in a thread, not on the loop
        # The kernel's pre-send check runs once, where the request leaves the stack
        # (harness.chain), in the pair mode this layer states on the request: its refusals
        # (InvalidToolPairs, ContextBudgetExceeded) are raised from call_next.
        if request.pairs != self._pairs:
            request = replace(request, pairs=self._pairs)
        if not checks_before_sending(call_next):  # called outside a composed chain
            request = checked(request, owner=self)
        return await call_next(request)


def _check_state(request: ModelRequest) -> None:
    state = request.state
    if state is None or state.version == request.state_version:
        return
    now = _origin(state.working_history[-1]) if state.working_history else None
    then = _origin(request.history[-1]) if request.history else None
    versions = {"expected_version": request.state_version, "actual_version": state.version}
    if now != then:
        raise StateConflict(
            f"the working history changed while this request was prepared (it now ends with "
            f"message {now!r}, the request with {then!r}), so the request was not sent. Run one "
            "agent call per session at a time and do not change the history from middleware; "
            "then call the agent again.",
            kind="history_conflict",
            transforms=request.transforms,
            **versions,
        )
    raise StateConflict(
        f"the agent state changed while this request was prepared (version "
        f"{request.state_version} → {state.version}), so the request was not sent. Middleware "
        "must treat request.state as read-only and a session must run one agent call at a "
        "time; then call the agent again.",
        kind="state_conflict",
        transforms=request.transforms,
        **versions,
    )


def _origin(message: Message) -> str:
    origin = message.meta(ORIGIN_ID)
    return origin if isinstance(origin, str) else message.id
