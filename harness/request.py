"""The values that flow through the chain: `ModelRequest` in, `ModelResponse` out.

Both are frozen. A middleware changes a request with ``request.replace(...)`` and passes
the new one on; nothing it adds for one request is written back to the persisted
history except what the agent commits after a request passed validation (see
`harness.agent.loop`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError
from harness.manifest import ContextManifest, Transform
from harness.markers import ORIGIN_ID
from harness.messages import Message, ToolSchema, new_id
from harness.policy import ContextPolicy

if TYPE_CHECKING:
    from harness.events import AgentEvent
    from harness.sessions.store import SessionStore
    from harness.state import AgentState, SessionKey, SessionScratch
    from harness.tokens import TokenEstimator
    from harness.types import ModelClient
    from harness.workspace import Workspace


T = TypeVar("T")


class RequestIds(msgspec.Struct, frozen=True, kw_only=True):
    """Who and what a request is for; sources receive these to choose their data."""

    agent_id: str = ""
    """The agent's id."""
    user_id: str = ""
    """The end user's id."""
    session_id: str = ""
    """The conversation's id."""
    run_id: str = ""
    """The id of one ``agent.call``."""
    call_id: str = msgspec.field(default_factory=new_id)
    """The id of this model-request preparation."""
    purpose: str = "agent"
    """Why the model is called: ``agent`` for the loop, ``summary`` for compaction …"""


class SystemPart(msgspec.Struct, frozen=True, kw_only=True):
    """One named piece of stable instructions; all parts merge into the System message."""

    name: str
    """A stable name: ``prompt``, ``AGENTS.md``, ``instruction/test-policy``, ``mode/plan``."""
    text: str
    """The instruction text."""


class RunScope(msgspec.Struct, kw_only=True):
    """Per-agent-call scratch space shared by the requests of one ``agent.call``.

    Middleware keep no state of their own between calls; what must live for one call (the
    workspace snapshot, "the folder was swept") is kept here in a slot owned by the
    middleware *instance* (`slot`), so two instances of one class never share it.
    """

    run_id: str = msgspec.field(default_factory=new_id)
    """The id of the agent call."""
    slots: dict[int, Any] = msgspec.field(default_factory=dict)
    """Per-owner values for this call, by the owner's identity (use `slot`)."""
    emit: Callable[[AgentEvent], None] | None = None
    """Sink for events (``context_build``, streamed text) of this call."""
    client: ModelClient | None = None
    """The agent's model client (compaction's default summariser)."""
    workspace: Workspace | None = None
    """The agent's workspace, when it has one."""
    store: SessionStore | None = None
    """The agent's session store (`harness.sessions`), when it has one."""
    key: SessionKey | None = None
    """Whose session this call is: user, agent and session id (scope every store read by it)."""
    session: SessionScratch | None = None
    """The session's scratch space, kept across its calls (`AgentState.scratch`), if any."""

    def slot(self, owner: object, make: Callable[[], T]) -> T:
        """Return ``owner``'s value for this call, made by ``make()`` on first use."""
        key = id(owner)
        if key not in self.slots:
            self.slots[key] = make()
        value: T = self.slots[key]
        return value

    def session_slot(self, owner: object, make: Callable[[], T]) -> T:
        """Return ``owner``'s value for this session, kept across its calls (else per call).

        For running state that is safe to reuse after the history changed (it compares
        histories): a new call's first round then costs only the new messages. The value is
        held in this call's slots once found, so the call's later rounds pay one look-up.
        """
        key = id(owner)
        value: T | None = self.slots.get(key)
        if value is None:
            found = make() if self.session is None else self.session.slot(owner, make)
            value = self.slots[key] = found
        return value


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage as the provider reported it."""

    prompt_tokens: int = 0
    """Input tokens the provider counted."""
    completion_tokens: int = 0
    """Output tokens."""
    total_tokens: int = 0
    """Their sum as reported."""
    cached_tokens: int = 0
    """Input tokens served from the provider's prompt cache, when reported."""


