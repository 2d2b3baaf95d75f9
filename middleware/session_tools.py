"""SessionTools: let the model read the session record — history, search and a listing.

Where it sits: anywhere in the stack. It changes no request (its ``__call__`` passes the
request on); like `ToolResultOffload` gives the agent ``read_file``, it gives the agent three
tools that read the durable record the agent keeps in its `harness.sessions.SessionStore`:

- ``session_history(offset, limit, text_offset)`` pages the full record of the *current*
  session: every message as it joined the history (the originals of whatever was trimmed,
  offloaded or summarised since), every rewritten copy with the id of its original and every
  summary with the ids it replaced — the ids that trimmed results and summary headers name
  resolve here. One compact entry per line group; long texts are cut, with the call that
  reads on.
- ``session_search(query, limit)`` searches the messages of the calling user's sessions
  (CJK included; terms separated by spaces must all occur).
- ``session_list()`` lists the calling user's sessions with titles, sizes and last activity.
- ``compact_conversation(focus)`` (with ``compact_tool=True``) asks for the history to be
  summarised before the model's next step (`harness.compaction_request`): Compaction honours
  it on the next request, wherever the session is served.

Every read is scoped to the calling run's `SessionKey` (``ToolContext.run.key``): another
user's session is indistinguishable from one that does not exist. A session without a user
id is its own scope (`harness.sessions.store.reader_scope`): its search and listing see
that session alone, never the other anonymous sessions. A bad argument or a store
that cannot be read gives the model an ``Error: …`` text, never an exception.

Store: the one given to the constructor, else the calling run's (``ToolContext.run.store``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import ClassVar

from harness.compaction_request import request_compaction
from harness.errors import ConfigurationError, HarnessError
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse
from harness.sessions.store import (
    CompactionEvent,
    LoggedEvent,
    MessageEvent,
    RewriteEvent,
    SessionKey,
    SessionStore,
    reader_scope,
)
from harness.tools import Tool, ToolContext
from harness.types import Concern, Handler

HISTORY_KINDS: tuple[str, ...] = ("message", "compaction", "rewrite")
"""The event tags `session_history` pages over (the ones that carry a message)."""
MAX_SEARCH_HITS = 50
"""The most hits one ``session_search`` returns."""
_MIN_ENTRY_CHARS = 200
"""An entry's text keeps at least this many characters, however full the page."""
_SHOWN_IDS = 8
"""How many replaced ids a summary entry names before counting the rest."""


