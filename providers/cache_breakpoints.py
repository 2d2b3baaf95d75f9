"""Explicit prompt-cache breakpoints, placed where our layout keeps the prefix stable.

Anthropic (directly, on Bedrock and on Vertex AI) caches a prompt only up to a block marked
``cache_control``, at most four per request; without marks every request pays full price.
`ModelRequest.render` lays a request out so that its prefix stays the same from round to
round: the tools, the System message, the stable reference message, then the history, and
last the material that changes each round (task and runtime state). So the marks go at the
ends of the stable pieces, newest first when slots run short:

1. the last history message: the next round's request starts with everything up to it, so
   this round writes what the next one reads (Anthropic looks back up to 20 blocks from a
   mark for an earlier entry, so last round's entry is found too);
2. the System message (with the tools before it, they are the part that almost never
   changes);
3. the stable reference message (workspace files, fragments);
4. the last tool schema (kept when a System part changes, e.g. a mode switch).

The caller's own marks are kept and count against the limit; a piece already marked is not
marked again. Providers that cache on their own (OpenAI, DeepSeek, Gemini's implicit cache)
need no marks, so `wants_breakpoints` places them only where the provider takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from harness.messages import Message

MAX_BREAKPOINTS: Final = 4
"""Anthropic's limit of ``cache_control`` marks in one request (tools, System and messages)."""

EPHEMERAL: Final[dict[str, str]] = {"type": "ephemeral"}
"""The mark placed: Anthropic's default five-minute cache entry."""

_EXPLICIT: Final = frozenset({"anthropic"})
"""Providers that cache only what is marked, whatever the model."""

_EXPLICIT_FOR_CLAUDE: Final = frozenset({"bedrock", "bedrock_converse", "vertex_ai"})
"""Providers that take Anthropic's marks for Claude models (litellm passes them on)."""


def wants_breakpoints(provider: str, model: str) -> bool:
    """Return whether ``provider`` caches only marked prefixes for ``model`` (auto mode)."""
    if provider in _EXPLICIT:
        return True
    lowered = model.lower()
    return provider in _EXPLICIT_FOR_CLAUDE and ("claude" in lowered or "anthropic" in lowered)


def count_marks(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> int:
    """Return how many ``cache_control`` marks the wire messages and tools already carry."""
    count = sum(1 for tool in tools or () if _marked(tool))
    for message in messages:
        if _marked(message):
            count += 1
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for part in content if isinstance(part, dict) and _marked(part))
    return count


def place_breakpoints(
    rendered: Sequence[Message],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    limit: int = MAX_BREAKPOINTS,
) -> tuple[str, ...]:
    """Mark the ends of the stable pieces of a request in place; return where marks went.

    ``messages`` are the wire dicts of ``rendered`` (`ModelRequest.render`), one for one.
    Returns the names of the pieces marked, in the order of `MAX_BREAKPOINTS`' priority:
    ``history``, ``system``, ``reference``, ``tools``.
    """
    if len(rendered) != len(messages):
        raise ValueError("rendered and messages must be the same request, one for one")
    room = limit - count_marks(messages, tools)
    if room <= 0:
        return ()
    ids = [m.id for m in rendered]
    history = [
        i for i, i_id in enumerate(ids) if not i_id.startswith("render/") and _markable(messages[i])
    ]
    candidates: list[tuple[str, dict[str, Any] | None]] = [
        ("history", messages[history[-1]] if history else None),
        ("system", _at(messages, ids, "render/system")),
        ("reference", _at(messages, ids, "render/reference")),
        ("tools", tools[-1] if tools else None),
    ]
    if tools:
        tools[-1] = dict(tools[-1])  # the schema dict may be shared with the caller
        candidates[-1] = ("tools", tools[-1])
    placed: list[str] = []
    for name, target in candidates:
        if room == 0:
            break
        if target is None or _covered(target):
            continue
        _mark(target)
        placed.append(name)
        room -= 1
    return tuple(placed)


def _at(messages: list[dict[str, Any]], ids: list[str], wanted: str) -> dict[str, Any] | None:
    return messages[ids.index(wanted)] if wanted in ids else None


def _marked(item: dict[str, Any]) -> bool:
    return item.get("cache_control") is not None


def _covered(target: dict[str, Any]) -> bool:
    """Return whether ``target`` (a message or tool dict) already ends with a mark."""
    if _marked(target):
        return True
    content = target.get("content")
    if isinstance(content, list) and content:
        last = content[-1]
        return isinstance(last, dict) and _marked(last)
    return False


def _markable(message: dict[str, Any]) -> bool:
    """Return whether a wire message has content to mark (not an assistant's bare tool calls)."""
    content = message.get("content")
    return bool(content) and (not isinstance(content, list) or isinstance(content[-1], dict))


def _mark(target: dict[str, Any]) -> None:
    """Mark ``target``'s last content block, or the message (or tool) itself."""
    content = target.get("content")
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        content[-1] = {**content[-1], "cache_control": dict(EPHEMERAL)}
    else:
        target["cache_control"] = dict(EPHEMERAL)
