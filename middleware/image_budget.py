"""ImageBudget: at most so many images, and so many image tokens, in one request.

Screenshots from a browser tool or pasted photos pile up: each costs up to ~1,600 tokens and
providers cap the count per request (Anthropic: 100). Text history is compacted, but an image
is kept until the summary replaces its whole turn. This middleware keeps the newest images
and replaces the oldest with a one-line placeholder once the history holds more than
``max_images`` images or ``max_tokens`` image tokens.

It works in batches, so that the provider's prompt cache keeps matching between rewrites:
when a limit is passed it removes images down to ``refill`` of both limits (three quarters by
default), then leaves the history alone until a limit is passed again. The images of the
newest message (what the user just sent, or a tool just returned) are never removed. Each
rewritten message is recorded as ``image_omitted:<message id>:<count>``; the session's full
record keeps the images. Counting costs the new messages only: what is known of the history
the previous round saw is kept per session (`shared_prefix`).

Where it sits: before BudgetFit and Compaction (it states the concern of a layer that
shrinks tool results), so they see the history without the removed images.
"""

from __future__ import annotations

from typing import ClassVar, Final

import msgspec

from harness.accounting.prefix import shared_prefix
from harness.errors import ConfigurationError
from harness.manifest import Transform, TransformKind
from harness.messages import ContentPart, Message
from harness.request import ModelRequest, ModelResponse
from harness.tokens import image_tokens
from harness.types import Concern, Handler

IMAGE_OMITTED: Final = TransformKind("image_omitted", omitted=True)
"""Older images of a message replaced by a placeholder: ``image_omitted:<id>:<count>``."""

PLACEHOLDER: Final = (
    "[an earlier image was removed from the context to stay within the image budget "
    "({tokens:,} tokens); re-run the tool that produced it, or ask the user to share it "
    "again, if you need to look at it]"
)
"""The text an image is replaced with."""


class _Image(msgspec.Struct, frozen=True, gc=False):
    message: int
    """Its message's position in the history."""
    tokens: int


class _Seen(msgspec.Struct):
    """What the previous round of the session learnt about its history's images."""

    history: tuple[Message, ...] = ()
    images: tuple[_Image, ...] = ()


class ImageBudget:
    """Keep the newest images of the history within a count and a token budget.

    Args:
        max_images: the most images a request may hold.
        max_tokens: the most image tokens a request may hold (``None``: a quarter of the
            request's input limit).
        refill: when a limit is passed, images are removed down to this share of both
            limits, in (0, 1].

    Raises:
        ConfigurationError: a limit is not a positive int, or ``refill`` is out of range.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.SHRINKS_TOOL_RESULTS})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self, *, max_images: int = 20, max_tokens: int | None = None, refill: float = 0.75
    ) -> None:
        for name, value in (("max_images", max_images), ("max_tokens", max_tokens)):
            if value is None and name == "max_tokens":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(refill, int | float) or not 0.0 < refill <= 1.0:
            raise ConfigurationError(f"refill must be a share in (0, 1], got {refill!r}")
        self.max_images = max_images
        self.max_tokens = max_tokens
        self.refill = float(refill)

    def __repr__(self) -> str:
        return (
            f"ImageBudget(max_images={self.max_images}, max_tokens={self.max_tokens}, "
            f"refill={self.refill})"
        )

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Send ``request`` with its oldest images replaced when a limit is passed."""
        history = request.history
        seen = request.run.session_slot(self, _Seen) if request.run is not None else _Seen()
        images = self._images(request, seen)
        seen.history, seen.images = history, images
        max_tokens = self.max_tokens
        if max_tokens is None:
            max_tokens = max(1, request.input_limit // 4) if request.input_limit > 0 else None
        total = sum(i.tokens for i in images)
        if len(images) <= self.max_images and (max_tokens is None or total <= max_tokens):
            return await call_next(request)
        keep_count = max(0, int(self.max_images * self.refill))
        keep_tokens = None if max_tokens is None else int(max_tokens * self.refill)
        removed: dict[int, int] = {}  # message position → images removed there
        newest = len(history) - 1
        count = len(images)
        for image in images:  # oldest first
            over_count = count > keep_count
            over_tokens = keep_tokens is not None and total > keep_tokens
            if not (over_count or over_tokens) or image.message == newest:
                break
            removed[image.message] = removed.get(image.message, 0) + 1
            count -= 1
            total -= image.tokens
        if not removed:
            return await call_next(request)
        rewritten = list(history)
        transforms: list[Transform] = []
        for position, how_many in removed.items():
            message = history[position]
            rewritten[position] = _without_images(message, how_many, request)
            transforms.append(Transform(IMAGE_OMITTED, f"{message.id}:{how_many}"))
        new_history = tuple(rewritten)
        # The rewritten history is what the next round starts from: re-read it from the
        # first rewritten message on (once per rewrite, not per round).
        seen.images = self._images(request.replace(history=new_history), seen)
        seen.history = new_history
        return await call_next(request.replace(history=new_history).with_transforms(*transforms))

    def _images(self, request: ModelRequest, seen: _Seen) -> tuple[_Image, ...]:
        """Return the history's images, oldest first; only new messages are read."""
        history = request.history
        shared = shared_prefix(seen.history, history, request.run) if seen.history else 0
        known = tuple(i for i in seen.images if i.message < shared)
        rule = getattr(request.policy.estimator, "images", "bound")
        found: list[_Image] = []
        for position in range(shared, len(history)):
            content = history[position].content
            if isinstance(content, tuple):
                found.extend(
                    _Image(position, image_tokens(part, rule))
                    for part in content
                    if _is_image(part)
                )
        return known + tuple(found)


def _is_image(part: ContentPart) -> bool:
    return part.type in ("image_url", "image", "input_image")


def _without_images(message: Message, how_many: int, request: ModelRequest) -> Message:
    """Return ``message`` with its first ``how_many`` images replaced by placeholders."""
    content = message.content
    if not isinstance(content, tuple):  # pragma: no cover - only messages with images come here
        return message
    rule = getattr(request.policy.estimator, "images", "bound")
    parts: list[ContentPart] = []
    left = how_many
    for part in content:
        if left and _is_image(part):
            left -= 1
            text = PLACEHOLDER.format(tokens=image_tokens(part, rule))
            parts.append(ContentPart(type="text", text=text))
        else:
            parts.append(part)
    return msgspec.structs.replace(message, content=tuple(parts))
