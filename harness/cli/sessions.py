"""``harness sessions …`` and ``harness manifests …``: read and purge the session store.

harness sessions list                          the user's sessions, most recently active first
harness sessions show --session ID             a session's record (every event, oldest first)
harness sessions show --session ID --usage     tokens, cache and cost per request, and the total
harness sessions search QUERY                  full text over the user's sessions
harness sessions compact --session ID [--focus TEXT]  compact before the session's next request
harness sessions purge --session ID            delete one session (and its offloaded files)
harness sessions purge --older-than DAYS       retention: delete sessions idle for DAYS
harness manifests show --session ID [--call ID]  the session's context_build manifests

Every command takes ``--store URL`` (default: ``sqlite:///<workspace>/.harness/sessions.db``
with ``--workspace DIR``, default ``.``), ``--user ID`` (default ``""``, the anonymous user)
and ``--agent ID``; every read is scoped to that one user, so another user's session looks
exactly like one that does not exist. Tables for people by default; ``--json`` prints JSON
lines and nothing else on stdout. A bad id, a missing session or an unreachable store is one
line on stderr and a non-zero exit: 1 when something asked for is not there, 2 for bad input
or a store that cannot be used.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from harness.cli._format import Output, flat, when
from harness.compaction_request import requested_extensions
from harness.errors import HarnessError
from harness.sessions import open_store
from harness.sessions.manifest_log import resolve
from harness.sessions.store import (
    CompactionEvent,
    CompactionRunEvent,
    FragmentEvent,
    LoggedEvent,
    ManifestEvent,
    MessageEvent,
    RemovalEvent,
    RewriteEvent,
    SessionKey,
    SessionStore,
    StateEvent,
    ToolRunEvent,
    UsageEvent,
    WarningEvent,
)
from harness.workspace import Workspace

DEFAULT_AGENT = "agent"
"""The agent id that ``show``, ``purge`` and ``manifests`` use without ``--agent``."""
STORE_FILE = ".harness/sessions.db"
"""The default store inside the workspace."""
_PAGE = 500
_MAX_ID = 512
_EVENT_KINDS = (
    "message",
    "manifest",
    "compaction",
    "rewrite",
    "tool_run",
    "state",
    "warning",
    "error",
    "fragment",
    "usage",
    "compaction_run",
)


class CommandError(Exception):
    """Raised when a command cannot do what was asked; ``status`` is the exit status."""

    def __init__(self, message: str, *, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------ the parser
def add_commands(sub: Any) -> None:
    """Add the ``sessions`` and ``manifests`` commands to ``harness``'s sub-parsers."""
    common = store_options()

    sessions = sub.add_parser("sessions", help="list, show, search and purge recorded sessions")
    actions = sessions.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[common], help="the user's sessions, newest activity first")
    show = actions.add_parser("show", parents=[common], help="a session's record, oldest first")
    show.add_argument("--session", required=True, help="the session id")
    show.add_argument(
        "--kind",
        action="append",
        choices=_EVENT_KINDS,
        default=None,
        help="only events of this kind (repeatable; default: all)",
    )
    show.add_argument(
        "--usage",
        action="store_true",
        help="the provider's usage per answered request (input, cached, cache writes, output, "
        "reasoning, cost) and the session's total, instead of the events",
    )
    show.add_argument("--offset", type=_count, default=0, help="events to skip (default 0)")
    show.add_argument("--limit", type=_count, default=None, help="events to show (default all)")
    compact = actions.add_parser(
        "compact",
        parents=[common],
        help="ask for a compaction before the session's next request (by whichever process "
        "serves it)",
    )
    compact.add_argument("--session", required=True, help="the session id")
    compact.add_argument("--focus", default=None, help="what the summary should focus on")
    search = actions.add_parser("search", parents=[common], help="full text over the sessions")
    search.add_argument("query", help="terms that must all occur (CJK included)")
    search.add_argument("--limit", type=_count, default=20, help="hits to show (default 20)")
    purge = actions.add_parser(
        "purge", parents=[common], help="delete sessions and their offloaded files"
    )
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", help="the session to delete")
    which.add_argument(
        "--older-than",
        type=_days,
        metavar="DAYS",
        help="delete the user's sessions idle for more than DAYS days",
    )
    purge.add_argument(
        "--all-users",
        action="store_true",
        help="with --older-than: every user's sessions (operator retention)",
    )
    purge.add_argument(
        "--offload-folder",
        default="large_tool_results",
        help="the workspace folder of offloaded tool results (default: large_tool_results)",
    )

    manifests = sub.add_parser("manifests", help="the context_build manifests of a session")
    manifest_actions = manifests.add_subparsers(dest="action", required=True)
    mshow = manifest_actions.add_parser(
        "show", parents=[common], help="every manifest of a session, or one call's"
    )
    mshow.add_argument("--session", required=True, help="the session id")
    mshow.add_argument("--call", default=None, help="only the manifest of this call id")


