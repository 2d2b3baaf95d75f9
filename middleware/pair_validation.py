"""PairValidation: the last check before the client — pairs, budget, and state conflicts.

Where it sits: innermost, directly before the model client, so it sees the request exactly
as it will be sent, after every other middleware rewrote it. Nothing is sent unless:

1. the agent state did not change while the request was prepared (else `StateConflict`);
2. every assistant tool call has exactly one result and every result its call, with the
   results directly after the assistant message that made the calls (the rule in
   `middleware._history`); in ``"fail"`` mode a violation raises `InvalidToolPairs`, in
   ``"repair"`` mode dangling calls get a synthetic ``no result: interrupted`` result,
   misplaced results are moved next to their call and orphan results are dropped, each
   recorded as a ``pair_repair:…`` transform;
3. the request fits ``request.input_limit`` — estimated far from it, counted with the
   family's exact tokenizer near it (else `ContextBudgetExceeded`).

Conflict rule (cheap, O(1)): when ``state.version`` differs from the version the request
started from, the kind is ``history_conflict`` if the working history no longer ends with
the message the request's history ends with (compared by origin id, so an offloaded or
trimmed copy still matches its original), and ``state_conflict`` otherwise (e.g. todos or
other structured state changed). The agent does not commit a request that failed here.

Incremental: within a session the pair check starts at the first unit the previous valid
history did not share (`harness.prefix.shared_prefix`) and reads the history in place from
there (`middleware._history.pairs_valid`, no slice): the rule is per unit, and the units
before it are unchanged and were valid. When the whole previous history is shared and a new
unit follows it (the usual round: a tool call and its results appended), its last unit is
complete and the check reads the new messages only. The budget check reads the session's running totals
(`harness.accounting.HistoryTally`). So a warm round costs O(new messages) here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import msgspec

from harness.accounting import count_off_loop, counted_near_limit
from harness.errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    InvalidToolPairs,
    StateConflict,
)
from harness.markers import INTERRUPTED_TEXT, ORIGIN_ID
from harness.messages import Message
from harness.prefix import shared_prefix
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler
from middleware._history import check_pairs, label, pairs_valid, repair_pairs

Mode = Literal["fail", "repair"]
_SHOWN = 5


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
        if self._pairs_ok(request):
            return await call_next(self._within_budget(request))
        if self.mode == "fail":
            check = check_pairs(request.history)
            raise InvalidToolPairs(
                _pairs_message(check.dangling, check.orphans, check.misplaced),
                dangling_calls=check.dangling,
                orphan_results=check.orphans,
                misplaced_results=check.misplaced,
                transforms=request.transforms,
            )
        history, transforms = repair_pairs(request.history, interrupted_text=self.interrupted_text)
        request = request.replace(history=history).with_transforms(*transforms)
        return await call_next(self._within_budget(request))

    def _pairs_ok(self, request: ModelRequest) -> bool:
        """Return whether the pairs are valid, checking only what this call has not seen."""
        history = request.history
        if request.run is None:
            return pairs_valid(history)
        seen = request.run.session_slot(self, _Valid)  # kept across the session's calls
        old = seen.history
        shared = shared_prefix(old, history, request.run)
        if shared < len(old) or (shared < len(history) and history[shared].role == "tool"):
            start = _unit_start(history, shared)  # its last unit lost or gained messages
        else:  # the whole valid history, then a new unit (or nothing): only the new is read
            start = shared
        ok = pairs_valid(history, start)
        if ok:
            seen.history = history
        return ok

    @staticmethod
    def _within_budget(request: ModelRequest) -> ModelRequest:
        """Return ``request`` (counted exactly near its limit) if it fits its input limit.

        Raises:
            ContextBudgetExceeded: when it does not.
        """
        if request.input_limit >= 0:
            request, tokens = counted_near_limit(request)  # exact near the limit
            if tokens > request.input_limit:
                raise ContextBudgetExceeded(
                    f"the prepared request needs ~{tokens:,} tokens but the input limit is "
                    f"{request.input_limit:,}, so it was not sent. Put BudgetFit and Compaction "
                    "before PairValidation in the stack, shorten the system prompt, tool schemas "
                    "or required blocks, or raise ContextPolicy.max_input_tokens.",
                    required_tokens=tokens,
                    limit=request.input_limit,
                    transforms=request.transforms,
                )
        return request


class _Valid(msgspec.Struct):
    """One PairValidation's per-call slot: the last history whose pairs were valid."""

    history: tuple[Message, ...] = ()


def _unit_start(history: tuple[Message, ...], shared: int) -> int:
    """Return where the unit holding message ``shared - 1`` starts (0 when nothing is shared).

    Every unit before it lies inside the shared prefix and is followed by a shared message,
    so it is the very unit checked before.
    """
    index = shared - 1
    while index > 0 and history[index].role == "tool":
        index -= 1
    return max(index, 0)


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


def _pairs_message(
    dangling: Sequence[str], orphans: Sequence[str], misplaced: Sequence[str]
) -> str:
    problems = []
    if dangling:
        problems.append(f"{len(dangling)} call(s) without a result ({_ids(dangling)})")
    if orphans:
        problems.append(f"{len(orphans)} result(s) without a call ({_ids(orphans)})")
    if misplaced:
        problems.append(
            f"{len(misplaced)} result(s) not directly after their call ({_ids(misplaced)})"
        )
    return (
        "tool calls and results are not paired: "
        + "; ".join(problems)
        + ". The request was not sent. A middleware that cuts or rewrites the history must keep "
        "each call with its results (see middleware._history.safe_cut); or use "
        "PairValidation(mode='repair') to fill, move and drop them."
    )


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(label(i) for i in ids[:_SHOWN])
    return shown + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")
