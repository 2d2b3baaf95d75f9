"""Fragments and their versions on both store backends (SQLite and a real PostgreSQL)."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import anyio
import msgspec
import pytest

from harness import FragmentPolicy, Fragments, SecretPattern, redact
from harness.errors import ConfigurationError, InvalidInputError, StateConflict
from harness.fragments.builtins import seed_builtins
from harness.fragments.editing import ReadsOneFragment, read_sets
from harness.fragments.model import FragmentScope
from harness.messages import ContentPart, Message, ToolCall
from harness.sessions import FragmentEvent, SessionKey, SessionStore, StoredState, open_store
from harness.sessions.redaction import DEFAULT_SECRETS, redact_message
from harness.sessions.sqlite.store import SqliteStore
from harness.sessions.store import FragmentStore, MessageEvent
from middleware.stack import DEFAULT_BUILTINS
from tests.sessions import conftest as shared

backend = shared.backend
pg_server = shared.pg_server
store_url = shared.store_url
"""The session-store fixtures: every test runs on SQLite and on a real PostgreSQL."""

KEY = SessionKey("u1", "agent", "s1")
SCOPES: tuple[Literal["session", "project"], ...] = ("session", "project")


@pytest.fixture
async def fstore(store_url: str) -> AsyncIterator[SessionStore]:
    """An open store of the backend under test."""
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        await opened.aclose()


async def commit_round(store: SessionStore, version: int, text: str) -> int:
    """Commit one round of one user message, as the agent's recorder would; return the version."""
    message = Message.user(text)
    return await store.commit(
        KEY,
        expected_version=version,
        events=[MessageEvent(message=message)],
        state=StoredState(working_ids=(message.id,)),
    )


async def record(store: SessionStore, *messages: Message) -> None:
    """Record messages as the agent would: logged and in the working history."""
    await store.commit(
        KEY,
        expected_version=0,
        events=[MessageEvent(message=m) for m in messages],
        state=StoredState(working_ids=tuple(m.id for m in messages)),
    )


async def test_operations_versions_and_revert(fstore: SessionStore) -> None:
    fragments = Fragments(fstore, KEY)
    a = await fragments.add("first rule", title="A", tags=["rules"])
    b = await fragments.add("second rule", title="B")
    c = await fragments.add("third rule", title="C", position=0)
    assert [f.id for f in await fragments.list()] == [c.id, a.id, b.id]
    await fragments.move(c.id, after=b.id)
    assert [f.id for f in await fragments.list()] == [a.id, b.id, c.id]
    await fragments.move(b.id, before=a.id)
    assert [f.id for f in await fragments.list()] == [b.id, a.id, c.id]

    await fragments.edit(a.id, content="first rule, revised")
    await fragments.disable(a.id)
    await fragments.enable(a.id)
    assert [v.version for v in await fragments.versions(a.id)] == [1, 2, 3, 4]
    back = await fragments.revert(a.id, to_version=1)
    assert (back.version, back.content) == (5, "first rule")
    await fragments.remove(b.id)
    assert b.id not in [f.id for f in await fragments.list()]
    assert b.id in [f.id for f in await fragments.list(removed=True)]
    restored = await fragments.revert(b.id)
    assert not restored.removed
    assert await fragments.version() == 11

    logged = [e.event for e in await fstore.events(KEY, kinds=("fragment",))]
    assert all(isinstance(e, FragmentEvent) for e in logged)
    assert [(e.op, e.old_version, e.new_version) for e in logged if isinstance(e, FragmentEvent)][
        -2:
    ] == [("remove", 2, 3), ("revert", 3, 4)]


async def test_a_history_message_is_a_fragment_by_reference(fstore: SessionStore) -> None:
    user = Message.user("use floats for the total")
    reply = Message.assistant("ok", reasoning_content="thinking")
    await record(fstore, user, reply)
    fragments = Fragments(fstore, KEY)
    listed = await fragments.list()
    assert [(f.id, f.version, f.message) for f in listed] == [
        (user.id, 0, True),
        (reply.id, 0, True),
    ]
    edited = await fragments.edit(user.id, content="use decimals for the total")
    assert (edited.version, edited.content, edited.edited) == (
        1,
        "use decimals for the total",
        True,
    )
    versions = await fragments.versions(user.id)
    assert [v.content for v in versions] == [
        "use floats for the total",
        "use decimals for the total",
    ]
    reverted = await fragments.revert(user.id, to_version=0)
    assert (reverted.version, reverted.content, reverted.edited) == (2, user.text, False)
    with pytest.raises(InvalidInputError, match="history message"):
        await fragments.move(user.id, position=0)
    # The message itself was never copied or changed.
    assert (await fstore.messages(KEY, [user.id]))[user.id] == user


