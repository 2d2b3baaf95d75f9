"""The contract every `SessionStore` keeps, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import random
import time

import anyio
import msgspec
import pytest

from harness.errors import DuplicateTurn, StateConflict
from harness.manifest import ContextManifest, Transform, enc_hook
from harness.messages import ContentPart, Message, ToolCall
from harness.sessions import (
    CompactionEvent,
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
    WarningEvent,
    open_store,
)
from middleware.tool_result_offload import TOOL_RESULT_OFFLOAD

KEY = SessionKey("alice", "agent", "s1")


def every_kind() -> tuple[list[Event], StoredState]:
    """A round with one event of every kind, and the state that points into it."""
    user = Message.user("Please explain 上下文管理 in this repository", metadata={"pinned": True})
    call = ToolCall(id="call_1", name="read_file", arguments='{"path": "README.md"}')
    assistant = Message.assistant(
        None, tool_calls=(call,), reasoning_content="I should read the README first."
    )
    result = Message.tool("call_1", "# context-harness\n" + "x" * 2000, name="read_file")
    trimmed = Message.tool(
        "call_1", "# context-harness [trimmed]", name="read_file", metadata={"trimmed": True}
    )
    parts = Message(
        role="user",
        content=(
            ContentPart(type="text", text="look at this "),
            ContentPart(type="image_url", data={"image_url": {"url": "data:image/png;base64,AA"}}),
            ContentPart(type="text", text="picture"),
        ),
        extra={"cache_control": {"type": "ephemeral"}},
    )
    summary = Message.user("Summary: the user asked about context management.")
    manifest = ContextManifest(
        call_id="c1",
        purpose="agent",
        model="openai/gpt-4o",
        estimated_input_tokens=1234,
        input_limit=100_000,
        counting_method="approximate:o200k",
        exact=False,
        transforms=(Transform(TOOL_RESULT_OFFLOAD, result.id),),
        agent_id="agent",
        session_id="s1",
    )
    events: list[Event] = [
        MessageEvent(message=user, turn_id=user.id),
        MessageEvent(message=assistant),
        MessageEvent(message=result),
        RewriteEvent(message=trimmed, original_id=result.id, how="trim"),
        MessageEvent(message=parts),
        ManifestEvent(manifest=manifest),
        CompactionEvent(summary=summary, replaced=(user.id, assistant.id)),
        ToolRunEvent(name="read_file", call_id="call_1", duration_s=0.25, error=False),
        ToolRunEvent(name="shell", call_id="call_2", duration_s=0.0, error=True, denied=True),
        StateEvent(keys=("todos", "plan_mode")),
        WarningEvent(code="summary_failed", text="the summary model timed out"),
        ErrorEvent(error="ProviderUnavailable", text="503 from the provider"),
        RefusalEvent(
            error="InvalidToolPairs",
            text="1 result without a call",
            messages=(Message.tool("call_9", "orphan"),),
            turn_id="turn-9",
        ),
    ]
    state = StoredState(
        working_ids=(summary.id, trimmed.id, parts.id),
        extensions={"todos": [{"text": "read", "status": "done"}], "plan_mode": False},
        calibration={"openai/gpt-4o": 1.07},
        title="Please explain 上下文管理",
    )
    return events, state


def round_of(n: int, text: str = "") -> list[Event]:
    """A small round: a user message and an answer."""
    return [
        MessageEvent(message=Message.user(text or f"question {n}")),
        MessageEvent(message=Message.assistant(f"answer {n}")),
    ]


async def test_round_trip_of_every_event_kind(store: SessionStore) -> None:
    events, state = every_kind()
    assert await store.load(KEY) is None
    version = await store.commit(KEY, expected_version=0, events=events, state=state)
    assert version == 1

    logged = await store.events(KEY, limit=1000)
    assert [entry.seq for entry in logged] == list(range(1, len(events) + 1))
    assert [entry.event for entry in logged] == events
    # Byte-exact through JSON: the multi-part content, tool calls, reasoning and extras survive
    # (a manifest's items need the manifest module's hook, like any msgspec encoding of them).
    encode = msgspec.json.Encoder(enc_hook=enc_hook).encode
    assert encode([e.event for e in logged]) == encode(events)


async def test_load_after_commit_returns_the_working_messages(store: SessionStore) -> None:
    events, state = every_kind()
    await store.commit(KEY, expected_version=0, events=events, state=state)
    loaded = await store.load(KEY)
    assert loaded is not None
    stored, messages = loaded
    assert stored.version == 1
    assert stored.working_ids == state.working_ids
    assert stored.extensions == state.extensions
    assert stored.calibration == state.calibration
    assert stored.title == state.title
    assert list(messages) == list(state.working_ids)
    by_id = {
        m.id: m
        for e in events
        for m in (
            [e.message]
            if isinstance(e, MessageEvent | RewriteEvent)
            else [e.summary]
            if isinstance(e, CompactionEvent)
            else []
        )
    }
    assert messages == {i: by_id[i] for i in state.working_ids}
    # The caller's state object is not changed by commit.
    assert state.version == 0


async def test_versions_and_conflict_write_nothing(store: SessionStore) -> None:
    assert await store.commit(KEY, expected_version=0, events=round_of(1), state=StoredState()) == 1
    assert await store.commit(KEY, expected_version=1, events=round_of(2), state=StoredState()) == 2

    with pytest.raises(StateConflict) as caught:
        await store.commit(
            KEY, expected_version=1, events=round_of(3), state=StoredState(title="stale")
        )
    error = caught.value
    assert error.kind == "state_conflict"
    assert (error.expected_version, error.actual_version) == (1, 2)
    assert "version 2" in str(error) and "nothing was written" in str(error)

    # A new session committed as if it existed, and an existing one committed as if new.
    with pytest.raises(StateConflict) as missing:
        await store.commit(
            SessionKey("alice", "agent", "new"), expected_version=3, events=[], state=StoredState()
        )
    assert missing.value.actual_version == 0
    with pytest.raises(StateConflict):
        await store.commit(KEY, expected_version=0, events=round_of(4), state=StoredState())

    logged = await store.events(KEY, limit=100)
    assert [entry.seq for entry in logged] == [1, 2, 3, 4]
    loaded = await store.load(KEY)
    assert loaded is not None and loaded[0].version == 2 and loaded[0].title == ""
    assert await store.load(SessionKey("alice", "agent", "new")) is None
    assert [s.events for s in await store.sessions("alice")] == [4]


async def test_events_paging_and_kind_filter(store: SessionStore) -> None:
    version = 0
    for n in range(5):
        events: list[Event] = [
            *round_of(n),
            ToolRunEvent(name="t", call_id=f"c{n}", duration_s=0.1),
        ]
        version = await store.commit(
            KEY, expected_version=version, events=events, state=StoredState()
        )
    first = await store.events(KEY, offset=0, limit=4)
    second = await store.events(KEY, offset=4, limit=4)
    rest = await store.events(KEY, offset=8, limit=100)
    assert [e.seq for e in first + second + rest] == list(range(1, 16))
    assert await store.events(KEY, offset=15, limit=10) == []

    runs = await store.events(KEY, kinds=["tool_run"])
    assert [e.seq for e in runs] == [3, 6, 9, 12, 15]
    assert all(isinstance(e.event, ToolRunEvent) for e in runs)
    page = await store.events(KEY, offset=1, limit=2, kinds=["tool_run"])
    assert [e.seq for e in page] == [6, 9]
    assert len(await store.events(KEY, kinds=["tool_run", "message"], limit=100)) == 15
    assert await store.events(KEY, kinds=["manifest"]) == []
    # Another user's key sees nothing.
    assert await store.events(SessionKey("mallory", "agent", "s1")) == []


async def test_messages_by_id(store: SessionStore) -> None:
    events, state = every_kind()
    await store.commit(KEY, expected_version=0, events=events, state=state)
    user = events[0]
    compaction = events[6]
    rewrite = events[3]
    assert isinstance(user, MessageEvent)
    assert isinstance(compaction, CompactionEvent)
    assert isinstance(rewrite, RewriteEvent)
    ids = [rewrite.original_id, compaction.summary.id, "no-such-id", user.message.id]
    found = await store.messages(KEY, ids)
    assert list(found) == [rewrite.original_id, compaction.summary.id, user.message.id]
    assert found[user.message.id] == user.message
    assert found[compaction.summary.id] == compaction.summary
    assert "x" * 2000 in found[rewrite.original_id].text  # the original, not the trimmed copy
    assert await store.messages(SessionKey("bob", "agent", "s1"), ids) == {}
    assert await store.messages(KEY, []) == {}


async def test_many_ids_resolve(store: SessionStore) -> None:
    messages = [Message.user(f"m{n}") for n in range(1200)]
    state = StoredState(working_ids=tuple(m.id for m in messages))
    await store.commit(
        KEY, expected_version=0, events=[MessageEvent(message=m) for m in messages], state=state
    )
    loaded = await store.load(KEY)
    assert loaded is not None
    assert list(loaded[1]) == [m.id for m in messages]


async def test_sessions_listing_is_scoped_and_ordered(store: SessionStore) -> None:
    await store.commit(
        SessionKey("alice", "agent", "old"),
        expected_version=0,
        events=round_of(1),
        state=StoredState(title="the old one"),
    )
    await store.commit(
        SessionKey("alice", "other-agent", "mid"),
        expected_version=0,
        events=[*round_of(1), ToolRunEvent(name="t", call_id="c", duration_s=0)],
        state=StoredState(title="middle"),
    )
    await store.commit(
        SessionKey("bob", "agent", "secret"),
        expected_version=0,
        events=round_of(1),
        state=StoredState(title="bob's"),
    )
    await store.commit(
        SessionKey("alice", "agent", "old"),
        expected_version=1,
        events=round_of(2),
        state=StoredState(title="the old one, renamed"),
    )

    listed = await store.sessions("alice")
    assert [s.session_id for s in listed] == ["old", "mid"]
    old, mid = listed
    assert (old.title, old.messages, old.events) == ("the old one, renamed", 4, 4)
    assert (mid.title, mid.messages, mid.events, mid.agent_id) == ("middle", 2, 3, "other-agent")
    assert old.created_at <= mid.created_at <= old.updated_at
    assert [s.session_id for s in await store.sessions("alice", "other-agent")] == ["mid"]
    assert [s.session_id for s in await store.sessions("bob")] == ["secret"]
    assert await store.sessions("carol") == []


async def test_search_english_and_cjk_scoped_to_the_user(store: SessionStore) -> None:
    alice = SessionKey("alice", "agent", "a1")
    bob = SessionKey("bob", "agent", "b1")
    await store.commit(
        alice,
        expected_version=0,
        events=[
            MessageEvent(message=Message.user("How does the Compaction middleware work?")),
            MessageEvent(message=Message.assistant("我们讨论了上下文管理的策略和实现。")),
            MessageEvent(message=Message.tool("c1", "grep found 3 matches in tokens.py")),
            CompactionEvent(summary=Message.user("Summary: discussed budget fitting"), replaced=()),
            ToolRunEvent(name="compaction_tool", call_id="c1", duration_s=0.1),
        ],
        state=StoredState(),
    )
    await store.commit(
        bob,
        expected_version=0,
        events=[
            MessageEvent(message=Message.user("Bob's private compaction notes, 上下文管理")),
        ],
        state=StoredState(),
    )

    hits = await store.search("alice", "compaction")
    assert [(h.session_id, h.role) for h in hits] == [("a1", "user")]
    assert "Compaction middleware" in hits[0].snippet
    assert hits[0].seq == 1

    cjk = await store.search("alice", "上下文管理")
    assert [(h.session_id, h.seq, h.role) for h in cjk] == [("a1", 2, "assistant")]
    assert "上下文管理" in cjk[0].snippet

    # Two-character CJK and short terms fall back to substring matching.
    assert [h.seq for h in await store.search("alice", "上下")] == [2]
    assert [h.seq for h in await store.search("alice", "3 matches")] == [3]
    assert [h.seq for h in await store.search("alice", "BUDGET fitting")] == [4]
    assert await store.search("alice", "budget nonsense") == []
    assert await store.search("alice", "   ") == []
    assert await store.search("alice", '"%_\\') == []

    bob_hits = await store.search("bob", "上下文管理")
    assert [h.session_id for h in bob_hits] == ["b1"]
    assert await store.search("carol", "compaction") == []
    assert len(await store.search("alice", "a", limit=2)) == 2


async def test_search_snippet_is_short(store: SessionStore) -> None:
    text = "lorem ipsum " * 100 + "the needle is here " + "dolor sit " * 100
    await store.commit(
        KEY,
        expected_version=0,
        events=[MessageEvent(message=Message.user(text))],
        state=StoredState(),
    )
    (hit,) = await store.search("alice", "needle")
    assert "needle" in hit.snippet
    assert len(hit.snippet) < 200


async def test_purge(store: SessionStore) -> None:
    other = SessionKey("alice", "agent", "keep")
    await store.commit(KEY, expected_version=0, events=round_of(1, "purge me"), state=StoredState())
    await store.commit(
        other, expected_version=0, events=round_of(1, "purge me too"), state=StoredState()
    )
    assert await store.purge(SessionKey("bob", "agent", "s1")) is False
    assert await store.purge(KEY) is True
    assert await store.purge(KEY) is False
    assert await store.load(KEY) is None
    assert await store.events(KEY) == []
    assert [h.session_id for h in await store.search("alice", "purge me")] == ["keep"]
    assert [s.session_id for s in await store.sessions("alice")] == ["keep"]
    # The key can be used again, from version 0.
    assert await store.commit(KEY, expected_version=0, events=round_of(2), state=StoredState()) == 1
    assert [e.seq for e in await store.events(KEY)] == [1, 2]


async def test_purge_older_than(store: SessionStore) -> None:
    old = SessionKey("bob", "agent", "old")
    await store.commit(old, expected_version=0, events=round_of(1), state=StoredState())
    await anyio.sleep(0.05)
    cutoff_start = time.time()
    await store.commit(KEY, expected_version=0, events=round_of(1), state=StoredState())
    assert await store.purge_older_than(3600) == []
    purged = await store.purge_older_than(time.time() - cutoff_start + 0.01)
    assert purged == [old]
    assert await store.load(old) is None
    assert await store.load(KEY) is not None
    assert await store.search("bob", "question") == []


async def test_purge_older_than_takes_the_purged_sessions_fragments_only(
    store: SessionStore,
) -> None:
    from harness.fragments.model import Fragment, FragmentChange, FragmentScope
    from harness.sessions import FragmentStore

    assert isinstance(store, FragmentStore)
    old, other_user = SessionKey("bob", "agent", "old"), SessionKey("carol", "agent", "old")
    scopes = [
        FragmentScope.of_session(old),
        FragmentScope.of_session(other_user),  # same agent and session id, another user
        FragmentScope.of_project("agent"),
    ]
    for n, scope in enumerate(scopes):
        note = Fragment(id=f"n{n}", kind="user", title="note", content=f"note {n}")
        await store.commit_fragments(
            scope,
            expected_version=0,
            changes=[FragmentChange(fragment=note, op="add", old_version=0)],
        )
    await store.commit(old, expected_version=0, events=round_of(1), state=StoredState())
    await anyio.sleep(0.05)
    cutoff_start = time.time()
    await store.commit(other_user, expected_version=0, events=round_of(1), state=StoredState())
    assert await store.purge_older_than(time.time() - cutoff_start + 0.01) == [old]
    assert await store.fragments(scopes[0]) == (0, [])
    for scope in scopes[1:]:
        version, kept = await store.fragments(scope)
        assert version == 1 and len(kept) == 1, scope


async def test_concurrent_commits_on_different_sessions(store: SessionStore) -> None:
    async def writer(n: int) -> None:
        key = SessionKey(f"user{n % 5}", "agent", f"s{n}")
        version = 0
        for r in range(4):
            version = await store.commit(
                key, expected_version=version, events=round_of(r), state=StoredState()
            )

    async with anyio.create_task_group() as group:
        for n in range(40):
            group.start_soon(writer, n)

    for n in range(40):
        key = SessionKey(f"user{n % 5}", "agent", f"s{n}")
        logged = await store.events(key, limit=100)
        assert [e.seq for e in logged] == list(range(1, 9))
        loaded = await store.load(key)
        assert loaded is not None and loaded[0].version == 4
    counts = [len(await store.sessions(f"user{u}")) for u in range(5)]
    assert counts == [8] * 5


async def test_two_writers_on_one_session(store: SessionStore) -> None:
    await store.commit(KEY, expected_version=0, events=round_of(0), state=StoredState())
    outcomes: list[str] = []

    async def writer(name: str) -> None:
        loaded = await store.load(KEY)
        assert loaded is not None
        try:
            await store.commit(
                KEY,
                expected_version=loaded[0].version,
                events=round_of(1, f"from {name}"),
                state=StoredState(title=name),
            )
        except StateConflict:
            outcomes.append("conflict")
        else:
            outcomes.append(name)

    for _ in range(5):
        outcomes.clear()
        async with anyio.create_task_group() as group:
            for name in ("w1", "w2", "w3"):
                group.start_soon(writer, name)
        assert len(outcomes) == 3

    logged = await store.events(KEY, limit=1000)
    loaded = await store.load(KEY)
    assert loaded is not None
    wins = loaded[0].version - 1
    assert [e.seq for e in logged] == list(range(1, 2 + 2 * wins + 1))
    ids = [e.event.message.id for e in logged if isinstance(e.event, MessageEvent)]
    assert len(ids) == len(set(ids))


async def test_two_writers_from_one_version_exactly_one_conflict(store: SessionStore) -> None:
    await store.commit(KEY, expected_version=0, events=round_of(0), state=StoredState())
    results: list[object] = []

    async def writer(name: str) -> None:
        try:
            results.append(
                await store.commit(
                    KEY, expected_version=1, events=round_of(1, name), state=StoredState()
                )
            )
        except StateConflict as error:
            results.append(error)

    async with anyio.create_task_group() as group:
        group.start_soon(writer, "first")
        group.start_soon(writer, "second")
    assert sorted(map(type, results), key=str) == sorted([int, StateConflict], key=str)
    assert 2 in results
    assert [e.seq for e in await store.events(KEY)] == [1, 2, 3, 4]


def _shared(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


async def test_working_ids_written_as_changes_load_back_whole(store: SessionStore) -> None:
    # Rounds that append, rewrite one id, compact, change nothing, or hand no hint (the ids
    # then go whole into the state), with ids a text column cannot hold (NUL) now and then:
    # every load returns exactly the ids of the last commit.
    rng = random.Random(7)
    ids: tuple[str, ...] = ()
    version, fresh = 0, iter(range(10**6))
    changes = ["append", "append", "rewrite", "compact", "same", "no hint", "nul"]
    for _ in range(60):
        change = rng.choice(changes)
        before = ids
        if change in ("append", "no hint"):
            ids = ids + tuple(f"m{next(fresh)}" for _ in range(rng.randint(1, 4)))
        elif change == "nul":
            ids = (*ids, f"m{next(fresh)}\x00odd")
        elif change == "rewrite" and ids:
            at = rng.randrange(len(ids))
            ids = (*ids[:at], f"m{next(fresh)}~trim", *ids[at + 1 :])
        elif change == "compact" and len(ids) > 3:
            ids = (ids[0], f"summary{next(fresh)}", *ids[-2:])
        hint = 0 if change == "no hint" else _shared(before, ids)
        state = StoredState(working_ids=ids, unchanged=hint)
        version = await store.commit(KEY, expected_version=version, events=[], state=state)
        loaded = await store.load(KEY)
        assert loaded is not None and loaded[0].working_ids == ids, change


def turn(n: int, turn_id: str) -> list[Event]:
    """A round whose user message is the caller's turn ``turn_id``."""
    user = Message.user(f"question {n}")
    return [MessageEvent(message=user, turn_id=turn_id), *round_of(n)[1:]]