def store_options() -> argparse.ArgumentParser:
    """Return the parent parser of the options every store command takes.

    ``--store``, ``--workspace``, ``--user``, ``--agent`` and ``--json``; `with_store` reads them.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=None,
        help="session store URL: sqlite:///abs/path.db or postgresql://user@host/db "
        "(default: sqlite:///<workspace>/.harness/sessions.db)",
    )
    common.add_argument(
        "--workspace",
        default=None,
        help="the agent's workspace folder (default: .): where the default store and the "
        "offloaded tool results live",
    )
    common.add_argument(
        "--user", default="", help="the user whose sessions to read (default: the anonymous user)"
    )
    common.add_argument(
        "--agent",
        default=None,
        help=f"the agent id (default: {DEFAULT_AGENT}; list and search cover every agent "
        "of the user unless given)",
    )
    common.add_argument("--json", action="store_true", help="print JSON lines instead of tables")
    return common


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more")
    return value


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days ≥ 0")
    return value


# ------------------------------------------------------------------ running
async def run(args: argparse.Namespace) -> int:
    """Run a ``sessions`` or ``manifests`` command; return the exit status."""
    out = Output(as_json=args.json)

    async def act(store: SessionStore, workspace: Path) -> None:
        command = f"{args.command} {args.action}"
        if command == "sessions list":
            await _list(store, args, out)
        elif command == "sessions show":
            await _show(store, args, out)
        elif command == "sessions search":
            await _search(store, args, out)
        elif command == "sessions compact":
            await _compact(store, args, out)
        elif command == "sessions purge":
            await _purge(store, args, out, workspace)
        elif command == "manifests show":
            await _manifests(store, args, out)
        else:  # argparse only lets the commands above through
            raise CommandError(f"unknown command {command!r}", status=2)

    return await with_store(args, act)


async def with_store(
    args: argparse.Namespace,
    act: Callable[[SessionStore, Path], Awaitable[None]],
    *,
    must_exist: bool = True,
) -> int:
    """Open the store the arguments name, run ``act`` on it, close it; return the exit status.

    Every failure is one line on stderr: exit 1 for what is not there, 2 for bad input or
    a store that cannot be used. ``must_exist=False`` lets a command create the database.
    """
    try:
        workspace = _workspace(args)
        url = args.store or _default_url(workspace)
        _check_ids(args)
        if must_exist:
            _check_exists(url)
        store = open_store(url)
    except CommandError as exc:
        return _fail(str(exc), exc.status)
    except HarnessError as exc:
        return _fail(f"{type(exc).__name__}: {exc}", 2)
    try:
        await act(store, workspace)
    except CommandError as exc:
        return _fail(str(exc), exc.status)
    except HarnessError as exc:
        return _fail(f"{type(exc).__name__}: {exc}", 2)
    finally:
        with contextlib.suppress(HarnessError):
            await store.aclose()
    return 0


def _fail(message: str, status: int) -> int:
    sys.stderr.write(f"harness: {' '.join(message.split())}\n")
    return status


def _workspace(args: argparse.Namespace) -> Path:
    folder = Path(args.workspace if args.workspace is not None else ".")
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"the workspace {str(folder)!r} is a file, not a folder", status=2)
    return folder.resolve()


def _default_url(workspace: Path) -> str:
    return f"sqlite://{workspace / STORE_FILE}"


def _check_exists(url: str) -> None:
    """Refuse a SQLite file that does not exist (reading must not create a database)."""
    if not url.lower().startswith("sqlite:///"):
        return
    path = Path(url[len("sqlite://") :])
    if str(path) != "/:memory:" and "?" not in url and not path.exists():
        raise CommandError(
            f"no session database at {path}; nothing has been recorded there yet — "
            "give the store with --store URL or the agent's folder with --workspace DIR",
            status=2,
        )


def _check_ids(args: argparse.Namespace) -> None:
    checks = [("--user", args.user, True), ("--agent", args.agent, False)]
    if getattr(args, "session", None) is not None:
        checks.append(("--session", args.session, False))
    if getattr(args, "call", None) is not None:
        checks.append(("--call", args.call, False))
    for flag, value, may_be_empty in checks:
        if value is None:
            continue
        if not value and not may_be_empty:
            raise CommandError(f"{flag} must not be empty", status=2)
        if len(value) > _MAX_ID:
            raise CommandError(f"{flag} is longer than {_MAX_ID} characters", status=2)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CommandError(f"{flag} {value!r} is not valid UTF-8 text", status=2) from None
        if any(ord(c) < 32 for c in value):
            raise CommandError(f"{flag} {value!r} contains control characters", status=2)


def _key(args: argparse.Namespace) -> SessionKey:
    return SessionKey(args.user, args.agent or DEFAULT_AGENT, args.session)


async def existing_session(store: SessionStore, args: argparse.Namespace) -> SessionKey:
    """Return the key of the session ``args`` name (``--user``, ``--agent``, ``--session``).

    Raises:
        CommandError: the store has no such session for that user (exit status 1).
    """
    key = _key(args)
    if await store.load(key) is None:
        raise CommandError(
            f"no session {key.session_id!r} of agent {key.agent_id!r} for user "
            f"{key.user_id!r} in {store.url} (see `harness sessions list`)"
        )
    return key


async def all_events(
    store: SessionStore, key: SessionKey, kinds: Sequence[str], offset: int, limit: int | None
) -> list[LoggedEvent]:
    """Return the session's events of ``kinds`` from ``offset`` (all when ``limit`` is None)."""
    found: list[LoggedEvent] = []
    while limit is None or len(found) < limit:
        want = _PAGE if limit is None else min(_PAGE, limit - len(found))
        page = await store.events(key, offset=offset + len(found), limit=want, kinds=kinds)
        found += page
        if len(page) < want:
            break
    return found


