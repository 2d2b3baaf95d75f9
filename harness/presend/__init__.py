"""The pre-send check: what every request passes before a model client receives it.

One function, `checked`, for every request any part of the library sends: the agent's
requests (the innermost handler of `harness.chain.compose` runs it, once, on what leaves the
stack, in the pair mode the request carries: `ModelRequest.pairs`, which PairValidation
sets) and the summary requests Compaction sends straight to its summariser. Nothing is sent unless:

1. **pairs** — every assistant tool call has exactly one result and every result its call,
   directly after the assistant message (`harness.presend.pairs`). ``"fail"`` raises
   `InvalidToolPairs`; ``"repair"`` gives a dangling call an "interrupted" result, moves a
   misplaced result next to its call and drops an orphan, each a ``pair_repair:…``
   transform. Messages are never rebuilt, so ``reasoning_content`` stays on every
   assistant turn.
2. **output** — ``max_tokens`` (and its other spellings, `harness.policy.OUTPUT_SETTINGS`) is
   within the model's output limit, when the client reports one
   (`harness.types.OutputLimited`); a larger one is lowered to it (``max_tokens_clamped:<n>``):
   the provider would refuse it, and the input budget reserved the larger amount anyway.
3. **budget** — the request fits ``request.input_limit`` and, when the client reports the
   window and the request sets ``max_tokens``, prompt + ``max_tokens`` fits the window: the
   input limit is lowered to ``window - max_tokens`` where that is smaller. Counted as
   `harness.accounting.counted_near_limit` counts (the fast estimate far from the limit,
   the family's exact tokenizer near it); else `ContextBudgetExceeded`.

Incremental: with a run scope and an ``owner`` the pair check reads only what the owner's
last valid history did not share (`harness.accounting.prefix.shared_prefix`), and the budget
check reuses the run's measurement, so a warm round costs O(new messages) here as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from harness.accounting import counted_near_limit
from harness.accounting.prefix import shared_prefix
from harness.errors import ContextBudgetExceeded, InvalidToolPairs
from harness.manifest import Transform, TransformKind
from harness.messages import Message
from harness.policy import OUTPUT_SETTINGS, requested_output
from harness.presend.pairs import check_pairs, label, pairs_valid, repair_pairs
from harness.request import ModelRequest, PairMode
from harness.types import ModelClient

MAX_TOKENS_CLAMPED: Final = TransformKind("max_tokens_clamped")
"""The output setting lowered to the model's output limit: ``max_tokens_clamped:<limit>``."""

_SHOWN = 5


def output_limit(client: ModelClient | None, model: str | None = None) -> int | None:
    """Return the most output tokens ``client`` says ``model`` answers with, or ``None``.

    ``None`` when there is no client, it does not report one (`harness.types.OutputLimited`)
    or does not know.
    """
    getter = getattr(client, "max_output_tokens", None)
    if getter is None:
        return None
    value = getter(model)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def checked(
    request: ModelRequest,
    client: ModelClient | None = None,
    *,
    pairs: PairMode | None = None,
    interrupted_text: str | None = None,
    owner: object | None = None,
) -> ModelRequest:
    """Return ``request`` as it may be sent to ``client``: paired, output bounded, in budget.

    Args:
        request: the request about to be sent.
        client: the client it goes to (its window and output limit count), or ``None``.
        pairs: ``"fail"`` refuses broken tool pairs, ``"repair"`` repairs them (default:
            the request's own `ModelRequest.pairs`).
        interrupted_text: the content of a dangling call's synthetic result (repair;
            default: the request's own).
        owner: whose running record of valid histories the pair check keeps within the
            session (any object; ``None``: the whole history is checked).

    Raises:
        InvalidToolPairs: the tool calls and results are not paired (``"fail"``).
        ContextBudgetExceeded: the request does not fit its input limit, or prompt plus
            ``max_tokens`` does not fit the window.
    """
    handling = request.pairs
    mode = pairs if pairs is not None else handling.mode
    text = interrupted_text if interrupted_text is not None else handling.interrupted_text
    request = _paired(request, mode, text, owner)
    if client is not None:
        request = _output_bounded(request, client)
    return _within_budget(request, client)


