"""Compaction: keep the history inside its budget — trim, truncate, then summarise.

Place in the stack: after BudgetFit (which sets ``request.history_budget``, the room left
for the history once System, tools and the kept blocks are counted) and before
PairValidation (which checks the history this layer produced). Without BudgetFit the
budget is the input limit minus the fixed cost and the blocks.

Nothing changes in a round where nothing is due: the history then stays byte for byte the
previous request's, so a provider's prompt cache keeps matching it. A round is due when the
request reaches the token trigger (by default 75 % of the input limit: window-aware) or the
history the message trigger (by default 200 messages; ``trigger_messages`` given alone
replaces the token default) — or, with ``trigger="cost"``, once carrying the long history
has cost what compacting would, at the model's prices with cache reads and writes
(`middleware.compaction._cost`) — when the history exceeds its budget, when
``request.force_compaction`` is set (by OverflowRetry), or when a compaction was asked for
(`harness.compaction_request`: the ``compact_conversation`` tool, `HarnessAgent.compact`,
``harness sessions compact``). ``auto=False`` keeps only the last three. Each compaction is
announced by ``compaction_started`` and ``compaction_finished`` events (a
`harness.events.CompactionReport`, also on `ModelResponse.compactions` and to ``observer``).
Then three stages run in order; each
changes only the *working* history the model sees next (the agent commits it, so nothing is
redone next round), never the agent's ``full_history``:

0. **Mask and supersede** (no model, off by default; `middleware.compaction._masking`):
   with ``mask_observations=M`` every tool output but the newest M becomes a one-line
   placeholder naming how to read it back; with ``supersede_reads`` a file read or listing
   that a later call repeats or a later write made stale becomes a one-line pointer.
   Transforms ``observation_mask:<id>`` and ``superseded_read:<id>``, one per message.
   (With ``summary_keeps_files``, stage 3's summary gets the files the summarised actions
   touched that it does not name, verbatim: ``summary_files_attached:<how many>``.)
1. **Trim old tool outputs** (no model). The newest ``trim_protect_tokens`` of tool output
   are protected; once the older, untrimmed tool outputs add up to ``trim_min_tokens``,
   each becomes a ``trim_preview_chars`` preview (new id, metadata ``trimmed``). In small
   windows both thresholds shrink to 40 % and 20 % of the history budget.
   Transform ``tool_output_trim:<messages>``.
2. **Truncate old tool-call arguments** (off by default). Outside the kept range, string
   arguments longer than ``max_arg_length`` keep their first 20 characters and
   ``truncation_text``. Transform ``tool_args_truncate:<calls>``.
3. **Summarise**, unless the history was only over its budget and the first two stages
   left at least `TRIM_HEADROOM` of it free (a trim that frees less would only delay the
   summary by a few rounds, breaking the cache twice). The long-term-memory hook first
   records lasting facts of the part to be summarised. When the summariser is the agent's
   own model with the default prompt, the summary is asked *in place*: the agent's own
   prefix up to the cut, then one instruction (`middleware.compaction._in_place`), which the
   provider's cache serves; the part of the early history that does not fit goes on top
   as a transcript. Otherwise the summariser (``model``, called directly — not through the
   stack) gets the early part as a transcript, in chunks that fit its window when needed —
   each message in exactly one summary request, then only the partial summaries are
   merged; a chunk the summariser still rejects as too long is halved and only it is
   asked again. The history becomes: the first user message (the task, pinned while it is
   the only user turn, or always with ``pin_first_task``), one summary message, the newest
   user message (what the agent is doing now, kept even when it lies in the early part),
   the kept recent messages. An existing summary is *updated*
   with the new early messages. Transform ``history_compaction:<messages summarised>``.

The cut never separates a tool call from its results (`middleware._history.safe_cut`).
The kept part is bounded by tokens (``keep_tokens``; ``None`` is 35 % of the history
budget) or, with ``keep_tokens=0``, by ``keep_messages`` — and, by tokens, always by
half of ``trigger_messages`` — so after a compaction the history is well below every
trigger and the next rounds append to a byte-stable prefix (task, summary, kept
messages) instead of compacting again. A forced compaction keeps only the last unit; when
it can shrink nothing it raises `ContextOverflowError` with ``reason="nothing_to_compact"``,
which ends OverflowRetry's round without resending the same history.

The stages live apart: trimming and truncation in ``middleware/compaction/_trim.py``, the summariser
side (prompts, rendering, chunk packing, the summary requests and their manifests) in
``middleware/compaction/_summariser.py``, the in-place summary request in
``middleware/compaction/_in_place.py``, the checked settings in
``middleware/compaction/_settings.py``;
this module decides when and where to cut and puts the new history together. A summariser
that fails leaves the early part out of that round only (transforms ``summary_failed:…``
and ``history_dropped:…``, a ``summary_failed`` warning event); the next round tries again.

Cost when nothing is due: one sum of cached per-message counts, bounded by the trigger
(compaction keeps the working history short), not by the session's length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, Literal

import msgspec

from harness.accounting import (
    blocks_tokens,
    count_off_loop,
    counted_near_limit,
    fixed_tokens,
    history_over,
)
from harness.compaction_request import FOCUS_KEY, REQUEST_KEY, request_compaction
from harness.errors import (
    NOTHING_TO_COMPACT,
    ConfigurationError,
    ContextOverflowError,
    ProviderBadRequest,
    ProviderError,
    WorkspaceError,
)
from harness.events import AgentEvent, CompactionReport
from harness.manifest import Transform, TransformKind
from harness.markers import (
    SUMMARISED,
    SUMMARY,
    SUMMARY_FAILED,
    SUMMARY_REQUEST,
)
from harness.messages import Message
from harness.policy import DEFAULT_INPUT_TOKENS
from harness.request import ModelRequest, ModelResponse
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator
from harness.tools import Tool, ToolContext
from harness.types import Concern, Handler, ModelClient, TokenPrices
from middleware._history import safe_cut
from middleware._layout import Layout, current_user, last_unit_start
from middleware._layout import layout as layout_of
from middleware.compaction._cost import (
    EXPECTED_SUMMARY_TOKENS,
    INSTRUCTION_TOKENS,
    CompactionCost,
    compaction_cost,
    prices_of,
)
from middleware.compaction._in_place import focus_line, summarise_in_place
from middleware.compaction._masking import mask_observations, supersede_reads
from middleware.compaction._settings import CompactionSettings
from middleware.compaction._summariser import (
    DEFAULT_SUMMARY_PROMPT,
    HEADER_TOKENS,
    MERGE_PROMPT,
    MIN_TEXT_TOKENS,
    SUMMARY_HEADER,
    UPDATE_PREAMBLE,
    SummaryWriter,
    summary_text,
)
from middleware.compaction._summary_check import keep_files
from middleware.compaction._trim import trim_tool_outputs, truncate_arguments
from middleware.memory import DEFAULT_MEMORY, MemoryStore

TOOL_OUTPUT_TRIM: Final = TransformKind("tool_output_trim")
"""Old tool results cut to a preview: ``tool_output_trim:<how many>``."""
OBSERVATION_MASK: Final = TransformKind("observation_mask")
"""An old tool output replaced by a placeholder: ``observation_mask:<original's id>``."""
SUPERSEDED_READ: Final = TransformKind("superseded_read")
"""A read made stale by a later read or write: ``superseded_read:<original's id>``."""
SUMMARY_FILES: Final = TransformKind("summary_files_attached")
"""Files the summary did not name, attached to it verbatim: ``summary_files_attached:<how many>``."""
TOOL_ARGS_TRUNCATE: Final = TransformKind("tool_args_truncate")
"""Long tool-call arguments shortened: ``tool_args_truncate:<how many>``."""
MEMORY_FAILED: Final = TransformKind("memory_failed")
"""The memory store failed to record the early part: ``memory_failed:<error class>``."""
MEMORY_RECORD: Final = TransformKind("memory_record")
"""The early part recorded in memory: ``memory_record:<what was stored>``."""
HISTORY_COMPACTION: Final = TransformKind("history_compaction")
"""Early messages replaced by a summary: ``history_compaction:<how many>``."""
SUMMARY_FAILURE: Final = TransformKind("summary_failed")
"""The summariser failed: ``summary_failed:<why>`` (with `HISTORY_DROPPED`; the notice that
stands for the early turns carries the `harness.markers.SUMMARY_FAILED` marker)."""
HISTORY_DROPPED: Final = TransformKind("history_dropped", omitted=True)
"""Early messages left out of this round because they could not be summarised:
``history_dropped:<how many>``."""

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "MERGE_PROMPT",
    "REQUEST_KEY",
    "SUMMARY_HEADER",
    "UPDATE_PREAMBLE",
    "Compaction",
    "compact_conversation",
    "last_unit_start",
    "select_cut",
]


