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
whose history starts with the one measured before (`harness.prefix.shared_prefix`) costs a
count per *new* message only, however often BudgetFit, Compaction, PairValidation and the
manifest measure it — also in the first round of the session's next call. The System
parts', tool schemas' and blocks' costs and items are kept beside them while requests carry
the same (or equal) tuples (`_Costs`). Without a run scope every measurement counts the
whole request (cached counts).

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

from array import array
from collections.abc import Sequence
from weakref import WeakSet

import anyio

from harness.accounting.prefix import shared_prefix
from harness.blocks import ContextBlock, content_hash
from harness.errors import ContextBuildError, validation_of
from harness.events import AgentEvent
from harness.manifest import ContextManifest, ItemsDraft, ManifestItem, ManifestItems
from harness.markers import is_summary
from harness.messages import Message, ToolSchema
from harness.request import ModelRequest, RunScope, SystemPart
from harness.tokens import MESSAGE_OVERHEAD, CountCache, TokenEstimator, message_key

REPLY_PRIMING = 3
"""Tokens every request spends priming the assistant's reply."""


BLOCKS_FRAMING = 2 * (MESSAGE_OVERHEAD + 6)
"""Tokens of the messages that hold the blocks, beyond the blocks themselves (markers): stable
reference material before the history and the changing blocks after it (`ModelRequest.render`)."""


def system_part_tokens(part: SystemPart, estimator: TokenEstimator) -> int:
    """Return one part's share of the merged System message: its text and a separator."""
    message = Message(role="system", content=part.text, id=f"system/{part.name}")
    return estimator.count_message(message) - MESSAGE_OVERHEAD + 1


