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
manifest measure it — also in the first round of the session's next call. Without a run
scope every measurement counts the whole history (cached counts).
"""

from __future__ import annotations

from array import array

from harness.blocks import content_hash
from harness.events import AgentEvent
from harness.manifest import ContextManifest, ManifestItem
from harness.messages import Message
from harness.prefix import shared_prefix
from harness.request import ModelRequest, RunScope, SystemPart
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator

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
    return system_tokens(request, estimator) + estimator.count_tools(request.tools) + REPLY_PRIMING


def blocks_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return the token cost of the rendered blocks message."""
    if not request.blocks:
        return 0
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
    return float(floor) if isinstance(floor, int | float) and 0 < floor <= 1 else 1.0


def near_limit(tokens: int, limit: int, estimator: TokenEstimator) -> bool:
    """Return whether an estimate of ``tokens`` is too close to ``limit`` to decide on.

    True when the estimate is not provably within the limit (``tokens ≥ floor × limit``) and
    an exact recount is possible.
    """
    return (
        limit > 0
        and tokens >= limit * floor_of(estimator)
        and exact_counter_of(estimator) is not None
    )


def sure_count(text: str, estimator: TokenEstimator, limit: int) -> int:
    """Return the tokens of ``text``: the estimate far below ``limit``, the exact count near it."""
    tokens = estimator.count(text)
    if near_limit(tokens, limit, estimator):  # far from it, no tokenizer is even loaded
        exact = exact_counter_of(estimator)
        if exact is not None:
            return exact.count(text)
    return tokens


def counted_near_limit(request: ModelRequest) -> tuple[ModelRequest, int]:
    """Return ``request`` and its input tokens, switched to exact counting near its limit.

    Far from ``request.input_limit`` the request is returned as it is with its estimate.
    Near it (see `near_limit`), the request's policy gets the exact estimator — so every
    later decision on it counts exactly, and its manifest names the exact counting method —
    and the exact total is returned.
    """
    est = request.estimator
    tokens = estimate_request(request, est)
    # near_limit first: far from the limit the exact tokenizer is not even loaded (loading
    # one takes seconds, which the first request of a fresh process would block on).
    if not near_limit(tokens, request.input_limit, est):
        return request, tokens
    exact = exact_counter_of(est)
    if exact is None:
        return request, tokens
    switched = request.replace(policy=request.policy.replace(estimator=exact))
    return switched, estimate_request(switched, exact)


def estimate_request(request: ModelRequest, estimator: TokenEstimator | None = None) -> int:
    """Return the estimated input tokens of ``request`` as it would be sent."""
    est = estimator or request.estimator
    return fixed_tokens(request, est) + history_tokens(request, est) + blocks_tokens(request, est)


def history_tokens(request: ModelRequest, estimator: TokenEstimator | None = None) -> int:
    """Return the tokens of ``request.history``: a running total within an agent call."""
    est = estimator or request.estimator
    tally = _tally(request, est)
    if tally is None:
        return est.count_messages(request.history)
    return tally.measure(request.history, request.run)


class HistoryTally:
    """The token counts and manifest items of the history one run measured last.

    ``sums[i]`` is the tokens of the first ``i`` messages; ``items`` the manifest items of
    the first ``len(items)`` messages (made when a manifest asks). Measuring a history that
    shares a prefix with the last one keeps the prefix and counts the rest. Holds 8 bytes
    per message beside the items; lives as long as the run.
    """

    __slots__ = ("estimator", "history", "items", "sums")

    def __init__(self, estimator: TokenEstimator) -> None:
        self.estimator = estimator
        """What counts (held, so no other estimator can take its ``id`` meanwhile)."""
        self.history: tuple[Message, ...] = ()
        self.sums = array("q", (0,))
        self.items: list[ManifestItem] = []

    def measure(self, history: tuple[Message, ...], run: RunScope | None = None) -> int:
        """Return the tokens of ``history``, counting only what the last one did not share.

        ``run`` lets `shared_prefix` reuse a comparison another middleware made this round.
        """
        if history is self.history:
            return self.sums[-1]
        kept = shared_prefix(self.history, history, run)
        sums = self.sums
        del sums[kept + 1 :]
        del self.items[kept:]
        total = sums[-1]
        count_message = self.estimator.count_message  # bound once: runs per new message
        for index in range(kept, len(history)):
            total += count_message(history[index])
            sums.append(total)
        self.history = history
        return total

    def message_items(
        self, history: tuple[Message, ...], run: RunScope | None = None
    ) -> list[ManifestItem]:
        """Return one manifest item per message of ``history``, made only for new ones."""
        self.measure(history, run)
        items, sums = self.items, self.sums
        for index in range(len(items), len(history)):
            message = history[index]
            items.append(
                ManifestItem(
                    kind="message",
                    source_id=f"history/{message.id}",
                    tokens=sums[index + 1] - sums[index],
                    placement="history",
                    role=message.role,
                )
            )
        return items


_MAX_TALLIES = 8
"""Tallies one run keeps (estimator × purpose); a calibrated estimator is new every round."""


class _Tallies(dict[tuple[int, str], HistoryTally]):
    """A run's tallies by (estimator identity, purpose)."""


def _tally(request: ModelRequest, est: TokenEstimator) -> HistoryTally | None:
    run = request.run
    if run is None:
        return None
    tallies = run.session_slot(_Tallies, _Tallies)  # the class is the owner: one per session
    key = (id(est), request.ids.purpose)
    tally = tallies.get(key)
    if tally is None or tally.estimator is not est:
        if len(tallies) >= _MAX_TALLIES:
            tallies.clear()
        tally = tallies[key] = HistoryTally(est)
    return tally


def manifest_items(
    request: ModelRequest, estimator: TokenEstimator | None = None
) -> tuple[int, tuple[ManifestItem, ...]]:
    """Return the estimated total and one manifest item per system part, message, tool and block.

    The total is the sum of the items plus framing, and equals `estimate_request`. Within a
    run, the message items of a history prefix measured before are reused (`HistoryTally`).
    """
    est = estimator or request.estimator
    items: list[ManifestItem] = []
    append = items.append
    total = REPLY_PRIMING
    if request.system:
        total += MESSAGE_OVERHEAD
        for part in request.system:
            tokens = system_part_tokens(part, est)
            total += tokens
            append(
                ManifestItem(
                    kind="system",
                    source_id=f"system/{part.name}",
                    tokens=tokens,
                    placement="system",
                )
            )
    tally = _tally(request, est) or HistoryTally(est)
    items.extend(tally.message_items(request.history, request.run))
    total += tally.measure(request.history, request.run)
    if request.blocks:
        total += BLOCKS_FRAMING
        for block in request.blocks:
            tokens = est.count_block(block)
            total += tokens
            append(
                ManifestItem(
                    kind="block",
                    source_id=block.source_id,
                    tokens=tokens,
                    placement=block.where,
                    revision=block.revision,
                    content_hash=content_hash(block.text),
                )
            )
    for tool in request.tools:
        tokens = est.count_tools((tool,))
        total += tokens
        append(
            ManifestItem(
                kind="tool_schema", source_id=f"tool/{tool.name}", tokens=tokens, placement="tools"
            )
        )
    return total, tuple(items)


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


def report_manifest(manifest: ContextManifest, request: ModelRequest) -> None:
    """Hand ``manifest`` to the request's policy observer and its call's event stream."""
    if request.policy.observer is not None:
        request.policy.observer(manifest)
    if request.run is not None and request.run.emit is not None:
        request.run.emit(AgentEvent(kind="context_build", manifest=manifest))