class LeftOut(msgspec.Struct, frozen=True, kw_only=True):
    """Messages a middleware left out of one request only, to keep in the working history.

    FragmentEditor leaves disabled messages out of what it passes on; the layers after it
    (offload, compaction) never see them. When the agent commits, `restore` puts them back
    among what those layers kept, in their old order: a left-out message whose neighbours
    were summarised comes right after the summary. A left-out tool result whose call was
    summarised away is dropped with it (a result never stands without its call).
    """

    history: tuple[Message, ...]
    """The history as the leaving-out layer received it; its order places what comes back."""
    sent: frozenset[str] | None = None
    """Ids of the ``history`` messages passed on as they are; ``None``: those of ``passed``,
    worked out only when `restore` must place messages (building the set every request
    cost O(history) at every round with a message left out)."""
    stand_ins: tuple[tuple[str, str], ...] = ()
    """Copies passed on in place of a ``history`` message, as (copy id, original id): an
    assistant message sent without the calls whose results were left out."""
    passed: tuple[Message, ...] = ()
    """The history passed on (``()``: not known). When the later layers kept exactly these
    messages, `restore` returns ``history`` without placing anything: no O(history) work."""
    left: tuple[int, ...] = ()
    """With ``passed``: the positions in ``history`` of the messages left out."""

    def restore(self, kept: tuple[Message, ...]) -> tuple[Message, ...]:
        """Return ``kept`` (what the later layers kept) with the left-out messages back."""
        if self.passed and self.left and len(kept) == len(self.passed):
            from harness.accounting.prefix import (
                shared_prefix,  # prefix imports this module to type
            )

            if shared_prefix(self.passed, kept) == len(kept) and self._calls_kept():
                return self.history
        history = self.history
        sent = self.sent if self.sent is not None else frozenset(m.id for m in self.passed)
        where = {m.id: i for i, m in enumerate(history)}
        stand_ins = dict(self.stand_ins)
        standing = set(stand_ins.values())
        waiting = [i for i, m in enumerate(history) if m.id not in sent and m.id not in standing]
        back = {history[i].id for i in waiting}
        out: list[Message] = []
        k = 0
        for message in kept:
            original = stand_ins.get(message.id)
            if original is not None:
                message = history[where[original]]  # the message with all its calls again
            at = where.get(message.id)
            if at is None:
                origin = message.meta(ORIGIN_ID)
                at = where.get(origin) if isinstance(origin, str) else None
            if at is not None:
                while k < len(waiting) and waiting[k] < at:
                    out.append(history[waiting[k]])
                    k += 1
            out.append(message)
        out.extend(history[i] for i in waiting[k:])
        calls: set[str] = set()
        restored: list[Message] = []
        for message in out:
            if message.id in back and message.role == "tool" and message.tool_call_id not in calls:
                continue  # its call was summarised away
            calls.update(c.id for c in message.tool_calls)
            restored.append(message)
        return tuple(restored)

    def _calls_kept(self) -> bool:
        """Return whether every left-out tool result has its call earlier in ``history``."""
        history = self.history
        for i in self.left:
            message = history[i]
            if message.role != "tool":
                continue
            j = i
            while j > 0 and history[j - 1].role == "tool":
                j -= 1
            head = history[j - 1] if j > 0 else None
            if head is None or all(c.id != message.tool_call_id for c in head.tool_calls):
                return False
        return True


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one model request is prepared from (immutable; change with `replace`)."""

    model: str
    """The model name, e.g. ``gpt-4o`` or ``deepseek/deepseek-chat``."""
    ids: RequestIds = msgspec.field(default_factory=RequestIds)
    """Agent, user, session, run and call ids, and the purpose."""
    system: tuple[SystemPart, ...] = ()
    """Stable instructions, merged into one System message in this order."""
    history: tuple[Message, ...] = ()
    """The working history: user, assistant and tool messages (maybe a summary first)."""
    blocks: tuple[ContextBlock, ...] = ()
    """Runtime-state and reference blocks for this request only."""
    tools: tuple[ToolSchema, ...] = ()
    """Tool schemas offered to the model; they count against the budget."""
    settings: dict[str, Any] | None = None
    """Provider settings (temperature, max_tokens …) passed through to the client."""
    policy: ContextPolicy = msgspec.field(default_factory=ContextPolicy)
    """Budget, estimator and observer."""
    input_limit: int = -1
    """The resolved input budget in tokens (set by the agent from policy and window)."""
    history_budget: int | None = None
    """Tokens left for the history after fixed material and blocks (set by BudgetFit)."""
    force_compaction: bool = False
    """Compact even below the thresholds (set by OverflowRetry after an overflow)."""
    commit_history: tuple[Message, ...] | None = None
    """The working history to keep for the next round when it differs from ``history``.

    Set by a middleware that shrank this request's history only for this round (Compaction
    dropping the oldest units because the summariser failed), so the next round still has
    the messages and tries again; ``None``: the sent ``history`` is kept.
    """
    left_out: LeftOut | None = None
    """Messages left out of this request only (a disabled fragment), kept for next rounds."""
    transforms: tuple[Transform, ...] = ()
    """What middleware changed, in order; copied into the manifest."""
    state: AgentState | None = None
    """The live agent state (todos, plan, working history); read it, do not mutate it."""
    state_version: int = 0
    """``state.version`` when preparation started; a change means another writer."""
    run: RunScope | None = None
    """The per-call scratch space and event sink."""

    def replace(self, **changes: Any) -> ModelRequest:
        """Return a copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)

    def kept_history(self) -> tuple[Message, ...]:
        """Return the working history to keep once this request was answered.

        What was sent (or ``commit_history``), with the messages ``left_out`` put back in
        their places — also when a later layer (compaction) rewrote the rest.
        """
        kept = self.history if self.commit_history is None else self.commit_history
        return kept if self.left_out is None else self.left_out.restore(kept)

    def with_transforms(self, *transforms: Transform) -> ModelRequest:
        """Return a copy with ``transforms`` appended to the record."""
        return msgspec.structs.replace(self, transforms=self.transforms + transforms)

    def without_superseded_blocks(self) -> ModelRequest:
        """Return this request without the blocks whose content the history still shows.

        Applied once, to the final request: a block may be superseded by a message that a
        later middleware (offload, compaction) removes, so only the last word counts.
        """
        if not self.blocks:
            return self
        wanted = {b.superseded_by for b in self.blocks if b.superseded_by is not None}
        if not wanted:
            return self
        present: set[str] = set()
        for message in reversed(self.history):
            if message.id in wanted:
                present.add(message.id)
                if present == wanted:
                    break
        if not present:
            return self
        kept = tuple(b for b in self.blocks if b.superseded_by not in present)
        return msgspec.structs.replace(self, blocks=kept)

    @property
    def estimator(self) -> TokenEstimator:
        """The token estimator in force (the policy's, resolved for the model)."""
        estimator = self.policy.estimator
        if estimator is None:
            raise ConfigurationError(
                "this request's policy has no estimator; build requests with "
                "ContextPolicy.resolve(model) or through HarnessAgent"
            )
        return estimator

    @property
    def system_text(self) -> str:
        """The merged System message text."""
        return "\n\n".join(part.text for part in self.system if part.text)

    def render(self) -> list[Message]:
        """Return the messages the provider receives.

        System first; then the stable reference material (memory, knowledge, context-file and fragment
        blocks under ``HARNESS_CONTEXT``) in one message; then the history; then one message
        with everything that changes between rounds (task and runtime state, source blocks).
        Stable material sits before the history so that a provider's prompt cache keeps
        matching the whole prefix from one round to the next: after the history it was
        re-sent uncached every round.
        """
        out: list[Message] = []
        system = self.system_text
        if system:
            out.append(Message(role="system", content=system, id="render/system"))
        stable = tuple(b for b in self.blocks if is_stable(b))
        if stable:
            out.append(Message(role="user", content=render_blocks(stable), id="render/reference"))
        out.extend(self.history)
        changing = tuple(b for b in self.blocks if not is_stable(b)) if stable else self.blocks
        if changing:
            out.append(Message(role="user", content=render_blocks(changing), id="render/blocks"))
        return out


