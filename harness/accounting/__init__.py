"""Counting a whole request: the estimated input tokens, the manifest items, exact near the edge.

Counts come from the estimator's content-keyed caches, so measuring a request whose history
grew by one message costs one new count plus one cache lookup per message.

**Exact near the edge.** The fast estimate has a known error bound: for any text it is at
least ``estimator.floor`` times the exact count. A request whose estimate is below
``floor × limit`` therefore fits for sure; one closer to the limit is recounted with the
family's exact tokenizer (``estimator.exact_counter``, cached per message), and every
decision after that — what BudgetFit drops, when Compaction summarises, whether
PairValidation sends — is taken on exact counts. `counted_near_limit` makes that switch on
the request itself (its policy's estimator), so the middleware after it agree without
knowing each other.

**Running totals.** Within a session (the agent's `harness.state.SessionScratch`, reached
through the call's `RunScope`; a bare run scope keeps them for one call), the history's
tokens and manifest items are kept per estimator and purpose (`HistoryTally`): a request
whose history starts with the one measured before (`harness.accounting.prefix.shared_prefix`)
costs a count per *new* message only, however often BudgetFit, Compaction, PairValidation
and the manifest measure it — also in the first round of the session's next call. The
System parts', tool schemas' and blocks' costs and items are kept beside them while
requests carry the same (or equal) tuples (`_Costs`). Without a run scope every
measurement counts the whole request (cached counts). These running totals (the memo) live
in ``_tally``.

**One round, one measurement.** The layers of a round mostly hand on the very System,
tool, history and block tuples they got (each replaces other fields), so the run keeps its
last measurement with the parts and estimator it was made from, and the input limit it was
found far from (`_Measured`): BudgetFit measures the round's request, and Compaction,
PairValidation and `fixed_tokens`/`history_tokens` get the same answer from five identity
checks, the manifest its items from the tally it was made with. Any other tuple or
estimator is measured anew; the next round's request of the same estimator and purpose
borrows that tally instead of looking the session's up.

What a warm round still pays per message of the history: `shared_prefix` one ``memcmp``
(a pointer compared in place). The manifest's items are a `ManifestItems` that shares every
chunk of `CHUNK` items with the last manifest (`ItemsDraft`), so the manifest costs the
new items and one pointer per chunk. Copying every item into a tuple cost 60–90 µs a round
at 10,000 messages and made that round 2.3–3.9× a 100-message one; shared, 1.1–1.6×.
"""

from __future__ import annotations

import anyio

from harness.accounting._tally import (
    BLOCKS_FRAMING,
    REPLY_PRIMING,
    HistoryTally,
    _last_measured,
    _measure_request,
    _measured,
    _run_tally,
    _tally,
    blocks_framing,
    system_part_tokens,
    system_tokens,
    tally_of,
)
from harness.accounting.cache_break import shared_prefix_of
from harness.accounting.cache_verdict import answered, cache_verdict, expected_cached
from harness.accounting.prefix import shared_prefix
from harness.errors import ContextBuildError, validation_of
from harness.events import AgentEvent
from harness.manifest import ContextManifest, ManifestItems
from harness.messages import Message
from harness.request import ModelRequest
from harness.tokens import EXACT_METHODS, CountCache, TokenEstimator, approximate, message_key
from harness.tokens.calibration import LEARNED, CalibratedEstimator


def fixed_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return what every request pays regardless of history: System, tools, priming."""
    last = _last_measured(request, estimator)
    if last is not None:
        return last.fixed
    tally = _tally(request, estimator)
    if tally is not None:
        return tally.costs.fixed(request)
    return system_tokens(request, estimator) + estimator.count_tools(request.tools) + REPLY_PRIMING


def blocks_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return the token cost of the rendered blocks message."""
    if not request.blocks:
        return 0
    tally = _tally(request, estimator)
    if tally is not None:
        return tally.costs.blocks(request.blocks)
    return blocks_framing(request.blocks) + sum(estimator.count_block(b) for b in request.blocks)


def exact_counter_of(estimator: TokenEstimator) -> TokenEstimator | None:
    """Return the exact estimator to recount with near the limit, or ``None``.

    ``None`` when the estimator is exact already or no tokenizer ships offline for its family.
    """
    if estimator.exact:
        return None
    counter: TokenEstimator | None = getattr(estimator, "exact_counter", None)
    return counter