async def test_a_turn_is_logged_once_per_session(store: SessionStore, store_url: str) -> None:
    await store.commit(KEY, expected_version=0, events=turn(0, "t0"), state=StoredState())
    other = open_store(store_url)  # another process's store on the same file or database
    try:
        # The lost-answer retry: the turn was committed, the writer retries at the new version.
        with pytest.raises(DuplicateTurn) as twice:
            await other.commit(KEY, expected_version=1, events=turn(1, "t0"), state=StoredState())
        assert twice.value.turn_ids == ("t0",) and isinstance(twice.value, StateConflict)
        assert "Load the session again" in str(twice.value)
        with pytest.raises(DuplicateTurn):  # one commit logging a turn twice
            await other.commit(
                KEY, expected_version=1, events=turn(1, "t1") + turn(2, "t1"), state=StoredState()
            )
        assert len(await store.events(KEY)) == 2  # nothing was written
        assert (
            await other.commit(KEY, expected_version=1, events=turn(1, "t1"), state=StoredState())
            == 2
        )
        # The same turn id in another session is another turn.
        elsewhere = SessionKey("alice", "agent", "s2")
        assert (
            await store.commit(
                elsewhere, expected_version=0, events=turn(0, "t0"), state=StoredState()
            )
            == 1
        )
    finally:
        await other.aclose()


