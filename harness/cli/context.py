"""``harness context show``: what the model received in one round of a recorded session.

harness context show --session ID [--call ID] [--project NAME] [--html FILE]

Each item of the round's request (`harness.cli.context_view`: its manifest read with the
stored messages and fragments) with its kind, placement, source, tokens and a bar of its share
of the input budget; the totals per placement; what was left out (for the budget, disabled,
unavailable) and what was changed underneath. ``--call`` takes a call id or a unique prefix of
one (default: the latest call); ``--project`` names the project whose fragments the agent
loads. ``--json`` prints JSON lines only, each with a ``type``: one ``call``, then ``item``,
``omission`` and ``transform`` lines. ``--html FILE`` also writes one self-contained page with
the same breakdown as a chart (`harness.cli.context_page`). ``--store``, ``--workspace``,
``--user`` and ``--agent`` work as for ``harness sessions``; errors are one line and a
non-zero exit.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from harness.cli._format import Output, bar, flat
from harness.cli.context_view import ContextView, build_view
from harness.cli.sessions import CommandError, existing_session, store_options, with_store
from harness.fragments.model import DEFAULT_PROJECT
from harness.manifest import ContextManifest
from harness.sessions.store import SessionStore


# ------------------------------------------------------------------ the parser
def add_commands(sub: Any) -> None:
    """Add the ``context`` command to ``harness``'s sub-parsers."""
    context = sub.add_parser("context", help="what the model received in one round of a session")
    actions = context.add_subparsers(dest="action", required=True)
    show = actions.add_parser(
        "show", parents=[store_options()], help="each item, its tokens and share, what was left out"
    )
    show.add_argument("--session", required=True, help="the session id")
    show.add_argument(
        "--call", default=None, help="a call id or a unique prefix of one (default: the latest)"
    )
    show.add_argument(
        "--project",
        default=DEFAULT_PROJECT,
        metavar="NAME",
        help=f"the project whose fragments the agent loads (default: {DEFAULT_PROJECT})",
    )
    show.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write a self-contained HTML page with the breakdown as a chart",
    )


async def run(args: argparse.Namespace) -> int:
    """Run a ``context`` command; return the exit status."""
    out = Output(as_json=args.json)

    async def act(store: SessionStore, workspace: Path) -> None:
        key = await existing_session(store, args)
        view = await build_view(store, key, args.call, project=args.project)
        if args.html is not None:
            _write_html(view, args.html)
        if out.as_json:
            _print_json(view, out)
        else:
            _print_table(view, out)
        if args.html is not None:
            out.note(f"wrote {args.html}")

    return await with_store(args, act)


# ------------------------------------------------------------------ printing
def _print_table(view: ContextView, out: Output) -> None:
    m = view.manifest
    out.text(
        f"session {view.key.session_id!r} · agent {view.key.agent_id!r} · user "
        f"{view.key.user_id!r} · call {m.call_id} ({view.position} of {view.calls}) · "
        f"{m.purpose} · {m.model}"
    )
    if m.estimated_input_tokens < 0:
        tokens = "tokens unavailable (building failed before counting)"
    else:
        limit = f"{m.input_limit:,}" if m.input_limit > 0 else "unknown"
        tokens = f"{m.estimated_input_tokens:,} of {limit} input tokens"
        if m.input_limit > 0:
            tokens += f" ({m.estimated_input_tokens / m.input_limit:.1%})"
    exact = ", exact" if m.exact else ""
    out.text(f"{tokens} · {m.counting_method}{exact} · validation {m.validation}")
    if m.error:
        out.text(f"error: {m.error}")
    if m.cache_break:
        out.text(f"cached prefix broken at {m.cache_break}")
    if m.cache_expected is not None:
        out.text(_cache_line(m))
    out.text("")
    out.table(
        ("#", "KIND", "PLACEMENT", "SOURCE", "TOKENS", "SHARE", "BUDGET", "TEXT"),
        [
            (
                str(i.index),
                i.kind + (f"/{i.role}" if i.role else ""),
                i.placement,
                flat(i.source_id, 48),
                f"{i.tokens:,}",
                f"{i.share:.1%}",
                bar(i.share),
                flat(i.preview, 60) if i.preview else "",
            )
            for i in view.items
        ],
    )
    out.text(
        f"{'':>4}{len(view.items)} items, {view.used:,} tokens = {view.used / view.budget:.1%} "
        f"of the budget ({view.budget:,})"
    )
    totals: Counter[str] = Counter()
    for item in view.items:
        totals[item.placement] += item.tokens
    out.text(
        f"{'':>4}by placement: "
        + " · ".join(f"{p} {n:,} ({n / view.budget:.1%})" for p, n in totals.most_common())
    )
    for title, lines in (("left out", view.omissions), ("transforms", view.transforms)):
        out.text(f"\n{title} ({len(lines)})" + ("" if lines else ": none"))
        for line in lines:
            out.text(f"  {line}")


def _print_json(view: ContextView, out: Output) -> None:
    m = view.manifest
    out.json(
        {
            "type": "call",
            **msgspec.to_builtins(view.key),
            **{k: v for k, v in m.to_dict().items() if k not in ("items", "transforms")},
            "position": view.position,
            "calls": view.calls,
            "budget": view.budget,
            "items": len(view.items),
            "tokens": view.used,
        }
    )
    for item in view.items:
        out.json({"type": "item", **msgspec.to_builtins(item)})
    for line in view.omissions:
        out.json({"type": "omission", "transform": line, "reason": line.kind})
    for line in view.transforms:
        out.json({"type": "transform", "transform": line, "what": line.kind})


def _write_html(view: ContextView, path: Path) -> None:
    from harness.cli.context_page import render_page

    try:
        path.write_text(render_page(view), "utf-8")
    except OSError as exc:
        raise CommandError(f"could not write {path}: {exc.strerror or exc}", status=2) from None


def _cache_line(m: ContextManifest) -> str:
    """One line: the cached prefix we expected and what the provider served (the verdict)."""
    line = f"cache: expected {m.cache_expected:,} cached tokens"
    usage = m.usage
    if usage is None:
        return line + " · not answered yet"
    if not usage.cache_reported:
        return line + " · the provider reports no cached tokens"
    return line + f" · provider served {usage.cached_tokens:,} · {m.cache_verdict}"