def system_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return the token cost of the merged System message."""
    if not request.system:
        return 0
    return MESSAGE_OVERHEAD + sum(system_part_tokens(p, estimator) for p in request.system)


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
    return BLOCKS_FRAMING + sum(estimator.count_block(b) for b in request.blocks)


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
    """
    run = request.run
    if run is None:
        return (
            system_tokens(request, ceiling)
            + ceiling.count_tools(request.tools)
            + REPLY_PRIMING
            + ceiling.count_messages(request.history)
            + blocks_tokens(request, ceiling)
        )
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
    exact counting method — and the exact total is returned. An estimator with no ceiling
    (a custom one) is trusted on its ``floor``.

    Counting a big new text blocks the caller: async code calls `count_off_loop` first, or
    `acounted_near_limit`.
    """
    est = request.estimator
    limit = request.input_limit
    run = request.run
    if run is None:
        measured = None
    else:
        measured = _last_measured(request, est) or _measure_request(request, est, run)
        if measured.far_from == limit:
            return request, measured.total  # decided for these very parts this round
    tokens = measured.total if measured is not None else estimate_request(request, est)
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
    return switched, estimate_request(switched, exact)


OFF_LOOP_CHARS = 16_384
"""A text this long or longer is counted in a worker thread by `count_off_loop` (an exact
count of one takes about 2-5 ms; an estimate far less, but a pathological one more)."""


async def count_off_loop(request: ModelRequest) -> None:
    """Count ``request``'s big new texts in a worker thread, for `counted_near_limit` to find.

    Every text of `OFF_LOOP_CHARS` or more that the request's estimator, its ceiling and —
    where the ceiling is over the limit — its exact counter have not counted yet is counted
    off the event loop (the exact tokenizer is loaded there too), into their content-keyed
    caches; `counted_near_limit` on the same request then only looks them up, and so does
    every later layer on the same messages. Smaller texts stay on the loop: a thread costs
    more than counting them. The loop is never held for more than a few milliseconds: a 16
    MB message takes seconds to count, in the thread, while other sessions go on.
    """
    est = request.estimator
    await _count_big(request, est)
    limit = request.input_limit
    ceiling = ceiling_of(est) if limit > 0 else None
    if ceiling is None:
        return
    await _count_big(request, ceiling)
    if ceiling_tokens(request, ceiling) <= limit:
        return
    if est not in _EXACT_READY:
        exact = await anyio.to_thread.run_sync(exact_counter_of, est)  # may load a tokenizer
        _EXACT_READY.add(est)
    else:
        exact = exact_counter_of(est)
    if exact is not None:
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


_EXACT_READY: WeakSet[TokenEstimator] = WeakSet()
"""Estimators whose exact counter was fetched (its tokenizer loaded) off the loop."""


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
        return (
            system_tokens(request, est)
            + est.count_tools(request.tools)
            + REPLY_PRIMING
            + est.count_messages(request.history)
            + blocks_tokens(request, est)
        )
    return measured.total


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


class _Costs:
    """What a request's System parts, tool schemas and blocks cost with one estimator.

    Each part is kept with the tuple it was computed for (held, so its ``id`` stays its own)
    and reused while a request carries the same tuple or an equal one: a warm round pays an
    identity check per part instead of a count (and a JSON encoding per tool schema). Their
    manifest items are made on the first manifest that asks.
    """

    __slots__ = (
        "_block_items",
        "_block_tokens",
        "_blocks",
        "_system",
        "_system_items",
        "_system_tokens",
        "_tail_items",
        "_tool_items",
        "_tool_tokens",
        "_tools",
        "estimator",
    )

    def __init__(self, estimator: TokenEstimator) -> None:
        self.estimator = estimator
        self._system: tuple[SystemPart, ...] | None = None
        self._system_tokens = 0
        self._system_items: tuple[ManifestItem, ...] | None = None
        self._tools: tuple[ToolSchema, ...] | None = None
        self._tool_tokens = 0
        self._tool_items: tuple[ManifestItem, ...] | None = None
        self._blocks: tuple[ContextBlock, ...] | None = None
        self._block_tokens = 0
        self._block_items: tuple[ManifestItem, ...] | None = None
        self._tail_items: tuple[ManifestItem, ...] | None = None

    def fixed(self, request: ModelRequest) -> int:
        """Return System + tool schemas + reply priming for ``request``."""
        system, tools = request.system, request.tools
        if system is not self._system and system != self._system:
            self._system = system
            self._system_tokens = system_tokens(request, self.estimator)
            self._system_items = None
        if tools is not self._tools and tools != self._tools:
            self._tools = tools
            self._tool_tokens = self.estimator.count_tools(tools)
            self._tool_items = self._tail_items = None
        return self._system_tokens + self._tool_tokens + REPLY_PRIMING

    def blocks(self, blocks: tuple[ContextBlock, ...]) -> int:
        """Return the cost of the blocks message for ``blocks`` (0 when there are none)."""
        if blocks is not self._blocks and blocks != self._blocks:
            count_block = self.estimator.count_block
            self._blocks = blocks
            self._block_tokens = (
                BLOCKS_FRAMING + sum(count_block(b) for b in blocks) if blocks else 0
            )
            self._block_items = self._tail_items = None
        return self._block_tokens

    def head_items(self, request: ModelRequest) -> tuple[ManifestItem, ...]:
        """Return the System parts' manifest items (`fixed` must have seen ``request``)."""
        if self._system_items is None:
            self._system_items = _system_items(request.system, self.estimator)
        return self._system_items

    def tail_items(self, request: ModelRequest) -> tuple[ManifestItem, ...]:
        """Return the blocks' then the tool schemas' items (`fixed`, `blocks` saw ``request``)."""
        if self._tail_items is None:
            if self._block_items is None:
                self._block_items = _block_items(request.blocks, self.estimator)
            if self._tool_items is None:
                self._tool_items = _tool_items(request.tools, self.estimator)
            self._tail_items = self._block_items + self._tool_items
        return self._tail_items