async def test_a_write_from_a_stale_version_is_a_conflict(fstore: SessionStore) -> None:
    one = Fragments(fstore, KEY)
    other = Fragments(fstore, KEY)
    seen = await one.version()
    await other.add("someone else")
    with pytest.raises(StateConflict):
        await one.add("mine", expected_version=seen)
    assert [f.content for f in await one.list()] == ["someone else"]


async def test_concurrent_writers_never_lose_a_change(fstore: SessionStore) -> None:
    fragments = Fragments(fstore, KEY)
    failures = 0

    async def add(i: int) -> None:
        nonlocal failures
        try:
            await fragments.add(f"note {i}")
        except StateConflict:
            failures += 1

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(add, i)
    assert len(await fragments.list()) + failures == 8
    assert await fragments.version() == 8 - failures


async def test_search_by_keyword_tag_and_cjk(fstore: SessionStore) -> None:
    await record(fstore, Message.user("数据库连接池的大小是多少"))
    fragments = Fragments(fstore, KEY)
    await fragments.add("不要修改公共接口", title="关键约束", tags=["rules"])
    await fragments.add("Money is Decimal, never float", tags=["money", "rules"])
    assert [f.title for f in await fragments.search("公共接口")] == ["关键约束"]
    assert [f.kind for f in await fragments.search("数据库连接")] == ["user"]
    assert len(await fragments.search("", tags=["rules"])) == 2
    assert [f.tags for f in await fragments.search("decimal", tags=["money"])] == [
        ("money", "rules")
    ]
    assert await fragments.search("nowhere-to-be-found") == []


async def test_project_fragments_are_shared_by_every_user_of_the_agent(
    fstore: SessionStore,
) -> None:
    await Fragments(fstore, KEY).add("shared rule", scope="project")
    other = Fragments(fstore, SessionKey("u2", "agent", "s9"))
    assert [f.content for f in await other.list()] == ["shared rule"]
    elsewhere = Fragments(fstore, SessionKey("u2", "another-agent", "s9"))
    assert await elsewhere.list() == []


async def test_secrets_are_redacted_and_size_is_limited(fstore: SessionStore) -> None:
    fragments = Fragments(fstore, KEY, policy=FragmentPolicy(max_chars=500))
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----"
    added = await fragments.add(
        f"key sk-proj-abcdefghijklmnop1234 Authorization: Bearer abcdefghij12345 "
        f"password=hunter2 {pem}"
    )
    for secret in ("sk-proj-abcdefghijklmnop1234", "abcdefghij12345", "hunter2", "MIIEabc"):
        assert secret not in added.content
        assert not await fragments.search(secret)
    assert "Bearer [REDACTED:bearer]" in added.content
    with pytest.raises(InvalidInputError, match="over the limit of 500"):
        await fragments.add("x" * 501)


def test_secret_patterns_are_configurable() -> None:
    custom = (SecretPattern("ticket", r"TICKET-\d+"),)
    assert redact("see TICKET-123", custom) == "see [REDACTED:ticket]"
    with pytest.raises(ConfigurationError):
        FragmentPolicy(secrets=(SecretPattern("bad", "(unclosed"),))


def test_a_message_is_redacted_in_text_reasoning_parts_and_arguments() -> None:
    call = ToolCall(
        id="c1",
        name="login",
        arguments='{"user": "ann", "password": "p=1", "x": "sk-abcdefghijklmnop1234"}',
    )
    message = Message.assistant(
        "use token=abc123",
        tool_calls=(call,),
        reasoning_content="the key is sk-abcdefghijklmnop1234",
    )
    clean = redact_message(message)
    assert clean.id == message.id and clean.text == "use token=[REDACTED:password]"
    assert clean.reasoning_content == "the key is [REDACTED:api_key]"
    arguments = json.loads(clean.tool_calls[0].arguments)  # still valid JSON
    assert arguments == {
        "user": "ann",
        "password": "[REDACTED:password]",
        "x": "[REDACTED:api_key]",
    }
    config = '{"api_key": "abc123", "name": "svc"}'  # JSON text in a tool result
    assert redact(config) == '{"api_key": "[REDACTED:password]", "name": "svc"}'
    parts = Message(
        role="user", content=(ContentPart(type="text", text="Bearer abcdefgh12345678"),)
    )
    assert redact_message(parts).text == "Bearer [REDACTED:bearer]"
    plain = Message.user("nothing to hide here")
    assert redact_message(plain) is plain  # a clean message is not copied