# ------------------------------------------------------------------ commands
async def _list(store: SessionStore, args: argparse.Namespace, out: Output) -> None:
    infos = await store.sessions(args.user, args.agent)
    if out.as_json:
        for info in infos:
            out.json(msgspec.to_builtins(info))
        return
    if not infos:
        out.note(f"no sessions for user {args.user!r} in {store.url}")
        return
    out.table(
        ("SESSION", "AGENT", "MESSAGES", "EVENTS", "LAST ACTIVE", "TITLE"),
        [
            (i.session_id, i.agent_id, str(i.messages), str(i.events), when(i.updated_at), i.title)
            for i in infos
        ],
    )


async def _show(store: SessionStore, args: argparse.Namespace, out: Output) -> None:
    key = await existing_session(store, args)
    if args.usage:
        await _usage(store, key, out)
        return
    events = await all_events(store, key, tuple(args.kind or ()), args.offset, args.limit)
    if out.as_json:
        for logged in events:
            out.json(logged)
        return
    out.note(f"session {key.session_id!r} · agent {key.agent_id!r} · user {key.user_id!r}")
    out.table(
        ("SEQ", "TIME", "KIND", "WHAT"),
        [(str(e.seq), when(e.event.at), _kind(e), _what(e)) for e in events],
    )


async def _usage(store: SessionStore, key: SessionKey, out: Output) -> None:
    """Print the session's usage per answered request, then its total."""
    found = await store.usage(key)
    if out.as_json:
        for request in found.requests:
            out.json({"kind": "request", **msgspec.to_builtins(request)})
        out.json(
            {"kind": "total", "requests": len(found.requests), **msgspec.to_builtins(found.total)}
        )
        return
    out.note(f"session {key.session_id!r} · agent {key.agent_id!r} · user {key.user_id!r}")

    def cost(value: float | None) -> str:
        return "-" if value is None else f"${value:.6f}"

    rows = [
        (
            str(r.seq),
            when(r.at),
            r.purpose,
            r.model,
            f"{r.usage.prompt_tokens:,}",
            f"{r.usage.cached_tokens:,}",
            f"{r.usage.cache_write_tokens:,}",
            f"{r.usage.completion_tokens:,}",
            f"{r.usage.reasoning_tokens:,}",
            cost(r.usage.cost_usd),
        )
        for r in found.requests
    ]
    t = found.total
    rows.append(
        (
            "total",
            "",
            f"{len(found.requests)} requests",
            "",
            f"{t.prompt_tokens:,}",
            f"{t.cached_tokens:,}",
            f"{t.cache_write_tokens:,}",
            f"{t.completion_tokens:,}",
            f"{t.reasoning_tokens:,}",
            cost(t.cost_usd),
        )
    )
    out.table(
        ("SEQ", "TIME", "PURPOSE", "MODEL", "INPUT", "CACHED", "CACHE WRITE", "OUTPUT",
         "REASONING", "COST"),
        rows,
    )  # fmt: skip


