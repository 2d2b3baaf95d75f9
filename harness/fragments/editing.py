"""Context fragments: what the model is given, as units a developer can see and edit.

A *fragment* is one independently understandable piece of context with metadata: a kind
(``system``, ``user``, ``assistant``, ``tool``, ``file``), a title, the content, tags, times,
its own version, a disabled flag, an order and a scope. There are two sorts:

- **history fragments** — every message of a session's working history *is* a fragment by
  reference: the fragment id is the message id (a rewritten copy answers to its original's
  id) and nothing is copied. Editing, disabling or removing one stores an *overlay* under that
  id (new content, the flags); `middleware.fragment_editor.FragmentEditor` applies it to the
  real request. Version 0 is the message itself.
- **added fragments** — stand on their own: pinned ``system`` fragments merge into System,
  the others go to the reference section in the order the developer gave them. Scope
  ``session`` (one session) or ``project`` (every session of the agent with that project
  name, for shared engineering rules; keyed by agent and project, no user).

Every change writes a new version (all versions are kept, so `Fragments.revert` can go back
to any of them) and bumps the *set* version of its scope; a write prepared from a stale set
version raises `StateConflict`. Each change is a `harness.sessions.FragmentEvent` in the
session's log. Content is checked (`FragmentPolicy.max_chars`) and secrets are redacted
(`FragmentPolicy.secrets`, `harness.sessions.redaction`) before anything is stored. The built-in
System parts are fragments too (`harness.fragments.builtins`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeGuard, cast, runtime_checkable

from harness.errors import ConfigurationError, InvalidInputError, StateConflict
from harness.fragments.model import (
    DEFAULT_PROJECT,
    KINDS,
    Fragment,
    FragmentChange,
    FragmentKind,
    FragmentList,
    FragmentPolicy,
    FragmentScope,
    Scope,
    SetsFound,
    SetsNow,
    from_message,
    overlaid,
    ref_id,
)
from harness.messages import Message, new_id
from harness.sessions.redaction import DEFAULT_SECRETS as DEFAULT_SECRETS
from harness.sessions.redaction import SecretPattern as SecretPattern
from harness.sessions.redaction import redact as redact

if TYPE_CHECKING:
    from harness.sessions.store import FragmentStore, SessionKey


# ---------------------------------------------------------------- reading sets
@runtime_checkable
class ReadsFragmentSets(Protocol):
    """A store that reads several fragment sets at once (the SQLite store: one worker trip)."""

    async def fragment_sets(
        self, scopes: Sequence[FragmentScope]
    ) -> list[tuple[int, FragmentList]]:
        """Return ``(version, fragments)`` of each scope, in order."""
        ...


@runtime_checkable
class ReadsOneFragment(Protocol):
    """A store that reads one fragment with its set's version (both built-in backends)."""

    async def fragment(self, scope: FragmentScope, fragment_id: str) -> tuple[int, Fragment | None]:
        """Return the set's version and the fragment's current version (``None``: not stored)."""
        ...


@runtime_checkable
class AnswersSetsAtOnce(Protocol):
    """A store that answers unchanged fragment sets from its cache without awaiting (SQLite)."""

    def fragment_sets_now(self, scopes: Sequence[FragmentScope]) -> SetsFound | None:
        """Return ``(version, fragments)`` of each scope when known current, else ``None``.

        For the request path: the answer may be the store's own cached sequences, to read
        and never to change (the async `ReadsFragmentSets.fragment_sets` returns copies).
        """
        ...


async def read_sets(
    store: FragmentStore, scopes: Sequence[FragmentScope]
) -> list[tuple[int, FragmentList]]:
    """Return ``store.fragments(scope)`` of each scope, in one read where the store can."""
    if _kinds(store)[1]:
        return await cast("ReadsFragmentSets", store).fragment_sets(scopes)
    return [await store.fragments(scope) for scope in scopes]


def sets_now_of(store: FragmentStore) -> SetsNow | None:
    """Return ``store``'s `AnswersSetsAtOnce.fragment_sets_now`, or ``None`` if it has none.

    For a caller that asks before every request: looked up once per store, each request then
    costs the one call.
    """
    return cast("AnswersSetsAtOnce", store).fragment_sets_now if _kinds(store)[2] else None


