"""The HTML page of ``harness context show --html``: one round's request as a chart.

One self-contained file — inline CSS and SVG, no script, nothing fetched — so it can be
attached to a bug report or opened offline. It shows the same breakdown as the table: the
budget as one stacked bar (a segment per item, coloured by placement, hover for details), the
totals per placement, every item with its own bar and the start of its text, and what was left
out or changed underneath. Every text from the store is HTML-escaped.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from harness.cli.context_view import ContextView, ViewItem

COLOURS: Final = {
    "system": "#4e79a7",
    "history": "#59a14f",
    "tools": "#f28e2b",
    "TASK_STATE": "#e15759",
    "RUNTIME_STATE": "#76b7b2",
    "HARNESS_CONTEXT": "#edc948",
}
"""Segment colour by placement (others get `OTHER`)."""
OTHER: Final = "#b07aa1"
FREE: Final = "#e6e6e6"
CHART_WIDTH: Final = 960
ROW_BAR_WIDTH: Final = 160

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1040px;
color:#222;padding:0 1em}
h1{font-size:1.3em;margin-bottom:.2em}.meta{color:#555;margin:.2em 0}
table{border-collapse:collapse;width:100%;margin:1em 0}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.src,td.text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;
word-break:break-all}.swatch{display:inline-block;width:.9em;height:.9em;
vertical-align:middle;margin-right:.3em;border-radius:2px}
ul{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}.none{color:#777}
.bad{color:#b00020;font-weight:600}
"""


def colour(placement: str) -> str:
    """Return the colour of a placement's segments."""
    return COLOURS.get(placement, OTHER)


def render_page(view: ContextView) -> str:
    """Return the whole HTML document of ``view``."""
    m = view.manifest
    key = view.key
    title = f"context of call {m.call_id} · session {key.session_id}"
    if m.estimated_input_tokens < 0:
        tokens = "tokens unavailable (building failed before counting)"
    else:
        limit = f"{m.input_limit:,}" if m.input_limit > 0 else "unknown"
        tokens = f"{m.estimated_input_tokens:,} of {limit} input tokens"
    validation = escape(m.validation)
    if m.validation != "passed":
        validation = f'<span class="bad">{validation}</span>'
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>What the model received: call {escape(m.call_id)}</h1>",
        f'<p class="meta">session <b>{escape(key.session_id)}</b> · agent '
        f"{escape(key.agent_id)} · user {escape(key.user_id or '(anonymous)')} · call "
        f"{view.position} of {view.calls} · {escape(m.purpose)} · model {escape(m.model)}</p>",
        f'<p class="meta">{escape(tokens)} · {escape(m.counting_method)}'
        f"{' (exact)' if m.exact else ''} · validation {validation}"
        + (f" · error {escape(m.error)}" if m.error else "")
        + "</p>",
        "<h2>The budget</h2>",
        _stacked_bar(view),
        _legend(view),
        "<h2>Items, in the order the model reads them</h2>",
        _items_table(view),
        _list("Left out", view.omissions),
        _list("Transforms", view.transforms),
        '<p class="meta">Made by <code>harness context show</code> from the session store: the '
        "manifest carries no prompt text, so System parts, tool schemas and blocks from sources "
        "are shown by id and size only.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _stacked_bar(view: ContextView) -> str:
    height = 40
    x = 0.0
    rects: list[str] = []
    for item in view.items:
        width = item.tokens / view.budget * CHART_WIDTH
        rects.append(
            f'<rect x="{x:.2f}" y="0" width="{max(width, 0.5):.2f}" height="{height}" '
            f'fill="{colour(item.placement)}" stroke="#fff" stroke-width="0.5">'
            f"<title>{escape(_tip(item))}</title></rect>"
        )
        x += width
    if x < CHART_WIDTH:
        free = view.budget - view.used
        rects.append(
            f'<rect x="{x:.2f}" y="0" width="{CHART_WIDTH - x:.2f}" height="{height}" '
            f'fill="{FREE}"><title>free: {free:,} tokens</title></rect>'
        )
    return (
        f'<svg role="img" width="100%" preserveAspectRatio="none" '
        f'height="{height}" viewBox="0 0 {max(CHART_WIDTH, x):.0f} {height}" '
        'aria-label="share of the input budget by item">' + "".join(rects) + "</svg>"
    )


def _tip(item: ViewItem) -> str:
    return f"#{item.index} {item.source_id}: {item.tokens:,} tokens ({item.share:.1%})"


def _legend(view: ContextView) -> str:
    totals: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for item in view.items:
        totals[item.placement] += item.tokens
        counts[item.placement] += 1
    rows = [
        f'<tr><td><span class="swatch" style="background:{colour(p)}"></span>{escape(p)}</td>'
        f'<td class="num">{counts[p]}</td><td class="num">{totals[p]:,}</td>'
        f'<td class="num">{totals[p] / view.budget:.1%}</td></tr>'
        for p in totals
    ]
    free = view.budget - view.used
    rows.append(
        f'<tr><td><span class="swatch" style="background:{FREE}"></span>free</td><td></td>'
        f'<td class="num">{free:,}</td><td class="num">{free / view.budget:.1%}</td></tr>'
    )
    return (
        "<table><tr><th>placement</th><th>items</th><th>tokens</th><th>share of the budget"
        f" ({view.budget:,})</th></tr>" + "".join(rows) + "</table>"
    )


def _items_table(view: ContextView) -> str:
    rows = []
    for item in view.items:
        width = min(1.0, item.share) * ROW_BAR_WIDTH
        chart = (
            f'<svg width="{ROW_BAR_WIDTH}" height="12">'
            f'<rect width="{ROW_BAR_WIDTH}" height="12" fill="{FREE}"/>'
            f'<rect width="{max(width, 1):.2f}" height="12" fill="{colour(item.placement)}"/>'
            "</svg>"
        )
        kind = item.kind + (f"/{item.role}" if item.role else "")
        text = escape(item.preview) if item.preview else '<span class="none">(no text kept)</span>'
        if item.note:
            text += f' <span class="none">({escape(item.note)})</span>'
        rows.append(
            f'<tr><td class="num">{item.index}</td><td>{escape(kind)}</td>'
            f'<td>{escape(item.placement)}</td><td class="src">{escape(item.source_id)}</td>'
            f'<td class="num">{item.tokens:,}</td><td class="num">{item.share:.1%}</td>'
            f'<td>{chart}</td><td class="text">{text}</td></tr>'
        )
    return (
        "<table><tr><th>#</th><th>kind</th><th>placement</th><th>source</th><th>tokens</th>"
        "<th>share</th><th>of the budget</th><th>text</th></tr>" + "".join(rows) + "</table>"
    )


def _list(title: str, lines: tuple[str, ...]) -> str:
    if not lines:
        return f'<h2>{escape(title)}</h2><p class="none">none</p>'
    items = "".join(f"<li>{escape(line)}</li>" for line in lines)
    return f"<h2>{escape(title)} ({len(lines)})</h2><ul>{items}</ul>"
