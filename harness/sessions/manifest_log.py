"""Manifests in the session log as deltas: a round stores only the items the last one lacked.

A manifest lists one item per history message, so storing every round's manifest whole made
the log grow with the square of the session (1.4 MB a round at 10,000 messages). Consecutive
manifests of one purpose share a long prefix of items, so the recorder stores a manifest as
a *delta*: ``ManifestEvent(base=<call id>, shared=N)`` whose items follow the first ``N``
items of the manifest of call ``base``, stored earlier in the same session. Every
`CHAIN`-th manifest is stored whole, so resolving one reads a bounded chain. Readers get
whole manifests back from `resolve`.

A manifest is stored with the usage the provider reported when its round knew it (our agent,
the drop-in). A host that sends the request itself learns it after the round was committed
(the litellm proxy hook): its `UsageEvent` follows later in the log, and `resolve`, given the
usage events too, puts it on the manifest of its call id — so every reader shows a proxy
call's usage as it shows an agent call's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from harness.accounting.cache_verdict import answered
from harness.errors import WorkspaceError
from harness.manifest import ContextManifest, ManifestItems, Usage
from harness.sessions.store import ManifestEvent, UsageEvent

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


def resolve(events: Iterable[ManifestEvent | UsageEvent]) -> list[ContextManifest]:
    """Return the whole manifests of a session's manifest events, given in log order.

    Usage events among ``events`` answer the manifests of their call ids that were stored
    without usage (`harness.accounting.answered`: the usage and the cache verdict it gives);
    a manifest stored with its usage keeps it.

    Raises:
        WorkspaceError: a delta refers to a manifest that is not among ``events`` (pass every
            manifest event of the session, from its first).
    """
    given = list(events)
    usage: dict[str, Usage] = {}
    for event in given:
        if isinstance(event, UsageEvent):
            usage.setdefault(event.call_id, event.usage)
    by_call: dict[str, ContextManifest] = {}
    out: list[ContextManifest] = []
    for event in given:
        if isinstance(event, UsageEvent):
            continue
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
        reported = usage.get(manifest.call_id) if manifest.usage is None else None
        out.append(manifest if reported is None else answered(manifest, reported))
    return out
