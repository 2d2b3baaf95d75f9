"""From what happened in memory to the store's events: one commit per round.

The agent keeps a session's working state in RAM (`harness.state.AgentState`) and a
`SessionRecorder` beside it. At the end of each round the recorder turns the changes into
events — new messages of the full history, the rewritten copies and summaries that entered
the working history, the round's manifests, tool runs, warnings and errors — and commits
them with the new state in one transaction. A commit from a stale version (another process
wrote the session meanwhile) raises `StateConflict` and writes nothing. The state's working
ids say how many of them the last commit stored already (`StoredState.unchanged`: the prefix
the working history shares with it), so a store can write only what changed — a round that
appended costs its new messages, not the working history's length, in the store too.

Secrets never reach the store in clear: every message, summary, rewritten copy, warning and
error text is redacted with the fragments' patterns (`harness.fragments.redact_message`,
configurable with ``secrets``) on its way to the store — in a worker thread when the
round's new messages hold `OFF_LOOP_CHARS` of text or more (a session's first round through
the proxy records the whole conversation), so the event loop serves other sessions meanwhile. The RAM state keeps the clear text,
so the model still reads a tool's real output in the rounds that follow it in this
process; a session resumed from the store reads the redacted text.

**A refused request commits nothing of the history.** The caller's new turns join the RAM
state before the stack sees them; when the stack refuses the request (a `ContextBuildError`
before anything was sent), `SessionRecorder.refuse` puts the RAM state back to the last commit
and commits only the record of it: a `RefusalEvent` with the messages the request carried, and
the round's other events (its failed manifest, tool runs). The stored history and state stay
as they were, so the next valid request works — in this process and in any other.

**Turns are stored once.** A caller's turn is marked with `SessionRecorder.mark_turn`; its
`MessageEvent` then carries the turn id, which a store refuses to log twice in one session
(`harness.errors.DuplicateTurn`).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Sequence

import anyio.to_thread
import msgspec

from harness.accounting.cache_verdict import answered
from harness.accounting.prefix import shared_prefix
from harness.errors import HarnessError
from harness.events import AgentEvent
from harness.markers import (
    ARGS_TRUNCATED,
    IMAGES_OFFLOADED,
    INTERRUPTED,
    OFFLOAD_FAILED,
    OFFLOADED,
    ORIGIN_ID,
    SUMMARY_FAILED,
    TRIMMED,
    is_summary,
)
from harness.messages import Message
from harness.sessions.codec import decode_extensions, encode_extensions, same_stored
from harness.sessions.manifest_log import ManifestDeltas
from harness.sessions.redaction import DEFAULT_SECRETS, SecretPattern, redact, redact_message
from harness.sessions.store import (
    CompactionEvent,
    CompactionRunEvent,
    ErrorEvent,
    Event,
    ManifestEvent,
    MessageEvent,
    RefusalEvent,
    RewriteEvent,
    SessionKey,
    SessionStore,
    StateEvent,
    StoredState,
    ToolRunEvent,
    UsageEvent,
    WarningEvent,
)
from harness.state import AgentState
from harness.tokens.calibration import LEARNED

TITLE_CHARS = 80
"""A session's title is its first user message, cut to this many characters."""