def keeps_fragments(store: object) -> TypeGuard[FragmentStore]:
    """Return whether ``store`` keeps fragments (`FragmentStore`), answered once per type.

    FragmentEditor asks before every request: a runtime-Protocol ``isinstance`` re-reads
    the protocol's members every time (tens of microseconds on Python 3.11). A store's
    methods are its class's, so the answer for its type is the answer for it.
    """
    return _kinds(store)[0]


_KINDS: dict[type, tuple[bool, bool, bool]] = {}
"""Store type → (keeps fragments, reads several sets at once, answers them at once)."""


def _kinds(store: object) -> tuple[bool, bool, bool]:
    kinds = _KINDS.get(type(store))
    if kinds is None:
        from harness.sessions.store import FragmentStore

        kinds = (
            isinstance(store, FragmentStore),
            isinstance(store, ReadsFragmentSets),
            isinstance(store, AnswersSetsAtOnce),
        )
        if len(_KINDS) >= 256:
            _KINDS.clear()  # types made on the fly (tests): asked again, never wrong
        _KINDS[type(store)] = kinds
    return kinds


# ---------------------------------------------------------------- operations


class Fragments:
    """The fragments of one session and of its agent's project, over a session store.

    Args:
        store: a store with the fragment tables (both built-in backends).
        key: the session (user, agent, session id); project changes are logged in it too.
        project: the project name of project-scope fragments.
        policy: size limit and secret patterns.

    Every write takes ``expected_version``: the set version the caller read (``None``: the
    version read at the start of the call). A write from a stale version raises
    `StateConflict` and changes nothing.
    """

    def __init__(
        self,
        store: object,
        key: SessionKey,
        *,
        project: str = DEFAULT_PROJECT,
        policy: FragmentPolicy | None = None,
    ) -> None:
        from harness.sessions.store import FragmentStore

        if not isinstance(store, FragmentStore):
            raise ConfigurationError(
                f"{store!r} keeps no fragments; use a store from harness.sessions.open_store "
                "(sqlite:/// or postgresql://)"
            )
        self.store: FragmentStore = store
        self.key = key
        self.project = project
        self.policy = policy or FragmentPolicy()

    def scope_of(self, scope: Scope) -> FragmentScope:
        """Return the fragment scope ``session`` or ``project`` of this session."""
        if scope == "session":
            return FragmentScope.of_session(self.key)
        if scope == "project":
            return FragmentScope.of_project(self.key.agent_id, self.project)
        raise InvalidInputError(f"a fragment scope is 'session' or 'project', got {scope!r}")

    async def version(self, scope: Scope = "session") -> int:
        """Return the set version of ``scope`` (0 before the first write)."""
        if isinstance(self.store, ReadsOneFragment):
            version, _ = await self.store.fragment(self.scope_of(scope), "")
        else:
            version, _ = await self.store.fragments(self.scope_of(scope))
        return version

    # -------------------------------------------------------------- reading
    async def list(self, *, scope: Scope | None = None, removed: bool = False) -> FragmentList:
        """Return the fragments in the order the model gets them.

        Project system fragments, session system fragments, the history (each message with
        its overlay), then the added fragments (project first), each group in its order.
        ``scope`` limits the listing to one scope; ``removed`` includes removed fragments.
        """
        out: FragmentList = []
        project: FragmentList = []
        session: FragmentList = []
        if scope in (None, "project"):
            _, project = await self.store.fragments(self.scope_of("project"))
        history: FragmentList = []
        if scope in (None, "session"):
            _, session = await self.store.fragments(self.scope_of("session"))
            history = await self._history(session)
        out = _in_model_order([f for f in project + session if not f.message], history)
        return out if removed else [f for f in out if not f.removed]

    async def get(self, fragment_id: str, *, scope: Scope = "session") -> Fragment:
        """Return the current version of one fragment.

        Raises:
            InvalidInputError: there is no such fragment in ``scope``.
        """
        _, current = await self._read_one(fragment_id, scope, None)
        return current

    async def versions(self, fragment_id: str, *, scope: Scope = "session") -> FragmentList:
        """Return every version of a fragment, oldest first (a history message's is 0)."""
        current = await self.get(fragment_id, scope=scope)
        found = await self.store.fragment_versions(self.scope_of(scope), current.id)
        if current.message:
            base = await self._message(fragment_id)
            return [from_message(base), *(overlaid(base, f) for f in found)]
        return found

    async def search(
        self,
        keyword: str = "",
        *,
        tags: Sequence[str] = (),
        scope: Scope | None = None,
        limit: int = 50,
    ) -> FragmentList:
        """Return fragments whose title, tags or content contain every term of ``keyword``.

        Added fragments and edited overlays are searched through the store's full-text index;
        history messages through the store's message search (CJK included). ``tags`` keeps
        only fragments carrying every tag given.
        """
        wanted = [t.casefold() for t in tags]
        if keyword.strip():
            listed = await self._found(keyword, scope, limit)
        else:  # tags are not indexed: filter the listing
            listed = await self.list(scope=scope)
        if wanted:
            listed = [f for f in listed if all(t in {g.casefold() for g in f.tags} for t in wanted)]
        return listed[:limit]

    async def _found(self, keyword: str, scope: Scope | None, limit: int) -> FragmentList:
        """Return the fragments matching ``keyword``, in the listing's order, from the indexes.

        Added fragments come from the store's full-text index only (the set is not listed);
        history fragments from the message search, the overlays' index and the history's
        own texts (copies answer to their original's id).
        """
        added: FragmentList = []
        hits: set[str] = set()
        for name in ("project", "session") if scope is None else (scope,):
            for found in await self.store.search_fragments(
                self.scope_of(name), keyword, limit=max(limit, 1) * 4
            ):
                if found.message:
                    hits.add(found.id)
                else:
                    added.append(found)
        history: FragmentList = []
        if scope in (None, "session"):
            _, session = await self.store.fragments(self.scope_of("session"))
            history = await self._history([f for f in session if f.message])
            for hit in await self.store.search(
                self.key.user_id, keyword, limit=500, within=self.key
            ):
                hits.add(hit.message_id)
            terms = [t.casefold() for t in keyword.split()]
            for f in history:
                if not f.edited and all(t in f.content.casefold() for t in terms):
                    hits.add(f.id)
            history = [f for f in history if f.id in hits]
        out = _in_model_order(added, history)
        return [f for f in out if not f.removed and _matches(f, keyword)]

    # -------------------------------------------------------------- writing
    async def add(
        self,
        content: str,
        *,
        kind: FragmentKind = "user",
        title: str = "",
        tags: Sequence[str] = (),
        scope: Scope = "session",
        position: int | None = None,
        before: str | None = None,
        after: str | None = None,
        expected_version: int | None = None,
    ) -> Fragment:
        """Add a fragment (at the end of its scope's order, or where ``position`` etc. say).

        Raises:
            InvalidInputError: a bad kind, an oversized content, an unknown neighbour.
            StateConflict: ``expected_version`` is stale.
        """
        if kind not in KINDS:
            raise InvalidInputError(
                f"a fragment kind is one of {', '.join(sorted(KINDS))}; got {kind!r}"
            )
        version, stored = await self._read(scope, expected_version)
        now = time.time()
        fragment = Fragment(
            id="f-" + new_id()[:12],
            kind=kind,
            title=self.policy.clean(title, "title"),
            content=self.policy.clean(content),
            tags=_tags(tags),
            created_at=now,
            updated_at=now,
            version=1,
            scope=scope,
        )
        order = _order_at(stored, fragment.id, position, before, after)
        fragment = fragment.replace(order=order)
        await self._write(
            scope, version, [FragmentChange(fragment=fragment, op="add", old_version=0)]
        )
        return fragment

    async def edit(
        self,
        fragment_id: str,
        *,
        content: str | None = None,
        title: str | None = None,
        tags: Sequence[str] | None = None,
        scope: Scope = "session",
        expected_version: int | None = None,
    ) -> Fragment:
        """Change a fragment's content, title or tags (a history message gets an overlay)."""
        changes: dict[str, object] = {}
        if content is not None:
            changes["content"] = self.policy.clean(content)
            changes["edited"] = True
        if title is not None:
            changes["title"] = self.policy.clean(title, "title")
        if tags is not None:
            changes["tags"] = _tags(tags)
        if not changes:
            raise InvalidInputError("nothing to edit: give the new content, title or tags")
        return await self._change(fragment_id, "edit", changes, scope, expected_version)

    async def remove(
        self, fragment_id: str, *, scope: Scope = "session", expected_version: int | None = None
    ) -> Fragment:
        """Remove a fragment: gone from the request and listings (revert brings it back)."""
        return await self._change(fragment_id, "remove", {"removed": True}, scope, expected_version)

    async def disable(
        self, fragment_id: str, *, scope: Scope = "session", expected_version: int | None = None
    ) -> Fragment:
        """Leave a fragment out of the request but keep it listed."""
        return await self._change(
            fragment_id, "disable", {"disabled": True}, scope, expected_version
        )

    async def enable(
        self, fragment_id: str, *, scope: Scope = "session", expected_version: int | None = None
    ) -> Fragment:
        """Bring a disabled fragment back."""
        return await self._change(
            fragment_id, "enable", {"disabled": False}, scope, expected_version
        )

    async def move(
        self,
        fragment_id: str,
        *,
        position: int | None = None,
        before: str | None = None,
        after: str | None = None,
        scope: Scope = "session",
        expected_version: int | None = None,
    ) -> Fragment:
        """Move an added fragment to ``position`` (0 first) or before / after another.

        History messages keep the conversation's order (moving one would split tool calls
        from their results); only added fragments move.
        """
        if sum(x is not None for x in (position, before, after)) != 1:
            raise InvalidInputError("move needs exactly one of position, before or after")
        version, stored = await self._read(scope, expected_version)
        current = await self._current(fragment_id, scope, stored)
        if current.message:
            raise InvalidInputError(
                f"{fragment_id!r} is a history message: history keeps the conversation's "
                "order (tool calls stay with their results); move added fragments only"
            )
        order = _order_at(stored, current.id, position, before, after)
        return await self._commit_one(scope, version, current, "move", {"order": order})

    async def revert(
        self,
        fragment_id: str,
        *,
        to_version: int | None = None,
        scope: Scope = "session",
        expected_version: int | None = None,
    ) -> Fragment:
        """Restore an earlier version (default: the one before the current) as a new version."""
        version, current = await self._read_one(fragment_id, scope, expected_version)
        target = current.version - 1 if to_version is None else to_version
        if not 0 <= target < current.version or (target == 0 and not current.message):
            first = 0 if current.message else 1
            raise InvalidInputError(
                f"fragment {fragment_id!r} is at version {current.version}; revert to a "
                f"version from {first} to {current.version - 1}"
                if current.version > first
                else f"fragment {fragment_id!r} has no earlier version to revert to"
            )
        if target == 0:
            old = from_message(await self._message(fragment_id)).replace(content="")
        else:
            found = await self.store.fragment_versions(self.scope_of(scope), current.id)
            old = next(f for f in found if f.version == target)
        changes: dict[str, object] = {
            "title": old.title,
            "content": old.content,
            "tags": old.tags,
            "disabled": old.disabled,
            "removed": old.removed,
            "edited": old.edited,
        }
        if target == 0:
            changes["title"] = ""
        return await self._commit_one(scope, version, current, "revert", changes)

    # -------------------------------------------------------------- private
    async def _read(self, scope: Scope, expected: int | None) -> tuple[int, FragmentList]:
        version, stored = await self.store.fragments(self.scope_of(scope))
        self._check(scope, expected, version)
        return version, stored

    def _check(self, scope: Scope, expected: int | None, version: int) -> None:
        """Raise `StateConflict` when the caller prepared the change from another version."""
        if expected is not None and expected != version:
            raise StateConflict(
                f"the {scope} fragments of {self.key.session_id!r} are at version {version}, "
                f"but this change was prepared from version {expected}: someone else changed "
                "them first and nothing was written. List them again and redo the change.",
                expected_version=expected,
                actual_version=version,
                session_id=self.key.session_id,
            )

    async def _change(
        self,
        fragment_id: str,
        op: str,
        changes: dict[str, object],
        scope: Scope,
        expected: int | None,
    ) -> Fragment:
        version, current = await self._read_one(fragment_id, scope, expected)
        return await self._commit_one(scope, version, current, op, changes)

    async def _read_one(
        self, fragment_id: str, scope: Scope, expected: int | None
    ) -> tuple[int, Fragment]:
        """Return the set version and one fragment's current version, without the whole set."""
        if not isinstance(self.store, ReadsOneFragment):
            version, stored = await self._read(scope, expected)
            return version, await self._current(fragment_id, scope, stored)
        version, found = await self.store.fragment(self.scope_of(scope), fragment_id)
        self._check(scope, expected, version)
        return version, await self._current(fragment_id, scope, [] if found is None else [found])

    async def _commit_one(
        self, scope: Scope, version: int, current: Fragment, op: str, changes: dict[str, object]
    ) -> Fragment:
        now = time.time()
        new = current.replace(
            version=current.version + 1,
            updated_at=now,
            created_at=current.created_at or now,
            **changes,
        )
        if new.message and not new.edited:
            new = new.replace(content="")  # the overlay holds no copy of the message
        await self._write(
            scope, version, [FragmentChange(fragment=new, op=op, old_version=current.version)]
        )
        if new.message:
            return overlaid(await self._message(new.id), new)
        return new

    async def _write(self, scope: Scope, version: int, changes: Sequence[FragmentChange]) -> None:
        await self.store.commit_fragments(
            self.scope_of(scope), expected_version=version, changes=changes, log=self.key
        )

    async def _current(self, fragment_id: str, scope: Scope, stored: FragmentList) -> Fragment:
        for fragment in stored:
            if fragment.id == fragment_id:
                return fragment
        if scope == "session":
            message = await self._find_message(fragment_id)
            if message is not None:
                return from_message(message).replace(content="", title="")
        raise InvalidInputError(
            f"no fragment {fragment_id!r} in the {scope} fragments of session "
            f"{self.key.session_id!r} (see `harness fragments list`)"
        )

    async def _history(self, stored: FragmentList) -> FragmentList:
        overlays = {f.id: f for f in stored if f.message}
        loaded = await self.store.load(self.key)
        working = (
            []
            if loaded is None
            else [loaded[1][i] for i in loaded[0].working_ids if i in loaded[1]]
        )
        seen: set[str] = set()
        out: FragmentList = []
        for message in working:
            fid = ref_id(message)
            seen.add(fid)
            out.append(overlaid(message, overlays.get(fid)))
        missing = [i for i in overlays if i not in seen]
        if missing:  # left out of the working history (compacted while disabled …)
            found = await self.store.messages(self.key, missing)
            out += [overlaid(found[i], overlays[i]) for i in missing if i in found]
        return out

    async def _find_message(self, message_id: str) -> Message | None:
        loaded = await self.store.load(self.key)
        if loaded is not None:
            for message in loaded[1].values():
                if message.id == message_id or ref_id(message) == message_id:
                    return message
        found = await self.store.messages(self.key, [message_id])
        return found.get(message_id)

    async def _message(self, message_id: str) -> Message:
        found = await self.store.messages(self.key, [message_id])
        if message_id in found:
            return found[message_id]
        message = await self._find_message(message_id)
        if message is None:
            raise InvalidInputError(
                f"the message {message_id!r} is not in session {self.key.session_id!r}"
            )
        return message


