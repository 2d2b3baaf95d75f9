"""The in-place summary request: the agent's own conversation, then "summarise the above".

A summary request written as a transcript (`middleware.compaction._summariser`) shares no prefix with
anything the provider saw: every token of the early part is billed at the full input price,
in several requests when the part is long. The early part was, however, the prefix of the
agent's previous request — System, tools, the stable reference material and the history —
which a provider's prompt cache still holds. Sent as that same prefix followed by one
instruction, the summary request is read from the cache (at 0.1–0.5× the price) and costs
one request per compaction.

It applies when the summariser is the agent's own model (a cache is per model) with the
default prompt, and when the prefix up to the cut fits the model's input limit — the common
case, since the previous request fitted. Otherwise (a long history compacted for the first
time, another summariser, a custom prompt) Compaction falls back to the transcript
summariser. Tools stay in the request, so the prefix matches, with ``tool_choice: none``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from harness.accounting import (
    acounted_near_limit,
    counted_near_limit,
    estimate_request,
    far_over,
    fast_estimator_of,
)
from harness.messages import Message, new_id
from harness.policy import OUTPUT_SETTINGS
from harness.presend.pairs import repair_pairs, safe_cut
from harness.request import ModelRequest, is_stable
from harness.tokens import TokenEstimator
from harness.types import ModelClient
from middleware.compaction._summariser import (
    SUMMARY_SECTIONS,
    fit_text,
    send_summary_request,
    summary_output,
)

IN_PLACE_PROMPT: Final = (
    """\
Pause the task here: do not call any tool and do not continue the work. The conversation \
above is being compacted. Write the summary that will replace it: the agent will see your \
summary in its place, followed by the most recent messages word for word. If the \
conversation begins with an earlier summary, fold it in: keep what still holds, correct \
what changed, add what is new.

