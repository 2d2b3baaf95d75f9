"""ProviderCompaction: let the provider compact the history on its side (OpenAI Responses).

OpenAI's Responses API compacts a long input on the server once it passes
``context_management``'s ``compact_threshold`` and returns an encrypted compaction item that
stands for everything it read (`providers.responses_client` says what the API and litellm
do). This middleware asks for it, with a threshold below our Compaction's trigger (by
default 60 % of the input limit), so the server compacts first and our Compaction, which
stays the default and the fallback, runs only when that is not enough.

The item the server returns is kept on the last history message it stands for (the
``provider_compacted`` marker, in the metadata of a revised copy of that message, so the
session log records it as a rewrite and a resumed session finds it; never sent). Each later request sends one message carrying the item instead of
the history up to that marker, then the rest; the working history the round keeps is the
whole readable one, so a fallback model, our Compaction and every other middleware still
read it. A marker our Compaction summarised away is gone with its message, and an item made
for another model is not sent. A server that refuses the option (or the item) gets the
request again as it came, the manifest says ``provider_compaction:refused``, and the session
stops asking. Manifest transforms: ``provider_compaction:asked@<threshold>`` and
``provider_compaction:sent@<messages replaced>``; the item itself comes back in
`ModelResponse.provider_edits` and as a ``provider_compaction`` warning event.

Place it after Compaction (nearer the client): it only shrinks what is sent. Clients that do
not compact natively (`harness.types.CompactsNatively`) get the request unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from harness.errors import ConfigurationError, ProviderBadRequest
from harness.events import AgentEvent
from harness.manifest import Transform, TransformKind
from harness.markers import PROVIDER_COMPACTED
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler

PROVIDER_COMPACTION: Final = TransformKind("provider_compaction")
"""Server-side compaction for this request: ``asked@<threshold>``, ``sent@<n>``, ``refused``."""

MIN_THRESHOLD: Final = 1_000
"""The smallest ``compact_threshold`` OpenAI takes."""

STAND_IN_TEXT: Final = "[earlier turns, compacted by the provider]"
"""The text of the message that carries the compaction item (what a reader of the log sees)."""

_TAG: Final = "provider-compacted"
"""The `Message.revise` tag of the message that carries the item's marker."""

_ITEM: Final = "responses_item"
"""`providers.responses_client.RESPONSES_ITEM`: the `Message.extra` key sent as the item."""


class ProviderCompaction:
    """Ask the provider to compact past a threshold, and send its item instead of the history.

    Args:
        trigger: the ``compact_threshold``: a share of the request's input limit in (0, 1]
            or a token count (at least 1,000, as OpenAI requires).

    Raises:
        ConfigurationError: the trigger is out of range.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset()
    after: ClassVar[frozenset[Concern]] = frozenset({Concern.COMPACTS})

    def __init__(self, *, trigger: float | int = 0.6) -> None:
        if isinstance(trigger, bool) or not isinstance(trigger, int | float):
            raise ConfigurationError(f"trigger must be a share or a token count, got {trigger!r}")
        if isinstance(trigger, float) and not 0.0 < trigger <= 1.0:
            raise ConfigurationError(f"a trigger share must be in (0, 1], got {trigger!r}")
        if isinstance(trigger, int) and trigger < MIN_THRESHOLD:
            raise ConfigurationError(
                f"a trigger token count must be at least {MIN_THRESHOLD:,}, got {trigger}"
            )
        self.trigger = trigger

    def __repr__(self) -> str:
        return f"ProviderCompaction(trigger={self.trigger!r})"

    def threshold(self, input_limit: int) -> int:
        """Return the ``compact_threshold`` for a request of ``input_limit`` tokens."""
        if isinstance(self.trigger, int):
            return self.trigger
        if input_limit <= 0:
            return 100_000
        return max(MIN_THRESHOLD, int(self.trigger * input_limit))

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Send ``request`` with the item for its compacted part, asking to compact past the threshold."""
        run = request.run
        client = run.client if run is not None else None
        native = getattr(client, "native_compaction", None)
        if run is None or not callable(native) or not native(request.model):
            return await call_next(request)
        refused: set[str] = run.session_slot(self, set)
        if request.model in refused:
            return await call_next(request)
        history = request.history
        upto, item = _newest_item(history, request.model)
        sent = request
        if item is not None:
            stand_in = Message(
                role="user",
                content=STAND_IN_TEXT,
                id=f"provider-compaction/{item.get('id') or upto}",
                extra={_ITEM: {k: v for k, v in item.items() if k != "model"}},
            )
            sent = sent.replace(history=(stand_in, *history[upto + 1 :])).with_transforms(
                Transform(PROVIDER_COMPACTION, f"sent@{upto + 1}")
            )
        settings = request.settings or {}
        if "context_management" not in settings:
            threshold = self.threshold(request.input_limit)
            entry = {"type": "compaction", "compact_threshold": threshold}
            sent = sent.replace(
                settings={**settings, "context_management": [entry]}
            ).with_transforms(Transform(PROVIDER_COMPACTION, f"asked@{threshold}"))
        try:
            response = await call_next(sent)
        except ProviderBadRequest as error:
            if error.status is None or not _about_compaction(error):
                raise  # nothing was sent, or the server refused something else
            refused.add(request.model)
            return await call_next(
                request.with_transforms(Transform(PROVIDER_COMPACTION, "refused"))
            )
        kept = response.kept
        if item is not None and kept and _ITEM in (kept[0].extra or {}):
            kept = (*history[: upto + 1], *kept[1:])  # the history the item stood for, back
        made = next((e for e in response.provider_edits if e.get("type") == "compaction"), None)
        if made is not None and kept:
            marker = {**made, "model": request.model}
            # a revised copy (a new id, ``origin_id`` the original): the session log records
            # it as a rewrite, so a resumed session finds the item too
            kept = (*kept[:-1], kept[-1].revise(_TAG, metadata={PROVIDER_COMPACTED: marker}))
            if run.emit is not None:
                run.emit(
                    AgentEvent(
                        kind="warning",
                        code="provider_compaction",
                        text=f"the provider compacted {len(kept)} messages into {made.get('id') or 'an item'}",
                    )
                )
        return response if kept is response.kept else response.replace(kept=kept)


def _about_compaction(error: ProviderBadRequest) -> bool:
    """Return whether a 400 names the option or the item (``Unknown parameter: 'context_management'`` …)."""
    said = str(error).lower()
    words = ("context_management", "compact", "encrypted_content", "encrypted content")
    return any(word in said for word in words)


def _newest_item(history: tuple[Message, ...], model: str) -> tuple[int, dict[str, Any] | None]:
    """Return the index of the newest message with a compaction item for ``model``, and the item."""
    for index in range(len(history) - 1, -1, -1):
        marker = history[index].meta(PROVIDER_COMPACTED)
        if isinstance(marker, dict) and marker.get("encrypted_content"):
            if marker.get("model") == model:
                return index, dict(marker)
            return -1, None  # the newest item was made for another model: send the history
    return -1, None


__all__ = ["MIN_THRESHOLD", "PROVIDER_COMPACTION", "STAND_IN_TEXT", "ProviderCompaction"]