# ------------------------------------------------------------------------- pairs
class _Valid(msgspec.Struct):
    """One owner's per-session slot: the last history whose pairs were valid."""

    history: tuple[Message, ...] = ()


def _paired(
    request: ModelRequest, mode: PairMode, interrupted_text: str, owner: object | None
) -> ModelRequest:
    if _pairs_ok(request, owner):
        return request
    if mode == "fail":
        check = check_pairs(request.history)
        raise InvalidToolPairs(
            _pairs_message(check.dangling, check.orphans, check.misplaced),
            dangling_calls=check.dangling,
            orphan_results=check.orphans,
            misplaced_results=check.misplaced,
            transforms=request.transforms,
        )
    history, transforms = repair_pairs(request.history, interrupted_text=interrupted_text)
    return request.replace(history=history).with_transforms(*transforms)


def _pairs_ok(request: ModelRequest, owner: object | None) -> bool:
    """Return whether the pairs are valid, checking only what ``owner`` has not seen."""
    history = request.history
    if request.run is None or owner is None:
        return pairs_valid(history)
    seen = request.run.session_slot(owner, _Valid)  # kept across the session's calls
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


def _unit_start(history: tuple[Message, ...], shared: int) -> int:
    """Return where the unit holding message ``shared - 1`` starts (0 when nothing is shared).

    Every unit before it lies inside the shared prefix and is followed by a shared message,
    so it is the very unit checked before.
    """
    index = shared - 1
    while index > 0 and history[index].role == "tool":
        index -= 1
    return max(index, 0)


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
        "each call with its results (see harness.pairs.safe_cut); or use "
        "PairValidation(mode='repair') to fill, move and drop them."
    )


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(label(i) for i in ids[:_SHOWN])
    return shown + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


# ------------------------------------------------------------------ output, budget
def _output_bounded(request: ModelRequest, client: ModelClient) -> ModelRequest:
    """Return ``request`` with its output settings lowered to the model's output limit."""
    asked = requested_output(request.settings)
    most = output_limit(client, request.model) if asked is not None else None
    if asked is None or most is None or asked <= most or request.settings is None:
        return request
    settings: dict[str, Any] = {
        key: min(value, most) if key in OUTPUT_SETTINGS and isinstance(value, int) else value
        for key, value in request.settings.items()
    }
    return request.replace(settings=settings).with_transforms(Transform(MAX_TOKENS_CLAMPED, most))


def _within_budget(request: ModelRequest, client: ModelClient | None) -> ModelRequest:
    """Return ``request`` (counted exactly near its limit) if it fits.

    Its input limit is lowered to ``window - max_tokens`` where that is smaller.

    Raises:
        ContextBudgetExceeded: when it does not fit.
    """
    asked = requested_output(request.settings)
    window = client.context_window(request.model) if client is not None and asked else None
    if window is not None and asked is not None and window > 0:
        room = window - asked
        if room <= 0:
            raise ContextBudgetExceeded(
                f"the request asks for {asked:,} output tokens (max_tokens) but the model's "
                f"window is {window:,} tokens, so it was not sent; lower max_tokens",
                required_tokens=asked,
                limit=window,
                transforms=request.transforms,
            )
        if request.input_limit < 0 or room < request.input_limit:
            request = request.replace(input_limit=room)
    if request.input_limit < 0:
        return request
    if request.policy.estimator is None:  # a bare request: count it as its model counts
        request = request.replace(policy=request.policy.resolve(request.model))
    request, tokens = counted_near_limit(request)  # exact near the limit
    if tokens > request.input_limit:
        raise ContextBudgetExceeded(
            f"the prepared request needs ~{tokens:,} tokens but the input limit is "
            f"{request.input_limit:,}, so it was not sent. Put BudgetFit and Compaction "
            "before PairValidation in the stack, shorten the system prompt, tool schemas "
            "or required blocks, lower max_tokens, or raise ContextPolicy.max_input_tokens.",
            required_tokens=tokens,
            limit=request.input_limit,
            transforms=request.transforms,
        )
    return request
