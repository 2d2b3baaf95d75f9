"""The accounting memo: a session's running totals and a run's last measurement.

`HistoryTally` keeps the history's tokens and manifest items per session, estimator and
purpose; `_Costs` keeps the System parts', tool schemas' and blocks' costs beside them;
`_Measured` is the run's last measurement, which the other layers of a round get back from
identity checks. `harness.accounting` (the face) says how they are used and exports the
public names. The base costs they add up (`REPLY_PRIMING`, `blocks_framing`,
`system_tokens`) live here too: the memo computes them, and the face imports the memo.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from harness.accounting.prefix import shared_prefix
from harness.blocks import ContextBlock, content_hash
from harness.manifest import ItemsDraft, ManifestItem, ManifestItems
from harness.markers import is_summary
from harness.messages import Message, ToolSchema
from harness.request import ModelRequest, RunScope, SystemPart, is_stable
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator

REPLY_PRIMING = 3
"""Tokens every request spends priming the assistant's reply."""


SECTION_FRAMING: dict[str, int] = {"TASK_STATE": 10, "RUNTIME_STATE": 11, "HARNESS_CONTEXT": 12}
"""Tokens of one placement's section in a blocks message beyond its blocks: its tags
(``<TAG>\\n`` … ``\\n</TAG>``, 9, 10 and 11 tokens in o200k) and the newline that joins it to
the next section or separates its blocks (`harness.request.render_blocks`)."""

BLOCKS_FRAMING = (
    2 * MESSAGE_OVERHEAD + SECTION_FRAMING["HARNESS_CONTEXT"] + sum(SECTION_FRAMING.values())
)
"""The most `blocks_framing` can be: the stable reference message (one ``HARNESS_CONTEXT``
section) before the history and the changing one after it with all three sections
(`ModelRequest.render`). What a layer reserves before it knows which blocks are sent (BudgetFit).
It was ``2 * (MESSAGE_OVERHEAD + 6)`` (20), which a changing message with more than one section
outgrew: 23 tokens short for a stable block and three changing sections (o200k, the chat
framing of OpenAI's cookbook; tests/integration/test_accounting_truth.py)."""


def blocks_framing(blocks: Sequence[ContextBlock]) -> int:
    """Return the tokens of the messages that hold ``blocks`` beyond the blocks themselves.

    Each message's framing and each of its sections' tags (0 without blocks).
    """
    stable = False
    placements: set[str] = set()
    for block in blocks:
        if is_stable(block):
            stable = True
        else:
            placements.add(block.where)
    total = MESSAGE_OVERHEAD + SECTION_FRAMING["HARNESS_CONTEXT"] if stable else 0
    if placements:
        total += MESSAGE_OVERHEAD + sum(SECTION_FRAMING[p] for p in placements)
    return total


def system_part_tokens(part: SystemPart, estimator: TokenEstimator) -> int:
    """Return one part's share of the merged System message: its text and a separator."""
    message = Message(role="system", content=part.text, id=f"system/{part.name}")
    return estimator.count_message(message) - MESSAGE_OVERHEAD + 1


def system_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return the token cost of the merged System message."""
    if not request.system:
        return 0
    return MESSAGE_OVERHEAD + sum(system_part_tokens(p, estimator) for p in request.system)


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
        "_stable_tokens",
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
        self._stable_tokens = 0
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
                blocks_framing(blocks) + sum(count_block(b) for b in blocks) if blocks else 0
            )
            stable = [count_block(b) for b in blocks if is_stable(b)]
            self._stable_tokens = (
                MESSAGE_OVERHEAD + SECTION_FRAMING["HARNESS_CONTEXT"] + sum(stable) if stable else 0
            )
            self._block_items = self._tail_items = None
        return self._block_tokens

    def leading(self, pieces: int) -> int:
        """Return the tokens of the first ``pieces`` of tools, System and stable reference.

        In the order a provider's prompt cache reads them (`ModelRequest.render`; `fixed` and
        `blocks` must have seen the request).
        """
        parts = (self._tool_tokens, self._system_tokens, self._stable_tokens)
        return sum(parts[: max(0, min(pieces, 3))])

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


def _newest_user(history: tuple[Message, ...], start: int) -> int | None:
    """Return the position of ``history``'s newest user turn at or after ``start``, if any."""
    for index in range(len(history) - 1, start - 1, -1):
        message = history[index]
        if message.role == "user" and not is_summary(message):
            return index
    return None


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
            if not self.history:  # cold: the newest user turn, without counting the rest
                return _newest_user(history, start)
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
        """Return the tokens of ``history``'s messages at ``picks`` and of all from ``tail`` on.

        A cold tally counts those messages only: a history over its limit for sure
        (`harness.accounting.over_for_sure`) is never counted whole with the exact estimator.
        """
        if history is not self.history:
            if not self.history:
                count_message = self.estimator.count_message
                chosen = [*picks, *range(tail, len(history))]
                return sum(count_message(history[i]) for i in chosen)
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


_MAX_TALLIES = 12
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