class SessionRecorder:
    """Records one session's rounds into a store (owned by the agent, one per session)."""

    def __init__(
        self,
        store: SessionStore,
        key: SessionKey,
        *,
        version: int = 0,
        title: str = "",
        keep_full_history: bool = False,
        secrets: Sequence[SecretPattern] = DEFAULT_SECRETS,
    ) -> None:
        self.store = store
        self.key = key
        self.secrets = tuple(secrets)
        """What is redacted before anything is written (``()``: nothing)."""
        self.keep_full_history = keep_full_history
        """Keep ``AgentState.full_history`` in RAM after commits (else it is emptied: the
        full record is read from the store on demand)."""
        self.version = version
        """The stored version this process last read or wrote."""
        self.title = title
        self._working: tuple[Message, ...] = ()
        """The working history last committed (held by reference: pointers only)."""
        self._working_ids: tuple[str, ...] = ()
        """… and its ids, as stored."""
        self._ids_stored = True
        """Whether the store holds exactly ``_working_ids`` (not when an id did not resolve on
        load): only then may a commit tell the store how many of them are unchanged."""
        self._full = 0
        self._extensions: dict[str, object] = {}
        self._calibration: dict[str, float] = {}
        self._turns: set[str] = set()
        """Ids of messages that are callers' turns (their events carry the id as turn id)."""
        self._pending: list[Event] = []
        self._manifests = ManifestDeltas()
        """Stores each round's manifest as a delta of the last one (its new items only)."""
        self._seed: tuple[int, tuple[Message, ...], dict[str, object]] | None = None
        """A state given in memory and not committed yet (`seeded`): what a refusal goes back to."""

    @classmethod
    async def load(
        cls,
        store: SessionStore,
        key: SessionKey,
        *,
        keep_full_history: bool = False,
        secrets: Sequence[SecretPattern] = DEFAULT_SECRETS,
    ) -> tuple[SessionRecorder, AgentState]:
        """Return the recorder and the RAM state of ``key``: resumed, or new.

        What other processes learned of the providers' token counts (`SessionStore.learned`)
        joins this process's calibration first, so a new process or replica counts as
        cautiously as the most cautious one before it; after that it is read again at most
        every `LEARNED_REFRESH_S` (a drop-in or proxy caller loads its session at every
        request, and one more store read each was a third of its store round trips).
        """
        await merge_learned(store)
        found = await store.load(key)
        if found is None:
            recorder = cls(store, key, keep_full_history=keep_full_history, secrets=secrets)
            return recorder, AgentState(session_id=key.session_id)
        stored, messages = found
        working = [messages[i] for i in stored.working_ids if i in messages]
        state = AgentState(
            session_id=key.session_id,
            working_history=working,
            extensions=decode_extensions(stored.extensions),
            calibration=dict(stored.calibration),
        )
        recorder = cls(
            store,
            key,
            version=stored.version,
            title=stored.title,
            keep_full_history=keep_full_history,
            secrets=secrets,
        )
        recorder._working = tuple(working)
        recorder._working_ids = tuple(m.id for m in working)
        recorder._ids_stored = recorder._working_ids == tuple(stored.working_ids)
        recorder._extensions = dict(state.extensions)
        recorder._calibration = dict(state.calibration)
        return recorder, state

    def seeded(self, state: AgentState) -> None:
        """Take ``state``, given in memory (``HarnessAgent(states=...)``), as the session's.

        Its messages are stored with the first commit; until then a refusal puts the RAM
        state back to it (not to the empty store): the seed is not the refused turn.
        """
        self._seed = (len(state.full_history), tuple(state.working_history), dict(state.extensions))

    def note(self, event: AgentEvent) -> None:
        """Remember an event of the round (manifests, warnings, errors) for the next commit."""
        if event.kind == "context_build" and event.manifest is not None:
            self._pending.append(ManifestEvent(manifest=event.manifest))
        elif event.kind == "usage" and event.usage is not None:
            call_id = event.call_id or ""
            self._pending.append(
                UsageEvent(
                    call_id=call_id,
                    purpose=event.purpose or "agent",
                    model=event.model or "",
                    usage=event.usage,
                )
            )
            self._with_usage(call_id, event)
        elif event.compaction is not None and event.kind in (
            "compaction_started",
            "compaction_finished",
        ):
            c = event.compaction
            if c.focus is not None:
                c = msgspec.structs.replace(c, focus=redact(c.focus, self.secrets))
            self._pending.append(
                CompactionRunEvent(
                    **msgspec.structs.asdict(c),
                    phase=event.kind.removeprefix("compaction_"),
                )
            )
        elif event.kind == "warning":
            text = redact(event.text or "", self.secrets)
            self._pending.append(WarningEvent(code=event.code or "", text=text))
        elif event.kind == "error":
            text = redact(event.text or "", self.secrets)
            self._pending.append(ErrorEvent(error=event.code or "", text=text))

    def _with_usage(self, call_id: str, event: AgentEvent) -> None:
        """Put the reported usage on the pending manifest of request ``call_id``."""
        for i in range(len(self._pending) - 1, -1, -1):
            pending = self._pending[i]
            if isinstance(pending, ManifestEvent) and pending.manifest.call_id == call_id:
                manifest = answered(pending.manifest, event.usage)
                self._pending[i] = msgspec.structs.replace(pending, manifest=manifest)
                return

    def note_tool_run(
        self, name: str, call_id: str, duration_s: float, *, error: bool, denied: bool = False
    ) -> None:
        """Remember that a tool ran (or was denied)."""
        self._pending.append(
            ToolRunEvent(
                name=name, call_id=call_id, duration_s=duration_s, error=error, denied=denied
            )
        )

    def note_error(self, error: BaseException) -> None:
        """Remember that the call ended with ``error``."""
        text = redact(str(error)[:2_000], self.secrets)
        self._pending.append(ErrorEvent(error=type(error).__name__, text=text))

    def mark_turn(self, message: Message) -> None:
        """Log ``message`` (a caller's turn, not yet committed) with its id as turn id."""
        self._turns.add(message.id)

    async def refuse(self, state: AgentState, error: BaseException) -> None:
        """Undo what joined ``state`` since the last commit, and commit only the refusal.

        The RAM state's histories and middleware state go back to the last commit (or to
        the state given in memory, before the first commit: `seeded`); the
        messages they had gained are logged in a `RefusalEvent` (not as history), with the
        round's pending events. The stored state is the last committed one, at a new version.

        Raises:
            StateConflict: another writer committed this session since it was read (nothing
                is written; the RAM state is put back all the same).
        """
        full, working, extensions = (
            self._seed if self._seed is not None else (self._full, self._working, self._extensions)
        )
        refused = tuple(self._clean(m) for m in state.full_history[full:])
        turn = next((m.id for m in refused if m.id in self._turns), None)
        del state.full_history[full:]
        state.working_history[:] = working
        state.extensions.clear()
        state.extensions.update(extensions)
        state.touch()  # a request prepared from the refused state is stale
        self._turns.clear()
        self._pending.append(
            RefusalEvent(
                error=type(error).__name__,
                text=redact(str(error)[:2_000], self.secrets),
                messages=refused,
                turn_id=turn,
            )
        )
        manifests = [e.manifest for e in self._pending if isinstance(e, ManifestEvent)]
        stored_as = iter(self._manifests.encode(manifests))
        events = [next(stored_as) if isinstance(e, ManifestEvent) else e for e in self._pending]
        stored = StoredState(
            working_ids=self._working_ids,
            unchanged=len(self._working_ids) if self._ids_stored else 0,
            extensions=encode_extensions(self._extensions),
            calibration=dict(self._calibration),
            title=self.title,
            version=self.version,
        )
        try:
            self.version = await self.store.commit(
                self.key, expected_version=self.version, events=events, state=stored
            )
        finally:
            self._pending.clear()
        self._manifests.committed()

    async def commit(self, state: AgentState) -> None:
        """Write the round: new messages, rewrites, summaries, pending events and the state.

        Raises:
            StateConflict: another writer committed this session since it was read.
        """
        working = tuple(state.working_history)  # pointers: a C-speed copy
        kept = shared_prefix(self._working, working)
        if _text_size(state.full_history[self._full :], working[kept:]) < OFF_LOOP_CHARS:
            events = self._message_events(state, working, kept)
        else:  # redacting much new text takes milliseconds: not on the event loop
            events = await anyio.to_thread.run_sync(self._message_events, state, working, kept)
        if state.extensions != self._extensions:
            changed = sorted(
                k
                for k in {*state.extensions, *self._extensions}
                if not same_stored(state.extensions.get(k), self._extensions.get(k))
            )
            if changed:  # not when a value read from the store was only typed (`get`)
                events.append(StateEvent(keys=tuple(changed)))
        manifests = [e.manifest for e in self._pending if isinstance(e, ManifestEvent)]
        stored_as = iter(self._manifests.encode(manifests))
        events.extend(next(stored_as) if isinstance(e, ManifestEvent) else e for e in self._pending)
        if not events and kept == len(working) == len(self._working):
            return
        ids = self._working_ids[:kept] + tuple(m.id for m in working[kept:])
        if not self.title:
            first = next((m for m in state.full_history if m.role == "user"), None)
            title = first.text[:TITLE_CHARS] if first is not None else ""
            self.title = redact(title, self.secrets)
        stored = StoredState(
            working_ids=ids,
            unchanged=kept if self._ids_stored else 0,
            extensions=encode_extensions(state.extensions),
            calibration=dict(state.calibration),
            title=self.title,
            version=self.version,
        )
        self.version = await self.store.commit(
            self.key, expected_version=self.version, events=events, state=stored
        )
        await save_learned(self.store)
        self._pending.clear()
        self._turns.clear()
        self._manifests.committed()
        self._seed = None
        self._working, self._working_ids, self._ids_stored = working, ids, True
        if self.keep_full_history:
            self._full = len(state.full_history)
        else:  # the record is in the store; RAM keeps the working history only
            del state.full_history[:]
            self._full = 0
        self._extensions = dict(state.extensions)
        self._calibration = dict(state.calibration)

    def _message_events(
        self, state: AgentState, working: tuple[Message, ...], kept: int
    ) -> list[Event]:
        # What is new since the last commit: the full history's tail, and working messages
        # that were neither in the last working history nor among those new messages (the
        # rewritten copies and summaries). Only the working history's changed tail is
        # looked at (after the ``kept`` messages it shares with the last commit), so a
        # round that appended costs its new messages, not the history. No set of every
        # logged id is kept: a session's RAM stays proportional to its working history.
        new = state.full_history[self._full :]
        clean = self._clean
        turns = self._turns
        events: list[Event] = [
            MessageEvent(message=clean(m), turn_id=m.id if m.id in turns else None) for m in new
        ]
        before = self._working_ids[kept:]
        known = {*before, *(m.id for m in new)}
        fresh = [m for m in working[kept:] if m.id not in known]
        if not fresh:
            return events
        now = {m.id for m in working[kept:]}
        origins = {m.meta(ORIGIN_ID) for m in fresh}
        gone = tuple(i for i in before if i not in now and i not in origins)
        for message in fresh:
            if is_summary(message):
                events.append(CompactionEvent(summary=clean(message), replaced=gone))
            else:
                origin = message.meta(ORIGIN_ID)
                events.append(
                    RewriteEvent(
                        message=clean(message),
                        original_id=origin if isinstance(origin, str) else "",
                        how=_how(message),
                    )
                )
        return events

    def _clean(self, message: Message) -> Message:
        return redact_message(message, self.secrets)


