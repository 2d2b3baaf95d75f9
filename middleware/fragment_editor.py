"""FragmentEditor: apply the developer's context fragments to the real request.

Place in the stack: after TaskState and before ToolResultOffload, BudgetFit, Compaction and
PairValidation — it adds context (System parts, reference blocks) and changes the history,
so the budget, compaction and pair checks see exactly what will be sent. It edits what the
context adders produced (TaskState's ``mode/plan`` part), so it states ``after =
{ADDS_CONTEXT}``: a stack with it before TaskState, ContextSources or WorkspaceMaterials is
refused when it is built.

Before every request it reads the session's fragments and the project's (`harness.fragments.editing`,
through the store and session key the agent puts in ``request.run``), so an edit made by the
CLI while an agent serves the session reaches its next request:

- a history message with an overlay is sent with the overlay's content (a copy with a new
  id, marker ``fragment`` = ``fragment:<id>@<version>`` and ``origin_id``); tool calls,
  results' call ids and ``reasoning_content`` stay as they were;
- a disabled or removed history message is left out *with its partner*: a disabled call
  message takes its results along; a disabled result takes its call out of the assistant
  message (the whole message when nothing else is left), so pairs stay valid. What is left
  out is for this request only (`LeftOut`): on the way out it is put back into the
  working history the round keeps (``response.kept``) — also when Compaction summarised the
  messages around it in the same round — so enabling it again brings it back;
- added ``system`` fragments (pinned) join System as parts named ``fragment:<id>@<version>``;
  other added fragments become reference blocks (category ``fragment``, source id
  ``fragment:<id>@<version>``) in the developer's order — project fragments first. BudgetFit
  may drop them (``omitted_for_budget:fragment:…``); each one dropped is a
  ``fragment_omitted_for_budget`` warning event, and a request over ``warn_at`` of its limit
  is a ``context_near_limit`` warning.

**Built-in System parts** (``builtins=DEFAULT_BUILTINS`` from `middleware.stack`: working
principles, environment information, the plan mode's rules; off by default) are seeded once
into the project's
fragments (`harness.builtin_fragments.seed_builtins`: idempotent, upgraded only while untouched) and
from then on are fragments like any other. ``{date}``, ``{platform}`` and ``{cwd}`` in a
built-in are filled in for each request. A built-in that governs a part another layer adds
(``mode/plan`` from TaskState) applies only while that part is in the request: disabled, the
part is left out; edited, its shipped text in the part is replaced by the developer's.

Cost per request: the store answers both sets from its cache while nothing was written —
SQLite at once on the event loop (`harness.fragments.sets_now_of`, looked up once per session:
a read of the database's wal-index header, mapped in memory, which every commit of any
process rewrites — about 1 µs, no lock, no coroutine, no worker-thread trip, a session with
no fragments included; ``PRAGMA data_version`` only after another connection's commit; the
sets' rows only after a write), PostgreSQL in one small query (`harness.fragments.read_sets`)
— so an edit by the CLI in another process still reaches the next request. With no fragment
in either set nothing else is done. Only the
units holding an overlaid or marked message are rebuilt, and what they
came to is kept in the session's scratch (`harness.request.RunScope.session_slot`) for the
overlays' versions: the next round scans and rebuilds only from the last unit the two
histories share. When the later layers keep what was passed on, the left-out messages go
back without placing them (`LeftOut.passed`).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, ClassVar, Final, NamedTuple, cast

import msgspec

from harness.accounting.prefix import shared_prefix
from harness.blocks import ContextBlock
from harness.errors import ConfigurationError
from harness.events import AgentEvent
from harness.fragments.builtins import (
    Builtin,
    builtin_changes,
    render_placeholders,
    seed_builtins,
)
from harness.fragments.editing import keeps_fragments, read_sets, sets_now_of
from harness.fragments.model import DEFAULT_PROJECT, Fragment, FragmentScope, SetsNow, ref_id
from harness.manifest import Transform, TransformKind
from harness.markers import FRAGMENT, ORIGIN_ID
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse, SystemPart
from harness.types import Concern, Handler

FRAGMENT_EDIT: Final = TransformKind("fragment_edit")
"""A message or governed System part sent with a developer's edit: ``fragment_edit:<label>``."""
FRAGMENT_RESTORE: Final = TransformKind("fragment_restore")
"""An edited copy put back to its original (the edit was reverted): ``fragment_restore:<id>``."""
FRAGMENT_DISABLED: Final = TransformKind("fragment_disabled", omitted=True)
"""A disabled message or governed part left out: ``fragment_disabled:<id or label>``."""
FRAGMENT_REMOVED: Final = TransformKind("fragment_removed", omitted=True)
"""A removed message left out: ``fragment_removed:<id>``."""
FRAGMENT_PAIR_LEFT_OUT: Final = TransformKind("fragment_pair_left_out", omitted=True)
"""The partner of a message left out, left out with it: ``fragment_pair_left_out:<id>``."""

