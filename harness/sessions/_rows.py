"""What both backends share: JSON codecs, searchable text, search terms, and values from rows.

The values are built from rows alike in both: messages by id, log pages, session lists,
search hits with their snippets, and the state as stored.

A backend stores each event as its msgspec JSON (with the ``type`` tag) plus a few columns it
queries by: the tag, the time, and for events that carry a message (`MessageEvent`,
`RewriteEvent`, `CompactionEvent`) the message's id, role and text. Keeping these rules in one
place makes the two backends answer `search`, `messages` and `sessions` alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from harness.errors import DuplicateTurn, InvalidInputError, StateConflict
from harness.fragments.model import Fragment, FragmentChange, FragmentScope
from harness.manifest import Usage, dec_hook, enc_hook
from harness.messages import Message
from harness.sessions.store import (
    CompactionEvent,
    Event,
    FragmentEvent,
    LoggedEvent,
    MessageEvent,
    RequestUsage,
    RewriteEvent,
    SearchHit,
    SessionInfo,
    SessionKey,
    SessionUsage,
    StoredState,
    UsageEvent,
)

SCHEMA_VERSION: Final = 2
"""The layout both backends write; a database with a newer one is refused.

2 added the fragment tables (every statement is ``IF NOT EXISTS``, so a version-1 database is
upgraded in place)."""

ENCODER: Final = msgspec.json.Encoder(enc_hook=enc_hook)
EVENT_DECODER: Final = msgspec.json.Decoder(Event, dec_hook=dec_hook)
STATE_DECODER: Final = msgspec.json.Decoder(StoredState)
FRAGMENT_DECODER: Final = msgspec.json.Decoder(Fragment)

SNIPPET_CHARS: Final = 160
"""About how long a search snippet is."""

Stamp = tuple[int, int, float]
"""A fragment set's row as the cache checks it: (row id, version, updated_at) — a set
purged and written again gets a new stamp even where its row id and version repeat."""


UsageRow = tuple[str, str, str, int, int, int, int, int, float | None]
"""(call id, purpose, model, input, cached, cache writes, output, reasoning, cost) of a row
of the ``usage`` table."""

USAGE_COLUMNS: Final = (
    "call_id, purpose, model, input_tokens, cached_tokens, cache_write_tokens, "
    "output_tokens, reasoning_tokens, cost_usd"
)
"""The ``usage`` table's figures, in `UsageRow`'s order."""


class EventRow(msgspec.Struct, frozen=True, kw_only=True):
    """One event as the columns a backend writes."""

    seq: int
    tag: str
    body: bytes
    at: float
    message_id: str | None
    role: str | None
    text: str | None
    """The searchable text, or ``None`` for events that carry no message."""
    turn_id: str | None = None
    """A caller's turn id (`MessageEvent.turn_id`): unique in its session."""
    usage: UsageRow | None = None
    """A `UsageEvent`'s figures, for the ``usage`` table (summed without decoding the log)."""


def usage_row(event: UsageEvent) -> UsageRow:
    """Return the ``usage`` table's figures of ``event``."""
    u = event.usage
    return (
        event.call_id,
        event.purpose,
        event.model,
        u.prompt_tokens,
        u.cached_tokens,
        u.cache_write_tokens,
        u.completion_tokens,
        u.reasoning_tokens,
        u.cost_usd,
    )


def checked_usage(event: object) -> UsageEvent:
    """Return ``event`` when it is a usage record a store may append (`UsageStore.append_usage`).

    Raises:
        InvalidInputError: not a `UsageEvent`; an empty call id, purpose or model; a negative
            token count; a cost that is negative or not finite.
    """
    if not isinstance(event, UsageEvent):
        raise InvalidInputError(
            f"append_usage takes a UsageEvent, got {type(event).__name__}; build one with "
            "UsageEvent(call_id=..., purpose=..., model=..., usage=Usage(...))"
        )
    empty = [name for name in ("call_id", "purpose", "model") if not getattr(event, name)]
    u = event.usage
    counts = {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "cached_tokens": u.cached_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "reasoning_tokens": u.reasoning_tokens,
    }
    negative = [name for name, value in counts.items() if value < 0]
    cost = u.cost_usd
    bad_cost = cost is not None and not (math.isfinite(cost) and cost >= 0)
    if empty or negative or bad_cost:
        problems = [f"empty {name}" for name in empty]
        problems += [f"{name}={counts[name]}" for name in negative]
        problems += [f"cost_usd={cost}"] if bad_cost else []
        raise InvalidInputError(
            f"the usage record of call {event.call_id!r} has {', '.join(problems)}; "
            "give the request's call id, purpose (agent or summary) and model, token counts "
            "of 0 or more and a finite cost of 0 or more (None when unpriced)",
            call_id=event.call_id,
        )
    return event


