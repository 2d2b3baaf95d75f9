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
        seen = self._seen
        found = None if seen is None else _first_break(seen, request)
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


def _reference(request: ModelRequest) -> tuple[ContextBlock, ...]:
    return tuple(b for b in request.blocks if is_stable(b))


def _first_break(seen: _Seen, request: ModelRequest) -> CacheBreak | None:
    if request.model != seen.model:
        return CacheBreak(where="model")
    if request.tools != seen.tools:
        return CacheBreak(where=f"tools:{_first_named(seen.tools, request.tools)}")
    if request.system != seen.system:
        return CacheBreak(where=f"system:{_first_named(seen.system, request.system)}")
    reference = _reference(request)
    if reference != seen.reference:
        return CacheBreak(where=f"reference:{_first_named(seen.reference, reference)}")
    shared = shared_prefix(seen.history, request.history, request.run)
    if shared >= len(seen.history):
        return None
    lost = seen.history[shared].id
    return CacheBreak(where=f"history:{lost}", cause=_cause(request.transforms, lost))


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
