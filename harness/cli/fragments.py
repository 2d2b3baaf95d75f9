"""``harness fragments …``: list, edit and search the context fragments of a session.

harness fragments list    --session ID [--project [NAME]] [--all]
harness fragments show    --session ID --fragment ID          every version of one fragment
harness fragments add     --session ID --content TEXT [--title T] [--kind K] [--tag T]…
harness fragments edit    --session ID --fragment ID [--content T] [--title T] [--tag T]…
harness fragments rm|disable|enable --session ID --fragment ID
harness fragments move    --session ID --fragment ID (--position N | --before ID | --after ID)
harness fragments revert  --session ID --fragment ID [--to-version N]
harness fragments search  --session ID [--keyword WORDS] [--tag T]…

``--project [NAME]`` acts on the agent's project fragments (default project ``default``)
instead of the session's; ``--expect-version N`` refuses a write when the set changed since
version N. ``--store``, ``--workspace``, ``--user``, ``--agent`` and ``--json`` work as for
``harness sessions``. A bad id, a stale version or a bad flag is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import msgspec

from harness.cli._format import Output, flat, when
from harness.cli.sessions import DEFAULT_AGENT, CommandError, with_store
from harness.fragments.editing import Fragments
from harness.fragments.model import DEFAULT_PROJECT, KINDS, Fragment, Scope
from harness.sessions.store import SessionKey, SessionStore

ACTIONS = ("list", "show", "add", "edit", "rm", "disable", "enable", "move", "revert", "search")


def add_commands(sub: Any) -> None:
    """Add the ``fragments`` command to ``harness``'s sub-parsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--session", required=True, help="the session id")
    common.add_argument(
        "--project",
        nargs="?",
        const=DEFAULT_PROJECT,
        default=None,
        metavar="NAME",
        help=f"act on the agent's project fragments (default project: {DEFAULT_PROJECT})",
    )
    common.add_argument("--store", default=None, help="session store URL (as for sessions)")
    common.add_argument("--workspace", default=None, help="the agent's workspace (default: .)")
    common.add_argument("--user", default="", help="the user (default: the anonymous user)")
    common.add_argument("--agent", default=None, help=f"the agent id (default: {DEFAULT_AGENT})")
    common.add_argument("--json", action="store_true", help="print JSON lines instead of tables")
    common.add_argument(
        "--expect-version",
        type=int,
        default=None,
        metavar="N",
        help="refuse the write unless the fragment set is still at version N",
    )
    one = argparse.ArgumentParser(add_help=False)
    one.add_argument("--fragment", required=True, help="the fragment id (see list)")

    fragments = sub.add_parser("fragments", help="see and edit the context fragments of a session")
    actions = fragments.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common], help="fragments in the model's order")
    listing.add_argument("--all", action="store_true", help="include removed fragments")
    actions.add_parser("show", parents=[common, one], help="every version of one fragment")
    add = actions.add_parser("add", parents=[common], help="add a fragment")
    add.add_argument("--content", required=True, help="the fragment's text")
    add.add_argument("--title", default="", help="a short title")
    add.add_argument("--kind", default="user", choices=sorted(KINDS), help="default: user")
    add.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    add.add_argument("--position", type=int, default=None, help="0 = first")
    edit = actions.add_parser("edit", parents=[common, one], help="change content, title, tags")
    edit.add_argument("--content", default=None, help="the new text")
    edit.add_argument("--title", default=None, help="the new title")
    edit.add_argument("--tag", action="append", default=None, help="the new tags (repeatable)")
    for name, text in (
        ("rm", "remove a fragment"),
        ("disable", "leave a fragment out, keep it"),
        ("enable", "bring a fragment back"),
    ):
        actions.add_parser(name, parents=[common, one], help=text)
    move = actions.add_parser("move", parents=[common, one], help="move an added fragment")
    where = move.add_mutually_exclusive_group(required=True)
    where.add_argument("--position", type=int, help="0 = first")
    where.add_argument("--before", help="another fragment's id")
    where.add_argument("--after", help="another fragment's id")
    revert = actions.add_parser("revert", parents=[common, one], help="restore an earlier version")
    revert.add_argument("--to-version", type=int, default=None, help="default: the previous one")
    search = actions.add_parser("search", parents=[common], help="title, tags and full text")
    search.add_argument("--keyword", default="", help="words that must all occur (CJK too)")
    search.add_argument("--tag", action="append", default=[], help="a tag to have (repeatable)")


async def run(args: argparse.Namespace) -> int:
    """Run a ``fragments`` command; return the exit status."""
    out = Output(as_json=args.json)

    async def act(store: SessionStore, workspace: Path) -> None:
        key = SessionKey(args.user, args.agent or DEFAULT_AGENT, args.session)
        await _act(Fragments(store, key, project=args.project or DEFAULT_PROJECT), args, out)

    return await with_store(args, act, must_exist=args.action != "add")


async def _act(fragments: Fragments, args: argparse.Namespace, out: Output) -> None:
    scope: Scope = "project" if args.project is not None else "session"
    expect = args.expect_version
    action = args.action
    if action == "list":
        listed = await fragments.list(scope=scope if args.project else None, removed=args.all)
        _table(out, listed)
        return
    if action == "search":
        if not args.keyword.strip() and not args.tag:
            raise CommandError("give --keyword WORDS or --tag TAG to search for", status=2)
        found = await fragments.search(
            args.keyword, tags=args.tag, scope=scope if args.project else None
        )
        _table(out, found)
        return
    if action == "show":
        _table(out, await fragments.versions(args.fragment, scope=scope), versions=True)
        return
    done: Fragment
    if action == "add":
        done = await fragments.add(
            args.content,
            kind=args.kind,
            title=args.title,
            tags=args.tag,
            scope=scope,
            position=args.position,
            expected_version=expect,
        )
    elif action == "edit":
        done = await fragments.edit(
            args.fragment,
            content=args.content,
            title=args.title,
            tags=args.tag,
            scope=scope,
            expected_version=expect,
        )
    elif action in ("rm", "disable", "enable"):
        method = {"rm": fragments.remove, "disable": fragments.disable, "enable": fragments.enable}
        done = await method[action](args.fragment, scope=scope, expected_version=expect)
    elif action == "move":
        done = await fragments.move(
            args.fragment,
            position=args.position,
            before=args.before,
            after=args.after,
            scope=scope,
            expected_version=expect,
        )
    else:
        done = await fragments.revert(
            args.fragment, to_version=args.to_version, scope=scope, expected_version=expect
        )
    if out.as_json:
        out.json(msgspec.to_builtins(done))
    else:
        out.note(f"{action} {done.id}: now version {done.version} ({_state(done)})")


def _state(fragment: Fragment) -> str:
    if fragment.removed:
        return "removed"
    if fragment.disabled:
        return "disabled"
    return "edited" if fragment.message and fragment.edited else "active"


def _table(out: Output, listed: list[Fragment], *, versions: bool = False) -> None:
    if out.as_json:
        for fragment in listed:
            out.json(msgspec.to_builtins(fragment))
        return
    if not listed:
        out.note("no fragments")
        return
    out.table(
        ("ID", "KIND", "SCOPE", "V", "STATE", "UPDATED", "TITLE", "CONTENT"),
        [
            (
                f.id,
                f.kind + (" (history)" if f.message else ""),
                f.scope,
                str(f.version),
                _state(f),
                when(f.updated_at) if f.updated_at else "-",
                flat(f.title, 30),
                flat(f.content, 60 if not versions else 100),
            )
            for f in listed
        ],
    )