KEEP_FRACTION: Final = 0.35
"""The share of the history budget kept verbatim when ``keep_tokens`` is ``None``."""
KEEP_CAP_FRACTION: Final = 0.8
"""The kept part plus the pinned task and newest user message never take more of the budget."""
TRIM_HEADROOM: Final = 0.25
"""A trim that leaves less of the history budget free than this share is not enough on its
own: the summary it would only delay comes in the same round instead, so the provider's
prompt cache breaks once, not twice a few rounds apart."""
SUMMARY_CAP_FRACTION: Final = 0.25
"""A summary longer than this share of the history budget is cut (head and tail kept)."""


def select_cut(
    body: Sequence[Message],
    count: Callable[[Message], int],
    *,
    keep_tokens: int,
    max_messages: int,
) -> int:
    """Return where the kept part of ``body`` starts.

    The result is the smallest safe cut (see `middleware._history.safe_cut`) whose suffix
    holds at most ``keep_tokens`` tokens and ``max_messages`` messages; the last unit is
    always kept, even when it alone is larger. Only the kept units are visited, so the cost
    is O(kept messages), not O(history).

    Args:
        body: the messages that may be summarised or kept, oldest first.
        count: the token count of one message (the estimator's cached ``count_message``).
        keep_tokens: the most tokens the kept part may hold.
        max_messages: the most messages the kept part may hold.

    Returns:
        An index in ``[0, len(body)]``; ``len(body)`` only when ``body`` is empty.
    """
    n = len(body)
    cut = n
    tokens = 0
    while cut > 0:
        start = safe_cut(body, cut - 1)
        for k in range(start, cut):
            tokens += count(body[k])
        if cut < n and (tokens > keep_tokens or n - start > max_messages):
            break
        cut = start
    return cut