def test_hinted_patterns_find_matches_on_every_line_and_nothing_else() -> None:
    text = "line one\nPASSWORD: hunter2\nplain\n" * 3 + "token = 'a b c'\nno secret"
    assert redact(text).count("[REDACTED:password]") == 4
    assert "hunter2" not in redact(text) and "a b c" not in redact(text)
    assert redact("tokens counted: 12 of the budget") == "tokens counted: 12 of the budget"
    unhinted = tuple(msgspec.structs.replace(s, hints=()) for s in DEFAULT_SECRETS)
    assert redact(text, unhinted) == redact(text)


async def test_builtins_are_seeded_once_and_sets_read_together(fstore: SessionStore) -> None:
    assert isinstance(fstore, FragmentStore)
    project = FragmentScope.of_project("agent")
    version, seeded = await seed_builtins(fstore, project, DEFAULT_BUILTINS, log=KEY)
    assert [f.id for f in seeded] == [b.id for b in DEFAULT_BUILTINS]
    assert await seed_builtins(fstore, project, DEFAULT_BUILTINS) == (version, seeded)
    await Fragments(fstore, KEY).add("a session note")
    (_, session), (project_version, listed) = await read_sets(
        fstore, (FragmentScope.of_session(KEY), project)
    )
    assert [f.content for f in session] == ["a session note"]
    assert (project_version, listed) == (version, seeded)


