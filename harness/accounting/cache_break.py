"""What broke the cached prefix: the first piece of a request that differs from the last one.

A provider's prompt cache serves the longest prefix a request shares with an earlier one:
tools, System, the stable reference material, then the history (`ModelRequest.render`).
When a round is billed in full, the user wants to know why. `CacheBreaks` keeps, per session,
the pieces of the last agent request (references only: no text is copied) and names, for the
next request, the first piece that differs:

- ``model`` — another model answers (no cache is shared across models);
- ``tools:<name>`` — a tool schema was added, removed or changed;
- ``system:<part>`` — a System part changed (a mode switch, an edited instruction);
- ``reference:<source>`` — a stable reference block changed (a workspace file, a fragment);
- ``history:<message id>`` — an earlier message was rewritten or dropped; the transform of
  this request that did it (an offload, a trim, the compaction) is named as the cause.

``None`` means the whole previous request is a prefix of this one, as it should be between
compactions. The comparison costs identity checks and one `shared_prefix` (which the round
has usually asked already), not a walk over the history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from harness.accounting.prefix import shared_prefix
from harness.messages import Message
from harness.request import ModelRequest, is_stable

if TYPE_CHECKING:
    from harness.blocks import ContextBlock
    from harness.manifest import Transform

_CAUSED_BY_REWRITE: Final = ("compaction", "summar", "trim", "mask", "omitted", "offload")
"""Transform kinds that drop or rewrite earlier history (any kind containing one of these)."""


class CacheBreak(msgspec.Struct, frozen=True, kw_only=True):
    """Where a request stopped sharing the previous agent request's prefix, and why."""

    where: str
    """``model``, ``tools:<name>``, ``system:<part>``, ``reference:<source>`` or
    ``history:<message id>``."""
    cause: str | None = None
    """The transform of this request that rewrote or dropped the history there, if known."""

    @property
    def label(self) -> str:
        """One line for a manifest, a header or a log: ``history:m12 (tool_result_offload:m12)``."""
        return f"{self.where} ({self.cause})" if self.cause else self.where


class SharedPrefix(msgspec.Struct, frozen=True, kw_only=True):
    """How much of a request the session's previous agent request had in front, piece by piece.

    The pieces in render order: the tools, the System message, the stable reference message,
    then ``messages`` leading history messages. What a provider's prompt cache can serve.
    """

    pieces: int
    """How many of tools, System and reference are shared whole (0 to 3); the history's
    ``messages`` count only when all three are."""
    messages: int = 0
    """How many leading history messages are shared."""
    broke: CacheBreak | None = None
    """What ended the shared prefix before the previous request's end (``None``: nothing)."""


_NOTHING_SEEN: Final = SharedPrefix(pieces=0)
"""The session's first request: nothing was sent before it, nothing can be cached."""


class _Seen(msgspec.Struct, kw_only=True):
    """The pieces of the session's last agent request (references to its own tuples)."""

    model: str
    tools: tuple[object, ...]
    system: tuple[object, ...]
    reference: tuple[ContextBlock, ...]
    history: tuple[Message, ...]


class CacheBreaks:
    """Per-session memory of the last agent request; `observe` names what broke its prefix."""

    def __init__(self) -> None:
        self._seen: _Seen | None = None

    def observe(self, request: ModelRequest) -> CacheBreak | None:
        """Return what in ``request`` breaks the last agent request's prefix (``None``: nothing).

        A summary request is compared but not remembered: an in-place summary shares the
        agent's prefix, and the next agent request is compared with the last agent request.
        """
        return self.compare(request).broke

    def compare(self, request: ModelRequest) -> SharedPrefix:
        """Return what ``request`` shares with the last agent request (`observe` says why not more)."""
        seen = self._seen
        found = _NOTHING_SEEN if seen is None else _compared(seen, request)
        if request.ids.purpose == "agent":
            self._seen = _Seen(
                model=request.model,
                tools=request.tools,
                system=request.system,
                reference=_reference(request),
                history=request.history,
            )
        return found


def cache_break_of(request: ModelRequest) -> CacheBreak | None:
    """Return what breaks the cached prefix of ``request``'s session (`CacheBreaks.observe`).

    The memory lives in the session's scratch space (per call when there is none), so
    requests of other sessions and users never compare with each other.
    """
    if request.run is None:
        return None
    return request.run.session_slot(CacheBreaks, CacheBreaks).observe(request)


def shared_prefix_of(request: ModelRequest) -> SharedPrefix | None:
    """Return what ``request`` shares with its session's previous agent request (`compare`).

    ``None`` without a run scope (nothing to compare with). Call it once per request, in
    place of `cache_break_of`: both remember an agent request as the session's last.
    """
    if request.run is None:
        return None
    return request.run.session_slot(CacheBreaks, CacheBreaks).compare(request)


def _reference(request: ModelRequest) -> tuple[ContextBlock, ...]:
    return tuple(b for b in request.blocks if is_stable(b))


def _compared(seen: _Seen, request: ModelRequest) -> SharedPrefix:
    if request.model != seen.model:
        return SharedPrefix(pieces=0, broke=CacheBreak(where="model"))
    if request.tools != seen.tools:
        named = _first_named(seen.tools, request.tools)
        return SharedPrefix(pieces=0, broke=CacheBreak(where=f"tools:{named}"))
    if request.system != seen.system:
        named = _first_named(seen.system, request.system)
        return SharedPrefix(pieces=1, broke=CacheBreak(where=f"system:{named}"))
    reference = _reference(request)
    if reference != seen.reference:
        named = _first_named(seen.reference, reference)
        return SharedPrefix(pieces=2, broke=CacheBreak(where=f"reference:{named}"))
    shared = shared_prefix(seen.history, request.history, request.run)
    if shared >= len(seen.history):
        return SharedPrefix(pieces=3, messages=len(seen.history))
    lost = seen.history[shared].id
    broke = CacheBreak(where=f"history:{lost}", cause=_cause(request.transforms, lost))
    return SharedPrefix(pieces=3, messages=shared, broke=broke)


def _first_named(old: tuple[object, ...], new: tuple[object, ...]) -> str:
    """Return the name of the first piece that differs between ``old`` and ``new``."""
    for before, after in zip(old, new, strict=False):
        if before != after:
            return _name(after)
    longer = old if len(old) > len(new) else new
    return _name(longer[min(len(old), len(new))]) if longer else "?"


def _name(piece: object) -> str:
    for attribute in ("name", "source_id", "id"):
        value = getattr(piece, attribute, None)
        if isinstance(value, str) and value:
            return value
    return "?"


def _cause(transforms: tuple[Transform, ...], lost: str) -> str | None:
    """Return the transform that rewrote message ``lost``, else one that rewrites history."""
    for transform in transforms:
        if transform.target == lost:
            return str(transform)
    for transform in transforms:
        if any(word in transform.kind for word in _CAUSED_BY_REWRITE):
            return str(transform)
    return None