def _system_items(
    system: tuple[SystemPart, ...], estimator: TokenEstimator
) -> tuple[ManifestItem, ...]:
    return tuple(
        ManifestItem(
            kind="system",
            source_id=f"system/{part.name}",
            tokens=system_part_tokens(part, estimator),
            placement="system",
        )
        for part in system
    )


def _block_items(
    blocks: tuple[ContextBlock, ...], estimator: TokenEstimator
) -> tuple[ManifestItem, ...]:
    return tuple(
        ManifestItem(
            kind="block",
            source_id=block.source_id,
            tokens=estimator.count_block(block),
            placement=block.where,
            revision=block.revision,
            content_hash=content_hash(block.text),
        )
        for block in blocks
    )


def _tool_items(
    tools: tuple[ToolSchema, ...], estimator: TokenEstimator
) -> tuple[ManifestItem, ...]:
    return tuple(
        ManifestItem(
            kind="tool_schema",
            source_id=f"tool/{tool.name}",
            tokens=estimator.count_tools((tool,)),
            placement="tools",
        )
        for tool in tools
    )


class HistoryTally:
    """The token counts and manifest items of the history one run measured last.

    ``sums[i]`` is the tokens of the first ``i`` messages. The manifest's items are kept as
    a draft (`ItemsDraft`): the System parts' items, then one item per message of the first
    ``made`` messages; each manifest adds the blocks' and tool schemas' items behind them.
    Measuring a history that shares a prefix with the last one keeps the prefix and counts
    the rest; the next manifest cuts the draft back to the shared prefix and appends items
    for the new messages only, sharing the draft's full chunks with the last manifest. Holds
    8 bytes per message beside the items; lives as long as the session's scratch.
    """

    __slots__ = ("_draft", "_head", "costs", "estimator", "history", "made", "sums", "users")

    def __init__(self, estimator: TokenEstimator) -> None:
        self.estimator = estimator
        """What counts (held, so no other estimator can take its ``id`` meanwhile)."""
        self.history: tuple[Message, ...] = ()
        self.sums = array("q", (0,))
        self.users = array("q")
        """The positions of the user turns (user messages that are not summaries), in order."""
        self.costs = _Costs(estimator)
        """The System parts', tool schemas' and blocks' costs with this estimator."""
        self.made = 0
        """How many leading messages of ``history`` have their item in the draft."""
        self._draft = ItemsDraft()
        self._head: tuple[ManifestItem, ...] = ()

    def measure(self, history: tuple[Message, ...], run: RunScope | None = None) -> int:
        """Return the tokens of ``history``, counting only what the last one did not share.

        ``run`` lets `shared_prefix` reuse a comparison another middleware made this round.
        """
        if history is self.history:
            return self.sums[-1]
        kept = shared_prefix(self.history, history, run)
        sums, users = self.sums, self.users
        del sums[kept + 1 :]
        while users and users[-1] >= kept:
            users.pop()
        if self.made > kept:
            self.made = kept
        total = sums[-1]
        count_message = self.estimator.count_message  # bound once: runs per new message
        for index in range(kept, len(history)):
            message = history[index]
            total += count_message(message)
            sums.append(total)
            if message.role == "user" and not is_summary(message):
                users.append(index)
        self.history = history
        return total

    def newest_user(self, history: tuple[Message, ...], start: int = 0) -> int | None:
        """Return the position of ``history``'s newest user turn at or after ``start``, if any.

        A user turn is a user message that is not a summary (`harness.markers.is_summary`).
        """
        if history is not self.history:
            self.measure(history)
        users = self.users
        return users[-1] if users and users[-1] >= start else None

    def picked(
        self,
        history: tuple[Message, ...],
        picks: Sequence[int],
        tail: int,
        run: RunScope | None = None,
    ) -> int:
        """Return the tokens of ``history``'s messages at ``picks`` and of all from ``tail`` on."""
        if history is not self.history:
            self.measure(history, run)
        sums = self.sums
        total = sums[-1] - sums[tail]
        for index in picks:
            total += sums[index + 1] - sums[index]
        return total

    def manifest_items(self, request: ModelRequest) -> tuple[int, ManifestItems]:
        """Return the total and the manifest items of ``request``, made only for what is new."""
        costs = self.costs
        total = costs.fixed(request) + self.measure(request.history, request.run)
        total += costs.blocks(request.blocks)  # also when there are none: the items follow
        return total, self.items(request)

    def items(self, request: ModelRequest) -> ManifestItems:
        """Return the manifest items of ``request``, made only for what is new.

        The tally's costs must have seen ``request``'s System parts, tool schemas and blocks
        last (`manifest_items` does; so does the measurement `_last_measured` returns).
        """
        costs = self.costs
        history = request.history
        if history is not self.history:
            self.measure(history, request.run)
        head = costs.head_items(request)
        if head is not self._head:  # other System parts: their items lead, start over
            self._draft = ItemsDraft(head)
            self._head = head
            self.made = 0
        made, sums = self.made, self.sums
        new = [
            ManifestItem(
                kind="message",
                source_id=f"history/{message.id}",
                tokens=sums[index + 1] - sums[index],
                placement="history",
                role=message.role,
            )
            for index, message in enumerate(history[made:], made)
        ]
        self.made = len(history)
        return self._draft.update(len(head) + made, new, costs.tail_items(request))