def floor_of(estimator: TokenEstimator) -> float:
    """Return the estimator's bound: its count is at least this share of the exact count."""
    floor = getattr(estimator, "floor", 1.0)
    return float(floor) if isinstance(floor, (int, float)) and 0 < floor <= 1 else 1.0


def ceiling_of(estimator: TokenEstimator) -> TokenEstimator | None:
    """Return a counter whose counts are never below the exact recount's, or ``None``.

    The UTF-8 bytes for every family with an offline tokenizer (`harness.tokens.ByteCeiling`),
    known without loading that tokenizer; ``None`` for exact estimators and for estimators
    that name none.
    """
    if estimator.exact:
        return None
    ceiling: TokenEstimator | None = getattr(estimator, "ceiling", None)
    return ceiling


def lower_bound_of(estimator: TokenEstimator) -> TokenEstimator | None:
    """Return a counter whose counts are never above the exact count's, or ``None``.

    The UTF-8 bytes over the family's longest token (`harness.tokens.ByteFloor`) for every
    family with an offline tokenizer, known without loading it (exact estimators have one
    too); ``None`` for estimators that name none (a calibrated or custom one).
    """
    lower: TokenEstimator | None = getattr(estimator, "lower_bound", None)
    return lower


FAR_OVER = 2.0
"""A request whose fast estimate is over this many times its input limit is over it.

Decided without an exact count (`far_over`): the estimate ÷ exact of every text class we
measured stays far below 2 (the floor side is 0.6), so such a request is over its limit by
a wide margin. A statistic, not a proof — but it only ever decides "over", and an over
request is compacted, cut or refused, never sent: the budget promise does not rest on it.
Whatever is then kept is counted exactly where it is near its limit."""


def fast_estimator_of(estimator: TokenEstimator) -> TokenEstimator:
    """Return the fast estimate's estimator: ``estimator`` itself, or its family's approximate one.

    A request switched to exact counting (`counted_near_limit`) still has a fast estimate,
    for the decisions an estimate settles (`far_over`).
    """
    if not estimator.exact:
        return estimator
    for family, (method, _) in EXACT_METHODS.items():
        if method == estimator.method:
            return approximate(family)
    return estimator


def far_over(tokens: int, limit: int) -> bool:
    """Return whether a fast estimate of ``tokens`` shows a request over ``limit`` (`FAR_OVER`)."""
    return limit > 0 and tokens > FAR_OVER * limit


def near_limit(
    tokens: int, limit: int, estimator: TokenEstimator, *, ceiling: int | None = None
) -> bool:
    """Return whether an estimate of ``tokens`` is too close to ``limit`` to decide on.

    With ``ceiling`` (a count never below the exact one: `ceiling_of`), the answer is
    certain: false when the ceiling is within the limit, otherwise true wherever an exact
    recount is possible. Without it, the estimate is compared with ``floor × limit`` — a
    floor measured on generated text out of sample, not a proof: pass the ceiling.
    """
    if limit <= 0:
        return False
    if ceiling is not None:
        if ceiling <= limit:
            return False
    elif tokens < limit * floor_of(estimator):
        return False
    # Last: the exact counter of an approximate estimator loads its tokenizer (seconds).
    return exact_counter_of(estimator) is not None


def sure_count(text: str, estimator: TokenEstimator, limit: int) -> int:
    """Return the tokens of ``text``: the estimate where it fits for sure, else the exact count.

    Sure means its ceiling (`ceiling_of`, its UTF-8 bytes) is within ``limit``.
    """
    tokens = estimator.count(text)
    ceiling = ceiling_of(estimator) if limit > 0 else None
    bound = ceiling.count(text) if ceiling is not None else None
    if near_limit(tokens, limit, estimator, ceiling=bound):  # far from it, nothing is loaded
        exact = exact_counter_of(estimator)
        if exact is not None:
            return exact.count(text)
    return tokens


def ceiling_tokens(request: ModelRequest, ceiling: TokenEstimator) -> int:
    """Return ``request``'s input tokens counted by ``ceiling`` (running totals in a run).

    Kept apart from the run's last measurement (`_Measured`), which stays the estimate's.
    Any bound counts so: `lower_bound_of`'s too.
    """
    run = request.run
    if run is None:
        return _counted_whole(request, ceiling)
    tally = _run_tally(run, request, ceiling)
    costs = tally.costs
    total = costs.fixed(request) + tally.measure(request.history, run)
    return total + costs.blocks(request.blocks)