async def test_a_store_from_before_turn_ids_is_upgraded_and_its_sessions_load(
    store: SessionStore, store_url: str, backend: str
) -> None:
    messages = round_of(0)
    ids = tuple(e.message.id for e in messages if isinstance(e, MessageEvent))
    await store.commit(KEY, expected_version=0, events=messages, state=StoredState(working_ids=ids))
    await store.aclose()
    if backend == "sqlite":  # back to schema 5: no turn column, no index
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite://"))
        conn.execute("DROP INDEX events_by_turn")
        conn.execute("ALTER TABLE events DROP COLUMN turn_id")
        conn.execute("PRAGMA user_version = 5")
        conn.commit()
        conn.close()
    else:  # back to +3
        import psycopg

        async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as pg:
            await pg.execute("DROP INDEX harness_events_by_turn")
            await pg.execute("ALTER TABLE harness_events DROP COLUMN turn_id")
            await pg.execute("UPDATE harness_schema SET version = 5")
    upgraded = open_store(store_url)
    try:
        loaded = await upgraded.load(KEY)
        assert loaded is not None and tuple(loaded[1]) == ids
        await upgraded.commit(KEY, expected_version=1, events=turn(1, "t1"), state=loaded[0])
        with pytest.raises(DuplicateTurn):
            await upgraded.commit(KEY, expected_version=2, events=turn(2, "t1"), state=loaded[0])
    finally:
        await upgraded.aclose()