async def _compact(store: SessionStore, args: argparse.Namespace, out: Output) -> None:
    """Write a compaction request into the session's stored state (one commit)."""
    key = _key(args)
    found = await store.load(key)
    if found is None:
        raise CommandError(
            f"no session {key.session_id!r} of agent {key.agent_id!r} for user "
            f"{key.user_id!r} in {store.url} (see `harness sessions list`)"
        )
    stored, _ = found
    extensions = dict(stored.extensions)
    keys = requested_extensions(extensions, args.focus)
    state = msgspec.structs.replace(
        stored, extensions=extensions, unchanged=len(stored.working_ids)
    )
    version = await store.commit(
        key, expected_version=stored.version, events=[StateEvent(keys=tuple(keys))], state=state
    )
    token = extensions[keys[0]]
    if out.as_json:
        out.json({**msgspec.to_builtins(key), "requested": token, "version": version})
    else:
        out.note(
            f"compaction requested for session {key.session_id!r} (request {token}): it runs "
            "before the session's next model request"
        )


async def _search(store: SessionStore, args: argparse.Namespace, out: Output) -> None:
    if not args.query.strip():
        raise CommandError("the search query is empty; give the words to look for", status=2)
    hits = await store.search(args.user, args.query, limit=max(1, args.limit))
    if args.agent is not None:
        hits = [h for h in hits if h.agent_id == args.agent]
    if out.as_json:
        for hit in hits:
            out.json(msgspec.to_builtins(hit))
        return
    if not hits:
        out.note(f"no message of user {args.user!r} matches {args.query!r}")
        return
    out.table(
        ("SESSION", "AGENT", "SEQ", "ROLE", "TIME", "SNIPPET"),
        [(h.session_id, h.agent_id, str(h.seq), h.role, when(h.at), flat(h.snippet)) for h in hits],
    )


async def _purge(
    store: SessionStore, args: argparse.Namespace, out: Output, workspace: Path
) -> None:
    if args.all_users and args.older_than is None:
        raise CommandError("--all-users goes with --older-than DAYS", status=2)
    if args.session is not None:
        key = _key(args)
        keys = [key] if await store.purge(key) else []
        if not keys:
            raise CommandError(
                f"no session {key.session_id!r} of agent {key.agent_id!r} for user "
                f"{key.user_id!r} in {store.url}; nothing purged"
            )
    elif args.all_users:
        keys = await store.purge_older_than(args.older_than * 86_400)
    else:
        cutoff = time.time() - args.older_than * 86_400
        keys = []
        for info in await store.sessions(args.user, args.agent):
            if info.updated_at < cutoff:
                key = SessionKey(args.user, info.agent_id, info.session_id)
                if await store.purge(key):
                    keys.append(key)
    offloads = _offload_workspace(args, workspace)
    for key in keys:
        removed = offloads is not None and _remove_offloads(offloads, key, args.offload_folder)
        if out.as_json:
            out.json({**msgspec.to_builtins(key), "offloads_removed": removed})
        else:
            files = "and its offloaded files" if removed else "(no offloaded files removed)"
            out.note(
                f"purged session {key.session_id!r} of agent {key.agent_id!r}, user "
                f"{key.user_id!r} {files}"
            )
    if not out.as_json and not keys:
        out.note("no session was idle that long; nothing purged")


def _offload_workspace(args: argparse.Namespace, workspace: Path) -> Workspace | None:
    """Return the workspace whose offloaded files go with the purged sessions, or ``None``.

    The workspace is known when ``--workspace`` is given or the store is the workspace's own
    default database; a ``--store`` elsewhere without ``--workspace`` leaves files alone.
    """
    if args.workspace is None and args.store is not None:
        sys.stderr.write(
            "harness: note: offloaded tool results were not removed; give --workspace DIR "
            "to remove the purged sessions' files too\n"
        )
        return None
    if not workspace.is_dir():
        return None
    return Workspace(workspace, create=False)


