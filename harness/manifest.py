"""The context manifest: what one model request was prepared from, without prompt text.

One manifest is produced per model request: on success just before the client is called,
on failure when preparation stops. It is handed to the policy's observer and emitted as a
``context_build`` event. It carries ids, counts, revisions and hashes — never the prompt.
"""

from __future__ import annotations

import time
from typing import Literal

import msgspec

from harness.errors import Validation

ItemKind = Literal["system", "message", "tool_schema", "block"]


class ManifestItem(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One thing the request was built from."""

    kind: ItemKind
    """``system``, ``message``, ``tool_schema`` or ``block``."""
    source_id: str
    """Where it came from: ``system/<name>``, ``history/<message id>``, ``tool/<name>``,
    ``source/<source>/<block>``, ``workspace/MEMORY.md`` …"""
    tokens: int
    """Its estimated token count."""
    placement: str | None = None
    """``system``, ``history``, ``tools``, ``TASK_STATE``, ``RUNTIME_STATE``, ``HARNESS_CONTEXT``."""
    revision: str | None = None
    """The block's revision label, when it has one."""
    content_hash: str | None = None
    """A hash of the content, to compare versions without the text."""
    role: str | None = None
    """For messages: the role."""


class ContextManifest(msgspec.Struct, frozen=True, kw_only=True):
    """The per-request context build record (see DESIGN.md for the field meanings)."""

    call_id: str
    """The id of this model-request preparation (not the session or run id)."""
    purpose: str
    """Why the model is called: ``agent``, ``summary`` …"""
    model: str
    """The model name the request is for."""
    estimated_input_tokens: int
    """The estimated input size; -1 when building failed before counting."""
    input_limit: int
    """The input budget in force; -1 when unknown because building failed early."""
    counting_method: str
    """How tokens were counted (``approximate:o200k``, ``tiktoken:o200k_base`` …) or ``unavailable``."""
    exact: bool
    """Whether the counting method is the provider's exact tokenizer."""
    items: tuple[ManifestItem, ...] = ()
    """What the request was built from, in render order."""
    transforms: tuple[str, ...] = ()
    """What preparation changed, e.g. ``tool_result_offload:<id>``, ``omitted_for_budget:<id>``."""
    validation: Validation = "passed"
    """``passed`` or the reason the request was not sent."""
    agent_id: str = ""
    """The agent's id."""
    session_id: str = ""
    """The session's id."""
    run_id: str = ""
    """The id of the agent call this request belongs to."""
    calibration: float = 1.0
    """The usage-calibrated correction factor applied to estimates (1.0 = none)."""
    error: str | None = None
    """The error class name when validation is not ``passed``."""
    created_at: float = msgspec.field(default_factory=time.time)
    """Unix time the manifest was made."""

    def to_dict(self) -> dict[str, object]:
        """Return the manifest as plain JSON-ready data."""
        result: dict[str, object] = msgspec.to_builtins(self)
        return result
