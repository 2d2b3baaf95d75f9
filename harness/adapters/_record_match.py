"""Matching a stateful caller's messages against its session's record, by content.

A stateful drop-in caller (and every client behind the proxy hook) resends its conversation
as it keeps it, and that is rarely byte-for-byte what the record holds: a reply comes back
as content parts or with its tool arguments re-encoded, an old message is rewritten, the
client trims its own oldest messages, a turn is sent twice. Matching at one fixed index
(the record's length) turned any such difference into a second copy of the whole
conversation, and every later resend into another (issue 23). So the match is by content:

- Each message has a **digest** (`content_digests`): its role, its text (text parts joined,
  so ``"x"`` and ``[{"type": "text", "text": "x"}]`` are one message), other parts, and its
  tool calls' names and arguments (JSON re-encoded canonically) — not ids, call ids,
  metadata or provider extras.
- The session keeps its caller's **view** (`SessionRecord`): how many messages the caller
  last sent (plus the reply recorded after them), the digest of its first, and the digests
  and record ids of its newest `TAIL`.
- `match` places the new messages against that view, in this order: (1) the view, grown
  (the usual resend); (2) an overlap — the caller's first messages are the view's newest
  (it trimmed its history, or sends a suffix); (3) otherwise a diff of the view's tail with
  the caller's messages. Whatever the diff finds is explicit: messages the caller no
  longer has (a retry of a turn whose reply was recorded, a message it removed) leave the
  working history — the record keeps them, it is append-only; an edited message is a new
  message, recorded once, and stands where the caller put it. The request's manifest
  then carries the transform ``client_history_diverged:added=<n>:dropped=<n>``.
  A caller that matches nothing of the view (or one message only) sends new turns.
Only the newest `TAIL` messages are compared: an edit older than that is not seen (the
record's version stays in the working history).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Any, Final

import msgspec

from harness.manifest import Transform, TransformKind
from harness.markers import ORIGIN_ID, is_summary
from harness.messages import Message

DIVERGED: Final = TransformKind("client_history_diverged")
"""The transform (``client_history_diverged:added=<n>:dropped=<n>``) on a request whose
caller's history differed from its session's view other than by growing or trimming."""
TAIL: Final = 128
"""How many of the view's newest messages a session keeps the digests of (and compares)."""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A stateful caller's view of its session: what it last sent, as the record holds it."""

    count: int = 0
    """How many messages the view has (the caller's last send, plus a reply recorded)."""
    hash: str = ""
    """The chain hash of the record's newest message (new messages' ids continue it)."""
    first: str = ""
    """The digest of the view's first message (a caller resending from the start has it)."""
    digests: tuple[str, ...] = ()
    """The digests of the view's newest `TAIL` messages, oldest first."""
    ids: tuple[str, ...] = ()
    """The record ids of those messages (``""``: not known)."""


class Match(msgspec.Struct, frozen=True, kw_only=True):
    """Where a caller's messages stand against its view (`match`)."""

    new: tuple[int, ...]
    """Indexes of the caller's messages to add to the record, in order."""
    matched: dict[int, str]
    """Caller index → record id, for the messages found in the view's tail."""
    dropped: tuple[str, ...] = ()
    """Record ids of view messages the caller no longer has (they leave the working history)."""
    diverged: bool = False
    """Whether the caller's history differs from the view other than by growing or trimming."""


def content_digests(messages: Sequence[Message]) -> list[str]:
    """Return each message's digest: what it says, not how it is encoded or named."""
    out: list[str] = []
    for message in messages:
        content: Any = message.content
        if isinstance(content, tuple):
            if all(p.type == "text" for p in content):
                content = "".join(p.text or "" for p in content)
            else:
                content = [[p.type, p.text, _without_options(p.data)] for p in content]
        calls = [[c.name, _canonical_json(c.arguments)] for c in message.tool_calls]
        canonical = msgspec.json.encode([message.role, content or "", calls])
        out.append(hashlib.blake2b(canonical, digest_size=12).hexdigest())
    return out


def _without_options(data: dict[str, Any] | None) -> Any:
    if not data:
        return None
    return {k: v for k, v in data.items() if k != "cache_control"} or None


def _canonical_json(text: str) -> str:
    try:
        return msgspec.json.encode(msgspec.json.decode(text), order="sorted").decode()
    except (msgspec.DecodeError, TypeError, ValueError):
        return text


def match(digests: Sequence[str], view: SessionRecord) -> Match:
    """Place the caller's messages (their ``digests``) against ``view``.

    Returns:
        Which messages are new, which are the view's (with their record ids), and which of
        the view's the caller no longer has.
    """
    m, n = len(digests), view.count
    tail, ids = list(view.digests), view.ids
    size = len(tail)
    if not n or not size:
        return Match(new=tuple(range(m)), matched={})
    # (1) The view, grown: the caller resends its whole conversation with new turns.
    if m >= n and list(digests[n - size : n]) == tail:
        return Match(new=tuple(range(n, m)), matched=_pairs(n - size, 0, size, ids))
    anchored = (digests[0] == view.first and (m >= 2 or n <= 2)) or m >= n
    if not anchored:
        # (2) Overlap: the caller's opening messages are the view's newest.
        last = tail[-1]
        for p in range(min(m, n), 0, -1):
            if digests[p - 1] != last:
                continue
            k = min(p, size)  # the whole tail, or the caller's messages up to p
            if list(digests[p - k : p]) == tail[size - k :]:
                return Match(new=tuple(range(p, m)), matched=_pairs(p - k, size - k, k, ids))
    # (3) A diff of the view's tail with the caller's messages from where that tail starts.
    start = max(0, n - size) if anchored else 0
    region = list(digests[start:])
    ops = SequenceMatcher(None, tail, region, autojunk=False).get_opcodes()
    equal = sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag == "equal")
    if not anchored and equal < 2:
        return Match(new=tuple(range(m)), matched={})  # new turns only
    matched: dict[int, str] = {}
    new: list[int] = []
    dropped: list[str] = []
    seen_equal = False
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            matched.update(_pairs(start + j1, i1, i2 - i1, ids))
            seen_equal = True
            continue
        leading = not seen_equal and not anchored
        if tag in ("delete", "replace") and not leading:  # a trimmed caller's oldest stay
            dropped.extend(i for i in ids[i1:i2] if i)
        if tag in ("insert", "replace") and not (leading and n > size):
            new.extend(range(start + j1, start + j2))  # (leading, n > size: older than the tail)
    plain = not dropped and all(i >= max(matched, default=-1) for i in new)
    return Match(new=tuple(new), matched=matched, dropped=tuple(dropped), diverged=not plain)


