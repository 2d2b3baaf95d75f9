"""Counting a whole request: the estimated input tokens and the manifest items.

Counts come from the estimator's per-id caches, so measuring a request whose history grew
by one message costs one new count plus one cache lookup per message.
"""

from __future__ import annotations

from harness.blocks import content_hash
from harness.events import AgentEvent
from harness.manifest import ContextManifest, ManifestItem
from harness.messages import Message
from harness.request import ModelRequest, SystemPart
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator

REPLY_PRIMING = 3
"""Tokens every request spends priming the assistant's reply."""


BLOCKS_FRAMING = MESSAGE_OVERHEAD + 6
"""Tokens of the message that holds the blocks, beyond the blocks themselves (markers)."""


def system_part_tokens(part: SystemPart, estimator: TokenEstimator) -> int:
    """Return one part's share of the merged System message: its text and a separator."""
    message = Message(role="system", content=part.text, id=f"system/{part.name}")
    return estimator.count_message(message) - MESSAGE_OVERHEAD + 1


def system_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return the token cost of the merged System message."""
    if not request.system:
        return 0
    return MESSAGE_OVERHEAD + sum(system_part_tokens(p, estimator) for p in request.system)


def fixed_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return what every request pays regardless of history: System, tools, priming."""
    return system_tokens(request, estimator) + estimator.count_tools(request.tools) + REPLY_PRIMING


def blocks_tokens(request: ModelRequest, estimator: TokenEstimator) -> int:
    """Return the token cost of the rendered blocks message."""
    if not request.blocks:
        return 0
    return BLOCKS_FRAMING + sum(estimator.count_block(b) for b in request.blocks)


def estimate_request(request: ModelRequest, estimator: TokenEstimator | None = None) -> int:
    """Return the estimated input tokens of ``request`` as it would be sent."""
    est = estimator or request.estimator
    return (
        fixed_tokens(request, est)
        + est.count_messages(request.history)
        + blocks_tokens(request, est)
    )


def manifest_items(
    request: ModelRequest, estimator: TokenEstimator | None = None
) -> tuple[int, tuple[ManifestItem, ...]]:
    """Return the estimated total and one manifest item per system part, message, tool and block.

    One pass over the request: the total is the sum of the items plus framing, and equals
    `estimate_request`.
    """
    est = estimator or request.estimator
    items: list[ManifestItem] = []
    append = items.append
    total = REPLY_PRIMING
    if request.system:
        total += MESSAGE_OVERHEAD
        for part in request.system:
            tokens = system_part_tokens(part, est)
            total += tokens
            append(
                ManifestItem(
                    kind="system",
                    source_id=f"system/{part.name}",
                    tokens=tokens,
                    placement="system",
                )
            )
    count_message = est.count_message  # bound once: this loop runs per message per round
    for message in request.history:
        tokens = count_message(message)
        total += tokens
        append(
            ManifestItem(
                kind="message",
                source_id=f"history/{message.id}",
                tokens=tokens,
                placement="history",
                role=message.role,
            )
        )
    if request.blocks:
        total += BLOCKS_FRAMING
        for block in request.blocks:
            tokens = est.count_block(block)
            total += tokens
            append(
                ManifestItem(
                    kind="block",
                    source_id=block.source_id,
                    tokens=tokens,
                    placement=block.where,
                    revision=block.revision,
                    content_hash=content_hash(block.text),
                )
            )
    for tool in request.tools:
        tokens = est.count_tools((tool,))
        total += tokens
        append(
            ManifestItem(
                kind="tool_schema", source_id=f"tool/{tool.name}", tokens=tokens, placement="tools"
            )
        )
    return total, tuple(items)


def build_manifest(
    request: ModelRequest, estimator: TokenEstimator | None = None
) -> ContextManifest:
    """Return the manifest of ``request`` as it is about to be sent (validation ``passed``)."""
    est = estimator or request.estimator
    total, items = manifest_items(request, est)
    return ContextManifest(
        call_id=request.ids.call_id,
        purpose=request.ids.purpose,
        model=request.model,
        estimated_input_tokens=total,
        input_limit=request.input_limit,
        counting_method=est.method,
        exact=est.exact,
        items=items,
        transforms=request.transforms,
        agent_id=request.ids.agent_id,
        session_id=request.ids.session_id,
        run_id=request.ids.run_id,
        calibration=getattr(est, "factor", 1.0),
    )


def report_manifest(manifest: ContextManifest, request: ModelRequest) -> None:
    """Hand ``manifest`` to the request's policy observer and its call's event stream."""
    if request.policy.observer is not None:
        request.policy.observer(manifest)
    if request.run is not None and request.run.emit is not None:
        request.run.emit(AgentEvent(kind="context_build", manifest=manifest))