"""
    + SUMMARY_SECTIONS
    + "conversation."
)
"""The instruction appended to the agent's own conversation (the default prompt's sections)."""

CUT_SLACK: Final = 64
"""Tokens cut from texts beyond the estimated excess (the exact count may differ)."""
MIN_TEXT_KEPT: Final = 200
"""The least a message text cut to fit an in-place summary request keeps, in tokens."""


def focus_line(focus: str) -> str:
    """Return the line that asks a summary to focus on ``focus`` (a manual request's)."""
    safe = focus.replace("{", "(").replace("}", ")")  # never a prompt placeholder
    return f"Focus the summary on: {safe}"


def instruction(focus: str | None) -> str:
    """Return the in-place instruction, asked to ``focus`` when a manual request gave one."""
    return IN_PLACE_PROMPT if not focus else f"{IN_PLACE_PROMPT}\n\n{focus_line(focus)}"


def in_place_request(
    request: ModelRequest,
    upto: int,
    client: ModelClient,
    cap: int,
    after: tuple[Message, ...] = (),
    focus: str | None = None,
) -> ModelRequest:
    """Return the summary request of ``request.history[:upto]`` sent as the agent's own prefix.

    System, tools, the stable blocks (rendered before the history) and the history up to
    ``upto`` are ``request``'s own, so the request starts as the agent's previous one did;
    the changing blocks (rendered after the history) are left out. It asks for at most
    ``cap`` (+ `OUTPUT_SLACK`, within the model's output limit: `summary_output`) output
    tokens and no tool call, and its input limit reserves exactly that output, so prompt +
    ``max_tokens`` stays within the window (a prefix that does not fit is shortened by
    `summarise_in_place`, never sent over). Broken tool pairs of the history (an orphan
    result, a dangling call, as a caller of ``acompletion`` may send) are repaired as
    PairValidation's repair mode does (`harness.pairs.repair_pairs`, ``pair_repair:…``
    transforms): a summary request is never sent broken. ``after`` goes between the
    prefix and the instruction (the rest of the early part, shortened to fit).
    """
    output = summary_output(client, cap, request.policy)
    window = client.context_window(client.model)
    limit = request.policy.input_limit(window, max_output=output) if window else request.input_limit
    settings = {k: v for k, v in (request.settings or {}).items() if k not in OUTPUT_SETTINGS}
    history, repairs = repair_pairs(
        (*request.history[:upto], *after, Message.user(instruction(focus)))
    )
    return ModelRequest(
        model=client.model,
        ids=msgspec.structs.replace(request.ids, purpose="summary", call_id=new_id()),
        system=request.system,
        history=history,
        blocks=tuple(b for b in request.blocks if is_stable(b)),
        tools=request.tools,
        settings={**settings, "max_tokens": output, "tool_choice": "none"},
        policy=request.policy,
        input_limit=limit,
        transforms=repairs,
    ).without_superseded_blocks()


async def summarise_in_place(
    request: ModelRequest,
    upto: int,
    client: ModelClient,
    cap: int,
    *,
    start: int = 0,
    focus: str | None = None,
) -> tuple[str, int] | None:
    """Return a summary of ``request.history[:k]`` asked in place, and ``k``; or ``None``.

    ``k`` is ``upto`` when that prefix fits the request's limit, or when it fits once the
    texts at its end are cut in the middle (a long tool result or pasted message that
    arrived this round is often what pushed the history over its budget). Else ``k`` is the longest
    shorter prefix that fits and ends between units: the caller summarises the rest on top.
    ``None`` when no prefix beyond ``start`` (the pinned task and earlier summary) fits, the
    model rejects the request as too long, or the answer has no text (e.g. a tool call
    despite ``tool_choice: none``): the caller then uses the transcript summariser.

    Raises:
        ProviderBadRequest: the provider refused the request (some refuse ``tool_choice``).
        ProviderError: any other failure of the summary request, as the client raised it.
    """
    summary = in_place_request(request, upto, client, cap, focus=focus)
    est = summary.estimator
    # A prefix over its limit by far on the fast estimate (`far_over`) is not counted exactly:
    # it is shortened on the estimate, and what is sent is counted exactly near its limit.
    fast = fast_estimator_of(est)
    tokens = estimate_request(summary, fast)
    if far_over(tokens, summary.input_limit):
        est = fast
    else:
        tokens = estimate_request(summary, est) if fast is not est else tokens
        if tokens <= summary.input_limit:  # over it by estimate: never counted exactly
            summary, tokens = await acounted_near_limit(summary)
    if tokens > summary.input_limit:
        over = tokens - summary.input_limit
        fitted = _fitted(request, upto, client, cap, over, start, est, focus)
        if fitted is None:
            return None
        summary, upto = fitted
    text = await send_summary_request(client, summary, request)
    return (fit_text(text, est, cap), upto) if text else None


def _fitted(
    request: ModelRequest,
    upto: int,
    client: ModelClient,
    cap: int,
    over: int,
    start: int,
    est: TokenEstimator,
    focus: str | None = None,
) -> tuple[ModelRequest, int] | None:
    """Return an in-place request that fits, ``over`` tokens shorter at least, and its end.

    First the prefix up to ``upto`` with the texts after the cut that frees ``over`` cut in
    the middle (one request still reads the whole early part); else shorter prefixes,
    at most twice (by estimate, then by the exact count near the limit). ``est`` counts
    what is cut (the fast one where the prefix was over by far).
    """
    history = request.history
    cut = _shorter(history, upto, over, est)
    after = _texts_cut(history[cut:upto], over + CUT_SLACK, est)
    if cut > start and after is not None:
        summary, tokens = counted_near_limit(
            in_place_request(request, cut, client, cap, after, focus)
        )
        if tokens <= summary.input_limit:
            return summary, upto
    for _ in range(2):
        if cut <= start:
            return None
        summary, tokens = counted_near_limit(
            in_place_request(request, cut, client, cap, focus=focus)
        )
        if tokens <= summary.input_limit:
            return summary, cut
        cut = _shorter(history, cut, tokens - summary.input_limit, summary.estimator)
    return None


def _texts_cut(
    messages: Sequence[Message], over: int, est: TokenEstimator
) -> tuple[Message, ...] | None:
    """Return ``messages`` with their texts cut to hold ``over`` fewer tokens, or ``None``.

    Each message with plain text content (a tool output, a long pasted user message) gives
    up the same share of its tokens, head and tail kept (`fit_text`); tool calls stay
    whole. ``None`` when the texts cannot give that much and keep `MIN_TEXT_KEPT` each.
    """
    sizes = [
        est.count_message(m) if isinstance(m.content, str) and not m.tool_calls else 0
        for m in messages
    ]
    total = sum(sizes)
    if total - MIN_TEXT_KEPT * sum(1 for n in sizes if n) < over:
        return None
    share = 1 - over / total
    return tuple(
        m.replace(content=fit_text(m.text, est, max(MIN_TEXT_KEPT, int(n * share)))) if n else m
        for m, n in zip(messages, sizes, strict=True)
    )


def _shorter(history: Sequence[Message], upto: int, over: int, est: TokenEstimator) -> int:
    """Return the safe cut before ``upto`` whose prefix is at least ``over`` tokens shorter."""
    freed = 0
    while upto > 0 and freed < over:
        upto -= 1
        freed += est.count_message(history[upto])
    return safe_cut(history, upto)
