"""Human-readable rendering of manifests (for the demo, logs and debugging)."""

from __future__ import annotations

from collections import Counter

from harness.manifest import ContextManifest

_KIND_LABEL = {"system": "system", "message": "history", "block": "blocks", "tool_schema": "tools"}


def format_manifest(manifest: ContextManifest, *, round_no: int | None = None) -> str:
    """Return a short table describing one manifest: tokens, items by kind, transforms.

    Args:
        manifest: the manifest to describe.
        round_no: the ReAct round, shown in the heading when given.
    """
    head = f"round {round_no}" if round_no is not None else "request"
    tokens = (
        "tokens unavailable"
        if manifest.estimated_input_tokens < 0
        else f"{manifest.estimated_input_tokens:,} / {manifest.input_limit:,} tokens"
    )
    lines = [
        f"┌ {head} · call {manifest.call_id[:8]} · {manifest.purpose} · {manifest.model}",
        f"│ validation {manifest.validation:<18} {tokens}  ({manifest.counting_method}"
        f"{', exact' if manifest.exact else ''}{f', ×{manifest.calibration:.3f}' if manifest.calibration != 1.0 else ''})",
    ]
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for item in manifest.items:
        label = _KIND_LABEL.get(item.kind, item.kind)
        counts[label] += 1
        sizes[label] += item.tokens
    if counts:
        lines.append(
            "│ items      "
            + "  ".join(
                f"{label} {counts[label]} ({sizes[label]:,} tok)"
                for label in _KIND_LABEL.values()
                if counts[label]
            )
        )
    blocks = [item for item in manifest.items if item.kind == "block"]
    for item in blocks:
        lines.append(
            f"│   {item.placement:<15} {item.source_id}  rev {item.revision}  {item.tokens:,} tok"
        )
    if manifest.transforms:
        lines.append("│ transforms " + manifest.transforms[0])
        lines.extend("│            " + t for t in manifest.transforms[1:])
    else:
        lines.append("│ transforms (none)")
    if manifest.error:
        lines.append(f"│ error      {manifest.error}")
    lines.append("└" + "─" * 60)
    return "\n".join(lines)
