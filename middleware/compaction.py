"""Compaction: keep the history inside its budget — trim, truncate, then summarise.

Place in the stack: after BudgetFit (which sets ``request.history_budget``, the room left
for the history once System, tools and the kept blocks are counted) and before
PairValidation (which checks the history this layer produced). Without BudgetFit the
budget is the input limit minus the fixed cost and the blocks.

Three stages run in order on every request; each changes only the *working* history the
model sees next (the agent commits it, so nothing is redone next round), never the agent's
``full_history``:

1. **Trim old tool outputs** (no model). The newest ``trim_protect_tokens`` of tool output
   are protected; once the older, untrimmed tool outputs add up to ``trim_min_tokens``,
   each becomes a ``trim_preview_chars`` preview (new id, metadata ``trimmed``). In small
   windows both thresholds shrink to 40 % and 20 % of the history budget.
   Transform ``tool_output_trim:<messages>``.
2. **Truncate old tool-call arguments** (off by default). Outside the kept range, string
   arguments longer than ``max_arg_length`` keep their first 20 characters and
   ``truncation_text``. Transform ``tool_args_truncate:<calls>``.
3. **Summarise** when the history has ``trigger_messages`` messages, exceeds its budget or
   the optional ``trigger`` threshold, when ``request.force_compaction`` is set (by
   OverflowRetry), or when the agent asked for it with the ``compact_conversation`` tool.
   The long-term-memory hook first records lasting facts of the part to be summarised;
   then the summariser (``model``, default the agent's own client, called directly — not
   through the stack) summarises the early part, in chunks that fit its window when
   needed (halved, up to three times, if it still reports an overflow), and the history
   becomes: the first user message (the task, pinned), one summary message, the newest
   user message (what the agent is doing now, kept even when it lies in the early part),
   the kept recent messages. An existing summary is *updated* with the new early
   messages. Transform ``history_compaction:<messages summarised>``.

The cut never separates a tool call from its results (`middleware._history.safe_cut`).
The kept part is bounded by tokens (``keep_tokens``; ``None`` is 35 % of the history
budget) or, with ``keep_tokens=0``, by ``keep_messages`` — and, by tokens, always by
half of ``trigger_messages`` — so after a compaction the history is well below every
trigger and the next rounds append to a byte-stable prefix (task, summary, kept
messages) instead of compacting again. A forced compaction keeps only the last unit; when it can shrink nothing it
raises `ContextOverflowError` with ``reason="nothing_to_compact"``, which ends OverflowRetry's
round without resending the same history.

The summariser side (prompts, rendering, chunk packing, the summary requests and their
manifests) lives in ``middleware/_summariser.py``.

Cost when nothing is compacted: one backward pass over the tool messages and one sum of
cached per-message counts; since compaction keeps the working history short, both are
bounded by the trigger, not by the session's length.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final

import msgspec

from harness.accounting import (
    blocks_tokens,
    counted_near_limit,
    fixed_tokens,
)
from harness.errors import (
    NOTHING_TO_COMPACT,
    ConfigurationError,
    ContextOverflowError,
    ProviderError,
    WorkspaceError,
)
from harness.events import AgentEvent
from harness.markers import (
    ARGS_TRUNCATED,
    OFFLOADED,
    SUMMARISED,
    SUMMARY,
    SUMMARY_FAILED,
    SUMMARY_REQUEST,
    TRIMMED,
)
from harness.memory import DEFAULT_MEMORY, MemoryStore
from harness.messages import Message, ToolCall, new_id
from harness.policy import DEFAULT_INPUT_TOKENS
from harness.request import ModelClientLike, ModelRequest, ModelResponse
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator, estimator_for
from harness.tools import Tool, ToolContext
from harness.types import Concern, Handler
from middleware._history import safe_cut
from middleware._layout import SUMMARY_ROOM, Layout, current_user, last_unit_start
from middleware._layout import layout as layout_of
from middleware._summariser import (
    DEFAULT_SUMMARY_PROMPT,
    MERGE_PROMPT,
    SUMMARY_HEADER,
    UPDATE_PREAMBLE,
    Summariser,
    fit_text,
    pack,
    render_message,
    summary_text,
)

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "MERGE_PROMPT",
    "SUMMARY_HEADER",
    "UPDATE_PREAMBLE",
    "Compaction",
    "compact_conversation",
    "last_unit_start",
    "select_cut",
]

REQUEST_KEY: Final = "compaction.requested"
"""The state extension the ``compact_conversation`` tool sets (a fresh token per request)."""

KEEP_FRACTION: Final = 0.35
"""The share of the history budget kept verbatim when ``keep_tokens`` is ``None``."""
KEEP_CAP_FRACTION: Final = 0.8
"""The kept part plus the pinned task and newest user message never take more of the budget."""
CHUNK_FRACTION: Final = 0.6
"""The share of the summariser's input limit one summary request uses by default."""
SUMMARY_CAP_FRACTION: Final = 0.25
"""A summary longer than this share of the history budget is cut (head and tail kept)."""
SUMMARY_OVERFLOW_RETRIES: Final = 3
"""Times the chunks are halved when the summariser rejects a summary request as too long."""
TRUNCATE_KEEP_CHARS: Final = 20
"""Characters a truncated argument keeps before the truncation text."""
_HEADER_TOKENS: Final = 32
"""Room for a summary message's header line ("[Summary of … compacted; …]")."""
_MIN_ROOM: Final = SUMMARY_ROOM - MESSAGE_OVERHEAD - _HEADER_TOKENS
"""The least text a summary gets (what `SUMMARY_ROOM` leaves after its header)."""
_PLACEHOLDER = re.compile(r"\{(messages|previous_summary)\}")


