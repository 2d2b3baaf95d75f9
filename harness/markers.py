"""The metadata markers the stack writes on messages, named once, and the results it makes up.

A middleware that rewrites a message (offload, trimming, truncation, summaries) says so in
the message's ``metadata`` under one of these keys, so a later round — or another
middleware — can tell what happened without parsing text. Every key lives here; nothing
writes a marker that is not listed, and `rewritten` knows them all.
"""

from __future__ import annotations

from typing import Final

from harness.messages import Message, ToolCall

SUMMARY: Final = "summary"
"""On a summary message that replaced early turns (``True``)."""
SUMMARISED: Final = "summarised"
"""On a summary message: how many messages it stands for in all (an int)."""
SUMMARY_REQUEST: Final = "request"
"""On a summary made because the model asked for it: the request's token."""
SUMMARY_FAILED: Final = "summary_failed"
"""On the notice that stands, for one round, for early turns the summariser could not take."""
TRIMMED: Final = "trimmed"
"""On an old tool result cut to a preview (``True``)."""
MASKED: Final = "masked"
"""On an old tool result replaced by a one-line placeholder (observation masking, ``True``)."""
SUPERSEDED: Final = "superseded"
"""On a file read or listing replaced by a pointer: the id of the later call that read the
same target again or wrote to it."""
ARGS_TRUNCATED: Final = "args_truncated"
"""On an assistant message whose long tool-call arguments were shortened (``True``)."""
OFFLOADED: Final = "offloaded"
"""On a tool result moved to a file: the file's workspace path."""
OFFLOADED_CHARS: Final = "offloaded_chars"
"""On an offloaded (or offload-failed) result: the original's length in characters."""
IMAGES_OFFLOADED: Final = "images_offloaded"
"""On a tool result whose large images were moved to files: their workspace paths (a list)."""
OFFLOAD_FAILED: Final = "offload_failed"
"""On a result that should have been offloaded but could not be written: why."""
ORIGIN_ID: Final = "origin_id"
"""On a rewritten message: the id of the message it was made from."""
INTERRUPTED: Final = "interrupted"
"""On a result made up for a tool call that never answered (``True``)."""
FRAGMENT: Final = "fragment"
"""On a history message sent with a developer's edit (`harness.fragments.editing`): the fragment's
``fragment:<id>@<version>`` label; ``origin_id`` names the message it overlays."""

PROVIDER_COMPACTED: Final = "provider_compacted"
"""On the last message a provider's compaction item stands for (OpenAI Responses): the item
and the model that made it, ``{"id", "encrypted_content", "model"}`` (`ProviderCompaction`)."""

REWRITE_MARKERS: Final = (
    TRIMMED,
    OFFLOADED,
    IMAGES_OFFLOADED,
    OFFLOAD_FAILED,
    ARGS_TRUNCATED,
    MASKED,
    SUPERSEDED,
)
"""Markers of a message whose content the model no longer sees in full."""

INTERRUPTED_TEXT: Final = "no result: interrupted"
"""The content of a result made up for a call that never answered."""


def rewritten(message: Message) -> bool:
    """Return whether ``message`` is a rewritten copy (trimmed, offloaded, truncated)."""
    return any(message.meta(key) is not None for key in REWRITE_MARKERS)


def is_summary(message: Message) -> bool:
    """Return whether ``message`` is a summary of earlier turns."""
    return bool(message.meta(SUMMARY))


def interrupted_result(
    call: ToolCall, *, text: str = INTERRUPTED_TEXT, id: str | None = None
) -> Message:
    """Return the result of a tool call that never answered (cancelled, or lost)."""
    extra = {"id": id} if id is not None else {}
    return Message.tool(call.id, text, name=call.name, metadata={INTERRUPTED: True}, **extra)