async def cli(store_url: str, *args: str) -> dict[str, object]:
    """Run ``harness fragments …`` in another process on the same store; return its JSON."""
    who = ["--user", KEY.user_id, "--agent", KEY.agent_id, "--session", KEY.session_id]
    done = await anyio.run_process(
        [sys.executable, "-m", "harness", "fragments", *args, "--store", store_url, *who, "--json"],
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    found: dict[str, object] = json.loads(done.stdout.decode().splitlines()[0])
    return found


async def test_an_edit_from_another_process_reaches_the_next_read(
    fstore: SessionStore, store_url: str
) -> None:
    """The sets an agent reads before each request (cached while unchanged) see the CLI's edits."""
    assert isinstance(fstore, FragmentStore)
    scopes = (FragmentScope.of_session(KEY), FragmentScope.of_project(KEY.agent_id))
    assert await read_sets(fstore, scopes) == [(0, []), (0, [])]
    assert await read_sets(fstore, scopes) == [(0, []), (0, [])]  # answered from the cache
    added = await cli(store_url, "add", "--content", "use the staging database")
    (version, session), _ = await read_sets(fstore, scopes)
    assert (version, [f.content for f in session]) == (1, ["use the staging database"])
    session.clear()  # a caller's list is its own: the cache keeps its copy
    await cli(store_url, "disable", "--fragment", str(added["id"]))
    (version, session), _ = await read_sets(fstore, scopes)
    assert (version, [(f.id, f.disabled) for f in session]) == (2, [(added["id"], True)])
    await cli(store_url, "add", "--project", "--content", "shared rule")
    (_, session), (_, project) = await read_sets(fstore, scopes)
    assert [f.content for f in project] == ["shared rule"] and len(session) == 1


async def test_a_write_through_the_store_itself_is_read_back(fstore: SessionStore) -> None:
    """This store's own writes, and a purge, reach its next read (nothing stale is cached)."""
    assert isinstance(fstore, FragmentStore)
    scope = FragmentScope.of_session(KEY)
    other = FragmentScope.of_session(SessionKey("u2", KEY.agent_id, KEY.session_id))
    assert await fstore.fragments(scope) == (0, [])
    note = await Fragments(fstore, KEY).add("a note")
    assert await fstore.fragments(scope) == (1, [note])
    second = await Fragments(fstore, KEY).add("a second note")
    assert await fstore.fragments(scope) == (2, [note, second])
    assert await fstore.fragments(other) == (0, [])  # another user's session of the same id
    await fstore.purge(KEY)
    assert await fstore.fragments(scope) == (0, [])


async def test_sqlite_sets_follow_another_connections_writes_between_own_commits(
    tmp_path: Path,
) -> None:
    """The cached answer survives this store's session commits, never another writer's edit.

    Between reads the store's own connection commits rounds (SQLite's data version of that
    connection does not move for them) while a second connection to the file — as another
    process would — adds, disables and purges; this store's own fragment writes count too.
    """
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    mine, other = open_store(url), open_store(url)
    assert isinstance(mine, FragmentStore) and isinstance(other, FragmentStore)
    scopes = (FragmentScope.of_session(KEY), FragmentScope.of_project(KEY.agent_id))
    try:
        for _ in range(3):  # opens the connection, then answers from what it saw
            assert await read_sets(mine, scopes) == [(0, []), (0, [])]
        version = 0
        rounds = iter(range(100))

        async def a_round() -> None:
            nonlocal version
            version = await commit_round(mine, version, f"round {next(rounds)}")

        await a_round()
        assert await read_sets(mine, scopes) == [(0, []), (0, [])]
        added = await Fragments(other, KEY).add("use the staging database")
        await a_round()
        assert await read_sets(mine, scopes) == [(1, [added]), (0, [])]
        assert await read_sets(mine, scopes) == [(1, [added]), (0, [])]
        disabled = await Fragments(other, KEY).disable(added.id)
        assert await read_sets(mine, scopes) == [(2, [disabled]), (0, [])]
        rule = await Fragments(mine, KEY).add("shared rule", scope="project")
        await a_round()
        assert await read_sets(mine, scopes) == [(2, [disabled]), (1, [rule])]
        await other.purge(KEY)
        assert await read_sets(mine, scopes) == [(0, []), (1, [rule])]
        again = await Fragments(mine, KEY).add("a new note")
        assert await read_sets(mine, scopes) == [(1, [again]), (1, [rule])]
        assert await read_sets(other, scopes) == await read_sets(mine, scopes)
    finally:
        await mine.aclose()
        await other.aclose()


async def test_sqlite_sets_see_a_commit_landing_right_after_an_own_commit(
    tmp_path: Path,
) -> None:
    """The wal-index header kept across an own commit never hides another writer's commit.

    A round commit keeps the cached data version when the header's change counter moved by
    its own commit alone. Here the steps around it (header inside the write transaction,
    commit, `committed`) are taken by hand, with another connection's fragment write put in
    the gap between the commit and the header read after it.
    """
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    mine, other = open_store(url), open_store(url)
    assert isinstance(mine, SqliteStore) and isinstance(other, FragmentStore)
    scopes = (FragmentScope.of_session(KEY), FragmentScope.of_project(KEY.agent_id))
    try:
        await record(mine, Message.user("first"))
        for _ in range(2):
            assert await read_sets(mine, scopes) == [(0, []), (0, [])]
        await mine.commit(KEY, expected_version=1, events=[], state=StoredState())
        assert mine._sets.clean is not None  # the round commit kept the version: no PRAGMA
        assert await read_sets(mine, scopes) == [(0, []), (0, [])]
        conn = mine._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE sessions SET version = version + 1")
        before = mine._sets.header()
        conn.commit()
        added = await Fragments(other, KEY).add("use the staging database")  # in the gap
        mine._sets.committed(before)
        assert await read_sets(mine, scopes) == [(1, [added]), (0, [])]
    finally:
        await mine.aclose()
        await other.aclose()


async def test_many_databases_opened_and_closed_keep_the_header_check(tmp_path: Path) -> None:
    """A process that opens and drops many databases keeps the lock-free header check.

    Each closed database's ``-shm`` file is deleted by SQLite; the descriptor and mapping
    kept for it are closed when the next file is mapped, so the fast path does not run out
    after the kept maximum (64) of files.
    """
    scopes = (FragmentScope.of_session(KEY), FragmentScope.of_project(KEY.agent_id))
    for i in range(3 * 64):
        store = open_store(f"sqlite:///{tmp_path / f'db{i}.db'}")
        assert isinstance(store, SqliteStore)
        try:
            await record(store, Message.user("first"))
            assert store._sets.shm is not None  # the header is mapped, not the fallback
            assert await read_sets(store, scopes) == [(0, []), (0, [])]
        finally:
            await store.aclose()


async def test_sqlite_sets_match_a_fresh_read_whatever_the_order_of_writes(
    tmp_path: Path,
) -> None:
    """Reads answered from the header check equal a cache-free read after any mix of writes.

    Own round commits, own fragment writes and another connection's writes and purges come
    in a random (seeded) order; after about half of them, this store's answers (twice: the
    repeated one takes the lock-free path) are compared with a store opened for that read.
    """
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    mine, other = open_store(url), open_store(url)
    assert isinstance(mine, FragmentStore) and isinstance(other, FragmentStore)
    scopes = (FragmentScope.of_session(KEY), FragmentScope.of_project(KEY.agent_id))
    chooser = random.Random(7)
    version = 0
    try:
        for step in range(60):
            action = chooser.choice(["round", "round", "mine", "other", "other", "purge"])
            if action == "round":
                version = await commit_round(mine, version, f"round {step}")
            elif action == "purge":
                await other.purge(KEY)
                version = 0
            else:
                writer = mine if action == "mine" else other
                await Fragments(writer, KEY).add(f"note {step}", scope=chooser.choice(SCOPES))
            if chooser.random() < 0.5:
                continue  # the next writes land before this store looks again
            fresh = open_store(url)
            assert isinstance(fresh, FragmentStore)
            try:
                expected = await read_sets(fresh, scopes)
            finally:
                await fresh.aclose()
            for _ in range(2):  # the second read is the one answered without a lock
                assert await read_sets(mine, scopes) == expected, (step, action)
    finally:
        await mine.aclose()
        await other.aclose()


async def test_one_fragment_is_read_with_its_set_version(fstore: SessionStore) -> None:
    """Writes check the set version and read the one fragment they change, not the set."""
    assert isinstance(fstore, ReadsOneFragment)
    scope = FragmentScope.of_session(KEY)
    assert await fstore.fragment(scope, "f-none") == (0, None)
    fragments = Fragments(fstore, KEY)
    note = await fragments.add("a note")
    await fragments.add("another note")
    assert await fstore.fragment(scope, note.id) == (2, note)
    assert await fstore.fragment(scope, "f-none") == (2, None)
    edited = await fragments.edit(note.id, content="a revised note", expected_version=2)
    assert await fstore.fragment(scope, note.id) == (3, edited)
    with pytest.raises(StateConflict):
        await fragments.disable(note.id, expected_version=2)
    assert (await fragments.get(note.id)).content == "a revised note"


async def test_search_answers_in_the_listing_order_without_removed_ones(
    fstore: SessionStore,
) -> None:
    """Search finds added fragments, edited and plain history messages, listed in model order."""
    asked = Message.user("how is the invoice total rounded?")
    answered = Message.assistant("the invoice total uses floats")
    unrelated = Message.user("thanks")
    await record(fstore, asked, answered, unrelated)
    fragments = Fragments(fstore, KEY)
    note = await fragments.add("invoice totals are Decimal")
    rule = await fragments.add("round invoice totals half-even", kind="system", scope="project")
    gone = await fragments.add("an old invoice note")
    await fragments.remove(gone.id)
    await fragments.edit(answered.id, content="the invoice total uses Decimal")
    found = await fragments.search("invoice")
    assert [f.id for f in found] == [rule.id, asked.id, answered.id, note.id]
    assert [f.id for f in await fragments.search("invoice decimal")] == [answered.id, note.id]
    assert [f.id for f in await fragments.search("invoice", scope="project")] == [rule.id]
    assert [f.id for f in await fragments.search("invoice", limit=2)] == [rule.id, asked.id]


async def test_a_set_read_after_writes_equals_a_fresh_stores_read(
    fstore: SessionStore, store_url: str
) -> None:
    """What a store keeps of its own writes is exactly what a newly opened store reads."""
    assert isinstance(fstore, FragmentStore)
    scope = FragmentScope.of_session(KEY)
    fragments = Fragments(fstore, KEY)
    first = await fragments.add("one")
    await fstore.fragments(scope)  # cached now: the writes below update it in place
    second = await fragments.add("two", position=0)
    await fragments.edit(first.id, content="one, revised")
    await fragments.disable(second.id)
    await fragments.add("three")
    ours = await fstore.fragments(scope)
    fresh = open_store(store_url)
    try:
        assert isinstance(fresh, FragmentStore)
        assert ours == await fresh.fragments(scope)
    finally:
        await fresh.aclose()
    assert [f.content for f in ours[1]] == ["one, revised", "two", "three"]