if TYPE_CHECKING:
    from harness.sessions.store import FragmentStore, SessionKey


class FragmentEditor:
    """Apply the session's and the project's fragments to each request.

    Args:
        project: the project whose fragments every session of the agent loads.
        priority: the selection priority of fragment reference blocks (higher survives
            longer when BudgetFit must drop optional material).
        warn_at: the share of the input limit above which a ``context_near_limit`` warning
            is emitted (``None``: never).
        purposes: request purposes the fragments apply to (default: the agent loop).
        builtins: the built-in System parts to seed into the project, e.g.
            `middleware.DEFAULT_BUILTINS` (default ``()``: none — the drop-in call and
            the proxy hook serve other machines, whose date and folder these are not; parts
            seeded before stay fragments until removed).

    Raises:
        ConfigurationError: an empty project name, a ``warn_at`` outside (0, 1], or two
            built-ins with one id.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.ADDS_CONTEXT})
    after: ClassVar[frozenset[Concern]] = frozenset({Concern.ADDS_CONTEXT})
    """It edits what the context adders produced (TaskState's ``mode/plan`` part, a source's
    block): standing before one of them, it would not see what that one adds."""

    def __init__(
        self,
        *,
        project: str = DEFAULT_PROJECT,
        priority: int = 0,
        warn_at: float | None = 0.9,
        purposes: Collection[str] = ("agent",),
        builtins: Sequence[Builtin] = (),
    ) -> None:
        if not isinstance(project, str) or not project:
            raise ConfigurationError(f"project must be a non-empty name, got {project!r}")
        if warn_at is not None and not 0 < warn_at <= 1:
            raise ConfigurationError(f"warn_at is a share of the limit in (0, 1], got {warn_at}")
        if isinstance(purposes, str):
            raise ConfigurationError(f"purposes must be a collection, e.g. ({purposes!r},)")
        ids = [b.id for b in builtins]
        if len(set(ids)) != len(ids) or not all(isinstance(b, Builtin) for b in builtins):
            raise ConfigurationError(
                f"builtins must be Builtin values with distinct ids, got {ids!r}"
            )
        self.project = project
        self.builtins = tuple(builtins)
        self._shipped = {b.id: b.content for b in self.builtins}
        self.priority = int(priority)
        self.warn_at = warn_at
        self.purposes = frozenset(purposes)

    def __repr__(self) -> str:
        return f"FragmentEditor(project={self.project!r}, priority={self.priority})"

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Apply the fragments, send the request on, and warn about what the budget left out."""
        run = request.run
        if run is None or run.key is None or request.ids.purpose not in self.purposes:
            return await call_next(request)
        key, store = run.key, run.store
        memo = run.session_slot(self, _Memo)
        scopes = memo.scopes
        if scopes is None or memo.store is not store or memo.session is not key:  # per call
            memo.store, memo.session = store, key
            memo.keeps = keeps_fragments(store)
            memo.now = sets_now_of(store) if keeps_fragments(store) else None
            scopes = memo.scopes = (
                FragmentScope.of_session(key),
                FragmentScope.of_project(key.agent_id, self.project),
            )
        if not memo.keeps:
            return await call_next(request)
        store = cast("FragmentStore", store)
        now = memo.now  # unchanged sets: answered at once (no coroutine, no worker trip)
        found = now(scopes) if now is not None else None
        if found is None:
            found = await read_sets(store, scopes)
        session, project = found[0][1], found[1][1]
        if self.builtins and builtin_changes(self.builtins, project):
            _, project = await seed_builtins(store, scopes[1], self.builtins, log=key)
        prepared, left_out = request, None  # no fragment at all (the usual case): nothing to do
        added: tuple[ContextBlock, ...] = ()
        if session or project:
            originals = await self._originals(request, session)
            workspace = run.workspace
            local = workspace is not None and workspace.local and not workspace.is_private
            cwd = workspace.root if local and workspace is not None else os.getcwd()
            prepared, left_out = self._apply(request, session, project, originals, cwd=cwd)
            added = prepared.blocks[len(request.blocks) :]  # `_apply` appends its blocks
        response = await call_next(prepared)
        self._warn(request, response, added)
        if left_out is not None and response.kept is not None:
            # What was left out of this request only comes back into the history kept.
            response = response.replace(kept=left_out.restore(response.kept))
        return response

    # ------------------------------------------------------------------ applying
    def apply(
        self,
        request: ModelRequest,
        session: Sequence[Fragment],
        project: Sequence[Fragment],
        originals: dict[str, Message] | None = None,
        *,
        cwd: str = "",
    ) -> ModelRequest:
        """Return ``request`` with the fragments applied (pure: no store access).

        Args:
            request: the request as prepared so far.
            session: the session's fragments (current versions, overlays included).
            project: the project's fragments.
            originals: original messages by id, for copies whose edit was reverted.
            cwd: the working folder a built-in's ``{cwd}`` names.
        """
        return self._apply(request, session, project, originals, cwd=cwd)[0]

    def _apply(
        self,
        request: ModelRequest,
        session: Sequence[Fragment],
        project: Sequence[Fragment],
        originals: dict[str, Message] | None = None,
        *,
        cwd: str = "",
    ) -> tuple[ModelRequest, LeftOut | None]:
        """Return `apply`'s request and what it left out of this request only."""
        parts = self._parts(request, session, project, cwd)
        changed, left_out = request, None
        if parts.overlays:  # edited copies exist only where an overlay was written (it stays)
            changed, left_out = self._history(request, parts.overlays, originals or {})
        governing = parts.governing
        if governing and any(p.name in governing for p in changed.system):
            changed = self._governed(changed, governing, cwd)
        if not parts.system and not parts.blocks:
            return changed, left_out
        changed = changed.replace(
            system=changed.system + parts.system, blocks=changed.blocks + parts.blocks
        )
        return changed, left_out

    def _parts(
        self,
        request: ModelRequest,
        session: Sequence[Fragment],
        project: Sequence[Fragment],
        cwd: str,
    ) -> _Parts:
        """Return what the two sets come to, kept for the session while they are the same.

        The store's cache hands out the same (frozen) fragment objects while a set is
        unchanged: the same objects, ``cwd`` and priority give the same parts. Parts with a
        built-in's placeholders (the date) are made anew each time.
        """
        run = request.run
        memo = run.session_slot(self, _Memo) if run is not None else None
        if (
            memo is not None
            and memo.parts is not None
            and memo.parts_for == (cwd, self.priority)
            and _same(memo.fragments[0], session)
            and _same(memo.fragments[1], project)
        ):
            return memo.parts
        added = sorted(
            (
                f
                for f in (*project, *session)
                if not f.message and not f.part and not f.disabled and not f.removed
            ),
            key=lambda f: (f.scope != "project", f.order),
        )
        parts = _Parts(
            overlays={f.id: f for f in session if f.message},
            governing={f.part: f for f in (*project, *session) if f.part and not f.message},
            system=tuple(
                SystemPart(name=f.label, text=self._text(f, cwd))
                for f in added
                if f.kind == "system"
            ),
            blocks=tuple(self._block(f) for f in added if f.kind != "system"),
        )
        if memo is not None and not any(f.builtin for f in added):
            memo.parts, memo.parts_for = parts, (cwd, self.priority)
            memo.fragments = (tuple(session), tuple(project))
        return parts

    @staticmethod
    def _text(fragment: Fragment, cwd: str) -> str:
        return (
            render_placeholders(fragment.content, cwd=cwd) if fragment.builtin else fragment.content
        )

    def _governed(
        self, request: ModelRequest, governing: dict[str, Fragment], cwd: str
    ) -> ModelRequest:
        """Apply built-ins to the System parts they govern (added by another layer)."""
        parts: list[SystemPart] = []
        transforms: list[Transform] = []
        for part in request.system:
            fragment = governing.get(part.name)
            if fragment is None:
                parts.append(part)
            elif fragment.disabled or fragment.removed:
                transforms.append(Transform(FRAGMENT_DISABLED, fragment.label))
            elif fragment.edited:
                text = self._text(fragment, cwd)
                shipped = self._shipped.get(fragment.id, "")
                if shipped and shipped in part.text:  # keep what the layer adds around it
                    text = part.text.replace(shipped, text)
                parts.append(msgspec.structs.replace(part, text=text))
                transforms.append(Transform(FRAGMENT_EDIT, fragment.label))
            else:
                parts.append(part)
        if not transforms:
            return request
        return request.replace(system=tuple(parts)).with_transforms(*transforms)

    def _block(self, fragment: Fragment) -> ContextBlock:
        text = f"{fragment.title}\n{fragment.content}" if fragment.title else fragment.content
        return ContextBlock.reference(
            fragment.label,
            text,
            source_id=fragment.label,
            revision=str(fragment.version),
            category="fragment",
            priority=self.priority,
            stable=True,  # rendered before the history: fragments change rarely
        )

    def _history(
        self,
        request: ModelRequest,
        overlays: dict[str, Fragment],
        originals: dict[str, Message],
    ) -> tuple[ModelRequest, LeftOut | None]:
        """Apply the overlays to the units that hold an overlaid or marked message.

        Returns the request and the messages it leaves out for this request only.

        One scan finds those messages; the history between their units is passed on as
        slices. What the units came to, and the request parts assembled from them, are kept
        for the session (`_Memo`): the next round, with the same overlays, reuses both for
        the history prefix the two rounds share and scans, rebuilds and assembles only from
        there — its cost is its new messages, plus the request's own tuples (the history
        passed on, and with what is left out the one kept).
        """
        history = request.history
        run = request.run
        memo = run.session_slot(self, _Memo) if run is not None and not originals else None
        key = tuple((f.id, f.version) for f in overlays.values())
        done_units: list[_Unit] = []  # memo.units' first ones: units are in history order
        resume = 0
        if memo is not None and memo.key == key and memo.history:
            resume = _unit_start(history, shared_prefix(memo.history, history, run))
            done_units = [u for u in memo.units if u.end <= resume]
        reused = len(done_units)
        units = done_units + [
            self._unit(history[start:end], start, overlays, originals)
            for start, end in _touched_units(history, overlays, resume)
        ]
        built = memo.built.upto(reused) if memo is not None else _Built()  # kept: in place
        done = units[reused - 1].end if reused else 0
        for unit in units[reused:]:
            built.add(history, done, unit)
            done = unit.end
        if memo is not None:
            memo.history, memo.key, memo.units, memo.built = history, key, units, built
        if not built.transforms:
            return request, None
        tail = history[done:]
        passed = tuple(built.sent) + tail
        left_out = None
        if built.left:  # for this request only: the agent keeps them
            left_out = LeftOut(
                history=tuple(built.kept) + tail,
                stand_ins=tuple(built.stand_ins),
                passed=passed,
                left=tuple(built.left),
            )
        return request.replace(history=passed).with_transforms(*built.transforms), left_out

    def _unit(
        self,
        messages: tuple[Message, ...],
        start: int,
        overlays: dict[str, Fragment],
        originals: dict[str, Message],
    ) -> _Unit:
        """Return what one unit comes to: edits applied, what is sent, what is left out."""
        transforms: list[Transform] = []
        kept = [self._edited(m, overlays, originals, transforms) for m in messages]
        sent: list[Message] = []
        stand_ins: list[tuple[str, str]] = []
        gone = self._send_unit(kept, overlays, sent, stand_ins, transforms)
        return _Unit(start, start + len(messages), kept, sent, stand_ins, transforms, gone)

    @staticmethod
    def _send_unit(
        unit: list[Message],
        overlays: dict[str, Fragment],
        sent: list[Message],
        stand_ins: list[tuple[str, str]],
        transforms: list[Transform],
    ) -> list[int]:
        """Append what of one unit is sent (a disabled call takes its results along).

        Returns:
            The positions in ``unit`` of the messages left out.
        """
        out = [_left_out(m, overlays) for m in unit]
        head = unit[0]
        if out[0] is not None:
            transforms.append(Transform(out[0], head.id))
            transforms.extend(Transform(FRAGMENT_PAIR_LEFT_OUT, m.id) for m in unit[1:])
            return list(range(len(unit)))
        if not (head.role == "assistant" and head.tool_calls) or not any(out[1:]):
            sent.extend(unit)
            return []
        gone = {m.tool_call_id for m, why in zip(unit[1:], out[1:], strict=True) if why}
        for m, why in zip(unit[1:], out[1:], strict=True):
            if why:
                transforms.append(Transform(why, m.id))
        calls = tuple(c for c in head.tool_calls if c.id not in gone)
        left = [i for i, why in enumerate(out) if why]
        if calls or head.text:
            copy = head.replace(id=f"{head.id}~calls{len(calls)}", tool_calls=calls)
            sent.append(copy)
            stand_ins.append((copy.id, head.id))
            if len(calls) < len(head.tool_calls):
                transforms.append(Transform(FRAGMENT_PAIR_LEFT_OUT, f"calls of {head.id}"))
        else:
            transforms.append(Transform(FRAGMENT_PAIR_LEFT_OUT, head.id))
            left.insert(0, 0)
        sent.extend(m for m, why in zip(unit[1:], out[1:], strict=True) if not why)
        return left

    @staticmethod
    def _edited(
        message: Message,
        overlays: dict[str, Fragment],
        originals: dict[str, Message],
        transforms: list[Transform],
    ) -> Message:
        fid = ref_id(message)
        overlay = overlays.get(fid)
        marker = message.meta(FRAGMENT)
        if overlay is not None and overlay.edited:
            if marker == overlay.label:
                return message  # already this version
            meta = dict(message.metadata or {})
            meta.update({FRAGMENT: overlay.label, ORIGIN_ID: fid})
            transforms.append(Transform(FRAGMENT_EDIT, overlay.label))
            return message.replace(
                id=f"{fid}~fragment{overlay.version}", content=overlay.content, metadata=meta
            )
        if marker is not None:  # an edit was reverted: back to the original message
            original = originals.get(fid)
            if original is not None:
                transforms.append(Transform(FRAGMENT_RESTORE, fid))
                return original
        return message

    async def _originals(
        self, request: ModelRequest, session: Sequence[Fragment]
    ) -> dict[str, Message]:
        """Return the originals of copies whose overlay no longer edits them (rare)."""
        reverted = frozenset(f.id for f in session if f.message and not f.edited)
        if not reverted:
            return {}  # every overlay edits its message: no copy goes back
        wanted = self._marked(request, reverted)
        if not wanted:
            return {}
        found: dict[str, Message] = {}
        if request.state is not None:
            found = {m.id: m for m in request.state.full_history if m.id in wanted}
        missing = [i for i in wanted if i not in found]
        run = request.run
        if missing and run is not None and run.store is not None and run.key is not None:
            found.update(await run.store.messages(run.key, missing))
        return found

    def _marked(self, request: ModelRequest, reverted: frozenset[str]) -> set[str]:
        """Return the ids whose copies (``fragment`` marker) in the history are ``reverted``.

        The hits are kept for the session (`_Memo`): the next round, with the same
        overlays not editing, scans only past the prefix its history shares with this one.
        """
        history, run = request.history, request.run
        memo = run.session_slot(self, _Memo) if run is not None else None
        start, hits = 0, []
        if memo is not None and memo.reverted == reverted and memo.scanned:
            start = shared_prefix(memo.scanned, history, run)
            hits = [hit for hit in memo.hits if hit[0] < start]
        for index in range(start, len(history)):
            metadata = history[index].metadata
            if metadata is not None and FRAGMENT in metadata:
                fid = ref_id(history[index])
                if fid in reverted:
                    hits.append((index, fid))
        if memo is not None:
            memo.scanned, memo.reverted, memo.hits = history, reverted, hits
        return {fid for _, fid in hits}

    # ------------------------------------------------------------------ warnings
    def _warn(
        self, request: ModelRequest, response: ModelResponse, added: Sequence[ContextBlock]
    ) -> None:
        """Warn about the blocks of ``added`` (this editor's) a later layer left out."""
        run, manifest = request.run, response.manifest
        if run is None or run.emit is None or manifest is None:
            return
        labels = {block.source_id for block in added}
        for transform in manifest.transforms if labels else ():
            if transform.omitted and transform.target in labels:
                run.emit(
                    AgentEvent(
                        kind="warning",
                        code="fragment_omitted_for_budget",
                        text=f"{transform.target} was left out: the "
                        "request is over its budget; shorten it, move it earlier or disable "
                        "other fragments",
                    )
                )
        limit = manifest.input_limit
        near = self.warn_at is not None and limit > 0
        if near and manifest.estimated_input_tokens >= (self.warn_at or 1.0) * limit:
            run.emit(
                AgentEvent(
                    kind="warning",
                    code="context_near_limit",
                    text=f"the request uses ~{manifest.estimated_input_tokens:,} of "
                    f"{limit:,} input tokens; disable or shorten fragments to make room",
                )
            )