TRIM_PROTECT_SHARE = 0.4
"""At most this share of the history budget is protected from trimming (small windows)."""
TRIM_MIN_SHARE = 0.2
"""Trimming starts once this share of the history budget is trimmable (small windows)."""


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


def compact_conversation(context: ToolContext) -> str:
    """Summarise the earlier conversation before your next step, to free context.

    Use it when the conversation has grown long and its early part is no longer needed
    word for word: the early messages are replaced by a summary, the latest are kept.
    """
    context.state.set_extension(REQUEST_KEY, new_id())
    return (
        "Compaction requested: the earlier conversation will be summarised before your next step."
    )


class Compaction:
    """Keep the working history within its budget: trim, truncate, then summarise.

    Args:
        trigger_messages: summarise when the history holds this many messages.
        trigger: an extra token threshold for the whole request — a fraction in ``(0, 1]``
            of the input limit (the model's window minus reserves), or an absolute token
            count (int). It lowers the history budget to what the threshold leaves for the
            history; the history exceeding its budget always triggers.
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
        summary_chunk_tokens: the most tokens one summary request may hold (default: 60 %
            of the summariser's input limit, from its window and the policy).
        memory: the long-term-memory store called before summarising (default: each
            user's own memory file in the agent's workspace, `harness.memory.WorkspaceMemory`;
            shared scopes only when configured); ``None`` disables it.
        compact_tool: give the agent a ``compact_conversation`` tool to ask for a summary.

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
        trigger_messages: int = 50,
        trigger: float | int | None = None,
        keep_tokens: int | None = None,
        keep_messages: int = 20,
        model: ModelClientLike | None = None,
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
    ) -> None:
        _check_int("trigger_messages", trigger_messages, minimum=4)
        if trigger is not None:
            if isinstance(trigger, bool) or not isinstance(trigger, int | float):
                raise ConfigurationError(
                    f"trigger must be a fraction in (0, 1], a token count or None, got {trigger!r}"
                )
            if isinstance(trigger, float) and not 0.0 < trigger <= 1.0:
                raise ConfigurationError(
                    f"trigger {trigger!r}: give a fraction of the input limit in (0, 1] "
                    "(e.g. 0.85) or an absolute token count as an int"
                )
            if isinstance(trigger, int) and trigger < 1:
                raise ConfigurationError(f"trigger must be a positive token count, got {trigger}")
        if keep_tokens is not None:
            _check_int("keep_tokens", keep_tokens, minimum=0)
        _check_int("keep_messages", keep_messages, minimum=1)
        if keep_tokens == 0 and keep_messages > trigger_messages - 4:
            raise ConfigurationError(
                f"keep_messages ({keep_messages}) must be at most trigger_messages - 4 "
                f"({trigger_messages - 4}) so that a compacted history (task, summary, current "
                "request, kept messages) is below the trigger; lower keep_messages or raise "
                "trigger_messages"
            )
        if model is not None and not (
            callable(getattr(model, "complete", None))
            and isinstance(getattr(model, "model", None), str)
        ):
            raise ConfigurationError(
                "model must be a model client with 'model' and 'async complete(request)', "
                f"got {model!r}"
            )
        if not isinstance(summary_prompt, str) or "{messages}" not in summary_prompt:
            raise ConfigurationError(
                "summary_prompt must contain the placeholder {messages}, where the messages "
                "to summarise are inserted; add it to your prompt"
            )
        _check_int("trim_protect_tokens", trim_protect_tokens, minimum=0)
        if trim_min_tokens is not None:
            _check_int("trim_min_tokens", trim_min_tokens, minimum=0)
        _check_int("trim_preview_chars", trim_preview_chars, minimum=0)
        _check_int("max_arg_length", max_arg_length, minimum=1)
        if not isinstance(truncation_text, str):
            raise ConfigurationError(f"truncation_text must be a string, got {truncation_text!r}")
        if summary_chunk_tokens is not None:
            _check_int("summary_chunk_tokens", summary_chunk_tokens, minimum=256)
        if memory is not None and not isinstance(memory, MemoryStore):
            raise ConfigurationError(
                f"memory must implement harness.memory.MemoryStore (async record(messages, "
                f"request)) or be None, got {memory!r}"
            )
        self.trigger_messages = trigger_messages
        self.trigger = trigger
        self.keep_tokens = keep_tokens
        self.keep_messages = keep_messages
        self.model = model
        self.summary_prompt = summary_prompt
        self.trim_protect_tokens = trim_protect_tokens
        self.trim_min_tokens = trim_min_tokens
        self.trim_preview_chars = trim_preview_chars
        self.truncate_args = bool(truncate_args)
        self.max_arg_length = max_arg_length
        self.truncation_text = truncation_text
        self.summary_chunk_tokens = summary_chunk_tokens
        self.memory = memory
        self.compact_tool = bool(compact_tool)

    def __repr__(self) -> str:
        return (
            f"Compaction(trigger_messages={self.trigger_messages}, trigger={self.trigger!r}, "
            f"keep_tokens={self.keep_tokens!r}, keep_messages={self.keep_messages}, "
            f"truncate_args={self.truncate_args}, compact_tool={self.compact_tool})"
        )

    def tools(self) -> list[Tool]:
        """Return the ``compact_conversation`` tool when ``compact_tool`` is on."""
        return [Tool(compact_conversation)] if self.compact_tool else []

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Compact ``request``'s history as needed and pass it on."""
        return await call_next(await self.prepare(request))

    # ------------------------------------------------------------------ stages
    async def prepare(self, request: ModelRequest) -> ModelRequest:
        """Return ``request`` with its history trimmed, truncated and summarised as needed.

        Raises:
            ConfigurationError: when a summary is needed but there is no summariser.
            ProviderError: when the summariser fails.
        """
        history = request.history
        if not history:
            return request
        request, _ = counted_near_limit(request)  # exact counts near the limit
        history = request.history
        est = request.estimator
        transforms: list[str] = []
        budget = self._history_budget(request, est)
        history, trimmed = self._trim(history, est, budget)
        if trimmed:
            transforms.append(f"tool_output_trim:{trimmed}")
        layout = layout_of(history)
        if self.truncate_args:
            body = history[layout.start :]
            end = layout.start + self._normal_cut(body, est, budget, layout)
            history, truncated = self._truncate(history, layout.start, end)
            if truncated:
                transforms.append(f"tool_args_truncate:{truncated}")
        reason = self._reason(request, history, est, budget, layout)
        keep: tuple[Message, ...] | None = None
        if reason is not None:
            history, done, keep = await self._compact(request, history, est, budget, layout, reason)
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
            return request
        return request.replace(history=history, commit_history=keep).with_transforms(*transforms)

    def _trim(
        self, history: tuple[Message, ...], est: TokenEstimator, budget: int
    ) -> tuple[tuple[Message, ...], int]:
        """Stage 1: shorten older tool outputs to previews once enough have piled up.

        The thresholds are absolute (~40,000 and ~20,000 tokens) for large windows and
        scale down with the history budget for small ones, where a fixed 40,000 would
        protect every tool output ever made.
        """
        if self.trim_min_tokens is None:
            return history, 0
        count = est.count_message
        protect = min(self.trim_protect_tokens, int(TRIM_PROTECT_SHARE * budget))
        minimum = min(self.trim_min_tokens, int(TRIM_MIN_SHARE * budget))
        preview = self.trim_preview_chars
        protected = 0
        trimmable = 0
        candidates: list[int] = []
        # The results the model has not answered yet (the trailing run) are always protected.
        tail = len(history)
        while tail > 0 and history[tail - 1].role == "tool":
            tail -= 1
        for i in range(len(history) - 1, -1, -1):
            message = history[i]
            if message.role != "tool":
                continue
            tokens = count(message)
            if protected < protect or i >= tail:
                protected += tokens
                continue
            content = message.content
            if (
                isinstance(content, str)
                and len(content) > preview + 100
                and not message.meta(TRIMMED)
                and not message.meta(OFFLOADED)
            ):
                candidates.append(i)
                trimmable += tokens
        if not candidates or trimmable < minimum:
            return history, 0
        out = list(history)
        for i in candidates:
            message = history[i]
            text = message.text
            rest = len(text) - preview
            out[i] = message.revise(
                "trim",
                metadata={TRIMMED: True},
                content=f"{text[:preview]}\n[… older tool output trimmed: {rest} more characters "
                "not shown; the full output is in the session log …]",
            )
        return tuple(out), len(candidates)

    def _truncate(
        self, history: tuple[Message, ...], start: int, end: int
    ) -> tuple[tuple[Message, ...], int]:
        """Stage 2: shorten long string arguments of the tool calls in ``history[start:end]``."""
        out: list[Message] | None = None
        changed_calls = 0
        limit = self.max_arg_length
        for i in range(start, end):
            message = history[i]
            if not message.tool_calls or message.meta(ARGS_TRUNCATED):
                continue
            calls: list[ToolCall] = []
            changed = 0
            for call in message.tool_calls:
                # A string value longer than the limit makes the JSON longer than it, too.
                new = self._truncate_call(call) if len(call.arguments) > limit else call
                changed += new is not call
                calls.append(new)
            if changed:
                if out is None:
                    out = list(history)
                out[i] = message.revise(
                    "truncate", metadata={ARGS_TRUNCATED: True}, tool_calls=tuple(calls)
                )
                changed_calls += changed
        return (tuple(out), changed_calls) if out is not None else (history, 0)

    def _truncate_call(self, call: ToolCall) -> ToolCall:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return call  # not JSON: leave it exactly as the model wrote it
        changed, shortened = self._truncate_value(arguments)
        if not changed:
            return call
        return msgspec.structs.replace(call, arguments=json.dumps(shortened, ensure_ascii=False))

    def _truncate_value(self, value: Any) -> tuple[bool, Any]:
        if isinstance(value, str):
            if len(value) > self.max_arg_length:
                return True, value[:TRUNCATE_KEEP_CHARS] + self.truncation_text
            return False, value
        if isinstance(value, dict):
            items = {k: self._truncate_value(v) for k, v in value.items()}
            return any(c for c, _ in items.values()), {k: v for k, (_, v) in items.items()}
        if isinstance(value, list):
            pairs = [self._truncate_value(v) for v in value]
            return any(c for c, _ in pairs), [v for _, v in pairs]
        return False, value

    # ---------------------------------------------------------------- deciding
    @staticmethod
    def _limit(request: ModelRequest) -> int:
        return request.input_limit if request.input_limit > 0 else DEFAULT_INPUT_TOKENS

    def _history_budget(self, request: ModelRequest, est: TokenEstimator) -> int:
        """Return the tokens the history may use: its budget, lowered by ``trigger``."""
        limit = self._limit(request)
        if request.history_budget is not None:
            budget = request.history_budget
        else:
            budget = limit - fixed_tokens(request, est) - blocks_tokens(request, est)
        if self.trigger is not None:
            # The trigger bounds the whole request; what is not history is limit - budget.
            threshold = self.trigger * limit if isinstance(self.trigger, float) else self.trigger
            budget = min(budget, int(threshold) - (limit - budget))
        return budget

    def _reason(
        self,
        request: ModelRequest,
        history: tuple[Message, ...],
        est: TokenEstimator,
        budget: int,
        layout: Layout,
    ) -> str | None:
        if request.force_compaction:
            return "forced"
        if self._pending_request(request, layout) is not None:
            return "requested"
        if len(history) >= self.trigger_messages:
            return "messages"
        if 0 < budget < est.count_messages(history):
            return "tokens"
        return None

    def _pending_request(self, request: ModelRequest, layout: Layout) -> str | None:
        """Return the token of a ``compact_conversation`` request not yet honoured."""
        if not self.compact_tool or request.state is None:
            return None
        token = request.state.extension(REQUEST_KEY)
        if not isinstance(token, str):
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
        if self.keep_tokens == 0:
            return select_cut(
                body, est.count_message, keep_tokens=cap, max_messages=self.keep_messages
            )
        # The dynamic range is what stays after compaction, pinned messages included, so a
        # long pinned task does not make every compacted request larger.
        wanted = (
            self.keep_tokens
            if self.keep_tokens is not None
            else max(0, int(max(budget, 0) * KEEP_FRACTION) - pinned)
        )
        return select_cut(
            body,
            est.count_message,
            keep_tokens=min(wanted, cap),
            max_messages=max(1, self.trigger_messages // 2 - 3),
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
    ) -> tuple[tuple[Message, ...], list[str], tuple[Message, ...] | None]:
        """Stage 3: summarise the early part of the body, keep the recent part.

        Returns the new history, the transforms, and the history to keep for the next round
        when it differs from the new one (the summariser failed: see `_without_summary`).
        """
        body = history[layout.start :]
        if reason == "forced":
            cut = last_unit_start(body)
        else:
            cut = self._normal_cut(body, est, budget, layout)
            if cut == 0 and reason == "requested":
                cut = last_unit_start(body)
        head = (layout.pinned,) if layout.pinned is not None else ()
        # The summary needs room too: while what is kept leaves less than _MIN_ROOM of the
        # budget for it, the oldest kept unit joins the early part (never the last unit).
        tail = last_unit_start(body)
        while cut < tail and budget - self._rest(est, head, body, cut) < _MIN_ROOM:
            cut = safe_cut(body, cut + 1, forward=True)
        early, kept = _split(body, cut)
        if not early:
            return history, [], None  # nothing early enough to summarise: leave it unchanged
        done: list[str] = []
        if self.memory is not None:
            try:
                stored = await self.memory.record(early, request)
            except (WorkspaceError, ProviderError) as exc:
                done.append(f"memory_failed:{type(exc).__name__}")
            else:
                if stored:
                    done.append(f"memory_record:{stored}")
        previous = summary_text(layout.previous) if layout.previous is not None else None
        # The summary gets what the pinned and kept messages leave of the budget (at most
        # SUMMARY_CAP_FRACTION of it), so the compacted history fits.
        rest = self._rest(est, head, body, cut)
        cap = max(_MIN_ROOM, min(int(max(budget, 0) * SUMMARY_CAP_FRACTION), budget - rest))
        try:
            text = await self._summarise(early, previous, request, cap)
        except ProviderError as exc:
            failure = type(exc).__name__
        else:
            failure = "" if text else "empty_summary"
        if failure:
            return self._without_summary(request, history, layout, early, kept, failure, done)
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
        done.append(f"history_compaction:{len(early)}")
        return (*head, summary, *kept), done, None

    @staticmethod
    def _rest(
        est: TokenEstimator, head: tuple[Message, ...], body: Sequence[Message], cut: int
    ) -> int:
        """Return the tokens of a compacted history besides the summary's text."""
        _, kept = _split(body, cut)
        return est.count_messages((*head, *kept)) + MESSAGE_OVERHEAD + _HEADER_TOKENS

    def _without_summary(
        self,
        request: ModelRequest,
        history: tuple[Message, ...],
        layout: Layout,
        early: Sequence[Message],
        kept: Sequence[Message],
        failure: str,
        done: list[str],
    ) -> tuple[tuple[Message, ...], list[str], tuple[Message, ...]]:
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
        done.extend((f"summary_failed:{failure}", f"history_dropped:{len(early)}"))
        return (*head, notice, *kept), done, history

    async def _summarise(
        self, early: Sequence[Message], previous: str | None, request: ModelRequest, cap: int
    ) -> str:
        """Return a summary of ``early`` (updating ``previous``), chunked to fit the summariser."""
        client = self.model or (request.run.client if request.run is not None else None)
        if client is None:
            raise ConfigurationError(
                "Compaction needs a summariser: pass Compaction(model=...) or run it inside "
                "HarnessAgent, whose client is the default",
                transforms=request.transforms,
            )
        est = request.estimator if client.model == request.model else estimator_for(client.model)
        limit = request.policy.input_limit(client.context_window(client.model))
        chunk = min(self.summary_chunk_tokens or int(limit * CHUNK_FRACTION), limit)
        ask = Summariser(client, request, limit, est)
        for attempt in range(SUMMARY_OVERFLOW_RETRIES + 1):
            try:
                text = await self._summarise_chunked(early, previous, request, ask, chunk)
                break
            except ContextOverflowError:
                # The summariser's real window is smaller than it said (or a chunk was over
                # by exact count): halve the chunks while they still hold messages.
                failed = ask.overflowed_at
                smaller = min(chunk, failed) // 2 if failed is not None else 0
                if attempt == SUMMARY_OVERFLOW_RETRIES or smaller < self._least_chunk(ask):
                    raise
                chunk = smaller
        return fit_text(text.strip(), est, cap)

    def _least_chunk(self, ask: Summariser) -> int:
        """Return the smallest chunk that leaves ``_MIN_ROOM`` for messages after the prompt."""
        return MESSAGE_OVERHEAD + 3 + ask.est.count(self._prompt("", None)) + _MIN_ROOM

    async def _summarise_chunked(
        self,
        early: Sequence[Message],
        previous: str | None,
        request: ModelRequest,
        ask: Summariser,
        chunk: int,
    ) -> str:
        est = ask.est
        frame = MESSAGE_OVERHEAD + 3  # one user message plus reply priming
        if previous is not None:
            previous = fit_text(previous, est, chunk // 3)
        room = chunk - frame - est.count(self._prompt("", previous))
        if room < _MIN_ROOM:
            if ask.overflowed_at is not None:  # the chunk was halved after overflows
                raise ContextOverflowError(
                    f"the summariser rejected summary requests down to {chunk:,} tokens, too "
                    "small to hold messages after the summary prompt; give Compaction a "
                    "summariser with a larger window (Compaction(model=...))",
                    reason="summary_overflow",
                )
            raise ConfigurationError(
                f"summary_chunk_tokens ({chunk}) leaves no room for messages after the summary "
                "prompt; raise summary_chunk_tokens or shorten summary_prompt",
                transforms=request.transforms,
            )
        chunks = pack([render_message(m) for m in early], est, room)
        if len(chunks) == 1:
            return await ask(self._prompt(chunks[0], previous))
        partials = await ask.many([self._prompt(c, None) for c in chunks])
        return await self._merge(
            ([previous] if previous else []) + partials, ask, est, chunk - frame
        )

    async def _merge(
        self, parts: list[str], ask: Summariser, est: TokenEstimator, chunk: int
    ) -> str:
        """Merge partial summaries, in as many rounds of chunked requests as needed."""
        room = chunk - est.count(MERGE_PROMPT)
        while len(parts) > 1:
            # Each part takes at most half the room, so every request merges at least two.
            parts = [fit_text(p, est, room // 2 - 8) for p in parts]
            groups = pack(
                [f'<summary part="{i + 1}">\n{p}\n</summary>' for i, p in enumerate(parts)],
                est,
                room,
            )
            if len(groups) == 1:
                return await ask(MERGE_PROMPT.replace("{summaries}", groups[0]))
            prompts = [MERGE_PROMPT.replace("{summaries}", g) for g in groups]
            parts = await ask.many(prompts)
        return parts[0]

    def _prompt(self, messages: str, previous: str | None) -> str:
        preamble = UPDATE_PREAMBLE.replace("{summary}", previous) if previous is not None else ""
        prompt = self.summary_prompt
        if preamble and "{previous_summary}" not in prompt:
            prompt = preamble.lstrip("\n") + "\n" + prompt
            preamble = ""
        values = {"messages": messages, "previous_summary": preamble}
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], prompt)


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an int ≥ {minimum}, got {value!r}")


def _split(body: Sequence[Message], cut: int) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Return the early and the kept part of ``body`` cut at ``cut``.

    The newest user message says what the agent is doing now: it is kept word for word,
    right after the summary, even when it lies in the early part.
    """
    current = current_user(body)
    if current is not None and current < cut:
        return (*body[:current], *body[current + 1 : cut]), (body[current], *body[cut:])
    return tuple(body[:cut]), tuple(body[cut:])