class _Measured:
    """The estimate of the last request a run measured, with the parts it was made from.

    A round's request is measured by BudgetFit, Compaction, PairValidation and the manifest,
    mostly with the very same System parts, tool schemas, history and blocks (each layer
    replaces other fields). Kept in the run's slots, the last answer costs those four
    identity checks and one of the estimator, instead of finding the session's tally and
    asking it again; the parts are held, so no other tuple can take their ``id`` meanwhile.
    Every part is immutable and an estimator counts a given content alike each time, so
    a request that carries the same objects has the same counts. One object per run,
    refilled by each new measurement (`refill`): a round allocates nothing for it, and the
    next request of the same estimator and purpose finds its tally here without a look-up.
    """

    __slots__ = (
        "blocks",
        "estimator",
        "far_from",
        "fixed",
        "history",
        "history_tokens",
        "purpose",
        "system",
        "tally",
        "tools",
        "total",
    )

    def __init__(self, tally: HistoryTally, purpose: str) -> None:
        self.tally = tally
        """The session's tally it was measured with (`tally.estimator` is ``estimator``)."""
        self.purpose = purpose
        """The purpose of the request measured (tallies are per estimator and purpose)."""
        self.estimator: TokenEstimator | None = None
        self.system: tuple[SystemPart, ...] | None = None
        self.tools: tuple[ToolSchema, ...] | None = None
        self.history: tuple[Message, ...] | None = None
        self.blocks: tuple[ContextBlock, ...] | None = None
        self.fixed = 0
        """System, tool schemas and reply priming."""
        self.history_tokens = 0
        """The history's tokens."""
        self.total = 0
        """The whole request's estimate (`estimate_request`)."""
        self.far_from: int | None = None
        """An input limit this estimate was found far from (`near_limit` is false for it)."""

    def refill(self, request: ModelRequest, tally: HistoryTally, run: RunScope | None) -> None:
        """Measure ``request`` with ``tally`` (its estimator's, its purpose's) and keep it."""
        costs = tally.costs
        fixed = costs.fixed(request)
        history = tally.measure(request.history, run)
        blocks = costs.blocks(request.blocks) if request.blocks else 0
        self.estimator = None  # unmatchable until every field below is this request's
        self.tally = tally
        self.purpose = request.ids.purpose
        self.system = request.system
        self.tools = request.tools
        self.history = request.history
        self.blocks = request.blocks
        self.fixed = fixed
        self.history_tokens = history
        self.total = fixed + history + blocks
        self.far_from = None
        self.estimator = tally.estimator