_ORDER = ("TASK_STATE", "RUNTIME_STATE", "HARNESS_CONTEXT")

STABLE_CATEGORIES: frozenset[str] = frozenset({"memory", "knowledge", "context", "fragment"})
"""Block categories that change rarely (workspace files and developer-authored fragments)."""


def is_stable(block: ContextBlock) -> bool:
    """Return whether ``block`` is rendered before the history (stable reference material)."""
    return block.category in STABLE_CATEGORIES and block.where == "HARNESS_CONTEXT"


def render_blocks(blocks: tuple[ContextBlock, ...]) -> str:
    """Render blocks as tagged sections: state first, then reference material."""
    if not blocks:
        return ""
    sections: list[str] = []
    for placement in _ORDER:
        chosen = [b for b in blocks if b.where == placement]
        if not chosen:
            continue
        body = "\n\n".join(f"[{b.source_id}]\n{b.text}" for b in chosen)
        sections.append(f"<{placement}>\n{body}\n</{placement}>")
    return "\n".join(sections)


class ProviderRetry(msgspec.Struct, frozen=True, kw_only=True):
    """One retry of a model request after a failed attempt (a rate limit, a transient 5xx)."""

    attempt: int
    """Which retry this was (1 for the first)."""
    status: int | None
    """The HTTP status of the failed attempt."""
    error: str
    """The error class of the failed attempt, e.g. ``ProviderRateLimited``."""
    wait_s: float
    """Seconds waited before this retry."""
    retry_after_s: float | None = None
    """What the provider asked for (``retry-after``), when it asked."""

    @property
    def label(self) -> str:
        """A short record for a transform or event: ``provider_retry:429:1.00s``."""
        return f"provider_retry:{self.status}:{self.wait_s:.2f}s"


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The model's answer to one request."""

    message: Message
    """The assistant message: text, tool calls, reasoning content."""
    usage: Usage | None = None
    """Token usage reported by the provider."""
    finish_reason: str | None = None
    """Why generation stopped (``stop``, ``tool_calls``, ``length`` …)."""
    model: str = ""
    """The model that answered, as the provider names it."""
    manifest: ContextManifest | None = None
    """The manifest of the request that produced this response."""
    latency_s: float = 0.0
    """Seconds the client waited for the provider."""
    retries: tuple[ProviderRetry, ...] = ()
    """The provider failures the client retried before this response, oldest first."""

    def replace(self, **changes: Any) -> ModelResponse:
        """Return a copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)