def counted_near_limit(request: ModelRequest) -> tuple[ModelRequest, int]:
    """Return ``request`` and its input tokens, switched to exact counting near its limit.

    Where the request fits for sure — its ceiling (`ceiling_of`: its UTF-8 bytes, never
    below its exact tokens) is within ``request.input_limit`` — it is returned as it is with
    its estimate. Anywhere else (see `near_limit`), the request's policy gets the exact
    estimator — so every later decision on it counts exactly, and its manifest names the
    exact counting method — and the exact total is returned, except where the request is
    over its limit for sure (`over_for_sure`: its floor, the bytes over the family's longest
    token, is over it): then the floor is returned, a total over the limit and never above
    the exact one, and the history is not counted exactly (a request 50x over its limit
    needs no exact count to be refused or compacted; BudgetFit's minimum and Compaction's
    cut count exactly what they keep). An estimator with no ceiling (a custom one) is
    trusted on its ``floor``.

    Counting a big new text blocks the caller: async code calls `count_off_loop` first, or
    `acounted_near_limit`.
    """
    learned = _learned(request)
    if learned is not None:
        request = request.replace(policy=request.policy.replace(estimator=learned))
    est = request.estimator
    limit = request.input_limit
    run = request.run
    if est.exact and _marked_over(request):  # switched by an earlier layer, over for sure
        marked: _OverForSure = request.run.slots[_OVER_KEY]  # type: ignore[union-attr]
        if far_over(marked.history_estimate, limit):
            return request, int(marked.history_estimate / FAR_OVER)
        low = over_for_sure(request, est)
        if low is not None:
            return request, low
    if run is None:
        measured = None
    else:
        measured = _last_measured(request, est) or _measure_request(request, est, run)
        if measured.far_from == limit:
            return request, measured.total  # decided for these very parts this round
    tokens = measured.total if measured is not None else estimate_request(request, est)
    if far_over(tokens, limit) and not est.exact:
        # Over by far (`FAR_OVER`): exact from here on for what is kept, nothing counted now.
        exact = exact_counter_of(est)  # its tokenizer is loaded on its first count
        if exact is None:
            return request, tokens
        history = measured.history_tokens if measured is not None else history_tokens(request, est)
        if run is not None:
            run.slots[_OVER_KEY] = _OverForSure(request.history, history)
        switched = request.replace(policy=request.policy.replace(estimator=exact))
        return switched, int(tokens / FAR_OVER)
    ceiling = ceiling_of(est) if limit > 0 else None
    bound = ceiling_tokens(request, ceiling) if ceiling is not None else None
    # near_limit first: where the request fits for sure the exact tokenizer is not even
    # loaded (loading one takes seconds, which a fresh process's first request would wait on).
    if not near_limit(tokens, limit, est, ceiling=bound):
        if measured is not None:
            measured.far_from = limit
        return request, tokens
    exact = exact_counter_of(est)
    if exact is None:
        return request, tokens
    switched = request.replace(policy=request.policy.replace(estimator=exact))
    if bound is not None:  # its ceiling is over the limit: it may be over for sure
        low = over_for_sure(request, est)
        if low is not None:
            return switched, low
    return switched, estimate_request(switched, exact)


def over_for_sure(request: ModelRequest, estimator: TokenEstimator | None = None) -> int | None:
    """Return ``request``'s floor when it is over ``request.input_limit`` for sure, else ``None``.

    The floor (`lower_bound_of`: the bytes over the longest token, never above the exact
    count) needs no tokenizer. Over for sure, the request is marked in its run
    (`_OverForSure`): later layers that recount it with the exact estimator
    (`counted_near_limit`, `history_over`) first ask its floor again instead of counting
    the whole history exactly.
    """
    est = estimator or request.estimator
    limit = request.input_limit
    lower = lower_bound_of(est) if limit > 0 else None
    if lower is None:
        return None
    low = ceiling_tokens(request, lower)
    if low <= limit:
        return None
    run = request.run
    if run is not None:
        run.slots[_OVER_KEY] = _OverForSure(request.history)
    return low


class _OverForSure:
    """The history of the run's last request found over its limit, and its fast estimate.

    ``history_estimate`` is 0 where the floor decided (`over_for_sure`).
    """

    __slots__ = ("history", "history_estimate")

    def __init__(self, history: tuple[Message, ...], history_estimate: int = 0) -> None:
        self.history = history
        self.history_estimate = history_estimate


_OVER_KEY = id(_OverForSure)
"""Where a run keeps its `_OverForSure` (the class is the owner, alive with the module)."""


