"""Context blocks: runtime facts and reference material added to one request.

A block never becomes System text and is never written to the persisted history: it is
rendered for the request it was added to (runtime blocks under ``TASK_STATE`` /
``RUNTIME_STATE``, reference blocks under ``HARNESS_CONTEXT``) and then forgotten.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

BlockKind = Literal["runtime", "reference"]
Placement = Literal["TASK_STATE", "RUNTIME_STATE", "HARNESS_CONTEXT"]


def content_hash(text: str) -> str:
    """Return a short, stable hash of ``text`` (used as the default revision)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


class ContextBlock(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of material for a single request.

    Build blocks with `ContextBlock.runtime` (current facts) or `ContextBlock.reference`
    (documents, retrieved passages); change them with ``block.replace(...)``.
    """

    kind: BlockKind
    """``runtime`` for current facts, ``reference`` for documents."""
    id: str
    """The block id, unique within its source."""
    text: str
    """The material itself."""
    revision: str = ""
    """A version label; the content hash when not given."""
    priority: int = 0
    """Higher survives longer when the budget is short."""
    required: bool = False
    """A required block is never dropped; if it does not fit, the build fails."""
    stable: bool = False
    """Material that changes rarely (workspace files, fragments): a ``HARNESS_CONTEXT``
    block marked so is rendered before the history, where a provider's prompt cache keeps
    matching it from one round to the next (`harness.request.is_stable`)."""
    source_id: str = ""
    """The id the manifest shows, e.g. ``source/build-status/latest`` (set by whoever adds it)."""
    category: str = "source"
    """Selection group: ``memory``, ``knowledge``, ``source``, ``task``, ``fragment`` …"""
    superseded_by: str | None = None
    """The id of a history message that already shows this content (a tool receipt): while
    that message is still in the history that is sent, the block is not rendered."""
    placement: Placement | None = None
    """Where it is rendered; by default runtime → ``RUNTIME_STATE``, reference → ``HARNESS_CONTEXT``."""

    def __post_init__(self) -> None:
        if not self.revision:
            msgspec.structs.force_setattr(self, "revision", content_hash(self.text))
        if not self.source_id:
            msgspec.structs.force_setattr(self, "source_id", self.id)

    @classmethod
    def runtime(cls, id: str, text: str, **kw: Any) -> ContextBlock:
        """Return a block of current facts (state placement)."""
        return cls(kind="runtime", id=id, text=text, **kw)

    @classmethod
    def reference(cls, id: str, text: str, **kw: Any) -> ContextBlock:
        """Return a block of reference material (``HARNESS_CONTEXT`` placement)."""
        return cls(kind="reference", id=id, text=text, **kw)

    @property
    def where(self) -> Placement:
        """The placement this block is rendered under."""
        if self.placement is not None:
            return self.placement
        return "RUNTIME_STATE" if self.kind == "runtime" else "HARNESS_CONTEXT"

    def replace(self, **changes: Any) -> ContextBlock:
        """Return a copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)

    def with_revision(self, revision: str) -> ContextBlock:
        """Return a copy with an explicit revision label."""
        return self.replace(revision=revision)

    def with_priority(self, priority: int) -> ContextBlock:
        """Return a copy with a selection priority (higher survives longer)."""
        return self.replace(priority=priority)

    def as_required(self) -> ContextBlock:
        """Return a copy that must be kept (the build fails if it cannot fit)."""
        return self.replace(required=True)