def session_usage(rows: Iterable[Sequence[Any]]) -> SessionUsage:
    """Return a session's `SessionUsage` from its ``usage`` rows (seq, at, *`USAGE_COLUMNS`)."""
    requests = tuple(request_usages(rows))
    total = Usage()
    for request in requests:
        total = total + request.usage
    return SessionUsage(requests=requests, total=total)


def request_usages(rows: Iterable[Sequence[Any]]) -> list[RequestUsage]:
    """Return `RequestUsage` from rows of (seq, at, *`USAGE_COLUMNS`)."""
    return [
        RequestUsage(
            seq=int(r[0]),
            at=float(r[1]),
            call_id=r[2],
            purpose=r[3],
            model=r[4],
            usage=Usage(
                prompt_tokens=int(r[5]),
                cached_tokens=int(r[6]),
                cache_write_tokens=int(r[7]),
                completion_tokens=int(r[8]),
                reasoning_tokens=int(r[9]),
                total_tokens=int(r[5]) + int(r[8]),
                cost_usd=None if r[10] is None else float(r[10]),
            ),
        )
        for r in rows
    ]


def carried_message(event: Event) -> Message | None:
    """Return the message an event brings into the log (original, rewritten copy or summary)."""
    if isinstance(event, MessageEvent | RewriteEvent):
        return event.message
    if isinstance(event, CompactionEvent):
        return event.summary
    return None


def event_rows(events: tuple[Event, ...] | list[Event], first_seq: int) -> list[EventRow]:
    """Encode ``events`` as rows numbered from ``first_seq``."""
    rows: list[EventRow] = []
    for offset, event in enumerate(events):
        message = carried_message(event)
        tag = event.__struct_config__.tag
        rows.append(
            EventRow(
                seq=first_seq + offset,
                tag=str(tag),
                body=ENCODER.encode(event),
                at=event.at,
                message_id=None if message is None else message.id,
                role=None if message is None else message.role,
                text=None if message is None else searchable_text(message),
                turn_id=event.turn_id if isinstance(event, MessageEvent) else None,
                usage=usage_row(event) if isinstance(event, UsageEvent) else None,
            )
        )
    return rows


def turn_ids(events: Sequence[Event]) -> list[str]:
    """Return the callers' turn ids that ``events`` log.

    Raises:
        DuplicateTurn: two of the events log one turn id.
    """
    found = [e.turn_id for e in events if isinstance(e, MessageEvent) and e.turn_id is not None]
    if len(set(found)) != len(found):
        twice = tuple(sorted({t for t in found if found.count(t) > 1}))
        raise DuplicateTurn(
            f"one commit logs the turn(s) {', '.join(twice)} twice; log each caller's turn "
            "once (a retried turn keeps its id and is not appended again)",
            turn_ids=twice,
        )
    return found


def duplicate_turn(key: SessionKey, stored: Sequence[str]) -> DuplicateTurn:
    """Return the `DuplicateTurn` for a commit whose turns the session's log holds already."""
    twice = tuple(sorted(set(stored)))
    return DuplicateTurn(
        f"session {key.session_id!r} holds the turn(s) {', '.join(twice)} already: the turn "
        "was committed before (a retry after a lost answer or a conflict?) and nothing was "
        "written. Load the session again and go on from the stored turn instead of sending "
        "it again.",
        kind="state_conflict",
        turn_ids=twice,
        session_id=key.session_id,
    )


def stored_state(state: StoredState, version: int, *, with_ids: bool) -> StoredState:
    """The state as a backend stores it: with its working ids, or without (they are rows)."""
    ids = tuple(state.working_ids) if with_ids else ()
    return msgspec.structs.replace(state, working_ids=ids, version=version, unchanged=0)


def latest_messages(bodies: Iterable[bytes | str], ids: Sequence[str]) -> dict[str, Message]:
    """Return the messages with these ids that logged events (oldest first) carry, by id.

    The latest event wins for a repeated id; the result follows the order of ``ids``.
    """
    found: dict[str, Message] = {}
    for body in bodies:
        message = carried_message(EVENT_DECODER.decode(body))
        if message is not None:
            found[message.id] = message
    return {i: found[i] for i in ids if i in found}