def _left_out(message: Message, overlays: dict[str, Fragment]) -> TransformKind | None:
    overlay = overlays.get(ref_id(message))
    if overlay is None:
        return None
    if overlay.removed:
        return FRAGMENT_REMOVED
    if overlay.disabled:
        return FRAGMENT_DISABLED
    return None


class _Unit(NamedTuple):
    """What one unit of the history came to (`FragmentEditor._unit`)."""

    start: int
    end: int
    kept: list[Message]
    sent: list[Message]
    stand_ins: list[tuple[str, str]]
    transforms: list[Transform]
    gone: list[int]


class _Parts(NamedTuple):
    """What a session's and a project's fragment sets come to (`FragmentEditor._parts`)."""

    overlays: dict[str, Fragment]
    governing: dict[str, Fragment]
    system: tuple[SystemPart, ...]
    blocks: tuple[ContextBlock, ...]


def _same(kept: tuple[Fragment, ...], given: Sequence[Fragment]) -> bool:
    return len(kept) == len(given) and all(map(operator.is_, kept, given))


class _Memo:
    """What a session's last history came to, for the overlays ``key`` (id, version)."""

    __slots__ = (
        "built",
        "fragments",
        "history",
        "hits",
        "keeps",
        "key",
        "now",
        "parts",
        "parts_for",
        "reverted",
        "scanned",
        "scopes",
        "session",
        "store",
        "units",
    )

    def __init__(self) -> None:
        self.store: object = None
        self.session: SessionKey | None = None
        """The store and session ``scopes`` were made for …"""
        self.scopes: tuple[FragmentScope, FragmentScope] | None = None
        """… the session's and the project's fragment sets, whether the store keeps them …"""
        self.keeps = False
        self.now: SetsNow | None = None
        """… and its `harness.fragments.sets_now_of`."""
        self.history: tuple[Message, ...] = ()
        self.key: tuple[tuple[str, int], ...] = ()
        self.units: list[_Unit] = []
        self.built = _Built()
        """The parts assembled from ``units`` (one mark per unit)."""
        self.scanned: tuple[Message, ...] = ()
        """The last history scanned for copies of messages whose overlay is ``reverted`` …"""
        self.reverted: frozenset[str] = frozenset()
        self.hits: list[tuple[int, str]] = []
        """… and where it found them (position, id)."""
        self.fragments: tuple[tuple[Fragment, ...], tuple[Fragment, ...]] = ((), ())
        """The session's and the project's fragments ``parts`` were made from (held) …"""
        self.parts_for: tuple[str, int] = ("", 0)
        """… with this working folder and priority …"""
        self.parts: _Parts | None = None
        """… and what they came to."""