def _marked_over(request: ModelRequest) -> bool:
    """Return whether ``request``'s history is the one its run last found over for sure."""
    run = request.run
    if run is None:
        return False
    marked: _OverForSure | None = run.slots.get(_OVER_KEY)
    return marked is not None and marked.history is request.history


def history_over(
    request: ModelRequest, budget: int, estimator: TokenEstimator | None = None
) -> bool:
    """Return whether ``request.history`` holds more than ``budget`` tokens.

    Where the run found this very history over its limit, its fast estimate (over
    `FAR_OVER` times the budget) or its floor (`lower_bound_of`) decides first: over the budget for sure, the history is not counted
    exactly. Otherwise, or in doubt, the history's tokens (`history_tokens`) decide.
    """
    est = estimator or request.estimator
    if _marked_over(request):
        marked: _OverForSure = request.run.slots[_OVER_KEY]  # type: ignore[union-attr]
        if far_over(marked.history_estimate, budget):
            return True
        lower = lower_bound_of(est)
        if lower is not None and history_tokens(request, lower) > budget:
            return True
    return history_tokens(request, est) > budget


LEARNED_METHOD = "bound:unknown"
"""The counting method whose factor is learned from the provider's usage (`observe_usage`)."""


def _learned(request: ModelRequest) -> TokenEstimator | None:
    """Return the learned estimator for ``request``'s model when it counts with the bound."""
    est = request.estimator
    if est.method != LEARNED_METHOD:
        return None
    return LEARNED.estimator(est, request.model)


def observe_usage(request: ModelRequest, api_base: str | None, reported: int) -> None:
    """Learn from the prompt tokens a provider reported for ``request`` (as it was sent).

    Only for models counted with the conservative bound (`LEARNED_METHOD`: no offline
    tokenizer): the raw bound of the very request is compared with ``reported`` per
    (model, api_base) (`harness.tokens.calibration.UsageLearner`), and the model's later
    requests are counted with the learned factor by `counted_near_limit` — never below any
    ratio observed, raised at once by a report above the calibrated count.
    """
    est = request.policy.estimator
    if est is None:  # a bare request (not prepared by a stack): nothing of ours to calibrate
        return
    base = est.base if isinstance(est, CalibratedEstimator) else est
    if base.method != LEARNED_METHOD or reported <= 0 or request.input_limit == 0:
        return
    LEARNED.observe(
        request.model, api_base, estimated=estimate_request(request, base), reported=reported
    )


OFF_LOOP_CHARS = 16_384
"""A text this long or longer is counted in a worker thread by `count_off_loop` (an exact
count of one takes about 2-5 ms; an estimate far less, but a pathological one more)."""


async def count_off_loop(request: ModelRequest) -> None:
    """Count ``request``'s big new texts in a worker thread, for `counted_near_limit` to find.

    Every text of `OFF_LOOP_CHARS` or more that the request's estimator, its ceiling and —
    where the ceiling is over the limit and the estimate is not over it by far (`far_over`)
    — its exact counter have not counted yet is counted off the event loop, into their
    content-keyed caches (where the ceiling is over the limit, the exact tokenizer is loaded
    in a worker thread too, while the estimate counts); `counted_near_limit` on the same request then only looks them up, and so does
    every later layer on the same messages. Smaller texts stay on the loop: a thread costs
    more than counting them. The loop is never held for more than a few milliseconds: a 16
    MB message takes seconds to count, in the thread, while other sessions go on.
    """
    run = request.run
    if run is not None:
        done: _OffLoop | None = run.slots.get(_OFF_LOOP_KEY)
        if done is not None and done.covers(request):
            return  # an outer layer of this round counted these very parts
    await _count_off_loop(request)
    if run is not None:
        run.slots[_OFF_LOOP_KEY] = _OffLoop(request)


class _OffLoop:
    """The parts and estimator of the last request `count_off_loop` counted in a run.

    BudgetFit, Compaction and PairValidation each call it on the round's request, mostly
    with the very same parts: the later calls cost five identity checks.
    """

    __slots__ = ("blocks", "estimator", "history", "limit", "system")

    def __init__(self, request: ModelRequest) -> None:
        self.history = request.history
        self.system = request.system
        self.blocks = request.blocks
        self.estimator = request.policy.estimator
        self.limit = request.input_limit

    def covers(self, request: ModelRequest) -> bool:
        """Return whether ``request`` carries these very parts."""
        return (
            self.history is request.history
            and self.estimator is request.policy.estimator
            and self.system is request.system
            and self.blocks is request.blocks
            and self.limit == request.input_limit
        )


