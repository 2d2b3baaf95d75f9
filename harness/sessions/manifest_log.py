"""Manifests in the session log as deltas: a round stores only the items the last one lacked.

A manifest lists one item per history message, so storing every round's manifest whole made
the log grow with the square of the session (1.4 MB a round at 10,000 messages). Consecutive
manifests of one purpose share a long prefix of items, so the recorder stores a manifest as
a *delta*: ``ManifestEvent(base=<call id>, shared=N)`` whose items follow the first ``N``
items of the manifest of call ``base``, stored earlier in the same session. Every
`CHAIN`-th manifest is stored whole, so resolving one reads a bounded chain. Readers get
whole manifests back from `resolve`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from harness.errors import WorkspaceError
from harness.manifest import ContextManifest, ManifestItems
from harness.sessions.store import ManifestEvent

CHAIN: Final = 32
"""At most this many deltas follow a whole manifest of the same purpose."""

MIN_SHARED: Final = 16
"""A manifest sharing fewer leading items with the last one is stored whole."""


class _Last(msgspec.Struct):
    call_id: str
    items: ManifestItems
    depth: int


class ManifestDeltas:
    """One session's writer side: turns manifests into whole or delta `ManifestEvent`s.

    `encode` is tentative; `committed` makes its choices the base of later deltas once the
    events are stored (a failed commit stores nothing, so nothing may refer to them).
    """

    def __init__(self) -> None:
        self._last: dict[str, _Last] = {}
        self._next: dict[str, _Last] = {}

    def encode(self, manifests: Iterable[ContextManifest]) -> list[ManifestEvent]:
        """Return the events that store ``manifests`` (in order)."""
        self._next = dict(self._last)
        out: list[ManifestEvent] = []
        for manifest in manifests:
            last = self._next.get(manifest.purpose)
            items = manifest.items
            if last is not None and last.depth < CHAIN:
                shared = last.items.shared_with(items)
                if shared >= MIN_SHARED:
                    self._next[manifest.purpose] = _Last(manifest.call_id, items, last.depth + 1)
                    delta = msgspec.structs.replace(manifest, items=items[shared:])
                    out.append(ManifestEvent(manifest=delta, base=last.call_id, shared=shared))
                    continue
            self._next[manifest.purpose] = _Last(manifest.call_id, items, 0)
            out.append(ManifestEvent(manifest=manifest))
        return out

    def committed(self) -> None:
        """The events of the last `encode` are stored: later deltas may refer to them."""
        self._last = self._next


def resolve(events: Iterable[ManifestEvent]) -> list[ContextManifest]:
    """Return the whole manifests of a session's manifest events, given in log order.

    Raises:
        WorkspaceError: a delta refers to a manifest that is not among ``events`` (pass every
            manifest event of the session, from its first).
    """
    by_call: dict[str, ContextManifest] = {}
    out: list[ContextManifest] = []
    for event in events:
        manifest = event.manifest
        if event.base is not None:
            base = by_call.get(event.base)
            if base is None or len(base.items) < event.shared:
                raise WorkspaceError(
                    f"manifest of call {manifest.call_id!r} refers to call {event.base!r}, which "
                    "is not in the events given; read every manifest event of the session"
                )
            manifest = msgspec.structs.replace(
                manifest, items=base.items[: event.shared] + manifest.items
            )
        by_call[manifest.call_id] = manifest
        out.append(manifest)
    return out
