"""ProviderContextEditing: let the provider clear old tool results itself (Anthropic).

Anthropic's context editing clears the oldest tool results (and optionally thinking blocks)
on the server, once the input passes a trigger, before the model reads the request
(``context_management`` with the ``clear_tool_uses`` / ``clear_thinking`` edits; litellm
passes it on and sets the beta header). The request we send stays whole and the cached
prefix up to the cleared part still matches, so it costs nothing to ask for.

This middleware is an opt-in backend next to our own Compaction, which stays the fallback:
it asks for the edits with a trigger below our compaction's (by default 60 % of the input
limit), so the server clears first and Compaction runs only when clearing is not enough. For
a provider that does not take these edits (anything but Anthropic, directly or on Bedrock or
Vertex AI) the request passes unchanged. The manifest records the edits asked for
(``provider_editing:<edit>``); what the server reports it cleared comes back in
`ModelResponse.provider_edits` and as a ``provider_context_edit`` warning event on the
agent's stream and in its log — for requests that are not streamed: litellm does not pass
the applied edits of a streamed answer on, so a streamed round records only what it asked.

With ``compact`` it also asks for Anthropic's server-side compaction (``compact_20260112``,
beta header ``compact-2026-01-12``, which litellm sets): past that trigger the server
summarises the conversation and starts its answer with a ``compaction`` block; sent back at
the start of that assistant turn, it makes the server drop every block before it. litellm
hands the block over in the message's ``provider_specific_fields["compaction_blocks"]`` and
puts it back at the start of the turn (`providers._response.message_from` keeps it in the
message's ``extra``, so the session log keeps it too); the working history stays whole for
our Compaction and any fallback model. A compaction comes back as a ``compaction`` entry of
`ModelResponse.provider_edits` and a ``provider_context_edit`` warning. Not in streamed
answers: this client does not assemble a streamed compaction block.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from harness.errors import ConfigurationError
from harness.events import AgentEvent
from harness.manifest import Transform, TransformKind
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler

PROVIDER_EDITING: Final = TransformKind("provider_editing")
"""Context edits asked of the provider for this request: ``provider_editing:<edit type>``."""

CLEAR_TOOL_USES: Final = "clear_tool_uses_20250919"
CLEAR_THINKING: Final = "clear_thinking_20251015"
COMPACT: Final = "compact_20260112"

_TAKES_EDITS: Final = frozenset({"anthropic", "bedrock", "bedrock_converse", "vertex_ai"})


class ProviderContextEditing:
    """Ask Anthropic to clear old tool results (and thinking) on its side, past a trigger.

    Args:
        trigger: when the server starts clearing: a share of the request's input limit in
            (0, 1] or a token count.
        keep_tool_uses: the newest tool uses whose results are never cleared.
        clear_at_least: the fewest input tokens one clearing must free (``None``: any);
            clearing breaks the cache after the cleared result, so small clearings cost more
            than they save.
        exclude_tools: tools whose results are never cleared (memory, file reads …).
        clear_thinking: also clear the thinking blocks of earlier turns, keeping the last
            ``keep_thinking_turns``.
        compact: also ask Anthropic to compact (``compact_20260112``) past this trigger: a
            share of the input limit in (0, 1] or a token count (``None``: never). Keep it
            between the clearing trigger and our Compaction's (75 % by default).

    Raises:
        ConfigurationError: a trigger, a count or a tool name is out of range.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset()
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self,
        *,
        trigger: float | int = 0.6,
        keep_tool_uses: int = 3,
        clear_at_least: int | None = 5_000,
        exclude_tools: tuple[str, ...] = ("read_file", "memory_search", "memory_get"),
        clear_thinking: bool = False,
        keep_thinking_turns: int = 1,
        compact: float | int | None = None,
    ) -> None:
        _check_trigger("trigger", trigger)
        if compact is not None:
            _check_trigger("compact", compact)
        for name, value in (
            ("keep_tool_uses", keep_tool_uses),
            ("keep_thinking_turns", keep_thinking_turns),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(f"{name} must be an int ≥ 0, got {value!r}")
        if clear_at_least is not None and (
            not isinstance(clear_at_least, int)
            or isinstance(clear_at_least, bool)
            or clear_at_least < 1
        ):
            raise ConfigurationError(
                f"clear_at_least must be a positive int or None, got {clear_at_least!r}"
            )
        if not all(isinstance(t, str) and t for t in exclude_tools):
            raise ConfigurationError(f"exclude_tools must be tool names, got {exclude_tools!r}")
        self.trigger = trigger
        self.keep_tool_uses = keep_tool_uses
        self.clear_at_least = clear_at_least
        self.exclude_tools = tuple(exclude_tools)
        self.clear_thinking = clear_thinking
        self.keep_thinking_turns = keep_thinking_turns
        self.compact = compact

    def __repr__(self) -> str:
        return (
            f"ProviderContextEditing(trigger={self.trigger!r}, keep_tool_uses={self.keep_tool_uses}, "
            f"clear_thinking={self.clear_thinking}, compact={self.compact!r})"
        )

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Send ``request`` with the edits asked for, where the provider takes them."""
        client = request.run.client if request.run is not None else None
        name = getattr(client, "provider_name", None)
        provider = name(request.model) if callable(name) else None
        settings = request.settings or {}
        if provider not in _TAKES_EDITS or "context_management" in settings:
            return await call_next(request)  # not Anthropic, or the caller asked itself
        edits = self.edits(request.input_limit)
        asked = request.replace(settings={**settings, "context_management": {"edits": edits}})
        response = await call_next(
            asked.with_transforms(*(Transform(PROVIDER_EDITING, e["type"]) for e in edits))
        )
        if response.provider_edits and request.run is not None and request.run.emit is not None:
            for edit in response.provider_edits:
                request.run.emit(
                    AgentEvent(kind="warning", code="provider_context_edit", text=_said(edit))
                )
        return response

    def edits(self, input_limit: int) -> list[dict[str, Any]]:
        """Return Anthropic's ``context_management.edits`` for a request of ``input_limit``."""
        trigger = _tokens(self.trigger, input_limit)
        edits: list[dict[str, Any]] = []
        if self.clear_thinking:  # Anthropic wants the thinking edit first
            edits.append(
                {
                    "type": CLEAR_THINKING,
                    "keep": {"type": "thinking_turns", "value": self.keep_thinking_turns},
                }
            )
        tool_edit: dict[str, Any] = {
            "type": CLEAR_TOOL_USES,
            "trigger": {"type": "input_tokens", "value": trigger},
            "keep": {"type": "tool_uses", "value": self.keep_tool_uses},
        }
        if self.clear_at_least is not None:
            tool_edit["clear_at_least"] = {"type": "input_tokens", "value": self.clear_at_least}
        if self.exclude_tools:
            tool_edit["exclude_tools"] = list(self.exclude_tools)
        edits.append(tool_edit)
        if self.compact is not None:
            value = _tokens(self.compact, input_limit)
            edits.append({"type": COMPACT, "trigger": {"type": "input_tokens", "value": value}})
        return edits


def _check_trigger(name: str, trigger: object) -> None:
    if isinstance(trigger, bool) or not isinstance(trigger, int | float):
        raise ConfigurationError(f"{name} must be a share or a token count, got {trigger!r}")
    if isinstance(trigger, float) and not 0.0 < trigger <= 1.0:
        raise ConfigurationError(f"a {name} share must be in (0, 1], got {trigger!r}")
    if isinstance(trigger, int) and trigger < 1:
        raise ConfigurationError(f"a {name} token count must be positive, got {trigger}")


def _tokens(trigger: float | int, input_limit: int) -> int:
    """A trigger as input tokens (a share of ``input_limit``; 100,000 when it is unknown)."""
    if isinstance(trigger, float):
        return max(1, int(trigger * input_limit)) if input_limit > 0 else 100_000
    return trigger


def _said(edit: dict[str, Any]) -> str:
    """One line for what the server cleared: ``clear_tool_uses_20250919: 4 tool uses, …``."""
    if edit.get("type") == "compaction":
        chars = edit.get("summary_chars")
        size = f" ({chars:,} characters)" if isinstance(chars, int) else ""
        return f"{COMPACT}: the history before this turn was summarised{size}"
    parts = [
        f"{value:,} {key.removeprefix('cleared_').replace('_', ' ')}"
        for key, value in edit.items()
        if key.startswith("cleared_") and isinstance(value, int)
    ]
    return f"{edit.get('type', 'edit')}: {', '.join(parts) or 'applied'}"