_OFF_LOOP_KEY = id(_OffLoop)
"""Where a run keeps its `_OffLoop` (the class is the owner, alive with the module)."""


async def _count_off_loop(request: ModelRequest) -> None:
    est = request.estimator
    if est.exact and _marked_over(request):
        return  # over by far: what is kept is counted where it is looked at, not all of it
    limit = request.input_limit
    ceiling = ceiling_of(est) if limit > 0 else None
    if ceiling is None:
        await _count_big(request, est)
        return
    await _count_big(request, ceiling)  # the UTF-8 bytes: ASCII costs nothing
    if ceiling_tokens(request, ceiling) <= limit:
        await _count_big(request, est)
        return
    # In doubt or over: the exact counter will be needed, for all or for what is kept. Its
    # tokenizer loads in a worker thread while the estimate counts in another.
    exact = exact_counter_of(est)
    load = getattr(exact, "load", None) if not getattr(exact, "loaded", True) else None
    async with anyio.create_task_group() as tg:
        if load is not None:
            tg.start_soon(anyio.to_thread.run_sync, load)
        await _count_big(request, est)
    if exact is not None and not far_over(estimate_request(request, est), limit):
        await _count_big(request, exact)


async def acounted_near_limit(request: ModelRequest) -> tuple[ModelRequest, int]:
    """`counted_near_limit` for async code: big texts are counted off the loop first."""
    await count_off_loop(request)
    return counted_near_limit(request)


async def asure_count(text: str, estimator: TokenEstimator, limit: int) -> int:
    """`sure_count` for async code: a text of `OFF_LOOP_CHARS` or more is counted in a thread."""
    if len(text) < OFF_LOOP_CHARS:
        return sure_count(text, estimator, limit)
    return await anyio.to_thread.run_sync(sure_count, text, estimator, limit)


def _size(message: Message) -> int:
    """Return the characters ``message`` counts (text, tool-call arguments, reasoning)."""
    content = message.content
    if isinstance(content, str):
        size = len(content)
    else:
        size = 0 if content is None else sum(len(p.text or "") for p in content)
    for call in message.tool_calls:
        size += len(call.arguments)
    if message.reasoning_content:
        size += len(message.reasoning_content)
    return size


async def _count_big(request: ModelRequest, est: TokenEstimator) -> None:
    """Count ``request``'s new texts of `OFF_LOOP_CHARS` or more with ``est`` in a thread.

    New: past the history its run's tally measured last (all of it without a run), not in
    ``est``'s cache; System parts and blocks are few and checked each time.
    """
    history = request.history
    run = request.run
    start = 0
    if run is not None:
        tally = _run_tally(run, request, est)
        start = shared_prefix(tally.history, history, run)
    counts = getattr(est, "cache", None)
    known = counts.messages if isinstance(counts, CountCache) else {}
    known_blocks = counts.blocks if isinstance(counts, CountCache) else {}
    big: list[Message] = [
        m for m in history[start:] if _size(m) >= OFF_LOOP_CHARS and message_key(m) not in known
    ]
    for part in request.system:
        if len(part.text) >= OFF_LOOP_CHARS:
            message = Message(role="system", content=part.text, id=f"system/{part.name}")
            if message_key(message) not in known:
                big.append(message)
    blocks = [
        b
        for b in request.blocks
        if len(b.text) >= OFF_LOOP_CHARS and hash((b.source_id, b.text)) not in known_blocks
    ]
    if not big and not blocks:
        return

    def count_all() -> None:
        for message in big:
            est.count_message(message)
        for block in blocks:
            est.count_block(block)

    await anyio.to_thread.run_sync(count_all)


def estimate_request(request: ModelRequest, estimator: TokenEstimator | None = None) -> int:
    """Return the estimated input tokens of ``request`` as it would be sent."""
    est = estimator or request.estimator
    measured = _measured(request, est)
    if measured is None:
        return _counted_whole(request, est)
    return measured.total