def compact_conversation(context: ToolContext, focus: str = "") -> str:
    """Summarise the earlier conversation before your next step, to free context.

    Use it when the conversation has grown long and its early part is no longer needed
    word for word: the early messages are replaced by a summary, the latest are kept.

    Args:
        context: filled in by the agent (not shown to the model).
        focus: what the summary should keep in most detail (optional).
    """
    request_compaction(context.state, focus)
    return (
        "Compaction requested: the earlier conversation will be summarised before your next step."
    )


class Compaction:
    """Keep the working history within its budget: trim, truncate, then summarise.

    Args:
        trigger_messages: summarise when the history holds this many messages (``None``:
            200, a guard beside the token trigger). Given without ``trigger``, it is the
            only trigger besides the budget (the former behaviour).
        trigger: a token threshold for the whole request — a fraction in ``(0, 1]`` of the
            input limit (the model's window minus reserves), or an absolute token count
            (int); ``None`` with ``trigger_messages`` also ``None``: 0.75.
            It lowers the history budget to what the threshold leaves for the history; the
            history exceeding its budget always triggers. ``"cost"``: the cost-aware rule
            (`middleware.compaction._cost`) — compact once what the rounds paid for carrying
            more than a compacted history reaches what compacting costs (the summary request
            and the cache write of the compacted history), at the model's prices
            (``prices``, else the client's, `harness.types.KnowsPrices`: litellm's price
            table for `providers.LiteLLMClient`); the keep range and the summary's room
            stay what 0.75 gives, only the moment changes; where the prices are unknown, 0.75.
        keep_tokens: tokens kept verbatim after a summary; ``None`` is 35 % of the history
            budget (as lowered by ``trigger``); ``0`` keeps ``keep_messages`` messages instead.
        keep_messages: messages kept verbatim when ``keep_tokens`` is 0.
        model: the summariser (default: the agent's client, ``request.run.client``).
        summary_prompt: the summary prompt; must contain ``{messages}`` and may contain
            ``{previous_summary}`` (where an earlier summary to update goes).
        trim_protect_tokens: the newest tool output, in tokens, that is never trimmed.
        trim_min_tokens: trim only once this many tokens of older tool output are
            trimmable; ``None`` disables trimming.
        trim_preview_chars: characters a trimmed tool output keeps.
        truncate_args: truncate long string arguments of old tool calls (stage 2).
        max_arg_length: string arguments longer than this are truncated.
        truncation_text: appended to the first 20 characters of a truncated argument.
        summary_chunk_tokens: the most tokens one summary request may hold, by the fast
            estimate (default: 60 % of the summariser's input limit, from its window and the
            policy, and never more than the estimator's ``floor`` of it, so no request needs
            an exact recount). Requests are still checked against the limit by exact count
            near it.
        memory: the long-term-memory store called before summarising (default: each
            user's own memory file in the agent's workspace, `harness.memory.WorkspaceMemory`;
            shared scopes only when configured); ``None`` disables it.
        compact_tool: give the agent a ``compact_conversation`` tool to ask for a summary.
        in_place_summary: ask for the summary as the agent's own conversation followed by
            one instruction, so a provider's prompt cache serves the early part
            (`middleware.compaction._in_place`); used when the summariser is the agent's model,
            ``summary_prompt`` is the default, ``summary_chunk_tokens`` is not set and the
            early part fits the model's limit — else the early part is sent as a
            transcript, in chunks when needed.
        pin_first_task: keep the first user message word for word for the whole session,
            even once newer user turns came (every request then carries it). By default it
            stays while it is the only user turn; the first compaction that finds a newer
            one summarises it with the early part (its goal and constraints go into the
            summary's "Session goal"), so a session that moved on to other tasks does not
            carry a finished one at the top of every request.
        mask_observations: in a round that compacts, replace every tool output but the newest
            this many by a one-line placeholder naming how to read it back (stage 0,
            `middleware.compaction._masking`); the summary then comes only when masking
            did not free enough. ``None`` (the default) masks nothing.
        supersede_reads: in a round that compacts, replace a file read or listing that a
            later call repeats or a later write made stale by a one-line pointer.
        summary_keeps_files: attach to a summary, verbatim, the files the summarised actions
            touched that its text does not name (`middleware.compaction._summary_check`).
        prices: the agent model's prices for the cost-aware rule (`harness.types.TokenPrices`),
            for a client that does not say them; ``None``: ask the client.
        auto: ``False`` turns automatic compaction off: it then runs only when asked
            (`harness.compaction_request`), forced after a provider overflow, or when the
            history would not fit its budget at all (a request over its limit is never sent).
        observer: called with each ``compaction_started`` / ``compaction_finished`` event
            (besides the call's event stream and the session log).

    Raises:
        ConfigurationError: when an argument is out of range, ``model`` is not a model
            client, or ``summary_prompt`` lacks ``{messages}``.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.COMPACTS})
    after: ClassVar[frozenset[Concern]] = frozenset(
        {Concern.ADDS_CONTEXT, Concern.RETRIES_OVERFLOW}
    )

    def __init__(
        self,
        *,
        trigger_messages: int | None = None,
        trigger: float | int | Literal["cost"] | None = None,
        keep_tokens: int | None = None,
        keep_messages: int = 20,
        model: ModelClient | None = None,
        summary_prompt: str = DEFAULT_SUMMARY_PROMPT,
        trim_protect_tokens: int = 40_000,
        trim_min_tokens: int | None = 20_000,
        trim_preview_chars: int = 300,
        truncate_args: bool = False,
        max_arg_length: int = 2000,
        truncation_text: str = "... [truncated] ...",
        summary_chunk_tokens: int | None = None,
        memory: MemoryStore | None = DEFAULT_MEMORY,
        compact_tool: bool = False,
        in_place_summary: bool = True,
        pin_first_task: bool = False,
        mask_observations: int | None = None,
        supersede_reads: bool = False,
        summary_keeps_files: bool = False,
        auto: bool = True,
        prices: TokenPrices | None = None,
        observer: Callable[[AgentEvent], None] | None = None,
    ) -> None:
        self.settings = CompactionSettings(
            trigger_messages=trigger_messages,
            trigger=trigger,
            keep_tokens=keep_tokens,
            keep_messages=keep_messages,
            model=model,
            summary_prompt=summary_prompt,
            trim_protect_tokens=trim_protect_tokens,
            trim_min_tokens=trim_min_tokens,
            trim_preview_chars=trim_preview_chars,
            truncate_args=truncate_args,
            max_arg_length=max_arg_length,
            truncation_text=truncation_text,
            summary_chunk_tokens=summary_chunk_tokens,
            memory=memory,
            compact_tool=compact_tool,
            in_place_summary=in_place_summary,
            pin_first_task=pin_first_task,
            mask_observations=mask_observations,
            supersede_reads=supersede_reads,
            summary_keeps_files=summary_keeps_files,
            auto=auto,
            prices=prices,
        )
        if observer is not None and not callable(observer):
            raise ConfigurationError(f"observer must be a callable or None, got {observer!r}")
        self.observer = observer
        """Called with every ``compaction_started`` / ``compaction_finished`` event."""
        """The configuration, checked (a frozen `CompactionSettings`)."""
        self._refused: set[str] = set()
        """Models whose provider refused an in-place summary request (model names only)."""

    def __repr__(self) -> str:
        settings = self.settings
        trigger = settings.trigger if settings.cost_aware else settings.token_trigger
        return (
            f"Compaction(trigger_messages={settings.message_trigger}, "
            f"trigger={trigger!r}, auto={settings.auto}, "
            f"keep_tokens={self.settings.keep_tokens!r}, keep_messages={self.settings.keep_messages}, "
            f"truncate_args={self.settings.truncate_args}, compact_tool={self.settings.compact_tool})"
        )

    def tools(self) -> list[Tool]:
        """Return the ``compact_conversation`` tool when ``compact_tool`` is on."""
        return [Tool(compact_conversation)] if self.settings.compact_tool else []

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Compact ``request``'s history as needed and pass it on.

        When the summariser failed, the early part is left out of this round only: the
        response keeps the history as it was (trimmed), so the next round tries again.
        """
        keep: tuple[Message, ...] | None = None
        report: CompactionReport | None = None
        if request.history:  # `prepare`, without a coroutine on the round with nothing due
            await count_off_loop(request)  # big new texts counted in a thread, not on the loop
            request, budget, reason = self._due(request)
            if reason is not None:
                request, keep, report = await self._rewrite(request, budget, reason)
        response = await call_next(request)
        if report is None:
            return response
        compactions = (*response.compactions, report)
        if keep is None:
            return response.replace(compactions=compactions)
        return response.replace(kept=keep, compactions=compactions)

    # ------------------------------------------------------------------ stages
    async def prepare(self, request: ModelRequest) -> ModelRequest:
        """Return ``request`` with its history trimmed, truncated and summarised as needed.

        What a round keeps when the summariser failed (`__call__`) is not part of it.

        Raises:
            ConfigurationError: when a summary is needed but there is no summariser.
            ProviderError: when the summariser fails.
        """
        if not request.history:
            return request
        request, budget, reason = self._due(request)
        if reason is None:
            # Nothing is due: the history stays byte for byte what the provider cached last
            # round. Trims and truncations wait for a round that rewrites the history anyway.
            return request
        return (await self._rewrite(request, budget, reason))[0]

    def _due(self, request: ModelRequest) -> tuple[ModelRequest, int, str | None]:
        """Return ``request`` (exact near its limit), its history budget, why it is due.

        The reason is ``None`` when nothing is due.
        """
        request, _ = counted_near_limit(request)  # exact counts near the limit
        est = request.estimator
        prices = self._prices(request)
        budget = self._history_budget(request, est)
        return request, budget, self._reason(request, request.history, est, budget, None, prices)

    async def _rewrite(
        self, request: ModelRequest, budget: int, reason: str
    ) -> tuple[ModelRequest, tuple[Message, ...] | None, CompactionReport]:
        """`_stages`, between a ``compaction_started`` and a ``compaction_finished`` event.

        Each goes to the call's event stream (and so the session log) and to ``observer``;
        the finished report is returned for the response (`ModelResponse.compactions`).
        """
        history = request.history
        est = request.estimator
        focus = request.state.get(FOCUS_KEY) if reason == "requested" and request.state else None
        started = CompactionReport(
            call_id=request.ids.call_id,
            reason=reason,
            messages_before=len(history),
            tokens_before=est.count_messages(history),
            focus=focus or None,
        )
        self._emit(request, AgentEvent(kind="compaction_started", compaction=started))
        try:
            done, keep = await self._stages(request, budget, reason, focus or None)
        except (ContextOverflowError, ProviderError) as exc:
            failed = msgspec.structs.replace(started, failure=type(exc).__name__)
            self._emit(request, AgentEvent(kind="compaction_finished", compaction=failed))
            raise
        new = done.transforms[len(request.transforms) :]
        counts = {
            kind: sum(int(t.target) for t in new if t.kind == kind and t.target.isdigit())
            for kind in (HISTORY_COMPACTION, TOOL_OUTPUT_TRIM, TOOL_ARGS_TRUNCATE)
        }
        failure = next((t.target for t in new if t.kind == SUMMARY_FAILURE), None)
        summary = next((m for m in done.history if m.meta(SUMMARY) and m not in history), None)
        finished = msgspec.structs.replace(
            started,
            messages_after=len(done.history),
            tokens_after=est.count_messages(done.history),
            summarised=counts[HISTORY_COMPACTION],
            trimmed=counts[TOOL_OUTPUT_TRIM],
            truncated=counts[TOOL_ARGS_TRUNCATE],
            summary_id=summary.id if summary is not None else None,
            failure=failure,
        )
        self._emit(request, AgentEvent(kind="compaction_finished", compaction=finished))
        return done, keep, finished

    def _emit(self, request: ModelRequest, event: AgentEvent) -> None:
        """Hand a lifecycle event to the call's event stream and to ``observer``."""
        if request.run is not None and request.run.emit is not None:
            request.run.emit(event)
        if self.observer is not None:
            self.observer(event)

    async def _stages(
        self, request: ModelRequest, budget: int, reason: str | None, focus: str | None = None
    ) -> tuple[ModelRequest, tuple[Message, ...] | None]:
        """Return ``request`` with its history trimmed, truncated and summarised for ``reason``.

        And the history the round keeps when it differs from the one sent (the summariser
        failed: `_without_summary`), else ``None``.
        """
        history = request.history
        est = request.estimator
        layout = layout_of(history)
        transforms: list[Transform] = []
        if self.settings.supersede_reads:
            history, superseded = supersede_reads(history)
            transforms.extend(Transform(SUPERSEDED_READ, origin) for origin in superseded)
        history, masked = mask_observations(self.settings, history)
        transforms.extend(Transform(OBSERVATION_MASK, origin) for origin in masked)
        if transforms:
            layout = layout_of(history)
        history, trimmed = trim_tool_outputs(self.settings, history, est, budget)
        if trimmed:
            transforms.append(Transform(TOOL_OUTPUT_TRIM, trimmed))
            layout = layout_of(history)
        if self.settings.truncate_args:
            body = history[layout.start :]
            end = layout.start + self._normal_cut(body, est, budget, layout)
            history, truncated = truncate_arguments(self.settings, history, layout.start, end)
            if truncated:
                transforms.append(Transform(TOOL_ARGS_TRUNCATE, truncated))
        if transforms:  # what was over its budget may fit now, without a summary
            reason = self._reason(request, history, est, budget, layout)
            if reason is None and est.count_messages(history) > (1 - TRIM_HEADROOM) * budget:
                reason = "tokens"  # a trim that frees little would be followed by a summary
        keep: tuple[Message, ...] | None = None
        if reason is not None:
            history, done, keep = await self._compact(
                request, history, est, budget, layout, reason, focus
            )
            transforms.extend(done)
        if history is request.history:
            if request.force_compaction:
                raise ContextOverflowError(
                    "Compaction was forced after a context overflow but nothing is left to "
                    "compact: the pinned task, the summary, the newest user message and the "
                    "last tool results are all that remain. Shorten the system prompt, tool "
                    "schemas or context blocks, or use a model with a larger window.",
                    reason=NOTHING_TO_COMPACT,
                    transforms=request.transforms,
                )
            return request, None
        return request.replace(history=history).with_transforms(*transforms), keep

    # ---------------------------------------------------------------- deciding
    def _history_budget(
        self, request: ModelRequest, est: TokenEstimator, *, lowered: bool = True
    ) -> int:
        """Return the tokens the history may use: its budget, lowered by the token trigger.

        With ``auto=False``, or ``lowered=False`` (the budget the cost-aware rule keeps to),
        nothing lowers it.
        """
        limit = request.input_limit if request.input_limit > 0 else DEFAULT_INPUT_TOKENS
        if request.history_budget is not None:
            budget = request.history_budget
        else:
            budget = limit - fixed_tokens(request, est) - blocks_tokens(request, est)
        trigger = self.settings.token_trigger
        if trigger is not None and self.settings.auto and lowered:
            # The trigger bounds the whole request; what is not history is limit - budget.
            threshold = trigger * limit if isinstance(trigger, float) else trigger
            budget = min(budget, int(threshold) - (limit - budget))
        return budget

    def _reason(
        self,
        request: ModelRequest,
        history: tuple[Message, ...],
        est: TokenEstimator,
        budget: int,
        layout: Layout | None,
        prices: TokenPrices | None = None,
    ) -> str | None:
        """Return why ``history`` must be compacted now, or ``None`` when nothing is due.

        ``layout`` is ``history``'s, or ``None`` to find it only if asked (a pending
        ``compact_conversation`` request): the round with nothing due does not look for it.
        With ``prices`` (``trigger="cost"``, prices known) the threshold does not decide:
        a history over its whole budget is due (``tokens``), and one within it when the
        rent paid reached the price of compacting (`cost_of`: ``cost``); ``budget`` (the
        threshold's) still shapes the compaction, so the rule only chooses when.
        """
        if request.force_compaction:
            return "forced"
        if (
            request.state is not None
            and request.state.get(REQUEST_KEY) is not None
            and self._pending_request(request, layout or layout_of(history)) is not None
        ):
            return "requested"
        if self.settings.auto and len(history) >= self.settings.message_trigger:
            return "messages"
        if budget <= 0:
            return None
        # The request's own history: the run's running total (O(new messages)), or its
        # floor where the request is over its limit for sure (no exact count of all of it).
        limit = budget if prices is None else self._history_budget(request, est, lowered=False)
        if history is request.history:
            over = history_over(request, limit, est)
        else:
            over = est.count_messages(history) > limit
        if over:
            return "tokens"
        if prices is not None:
            cost = self.cost_of(request, history, budget, prices, layout)
            if cost is not None and cost.pays:
                return "cost"
        return None

    def _prices(self, request: ModelRequest) -> TokenPrices | None:
        """Return the agent model's prices when the cost-aware rule applies, else ``None``.

        ``prices`` as configured, else what the agent's client (or the summariser) says
        (`harness.types.KnowsPrices`); ``None`` falls back to the plain threshold.
        """
        settings = self.settings
        if not settings.cost_aware or not settings.auto:
            return None
        if settings.prices is not None:
            return settings.prices
        client = request.run.client if request.run is not None else None
        found = prices_of(client, request.model)
        if found is None and settings.model is not None and settings.model.model == request.model:
            found = prices_of(settings.model, request.model)
        return found

    def cost_of(
        self,
        request: ModelRequest,
        history: tuple[Message, ...],
        budget: int,
        prices: TokenPrices,
        layout: Layout | None = None,
    ) -> CompactionCost | None:
        """Return the cost-aware trigger's figures for ``history``: the rent paid, the price.

        (`middleware.compaction._cost`.) The compaction priced is the one that would run: the
        cut of the keep range, a summary as long as the previous one (`EXPECTED_SUMMARY_TOKENS`
        for the first), asked in place when it would be. A round is each assistant message
        of the working history (the request before it), and this one. ``None`` when nothing
        would be summarised.
        """
        est = request.estimator
        layout = layout or layout_of(history)
        body = history[layout.start :]
        cut = self._normal_cut(body, est, budget, layout)
        if cut == 0:
            return None  # everything is in the keep range: a compaction would summarise nothing
        head = (layout.pinned,) if layout.pinned is not None else ()
        cap = max(MIN_TEXT_TOKENS, int(max(budget, 0) * SUMMARY_CAP_FRACTION))
        previous = summary_text(layout.previous) if layout.previous is not None else None
        output = min(cap, est.count(previous) if previous else EXPECTED_SUMMARY_TOKENS)
        compacted = self._rest(est, head, body, cut) + output
        rounds: list[int] = []
        tokens = 0
        upto = layout.start + cut  # the history before the cut: what a summary request reads
        early = 0
        for i, message in enumerate(history):
            if message.role == "assistant":
                rounds.append(tokens)
            if i == upto:
                early = tokens
            tokens += est.count_message(message)
        rounds.append(tokens)
        summariser = self.settings.model
        other = None
        if summariser is not None and summariser.model != request.model:
            other = prices_of(summariser, summariser.model)
        if self._in_place_client(request) is not None:
            fixed = fixed_tokens(request, est) + blocks_tokens(request, est)
            cached, fresh = fixed + early, INSTRUCTION_TOKENS
        else:  # a transcript of the early part, at the summariser's full input price
            cached, fresh = 0, early + len(self.settings.summary_prompt) // 4
        return compaction_cost(
            prices,
            rounds=rounds,
            new=est.count_messages(body[last_unit_start(body) :]),
            compacted=compacted,
            summary_cached=cached,
            summary_fresh=fresh,
            summary_output=output,
            summary_prices=other,
        )

    def _pending_request(self, request: ModelRequest, layout: Layout) -> str | None:
        """Return the token of a compaction request not yet honoured (tool, API or CLI)."""
        if request.state is None:
            return None
        token = request.state.get(REQUEST_KEY)
        if token is None:
            return None
        if layout.previous is not None and layout.previous.meta(SUMMARY_REQUEST) == token:
            return None
        return token

    def _normal_cut(
        self, body: Sequence[Message], est: TokenEstimator, budget: int, layout: Layout
    ) -> int:
        """Return the keep boundary in ``body`` under the configured keep range."""
        pinned = est.count_message(layout.pinned) if layout.pinned is not None else 0
        current = current_user(body)
        if current is not None:
            pinned += est.count_message(body[current])
        cap = max(0, int(max(budget, 0) * KEEP_CAP_FRACTION) - pinned)
        if self.settings.keep_tokens == 0:
            return select_cut(
                body, est.count_message, keep_tokens=cap, max_messages=self.settings.keep_messages
            )
        # The dynamic range is what stays after compaction, pinned messages included, so a
        # long pinned task does not make every compacted request larger.
        wanted = (
            self.settings.keep_tokens
            if self.settings.keep_tokens is not None
            else max(0, int(max(budget, 0) * KEEP_FRACTION) - pinned)
        )
        return select_cut(
            body,
            est.count_message,
            keep_tokens=min(wanted, cap),
            max_messages=max(1, self.settings.message_trigger // 2 - 3),
        )

    # -------------------------------------------------------------- compacting
    async def _compact(
        self,
        request: ModelRequest,
        history: tuple[Message, ...],
        est: TokenEstimator,
        budget: int,
        layout: Layout,
        reason: str,
        focus: str | None = None,
    ) -> tuple[tuple[Message, ...], list[Transform], tuple[Message, ...] | None]:
        """Stage 3: summarise the early part of the body, keep the recent part.

        Returns the new history, the transforms, and the history to keep for the next round
        when it differs from the new one (the summariser failed: see `_without_summary`).
        """
        body = history[layout.start :]
        task: tuple[Message, ...] = ()  # a first task that joins the early part
        if (
            layout.pinned is not None
            and not self.settings.pin_first_task
            and current_user(body) is not None
        ):
            task = (layout.pinned,)  # a newer user turn came: the first task is history now
            layout = msgspec.structs.replace(layout, pinned=None)
        if reason == "forced":
            cut = last_unit_start(body)
        else:
            cut = self._normal_cut(body, est, budget, layout)
            if cut == 0 and reason == "requested":
                cut = last_unit_start(body)
        head = (layout.pinned,) if layout.pinned is not None else ()
        # The summary needs room too: while what is kept leaves less than MIN_TEXT_TOKENS of the
        # budget for it, the oldest kept unit joins the early part (never the last unit).
        tail = last_unit_start(body)
        while cut < tail and budget - self._rest(est, head, body, cut) < MIN_TEXT_TOKENS:
            cut = safe_cut(body, cut + 1, forward=True)
        early, kept = _split(body, cut)
        early = (*task, *early)
        if not early:
            return history, [], None  # nothing early enough to summarise: leave it unchanged
        done: list[Transform] = []
        if self.settings.memory is not None:
            try:
                stored = await self.settings.memory.record(early, request)
            except (WorkspaceError, ProviderError) as exc:
                done.append(Transform(MEMORY_FAILED, type(exc).__name__))
            else:
                if stored:
                    done.append(Transform(MEMORY_RECORD, stored))
        previous = summary_text(layout.previous) if layout.previous is not None else None
        # The summary gets what the pinned and kept messages leave of the budget (at most
        # SUMMARY_CAP_FRACTION of it), so the compacted history fits.
        rest = self._rest(est, head, body, cut)
        cap = max(MIN_TEXT_TOKENS, min(int(max(budget, 0) * SUMMARY_CAP_FRACTION), budget - rest))
        try:
            text = None
            # After an overflow the previous request was too long: its prefix would be too.
            client = self._in_place_client(request) if reason != "forced" else None
            if client is not None:
                # The history as received: up to the cut, the previous request's prefix.
                upto = layout.start + cut
                try:
                    asked = await summarise_in_place(
                        request, upto, client, cap, start=layout.start, focus=focus
                    )
                except ProviderBadRequest:
                    # A provider (or litellm for it) that refuses tools with tool_choice
                    # "none": the transcript, now and for this model from now on.
                    self._refused.add(client.model)
                    asked = None
                if asked is not None:
                    text, used = asked
                    if used < upto:  # what did not fit goes on top, as a transcript
                        among = {id(m) for m in early}
                        leftover = [m for m in history[used:upto] if id(m) in among]
                        text = await self._writer(focus).summarise(leftover, text, request, cap)
            if text is None:
                text = await self._writer(focus).summarise(early, previous, request, cap)
        except ProviderError as exc:
            failure = type(exc).__name__
        else:
            failure = "" if text else "empty_summary"
        if failure:
            return self._without_summary(request, history, layout, early, kept, failure, done)
        if self.settings.summary_keeps_files and text:
            # What the summary's cap leaves (about 3 characters a token for path names).
            room = 3 * (cap - est.count(text))
            text, files = keep_files(text, early, previous, max_chars=room)
            if files:
                done.append(Transform(SUMMARY_FILES, len(files)))
        total = len(early) + (int(layout.previous.meta(SUMMARISED, 0)) if layout.previous else 0)
        metadata: dict[str, Any] = {SUMMARY: True, SUMMARISED: total}
        token = self._pending_request(request, layout)
        if token is not None:
            metadata[SUMMARY_REQUEST] = token
        summary = Message.user(
            f"{SUMMARY_HEADER}: {total} messages were compacted; the full record is in the "
            f"session log.]\n\n{text}",
            metadata=metadata,
        )
        done.append(Transform(HISTORY_COMPACTION, len(early)))
        return (*head, summary, *kept), done, None

    def _writer(self, focus: str | None = None) -> SummaryWriter:
        """Return the transcript summariser of these settings (asked to ``focus``, if given)."""
        prompt = self.settings.summary_prompt
        if focus:
            prompt += "\n\n" + focus_line(focus)
        return SummaryWriter(
            model=self.settings.model,
            prompt=prompt,
            chunk_tokens=self.settings.summary_chunk_tokens,
        )

    def _in_place_client(self, request: ModelRequest) -> ModelClient | None:
        """Return the client to ask in place, when an in-place summary applies."""
        settings = self.settings
        if (
            not settings.in_place_summary
            or settings.summary_prompt != DEFAULT_SUMMARY_PROMPT
            or settings.summary_chunk_tokens is not None  # the caller bounds each request
        ):
            return None
        client = settings.model or (request.run.client if request.run is not None else None)
        if client is None or client.model != request.model or client.model in self._refused:
            return None  # a provider's cache is per model
        return client

    @staticmethod
    def _rest(
        est: TokenEstimator, head: tuple[Message, ...], body: Sequence[Message], cut: int
    ) -> int:
        """Return the tokens of a compacted history besides the summary's text."""
        _, kept = _split(body, cut)
        return est.count_messages((*head, *kept)) + MESSAGE_OVERHEAD + HEADER_TOKENS

    def _without_summary(
        self,
        request: ModelRequest,
        history: tuple[Message, ...],
        layout: Layout,
        early: Sequence[Message],
        kept: Sequence[Message],
        failure: str,
        done: list[Transform],
    ) -> tuple[tuple[Message, ...], list[Transform], tuple[Message, ...]]:
        """Leave the early part out of this round only, when the summariser failed.

        The round still fits; the working history kept for the next round is ``history``
        (as trimmed), so the next compaction tries to summarise the same messages again.
        """
        notice = Message.user(
            f"[{len(early)} earlier messages are left out of this request because they could "
            f"not be summarised ({failure}); the full record is in the session log.]",
            metadata={SUMMARY_FAILED: failure},
        )
        head = tuple(m for m in (layout.pinned, layout.previous) if m is not None)
        if request.run is not None and request.run.emit is not None:
            request.run.emit(
                AgentEvent(
                    kind="warning",
                    code="summary_failed",
                    text=f"the summariser failed ({failure}); {len(early)} early messages were "
                    "left out of this request and will be summarised on a later round",
                )
            )
        done.extend((Transform(SUMMARY_FAILURE, failure), Transform(HISTORY_DROPPED, len(early))))
        return (*head, notice, *kept), done, history


def _split(body: Sequence[Message], cut: int) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Return the early and the kept part of ``body`` cut at ``cut``.

    The newest user message says what the agent is doing now: it is kept word for word,
    right after the summary, even when it lies in the early part.
    """
    current = current_user(body)
    if current is not None and current < cut:
        return (*body[:current], *body[current + 1 : cut]), (body[current], *body[cut:])
    return tuple(body[:cut]), tuple(body[cut:])