class _Built:
    """The request parts assembled from a history's units, each unit's end marked.

    ``kept`` (edits applied, nothing left out), ``sent``, the stand-ins, the transforms
    and ``left`` (positions in ``kept`` of what is left out) hold the units and the history
    between them, up to the last unit's end; ``marks`` their lengths after each unit.
    """

    __slots__ = ("kept", "left", "marks", "sent", "stand_ins", "transforms")

    def __init__(self) -> None:
        self.kept: list[Message] = []
        self.sent: list[Message] = []
        self.stand_ins: list[tuple[str, str]] = []
        self.transforms: list[Transform] = []
        self.left: list[int] = []
        self.marks: list[tuple[int, int, int, int, int]] = []

    def upto(self, units: int) -> _Built:
        """Keep what the first ``units`` units came to, cutting the rest in place; return it.

        Cut from the end, so a round that keeps every unit cuts nothing (no copy of the
        history they hold). The caller replaces the session's parts with the result.
        """
        kept, sent, stand_ins, transforms, left = self.marks[units - 1] if units else (0,) * 5
        del self.kept[kept:], self.sent[sent:], self.stand_ins[stand_ins:]
        del self.transforms[transforms:], self.left[left:], self.marks[units:]
        return self

    def add(self, history: tuple[Message, ...], done: int, unit: _Unit) -> None:
        """Append the history from ``done`` to ``unit`` and what ``unit`` came to."""
        between = history[done : unit.start]
        self.kept.extend(between)
        self.sent.extend(between)
        at = len(self.kept)
        self.left.extend(at + i for i in unit.gone)
        self.kept.extend(unit.kept)
        self.sent.extend(unit.sent)
        self.stand_ins.extend(unit.stand_ins)
        self.transforms.extend(unit.transforms)
        self.marks.append(
            (
                len(self.kept),
                len(self.sent),
                len(self.stand_ins),
                len(self.transforms),
                len(self.left),
            )
        )