def _counted_whole(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return ``request``'s input tokens by ``estimator``, every part counted (no run tally)."""
    return (
        system_tokens(request, estimator)
        + estimator.count_tools(request.tools)
        + REPLY_PRIMING
        + estimator.count_messages(request.history)
        + blocks_tokens(request, estimator)
    )


def history_tokens(request: ModelRequest, estimator: TokenEstimator | None = None) -> int:
    """Return the tokens of ``request.history``: a running total within an agent call."""
    est = estimator or request.estimator
    last = _last_measured(request, est)
    if last is not None:
        return last.history_tokens
    tally = _tally(request, est)
    if tally is None:
        return est.count_messages(request.history)
    return tally.measure(request.history, request.run)


def manifest_items(
    request: ModelRequest, estimator: TokenEstimator | None = None
) -> tuple[int, ManifestItems]:
    """Return the estimated total and one manifest item per system part, message, block and tool.

    The total is the sum of the items plus framing, and equals `estimate_request`. Within a
    run, the items of the history prefix the last manifest shared are reused and the
    System, block and tool items are kept while those parts stay the same (`HistoryTally`).
    """
    total, items, _ = _items_and_tally(request, estimator or request.estimator)
    return total, items


def _items_and_tally(
    request: ModelRequest, est: TokenEstimator
) -> tuple[int, ManifestItems, HistoryTally]:
    """Return `manifest_items` and the tally that measured them (the manifest reads it again)."""
    last = _last_measured(request, est)  # the round's request was measured just before
    if last is not None and last.purpose == request.ids.purpose:
        tally = last.tally  # its costs saw these very parts; blocks: also when there are none
        tally.costs.blocks(request.blocks)
        return last.total, tally.items(request), tally
    tally = _tally(request, est) or HistoryTally(est)
    total, items = tally.manifest_items(request)
    return total, items, tally


def build_manifest(
    request: ModelRequest, estimator: TokenEstimator | None = None
) -> ContextManifest:
    """Return the manifest of ``request`` as it is about to be sent (validation ``passed``)."""
    est = estimator or request.estimator
    total, items, tally = _items_and_tally(request, est)
    shared = shared_prefix_of(request)
    broke = None if shared is None else shared.broke
    expected = None
    if shared is not None and request.ids.session_id:  # stateless: no previous request known
        if tally.history is not request.history:
            tally.measure(request.history, request.run)
        expected = expected_cached(shared, tally)
    return ContextManifest(
        call_id=request.ids.call_id,
        purpose=request.ids.purpose,
        model=request.model,
        estimated_input_tokens=total,
        input_limit=request.input_limit,
        counting_method=est.method,
        exact=est.exact,
        items=items,
        transforms=request.transforms,
        agent_id=request.ids.agent_id,
        session_id=request.ids.session_id,
        run_id=request.ids.run_id,
        calibration=getattr(est, "factor", 1.0),
        cache_break=None if broke is None else broke.label,
        cache_expected=expected,
    )


def failed_manifest(request: ModelRequest, error: BaseException) -> ContextManifest:
    """Return the manifest of ``request`` whose preparation stopped with ``error`` (no items)."""
    return ContextManifest(
        call_id=request.ids.call_id,
        purpose=request.ids.purpose,
        model=request.model,
        estimated_input_tokens=-1,
        input_limit=request.input_limit,
        counting_method="unavailable",
        exact=False,
        transforms=error.transforms if isinstance(error, ContextBuildError) else (),
        validation=validation_of(error),
        agent_id=request.ids.agent_id,
        session_id=request.ids.session_id,
        run_id=request.ids.run_id,
        error=type(error).__name__,
    )


def report_manifest(manifest: ContextManifest, request: ModelRequest) -> None:
    """Hand ``manifest`` to the request's policy observer and its call's event stream."""
    if request.policy.observer is not None:
        request.policy.observer(manifest)
    if request.run is not None and request.run.emit is not None:
        request.run.emit(AgentEvent(kind="context_build", manifest=manifest))


__all__ = [
    "BLOCKS_FRAMING",
    "FAR_OVER",
    "LEARNED_METHOD",
    "OFF_LOOP_CHARS",
    "REPLY_PRIMING",
    "HistoryTally",
    "acounted_near_limit",
    "answered",
    "asure_count",
    "blocks_framing",
    "blocks_tokens",
    "build_manifest",
    "cache_verdict",
    "ceiling_of",
    "ceiling_tokens",
    "count_off_loop",
    "counted_near_limit",
    "estimate_request",
    "exact_counter_of",
    "failed_manifest",
    "far_over",
    "fast_estimator_of",
    "fixed_tokens",
    "floor_of",
    "history_over",
    "history_tokens",
    "lower_bound_of",
    "manifest_items",
    "near_limit",
    "observe_usage",
    "over_for_sure",
    "report_manifest",
    "sure_count",
    "system_part_tokens",
    "system_tokens",
    "tally_of",
]