class SessionTools:
    """Give the agent ``session_history``, ``session_search`` and ``session_list``.

    Args:
        store: the store to read (default: the calling run's, ``ToolContext.run.store``).
        page_size: the default and largest ``limit`` of ``session_history``.
        max_chars: the characters of text one answer shows at most (each entry of a page
            gets an equal share, at least 200); longer texts are cut with a note on how to
            read on.
        compact_tool: also give the model ``compact_conversation(focus)``, to ask for a
            compaction itself (off: its schema would ride on every request).

    Raises:
        ConfigurationError: when an argument is out of range.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset()
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self,
        *,
        store: SessionStore | None = None,
        page_size: int = 20,
        max_chars: int = 4_000,
        compact_tool: bool = False,
    ) -> None:
        if store is not None and not isinstance(store, SessionStore):
            raise ConfigurationError(
                f"store must be a SessionStore (harness.sessions.open_store(url)) or None, "
                f"got {store!r}"
            )
        if not _is_int(page_size) or not 1 <= page_size <= 1_000:
            raise ConfigurationError(f"page_size must be an int in 1..1000, got {page_size!r}")
        if not _is_int(max_chars) or max_chars < _MIN_ENTRY_CHARS:
            raise ConfigurationError(
                f"max_chars must be an int ≥ {_MIN_ENTRY_CHARS}, got {max_chars!r}"
            )
        if not isinstance(compact_tool, bool):
            raise ConfigurationError(f"compact_tool must be True or False, got {compact_tool!r}")
        self.store = store
        self.page_size = page_size
        self.max_chars = max_chars
        self.compact_tool = compact_tool

    def __repr__(self) -> str:
        return f"SessionTools(page_size={self.page_size}, max_chars={self.max_chars})"

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Pass the request on unchanged (this middleware only provides tools)."""
        return await call_next(request)

    def tools(self) -> list[Tool]:
        """Return the session tools (``compact_conversation`` too with ``compact_tool``)."""
        made = (self._history_tool(), self._search_tool(), self._list_tool())
        tools = [Tool(fn, description=_description(fn)) for fn in made]
        if self.compact_tool:
            fn = _compact_conversation
            tools.append(Tool(fn, name="compact_conversation", description=_description(fn)))
        return tools

    # ------------------------------------------------------------------ the tools
    def _history_tool(self) -> Callable[..., Awaitable[str]]:
        page_size = self.page_size

        async def session_history(
            ctx: ToolContext, offset: int = 0, limit: int = page_size, text_offset: int = 0
        ) -> str:
            """Read the full record of this session, oldest first, one page at a time.

            Every message as it was first recorded (also those later trimmed, offloaded or
            summarised), each rewritten copy with the id of its original, and each summary
            with the ids of the messages it replaced. Ids named in trimmed results and
            summary headers are found here.

            Args:
                ctx: filled in by the agent (not shown to the model).
                offset: the first entry to show (0-based; the header of each page names the next).
                limit: how many entries to show.
                text_offset: the first character of each entry's text to show (to read the rest
                    of a long entry: same offset, limit=1).
            """
            for name, value, low in (("offset", offset, 0), ("limit", limit, 1)):
                if not _is_int(value) or value < low:
                    return f"Error: {name} must be a whole number ≥ {low}, got {value!r}."
            if not _is_int(text_offset) or text_offset < 0:
                return f"Error: text_offset must be a whole number ≥ 0, got {text_offset!r}."
            found = _scope(self.store, ctx)
            if isinstance(found, str):
                return found
            store, key = found
            capped = min(limit, page_size)
            try:
                page = await store.events(key, offset=offset, limit=capped + 1, kinds=HISTORY_KINDS)
            except HarnessError as exc:
                return _unreadable(exc)
            return self._history_page(page, offset, capped, limit, text_offset)

        return session_history

    def _search_tool(self) -> Callable[..., Awaitable[str]]:
        async def session_search(ctx: ToolContext, query: str, limit: int = 10) -> str:
            """Search the messages of all your sessions (any language, CJK included).

            Terms separated by spaces must all occur, in any case, as parts of one message;
            a CJK phrase is one term. Hits in the current session can be read in full with
            session_history.

            Args:
                ctx: filled in by the agent (not shown to the model).
                query: the words to look for.
                limit: the most hits to return (up to 50).
            """
            if not isinstance(query, str) or not query.strip():
                return "Error: query must be a non-empty text, e.g. session_search(query='login')."
            if not _is_int(limit) or not 1 <= limit <= MAX_SEARCH_HITS:
                return f"Error: limit must be a whole number from 1 to {MAX_SEARCH_HITS}, got {limit!r}."
            found = _scope(self.store, ctx)
            if isinstance(found, str):
                return found
            store, key = found
            try:
                hits = await store.search(key.user_id, query, limit=limit, within=reader_scope(key))
            except HarnessError as exc:
                return _unreadable(exc)
            if not hits:
                return f"No message of your sessions matches {query!r}."
            lines = [f"{len(hits)} hit(s) for {query!r}, best first:"]
            for hit in hits:
                where = (
                    "this session"
                    if (hit.agent_id, hit.session_id) == (key.agent_id, key.session_id)
                    else f"session {hit.session_id!r} (agent {hit.agent_id!r})"
                )
                lines.append(
                    f"- {where}, entry seq {hit.seq}, {hit.role} message {hit.message_id} "
                    f"at {_when(hit.at)}: {_one_line(hit.snippet)}"
                )
            return "\n".join(lines)

        return session_search

    def _list_tool(self) -> Callable[..., Awaitable[str]]:
        async def session_list(ctx: ToolContext) -> str:
            """List your sessions, most recently active first: title, size, last activity.

            Args:
                ctx: filled in by the agent (not shown to the model).
            """
            found = _scope(self.store, ctx)
            if isinstance(found, str):
                return found
            store, key = found
            try:
                infos = await store.sessions(key.user_id, within=reader_scope(key))
            except HarnessError as exc:
                return _unreadable(exc)
            if not infos:
                return "You have no recorded sessions yet."
            lines = [f"{len(infos)} session(s), most recently active first:"]
            for info in infos:
                current = (
                    " (this session)"
                    if (info.agent_id, info.session_id) == (key.agent_id, key.session_id)
                    else ""
                )
                title = _one_line(info.title)[:120] or "(untitled)"
                lines.append(
                    f"- {info.session_id!r}{current}, agent {info.agent_id!r}: {title} · "
                    f"{info.messages} messages, {info.events} events · "
                    f"last active {_when(info.updated_at)}, started {_when(info.created_at)}"
                )
            return "\n".join(lines)

        return session_list

    # ------------------------------------------------------------------ rendering
    def _history_page(
        self, page: list[LoggedEvent], offset: int, capped: int, asked: int, text_offset: int
    ) -> str:
        more = len(page) > capped
        page = page[:capped]
        if not page:
            if offset == 0:
                return "This session has no recorded messages yet."
            return (
                f"No entries from offset {offset}: the record is shorter. "
                "Start again with session_history(offset=0)."
            )
        end = offset + len(page)
        share = max(_MIN_ENTRY_CHARS, self.max_chars // len(page))
        header = f"[Session record: entries {offset}–{end - 1}"
        header += f"; next: session_history(offset={end})]" if more else "; end of the record]"
        if asked > capped:
            header += f" (limit capped at {capped})"
        lines = [header]
        for index, logged in enumerate(page, start=offset):
            lines.append(_entry(logged, index, share, text_offset))
        return "\n".join(lines)


# ---------------------------------------------------------------------- helpers
def _scope(fixed: SessionStore | None, ctx: ToolContext) -> tuple[SessionStore, SessionKey] | str:
    """Return the store and the caller's key, or the error text for the model."""
    run = ctx.run
    key = run.key if run is not None else None
    store = fixed if fixed is not None else (run.store if run is not None else None)
    if store is None or key is None:
        return (
            "Error: this agent keeps no session record, so there is nothing to read; "
            "carry on with the conversation as you see it."
        )
    return store, key


def _description(fn: Callable[..., object]) -> str:
    """Return a tool's description: every paragraph of its docstring before ``Args:``."""
    doc = (inspect.getdoc(fn) or "").split("\nArgs:", 1)[0]
    return "\n\n".join(" ".join(p.split()) for p in doc.split("\n\n") if p.strip())


def _unreadable(exc: HarnessError) -> str:
    return f"Error: the session record cannot be read right now ({type(exc).__name__}: {exc})."


def _entry(logged: LoggedEvent, index: int, share: int, text_offset: int) -> str:
    """Return one compact entry: position, what it is, ids, then its (cut) text."""
    event = logged.event
    if isinstance(event, MessageEvent):
        message = event.message
        head = f"{_describe(message)}"
    elif isinstance(event, RewriteEvent):
        message = event.message
        head = f"{event.how} copy {message.id} of {event.original_id} ({message.role})"
    elif isinstance(event, CompactionEvent):
        message = event.summary
        ids = event.replaced
        named = ", ".join(ids[:_SHOWN_IDS])
        rest = f" and {len(ids) - _SHOWN_IDS} more" if len(ids) > _SHOWN_IDS else ""
        head = f"summary {message.id} replacing {len(ids)} messages ({named}{rest})"
    else:  # not asked for; shown briefly rather than dropped
        return f"#{index} (seq {logged.seq}) {type(event).__name__}"
    body = _cut(message.text, index, share, text_offset)
    return f"#{index} (seq {logged.seq}, {_when(event.at)}) {head}:\n{body}"


def _describe(message: Message) -> str:
    parts = [f"{message.role} {message.id}"]
    if message.role == "tool":
        parts.append(f"result of {message.name or 'a tool'} call {message.tool_call_id}")
    if message.tool_calls:
        calls = ", ".join(
            f"{c.name}({_short(c.arguments, 80)}) id {c.id}" for c in message.tool_calls
        )
        parts.append(f"calls {calls}")
    return ", ".join(parts)


def _cut(text: str, index: int, share: int, text_offset: int) -> str:
    total = len(text)
    if text_offset >= total > 0:
        return (
            f"  [text_offset {text_offset:,} is past the end: this text has {total:,} characters]"
        )
    end = min(total, text_offset + share)
    shown = text[text_offset:end]
    notes: list[str] = []
    if text_offset:
        notes.append(f"from character {text_offset:,}")
    if end < total:
        notes.append(
            f"{total - end:,} more characters; read on with "
            f"session_history(offset={index}, limit=1, text_offset={end})"
        )
    body = _indent(shown) if shown else "  (no text)"
    return body + (f"\n  [… {'; '.join(notes)} …]" if notes else "")


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.split("\n"))  # exact: no line end is lost


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short(text: str, chars: int) -> str:
    flat = _one_line(text)
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at))


def _compact_conversation(ctx: ToolContext, focus: str = "") -> str:
    """Summarise the earlier conversation before your next step, to free context.

    Use it when the conversation has grown long and its early part is no longer needed word
    for word: the early messages are replaced by a summary, the latest are kept, and the full
    record stays readable with session_history.

    Args:
        ctx: filled in by the agent (not shown to the model).
        focus: what the summary should keep in most detail (optional).
    """
    request_compaction(ctx.state, focus if isinstance(focus, str) else str(focus))
    return (
        "Compaction requested: the earlier conversation will be summarised before your next step."
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