def _unit_start(history: tuple[Message, ...], shared: int) -> int:
    """Return where the unit holding message ``shared - 1`` starts (0 when nothing is shared).

    Every unit before it lies in the shared prefix and is followed by a shared message, so
    it is the very unit worked out before.
    """
    index = shared - 1
    while index > 0 and history[index].role == "tool":
        index -= 1
    return max(index, 0)


def _touched_units(
    history: tuple[Message, ...], overlays: dict[str, Fragment], start: int = 0
) -> list[tuple[int, int]]:
    """Return the ``[start, end)`` units (`middleware._history.units`) with work to do.

    A unit has work when one of its messages has an overlay or carries the ``fragment``
    marker (a copy whose overlay may be reverted). Spans are in order and disjoint; the
    scan begins at ``start``, which must be where a unit starts.
    """
    spans: list[tuple[int, int]] = []
    n = len(history)
    for i in range(start, n):
        message = history[i]
        metadata = message.metadata
        if metadata is None:
            if message.id not in overlays:
                continue
        else:
            origin = metadata.get(ORIGIN_ID)
            fid = origin if isinstance(origin, str) and origin else message.id
            if fid not in overlays and FRAGMENT not in metadata:
                continue
        if spans and i < spans[-1][1]:
            continue  # in the unit already found
        first = i
        if message.role == "tool":
            j = i
            while j > start and history[j - 1].role == "tool":
                j -= 1
            head = history[j - 1] if j > start else None
            if head is not None and head.role == "assistant" and head.tool_calls:
                first = j - 1
        end = first + 1
        if history[first].role == "assistant" and history[first].tool_calls:
            while end < n and history[end].role == "tool":
                end += 1
        spans.append((first, end))
    return spans