def diverged_transform(found: Match, added: int, compacted: int) -> Transform:
    """Return the `DIVERGED` transform of a request (``compacted``: dropped ones already summarised)."""
    target = f"added={added}:dropped={len(found.dropped)}"
    return Transform(DIVERGED, f"{target}:compacted={compacted}" if compacted else target)


def _pairs(at: int, tail_at: int, count: int, ids: Sequence[str]) -> dict[int, str]:
    return {at + i: ids[tail_at + i] for i in range(count) if ids[tail_at + i]}


def view_after(
    digests: Sequence[str], record_ids: dict[int, str], *, record_hash: str
) -> SessionRecord:
    """Return the view after a call: the caller's messages, with the record ids now known."""
    m = len(digests)
    start = max(0, m - TAIL)
    return SessionRecord(
        count=m,
        hash=record_hash,
        first=digests[0] if digests else "",
        digests=tuple(digests[start:]),
        ids=tuple(record_ids.get(i, "") for i in range(start, m)),
    )


def with_reply(view: SessionRecord, digest: str, record_id: str, record_hash: str) -> SessionRecord:
    """Return ``view`` with a reply recorded after it."""
    digests = (*view.digests, digest)[-TAIL:]
    ids = (*view.ids, record_id)[-TAIL:]
    first = view.first or digest
    return SessionRecord(
        count=view.count + 1, hash=record_hash, first=first, digests=digests, ids=ids
    )


def legacy_view(record: SessionRecord, working: Sequence[Message]) -> SessionRecord:
    """Return a view for a record stored before views had digests: from the working history."""
    plain = [m for m in working if not is_summary(m) and m.meta(ORIGIN_ID) is None][-TAIL:]
    return SessionRecord(
        count=max(record.count, len(plain)),
        hash=record.hash,
        digests=tuple(content_digests(plain)),
        ids=tuple(m.id for m in plain),
    )


def rebuilt_working(
    working: Sequence[Message],
    placed: Sequence[tuple[Message, str | None, str | None]],
    dropped: Sequence[str],
) -> tuple[list[Message], int]:
    """Return the working history without ``dropped`` and with ``placed`` where they stand.

    Args:
        working: the working history.
        placed: each new message with the record id of the matched message before it and
            after it (``None``: none); it goes after the one before, else before the one
            after, else at the end.
        dropped: record ids to remove (also their rewritten copies).

    Returns:
        The new working history and how many dropped messages were no longer in it (compacted).
    """
    gone = set(dropped)
    kept = [m for m in working if m.id not in gone and m.meta(ORIGIN_ID) not in gone]
    present = {m.id for m in working} | {m.meta(ORIGIN_ID) for m in working}
    compacted = sum(1 for i in gone if i not in present)
    at = {m.id: i for i, m in enumerate(kept)}
    for m_index, m in enumerate(kept):
        origin = m.meta(ORIGIN_ID)
        if isinstance(origin, str):
            at.setdefault(origin, m_index)
    inserts: list[tuple[int, int, Message]] = []
    for order, (message, before, after) in enumerate(placed):
        if before is not None and before in at:
            position = at[before] + 1
        elif after is not None and after in at:
            position = at[after]
        else:
            position = len(kept)
        inserts.append((position, order, message))
    out: list[Message] = []
    inserts.sort(key=lambda item: (item[0], item[1]))
    pending = iter(inserts)
    nxt = next(pending, None)
    for index, message in enumerate(kept):
        while nxt is not None and nxt[0] == index:
            out.append(nxt[2])
            nxt = next(pending, None)
        out.append(message)
    while nxt is not None:
        out.append(nxt[2])
        nxt = next(pending, None)
    return out, compacted
