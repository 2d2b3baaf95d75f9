"""The values that flow through the chain: `ModelRequest` in, `ModelResponse` out.

Both are frozen. A middleware changes a request with ``request.replace(...)`` and passes
the new one on; nothing it adds for one request is written back to the persisted
history except what the agent commits after a request passed validation (see
`harness.agent.loop`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError
from harness.events import CompactionReport
from harness.manifest import ContextManifest, Transform
from harness.manifest import Usage as Usage
from harness.markers import INTERRUPTED_TEXT
from harness.messages import ContentPart, Message, ToolSchema, new_id
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
    blocks: tuple[ContentPart, ...] = ()
    """The caller's own content blocks for this part, with their provider options
    (``cache_control`` …), whose text is ``text``: while ``text`` still holds their text the
    System message is sent as blocks (see `ModelRequest.render`); empty: plain text."""

    def content_blocks(self) -> tuple[ContentPart, ...]:
        """Return the blocks this part is sent as inside a System message of blocks.

        The caller's blocks when ``text`` is still their text; when a layer put text around it
        (``text`` holds their text once), the blocks with that text as further text blocks
        before and after; else (the text was rewritten) one plain text block.
        """
        if not self.text:
            return ()
        if self.blocks:
            own = "".join(b.text or "" for b in self.blocks if b.text is not None)
            if own == self.text:
                return self.blocks
            before, found, after = self.text.partition(own)
            if own and found:
                head = (ContentPart(type="text", text=before),) if before else ()
                tail = (ContentPart(type="text", text=after),) if after else ()
                return (*head, *self.blocks, *tail)
        return (ContentPart(type="text", text=self.text),)


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


PairMode = Literal["fail", "repair"]
"""What the pre-send check does with broken tool pairs: refuse the request, or repair it."""


class PairHandling(msgspec.Struct, frozen=True, kw_only=True):
    """How the pre-send check treats the request's tool pairs (set by PairValidation).

    The check runs once, where the request leaves the stack (`harness.chain.compose`);
    PairValidation states its mode here instead of running the check a second time.
    """

    mode: PairMode = "fail"
    """``"fail"`` refuses broken pairs (`InvalidToolPairs`); ``"repair"`` repairs them."""
    interrupted_text: str = INTERRUPTED_TEXT
    """The content of a dangling call's synthetic result (repair)."""


DEFAULT_PAIRS = PairHandling()
"""Refuse broken pairs: what a request gets when no layer asked for anything else."""


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
    transforms: tuple[Transform, ...] = ()
    """What middleware changed, in order; copied into the manifest."""
    pairs: PairHandling = DEFAULT_PAIRS
    """How the pre-send check treats broken tool pairs (PairValidation's mode)."""
    state: AgentState | None = None
    """The live agent state (todos, plan, working history); read it, do not mutate it."""
    state_version: int = 0
    """``state.version`` when preparation started; a change means another writer."""
    run: RunScope | None = None
    """The per-call scratch space and event sink."""

    def replace(self, **changes: Any) -> ModelRequest:
        """Return a copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)

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

        System first (one message: the parts' text, or content blocks when a part carries
        the caller's own blocks, `SystemPart.blocks`); then the stable reference material (``HARNESS_CONTEXT`` blocks marked
        ``stable``: workspace files, fragments) in one message; then the history; then one message
        with everything that changes between rounds (task and runtime state, source blocks).
        Stable material sits before the history so that a provider's prompt cache keeps
        matching the whole prefix from one round to the next: after the history it was
        re-sent uncached every round.
        """
        out: list[Message] = []
        system = self.system_text
        if system and any(part.blocks for part in self.system):
            # The caller's System blocks carry provider options (``cache_control``): send
            # them as blocks, each other part as a further text block.
            blocks = tuple(b for part in self.system for b in part.content_blocks())
            out.append(Message(role="system", content=blocks, id="render/system"))
        elif system:
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


def is_stable(block: ContextBlock) -> bool:
    """Return whether ``block`` is rendered before the history (stable reference material)."""
    return block.stable and block.where == "HARNESS_CONTEXT"


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
    provider_edits: tuple[dict[str, Any], ...] = ()
    """Context edits the provider applied to the request before the model read it, as it
    reported them (Anthropic's ``clear_tool_uses`` …, see `ProviderContextEditing`)."""
    kept: tuple[Message, ...] | None = None
    """The working history the round keeps for the next one (``None``: not sent by a chain).

    The innermost handler of `harness.chain.compose` sets it to the history as sent; a
    middleware that changed the history for this round only mends it on the way out
    (Compaction when the summariser failed, FragmentEditor putting left-out messages back).
    The agent and the adapters commit it once the chain returned.
    """
    compactions: tuple[CompactionReport, ...] = ()
    """What compaction did for this round (`CompactionReport`, as in the ``compaction_finished``
    event): how an outer middleware (Tracing) learns of it without knowing Compaction."""

    def replace(self, **changes: Any) -> ModelResponse:
        """Return a copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)