OFF_LOOP_CHARS = 32_768
"""A commit whose new messages hold this much text or more redacts them in a worker thread."""


def _text_size(*groups: Sequence[Message]) -> int:
    """Return about how much text ``groups`` hold (string contents; parts count their text)."""
    size = 0
    for group in groups:
        for message in group:
            content = message.content
            size += len(content) if isinstance(content, str) else len(message.text)
    return size


LEARNED_REFRESH_S = 30.0
"""A store's learned calibration is read at most this often by one process (`merge_learned`)."""
_READ_AT: weakref.WeakKeyDictionary[SessionStore, float] = weakref.WeakKeyDictionary()


async def merge_learned(store: SessionStore, *, every_s: float = LEARNED_REFRESH_S) -> None:
    """Join the store's learned calibration into this process's (`LEARNED.merge`).

    Read at most once per ``every_s`` per store (a stateless caller reads it at its first
    call, not at each); a store that cannot be read now is read at the next chance — the
    process's own bound holds meanwhile.
    """
    now = time.monotonic()
    try:
        last = _READ_AT.get(store)
    except TypeError:  # a store that cannot be weakly referenced: read every time
        last = None
    if last is not None and now - last < every_s:
        return
    try:
        rows = await store.learned()
    except HarnessError:
        return
    with contextlib.suppress(TypeError):
        _READ_AT[store] = now
    LEARNED.merge(rows)


async def save_learned(store: SessionStore) -> None:
    """Hand what this process learned since its last save to ``store``."""
    rows = LEARNED.unsaved()
    if not rows:
        return
    try:
        await store.learn(rows)
    except HarnessError:
        return  # kept in this process (its bound holds); saved with a later observation


def _how(message: Message) -> str:
    for marker, how in (
        (OFFLOADED, "offload"),
        (IMAGES_OFFLOADED, "offload"),
        (OFFLOAD_FAILED, "offload"),
        (TRIMMED, "trim"),
        (ARGS_TRUNCATED, "truncate"),
        (INTERRUPTED, "repair"),
        (SUMMARY_FAILED, "notice"),
    ):
        if message.meta(marker) is not None:
            return how
    return "rewrite"