def _in_model_order(added: FragmentList, history: FragmentList) -> FragmentList:
    """Return added system fragments, the history, then the other added fragments.

    Added fragments go project first, each scope in its order.
    """
    added = sorted(added, key=lambda f: (f.scope != "project", f.order))
    return (
        [f for f in added if f.kind == "system"]
        + history
        + [f for f in added if f.kind != "system"]
    )


def _tags(tags: Sequence[str]) -> tuple[str, ...]:
    if isinstance(tags, str):
        tags = [tags]
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip() or len(tag) > 100:
            raise InvalidInputError(f"a tag is non-empty text up to 100 characters, got {tag!r}")
        if tag.strip() not in out:
            out.append(tag.strip())
    return tuple(out)


def _matches(fragment: Fragment, keyword: str) -> bool:
    text = f"{fragment.title}\n{' '.join(fragment.tags)}\n{fragment.content}".casefold()
    return all(term.casefold() in text for term in keyword.split())


def _order_at(
    stored: list[Fragment],
    moving: str,
    position: int | None,
    before: str | None,
    after: str | None,
) -> float:
    """Return an order value that puts ``moving`` where asked among the added fragments."""
    others = sorted(
        (f for f in stored if not f.message and not f.removed and f.id != moving),
        key=lambda f: f.order,
    )
    if before is not None or after is not None:
        anchor = before if before is not None else after
        index = next((i for i, f in enumerate(others) if f.id == anchor), None)
        if index is None:
            raise InvalidInputError(
                f"no added fragment {anchor!r} in this scope to move next to "
                "(history messages keep their place)"
            )
        position = index if before is not None else index + 1
    if position is None:
        position = len(others)
    if position < 0:
        raise InvalidInputError(f"a position is 0 or more, got {position}")
    position = min(position, len(others))
    low = others[position - 1].order if position > 0 else None
    high = others[position].order if position < len(others) else None
    if low is None and high is None:
        return 1.0
    if low is None:
        return (high or 0.0) - 1.0
    if high is None:
        return low + 1.0
    return (low + high) / 2