def logged_events(rows: Iterable[Sequence[Any]]) -> list[LoggedEvent]:
    """Return the log's events from rows of (seq, body)."""
    return [LoggedEvent(seq=seq, event=EVENT_DECODER.decode(body)) for seq, body in rows]


def session_infos(rows: Iterable[Sequence[Any]]) -> list[SessionInfo]:
    """Return `SessionInfo` from rows of (agent, session, title, messages, events, created, updated)."""
    return [
        SessionInfo(
            agent_id=agent,
            session_id=session,
            title=title,
            messages=messages,
            events=events,
            created_at=created,
            updated_at=updated,
        )
        for agent, session, title, messages, events, created, updated in rows
    ]


def search_hits(rows: Iterable[Sequence[Any]], terms: list[str]) -> list[SearchHit]:
    """Return `SearchHit` from rows of (agent, session, seq, message id, role, text, at)."""
    return [
        SearchHit(
            agent_id=r[0],
            session_id=r[1],
            seq=r[2],
            message_id=r[3],
            role=r[4],
            snippet=snippet(r[5], terms),
            at=r[6],
        )
        for r in rows
    ]


def searchable_text(message: Message) -> str:
    """Return what `search` matches for a message: its text and its tool calls' names and arguments."""
    parts = [message.text]
    parts.extend(f"{call.name} {call.arguments}" for call in message.tool_calls)
    return "\n".join(part for part in parts if part)


def count_messages(events: tuple[Event, ...] | list[Event]) -> int:
    """Return how many events are messages joining the full history."""
    return sum(1 for event in events if isinstance(event, MessageEvent))


def search_terms(query: str) -> list[str]:
    """Split a query into terms that must all occur (case-insensitively) in a matching text.

    Terms are separated by whitespace; a CJK phrase without spaces is one term and matches as a
    substring (``上下文管理`` finds ``…的上下文管理策略…``).
    """
    return [term for term in query.split() if term]


def escape_like(term: str) -> str:
    r"""Escape ``%``, ``_`` and ``\`` for a ``LIKE … ESCAPE '\'`` pattern."""
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def snippet(text: str, terms: list[str]) -> str:
    """Return an excerpt of ``text`` around the first match of a term."""
    if len(text) <= SNIPPET_CHARS:
        return text
    folded = text.casefold()
    hits = [pos for pos in (folded.find(term.casefold()) for term in terms) if pos >= 0]
    start = max(0, min(hits, default=0) - SNIPPET_CHARS // 3)
    end = min(len(text), start + SNIPPET_CHARS)
    start = max(0, end - SNIPPET_CHARS)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def conflict(key: SessionKey, expected: int, actual: int) -> StateConflict:
    """Return the `StateConflict` for a commit from a stale version."""
    return StateConflict(
        f"session {key.session_id!r} is at version {actual}, but this commit was prepared from "
        f"version {expected}: another writer committed first and nothing was written. Load the "
        "session again and redo the round from the stored state.",
        kind="state_conflict",
        expected_version=expected,
        actual_version=actual,
        session_id=key.session_id,
    )


def fragment_text(fragment: Fragment) -> str:
    """Return what `search_fragments` matches: title, tags and content (an overlay's own)."""
    content = fragment.content if (fragment.edited or not fragment.message) else ""
    return "\n".join(part for part in (fragment.title, " ".join(fragment.tags), content) if part)


def fragment_events(
    scope: FragmentScope,
    changes: list[FragmentChange] | tuple[FragmentChange, ...],
    set_version: int,
) -> list[Event]:
    """Return the log events of a fragment commit."""
    where = "session" if scope.scope == "session" else f"project:{scope.name}"
    return [
        FragmentEvent(
            fragment_id=c.fragment.id,
            op=c.op,
            old_version=c.old_version,
            new_version=c.fragment.version,
            scope=where,
            set_version=set_version,
        )
        for c in changes
    ]


def empty_state() -> bytes:
    """Return the encoded state of a session created by a fragment write (no rounds yet)."""
    return ENCODER.encode(StoredState())


def fragment_conflict(scope: FragmentScope, expected: int, actual: int) -> StateConflict:
    """Return the `StateConflict` for a fragment write from a stale set version."""
    return StateConflict(
        f"the {scope.scope} fragments {scope.name!r} are at version {actual}, but this change "
        f"was prepared from version {expected}: another writer changed them first and nothing "
        "was written. List the fragments again and redo the change.",
        kind="state_conflict",
        expected_version=expected,
        actual_version=actual,
        session_id=scope.name,
    )