class LeftOut(msgspec.Struct, frozen=True, kw_only=True):
    """Messages a middleware left out of one request only, to keep in the working history.

    FragmentEditor leaves disabled messages out of what it passes on; the layers after it
    (offload, compaction) never see them. On the way out, `restore` puts them back among
    what those layers kept (`ModelResponse.kept`), in their old order: a left-out message whose neighbours
    were summarised comes right after the summary. A left-out tool result whose call was
    summarised away is dropped with it (a result never stands without its call).
    """

    history: tuple[Message, ...]
    """The history as the leaving-out layer received it; its order places what comes back."""
    sent: frozenset[str] | None = None
    """Ids of the ``history`` messages passed on as they are; ``None``: those of ``passed``,
    worked out only when `restore` must place messages (building the set every request
    cost O(history) at every round with a message left out)."""
    stand_ins: tuple[tuple[str, str], ...] = ()
    """Copies passed on in place of a ``history`` message, as (copy id, original id): an
    assistant message sent without the calls whose results were left out."""
    passed: tuple[Message, ...] = ()
    """The history passed on (``()``: not known). When the later layers kept exactly these
    messages, `restore` returns ``history`` without placing anything: no O(history) work."""
    left: tuple[int, ...] = ()
    """With ``passed``: the positions in ``history`` of the messages left out."""

    def restore(self, kept: tuple[Message, ...]) -> tuple[Message, ...]:
        """Return ``kept`` (what the later layers kept) with the left-out messages back."""
        if (
            self.passed
            and self.left
            and len(kept) == len(self.passed)
            and shared_prefix(self.passed, kept) == len(kept)
            and self._calls_kept()
        ):
            return self.history
        history = self.history
        sent = self.sent if self.sent is not None else frozenset(m.id for m in self.passed)
        where = {m.id: i for i, m in enumerate(history)}
        stand_ins = dict(self.stand_ins)
        standing = set(stand_ins.values())
        waiting = [i for i, m in enumerate(history) if m.id not in sent and m.id not in standing]
        back = {history[i].id for i in waiting}
        out: list[Message] = []
        k = 0
        for message in kept:
            original = stand_ins.get(message.id)
            if original is not None:
                message = history[where[original]]  # the message with all its calls again
            at = where.get(message.id)
            if at is None:
                origin = message.meta(ORIGIN_ID)
                at = where.get(origin) if isinstance(origin, str) else None
            if at is not None:
                while k < len(waiting) and waiting[k] < at:
                    out.append(history[waiting[k]])
                    k += 1
            out.append(message)
        out.extend(history[i] for i in waiting[k:])
        calls: set[str] = set()
        restored: list[Message] = []
        for message in out:
            if message.id in back and message.role == "tool" and message.tool_call_id not in calls:
                continue  # its call was summarised away
            calls.update(c.id for c in message.tool_calls)
            restored.append(message)
        return tuple(restored)

    def _calls_kept(self) -> bool:
        """Return whether every left-out tool result has its call earlier in ``history``."""
        history = self.history
        for i in self.left:
            message = history[i]
            if message.role != "tool":
                continue
            j = i
            while j > 0 and history[j - 1].role == "tool":
                j -= 1
            head = history[j - 1] if j > 0 else None
            if head is None or all(c.id != message.tool_call_id for c in head.tool_calls):
                return False
        return True