def _remove_offloads(workspace: Workspace, key: SessionKey, folder: str) -> bool:
    from middleware.tool_result_offload import purge_session

    try:
        purge_session(
            workspace, key.session_id, user_id=key.user_id, agent_id=key.agent_id, folder=folder
        )
    except (OSError, HarnessError) as exc:
        sys.stderr.write(
            f"harness: could not remove the offloaded files of session {key.session_id!r}: {exc}\n"
        )
        return False
    return True


async def _manifests(store: SessionStore, args: argparse.Namespace, out: Output) -> None:
    key = await existing_session(store, args)
    manifests = resolve(
        e.event
        for e in await all_events(store, key, ("manifest", "usage"), 0, None)
        if isinstance(e.event, ManifestEvent | UsageEvent)
    )
    if args.call is not None:
        manifests = [m for m in manifests if m.call_id == args.call]
        if not manifests:
            raise CommandError(
                f"session {key.session_id!r} has no manifest of call {args.call!r} "
                "(`harness manifests show --session ID` lists them)"
            )
    if out.as_json:
        for manifest in manifests:
            out.json(manifest.to_dict())
        return
    if not manifests:
        out.note(f"session {key.session_id!r} has no manifests")
        return
    from harness.cli.report import format_manifest

    for manifest in manifests:
        out.text(format_manifest(manifest))


# ------------------------------------------------------------------ output
def _kind(logged: LoggedEvent) -> str:
    return str(logged.event.__struct_config__.tag)


def _what(logged: LoggedEvent) -> str:
    event = logged.event
    if isinstance(event, MessageEvent):
        m = event.message
        calls = ", ".join(c.name for c in m.tool_calls)
        return flat(f"{m.role} {m.id}: {m.text}" + (f" → {calls}" if calls else ""))
    if isinstance(event, RewriteEvent):
        return flat(
            f"{event.how} of {event.original_id} → {event.message.id}: {event.message.text}"
        )
    if isinstance(event, CompactionEvent):
        return flat(f"summary {event.summary.id} replaced {len(event.replaced)} messages")
    if isinstance(event, ManifestEvent):
        built = event.manifest
        return (
            f"call {built.call_id} · {built.purpose} · {built.validation} · "
            f"{built.estimated_input_tokens:,}/{built.input_limit:,} tokens"
        )
    if isinstance(event, ToolRunEvent):
        flags = " denied" if event.denied else " error" if event.error else ""
        return f"{event.name} ({event.call_id}) {event.duration_s:.3f}s{flags}"
    if isinstance(event, StateEvent):
        return "changed: " + ", ".join(event.keys)
    if isinstance(event, FragmentEvent):
        return (
            f"{event.op} {event.fragment_id} v{event.old_version} → v{event.new_version} "
            f"({event.scope}, set v{event.set_version})"
        )
    if isinstance(event, RemovalEvent):
        n = len(event.message_ids)
        return f"{event.how}: {n} message{'' if n == 1 else 's'} left the working history"
    if isinstance(event, UsageEvent):
        u = event.usage
        price = "" if u.cost_usd is None else f" · ${u.cost_usd:.6f}"
        return (
            f"call {event.call_id} · {event.purpose} · {event.model} · in {u.prompt_tokens:,} "
            f"(cached {u.cached_tokens:,}, written {u.cache_write_tokens:,}) · out "
            f"{u.completion_tokens:,} (reasoning {u.reasoning_tokens:,}){price}"
        )
    if isinstance(event, CompactionRunEvent):
        after = (
            f" → {event.messages_after} messages, {event.tokens_after:,} tokens; summarised "
            f"{event.summarised}, trimmed {event.trimmed}"
            if event.phase == "finished"
            else ""
        )
        summary = f"; summary {event.summary_id}" if event.summary_id else ""
        failed = f"; failed: {event.failure}" if event.failure else ""
        return flat(
            f"{event.phase} ({event.reason}) call {event.call_id}: {event.messages_before} "
            f"messages, {event.tokens_before:,} tokens{after}{summary}{failed}"
        )
    label = event.code if isinstance(event, WarningEvent) else event.error
    return flat(f"{label}: {event.text}")