def _last_measured(request: ModelRequest, estimator: TokenEstimator) -> _Measured | None:
    """Return the run's last measurement if ``request`` carries its very parts, else ``None``."""
    run = request.run
    if run is None:
        return None
    last: _Measured | None = run.slots.get(_LAST_KEY)
    if (
        last is not None
        and last.history is request.history
        and last.estimator is estimator
        and last.blocks is request.blocks
        and last.system is request.system
        and last.tools is request.tools
    ):
        return last
    return None


def _measured(request: ModelRequest, estimator: TokenEstimator) -> _Measured | None:
    """Return the run's measurement of ``request`` (kept or made now), ``None`` without a run."""
    run = request.run
    if run is None:
        return None
    last = _last_measured(request, estimator)
    return last if last is not None else _measure_request(request, estimator, run)


def _measure_request(request: ModelRequest, estimator: TokenEstimator, run: RunScope) -> _Measured:
    """Measure ``request`` with the session's running totals and keep it as the run's last.

    The run's last measurement lends its tally when it was made with the same estimator for
    the same purpose (the usual case: the round's new request after the last one's manifest).
    """
    last: _Measured | None = run.slots.get(_LAST_KEY)
    if last is None:
        last = run.slots[_LAST_KEY] = _Measured(
            _run_tally(run, request, estimator), request.ids.purpose
        )
        tally = last.tally
    elif last.tally.estimator is estimator and last.purpose == request.ids.purpose:
        tally = last.tally
    else:
        tally = _run_tally(run, request, estimator)
    last.refill(request, tally, run)
    return last


_LAST_KEY = id(_Measured)
"""Where a run keeps its `_Measured` (the class is the owner, alive as long as the module)."""


_MAX_TALLIES = 8
"""Tallies one run keeps (estimator × purpose); a calibrated estimator is new every round."""


class _Tallies(dict[tuple[int, str], HistoryTally]):
    """A run's tallies by (estimator identity, purpose)."""


def _tally(request: ModelRequest, est: TokenEstimator) -> HistoryTally | None:
    run = request.run
    return None if run is None else _run_tally(run, request, est)


def _run_tally(run: RunScope, request: ModelRequest, est: TokenEstimator) -> HistoryTally:
    tallies = run.session_slot(_Tallies, _Tallies)  # one per session
    key = (id(est), request.ids.purpose)
    tally = tallies.get(key)
    if tally is None or tally.estimator is not est:
        if len(tallies) >= _MAX_TALLIES:
            tallies.clear()
        tally = tallies[key] = HistoryTally(est)
    return tally


def tally_of(request: ModelRequest, estimator: TokenEstimator | None = None) -> HistoryTally:
    """Return the running `HistoryTally` of ``request``'s session, estimator and purpose.

    Without a run scope, a fresh one (it counts the whole history once).
    """
    est = estimator or request.estimator
    return _tally(request, est) or HistoryTally(est)


def manifest_items(
    request: ModelRequest, estimator: TokenEstimator | None = None
) -> tuple[int, ManifestItems]:
    """Return the estimated total and one manifest item per system part, message, block and tool.

    The total is the sum of the items plus framing, and equals `estimate_request`. Within a
    run, the items of the history prefix the last manifest shared are reused and the
    System, block and tool items are kept while those parts stay the same (`HistoryTally`).
    """
    est = estimator or request.estimator
    last = _last_measured(request, est)  # the round's request was measured just before
    if last is not None and last.purpose == request.ids.purpose:
        tally = last.tally  # its costs saw these very parts; blocks: also when there are none
        tally.costs.blocks(request.blocks)
        return last.total, tally.items(request)
    tally = _tally(request, est) or HistoryTally(est)
    return tally.manifest_items(request)


def build_manifest(
    request: ModelRequest, estimator: TokenEstimator | None = None
) -> ContextManifest:
    """Return the manifest of ``request`` as it is about to be sent (validation ``passed``)."""
    est = estimator or request.estimator
    total, items = manifest_items(request, est)
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
