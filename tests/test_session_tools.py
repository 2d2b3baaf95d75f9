"""SessionTools: session_history, session_search and session_list over a real SQLite store.

The store is filled through `SessionStore.commit` with the events the agent records; the
tools run through `Tool.run` (JSON arguments, as the agent calls them), with a `RunScope`
that carries the store and the calling user's `SessionKey`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from harness.errors import ConfigurationError
from harness.messages import Message, ToolCall
from harness.request import RunScope
from harness.sessions import (
    CompactionEvent,
    Event,
    MessageEvent,
    RewriteEvent,
    SessionKey,
    SessionStore,
    StoredState,
    ToolRunEvent,
    open_store,
)
from harness.state import AgentState
from harness.tools import Tool, ToolContext
from middleware import SessionTools

ALICE = SessionKey("alice", "agent", "s1")
ALICE_OTHER = SessionKey("alice", "agent", "s2")
BOB = SessionKey("bob", "agent", "s1")  # the same session id as Alice's, another user
LONG = "".join(f"line {i:05} of the test output\n" for i in range(600))  # 17,400 characters


async def record(store: SessionStore, key: SessionKey, events: list[Event], title: str) -> None:
    """Commit ``events`` as one round of a new session."""
    await store.commit(key, expected_version=0, events=events, state=StoredState(title=title))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = open_store(f"sqlite://{tmp_path / 'sessions.db'}")
    try:
        yield opened
    finally:
        await opened.aclose()


class Alice(msgspec.Struct):
    """The messages of Alice's session ``s1``."""

    user: Message
    call: Message
    result: Message
    trimmed: Message
    summary: Message


@pytest.fixture
async def alice(store: SessionStore) -> Alice:
    user = Message.user("The login test fails; please fix it.")
    call = Message.assistant(
        "Running the tests.", tool_calls=(ToolCall(id="call-1", name="run_tests"),)
    )
    result = Message.tool("call-1", LONG, name="run_tests")
    trimmed = result.revise("trim", content=LONG[:200] + "\n[… older tool output trimmed …]")
    summary = Message.user("[Summary: the login test fails because of an inverted comparison.]")
    events: list[Event] = [
        MessageEvent(message=user),
        MessageEvent(message=call),
        MessageEvent(message=result),
        ToolRunEvent(name="run_tests", call_id="call-1", duration_s=0.25),
        RewriteEvent(message=trimmed, original_id=result.id, how="trim"),
        CompactionEvent(summary=summary, replaced=(user.id, call.id)),
    ]
    await record(store, ALICE, events, "fix the login test")
    await record(
        store,
        ALICE_OTHER,
        [MessageEvent(message=Message.user("ログインのテストが失敗しました。修复登录测试。"))],
        "ログイン",
    )
    await record(
        store,
        BOB,
        [
            MessageEvent(
                message=Message.user("Bob's secret: the vault code is 4711 (금고 비밀번호).")
            )
        ],
        "bob's vault",
    )
    return Alice(user=user, call=call, result=result, trimmed=trimmed, summary=summary)


def tools(**options: object) -> dict[str, Tool]:
    return {t.name: t for t in SessionTools(**options).tools()}  # type: ignore[arg-type]


def context(store: SessionStore | None, key: SessionKey | None) -> ToolContext:
    return ToolContext(
        state=AgentState(session_id=key.session_id if key else ""),
        call=ToolCall(id="x", name="session_history"),
        run=RunScope(store=store, key=key),
        user_id=key.user_id if key else "",
        session_id=key.session_id if key else "",
    )


async def call(
    name: str,
    run_store: SessionStore | None,
    key: SessionKey | None,
    args: str = "{}",
    **options: object,
) -> str:
    return await tools(**options)[name].run(args, context(run_store, key))


# ------------------------------------------------------------------ the tools
def test_the_middleware_gives_three_tools_the_model_can_read() -> None:
    found = tools()
    assert sorted(found) == ["session_history", "session_list", "session_search"]
    history = found["session_history"].schema
    assert "summarised" in history.description and "replaced" in history.description
    assert set(history.parameters["properties"]) == {"offset", "limit", "text_offset"}
    assert "ctx" not in found["session_search"].schema.parameters["properties"]


@pytest.mark.parametrize(
    "options", [{"page_size": 0}, {"page_size": True}, {"max_chars": 10}, {"store": "sqlite://"}]
)
def test_bad_settings_are_refused_at_once(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        SessionTools(**options)  # type: ignore[arg-type]


async def test_history_shows_originals_copies_and_summaries_in_order(
    store: SessionStore, alice: Alice
) -> None:
    text = await call("session_history", store, ALICE)
    assert text.startswith("[Session record: entries 0–4; end of the record]")
    entries = re.findall(r"^#(\d+) \(seq (\d+)", text, flags=re.M)
    assert [int(i) for i, _ in entries] == [0, 1, 2, 3, 4]
    assert [int(s) for _, s in entries] == [1, 2, 3, 5, 6]  # the tool run (seq 4) is not a message
    assert alice.user.text in text and "calls run_tests({}) id call-1" in text
    assert f"trim copy {alice.trimmed.id} of {alice.result.id}" in text
    assert (
        f"summary {alice.summary.id} replacing 2 messages ({alice.user.id}, {alice.call.id})"
        in text
    )
    assert text.index(alice.user.id) < text.index(alice.result.id) < text.index(alice.summary.id)


async def test_a_long_original_is_cut_and_read_in_full_by_following_the_notes(
    store: SessionStore, alice: Alice
) -> None:
    page = await call("session_history", store, ALICE)
    assert "more characters; read on with session_history(offset=2, limit=1, text_offset=" in page
    pieces: list[str] = []
    args = '{"offset": 2, "limit": 1}'
    for _ in range(100):
        text = await call("session_history", store, ALICE, args)
        body = text.split(":\n", 1)[1]
        note = re.search(r"\n  \[… .*text_offset=(\d+)\) …\]$", body)
        if note is None:
            note_free = re.sub(r"\n  \[… from character [\d,]+ …\]$", "", body)
            pieces.append(note_free)
            break
        pieces.append(body[: note.start()])
        args = f'{{"offset": 2, "limit": 1, "text_offset": {note.group(1)}}}'
    rebuilt = "".join("\n".join(line[2:] for line in p.split("\n")) for p in pieces)
    assert rebuilt == LONG
    assert len(pieces) == len(LONG) // 4_000 + 1  # limit=1 gets the whole max_chars


async def test_history_pages_name_the_next_offset_and_cap_the_limit(
    store: SessionStore, alice: Alice
) -> None:
    first = await call("session_history", store, ALICE, '{"limit": 2}')
    assert first.startswith("[Session record: entries 0–1; next: session_history(offset=2)]")
    second = await call("session_history", store, ALICE, '{"offset": 2, "limit": 50}', page_size=2)
    assert second.startswith("[Session record: entries 2–3; next: session_history(offset=4)]")
    assert "(limit capped at 2)" in second
    past = await call("session_history", store, ALICE, '{"offset": 40}')
    assert "the record is shorter" in past


async def test_search_finds_cjk_text_in_the_users_sessions(
    store: SessionStore, alice: Alice
) -> None:
    for query in ("登录测试", "ログイン", "テスト 修复"):
        text = await call(
            "session_search", store, ALICE, msgspec.json.encode({"query": query}).decode()
        )
        assert text.startswith("1 hit(s)"), (query, text)
        assert "session 's2' (agent 'agent')" in text
    here = await call("session_search", store, ALICE, '{"query": "INVERTED comparison"}')
    assert "this session" in here and alice.summary.id in here


async def test_list_shows_titles_sizes_and_activity(store: SessionStore, alice: Alice) -> None:
    text = await call("session_list", store, ALICE)
    assert text.startswith("2 session(s)")
    assert "'s1' (this session), agent 'agent': fix the login test · 3 messages, 6 events" in text
    assert "'s2', agent 'agent': ログイン · 1 messages, 1 events" in text
    assert "last active 20" in text


# ------------------------------------------------------------------ isolation
async def test_another_users_session_is_indistinguishable_from_a_missing_one(
    store: SessionStore, alice: Alice
) -> None:
    bob_in_s2 = SessionKey("bob", "agent", "s2")  # only Alice has an s2
    nobody = SessionKey("bob", "agent", "never-recorded")
    for name, args in [("session_history", "{}"), ("session_history", '{"offset": 3}')]:
        theirs = await call(name, store, bob_in_s2, args)
        missing = await call(name, store, nobody, args)
        assert theirs == missing
        assert "ログイン" not in theirs
    bobs = await call("session_history", store, BOB)
    assert "vault code" in bobs and alice.user.text not in bobs and "login" not in bobs


async def test_search_and_list_never_reach_another_user(store: SessionStore, alice: Alice) -> None:
    for query in ("vault", "4711", "금고", "secret"):
        text = await call(
            "session_search", store, ALICE, msgspec.json.encode({"query": query}).decode()
        )
        assert text == f"No message of your sessions matches {query!r}."
    bob_search = await call("session_search", store, BOB, '{"query": "login"}')
    assert bob_search.startswith("No message")
    bob_list = await call("session_list", store, BOB)
    assert bob_list.startswith("1 session(s)") and "bob's vault" in bob_list
    assert "fix the login test" not in bob_list and "ログイン" not in bob_list
    stranger = await call("session_list", store, SessionKey("carol", "agent", "s1"))
    assert stranger == "You have no recorded sessions yet."


# ------------------------------------------------------------------ errors as text
@pytest.mark.parametrize(
    ("name", "args", "says"),
    [
        ("session_history", '{"offset": -1}', "offset must be a whole number ≥ 0"),
        ("session_history", '{"limit": 0}', "limit must be a whole number ≥ 1"),
        ("session_history", '{"text_offset": -5}', "text_offset must be"),
        ("session_history", '{"offset": "three"}', "invalid arguments for session_history"),
        ("session_history", '{"page": 2}', "invalid arguments for session_history"),
        ("session_history", "not json", "invalid arguments"),
        ("session_search", "{}", "invalid arguments for session_search"),
        ("session_search", '{"query": "   "}', "query must be a non-empty text"),
        (
            "session_search",
            '{"query": "x", "limit": 500}',
            "limit must be a whole number from 1 to 50",
        ),
        (
            "session_search",
            '{"query": "x", "limit": 0}',
            "limit must be a whole number from 1 to 50",
        ),
        ("session_list", '{"user": "bob"}', "invalid arguments for session_list"),
    ],
)
async def test_bad_arguments_are_an_error_text_for_the_model(
    store: SessionStore, alice: Alice, name: str, args: str, says: str
) -> None:
    text = await call(name, store, ALICE, args)
    assert text.startswith("Error: ") and says in text


async def test_bad_arguments_called_directly_are_an_error_text_too(store: SessionStore) -> None:
    fn = tools()["session_history"].fn
    text = await fn(context(store, ALICE), offset=-3)
    assert text.startswith("Error: offset must be")


@pytest.mark.parametrize("name", ["session_history", "session_search", "session_list"])
async def test_without_a_store_or_key_the_tools_say_there_is_no_record(
    store: SessionStore, name: str
) -> None:
    args = '{"query": "login"}' if name == "session_search" else "{}"
    for answer in (await call(name, None, ALICE, args), await call(name, store, None, args)):
        assert answer.startswith("Error: this agent keeps no session record")


async def test_a_store_that_cannot_be_read_is_an_error_text(tmp_path: Path) -> None:
    broken = open_store(f"sqlite://{tmp_path}")  # a folder, not a database file
    try:
        for name in ("session_history", "session_list"):
            text = await call(name, broken, ALICE)
            assert text.startswith("Error: the session record cannot be read right now")
    finally:
        await broken.aclose()


async def test_a_store_given_to_the_middleware_wins_over_the_runs(
    store: SessionStore, alice: Alice, tmp_path: Path
) -> None:
    empty = open_store(f"sqlite://{tmp_path / 'other.db'}")
    try:
        text = await call("session_history", empty, ALICE, store=store)
        assert alice.user.text in text
        assert await call("session_history", empty, ALICE) == (
            "This session has no recorded messages yet."
        )
    finally:
        await empty.aclose()


# ------------------------------------------------------------------ through the agent
async def test_the_agent_records_and_its_model_reads_the_record_through_the_tools(
    tmp_path: Path,
) -> None:
    from harness import HarnessAgent, RuntimeContext
    from middleware import default_stack
    from providers import ScriptedModel

    def agent(model: ScriptedModel) -> HarnessAgent:
        return HarnessAgent(
            model=model,
            stack=[*default_stack(), SessionTools()],
            workspace=str(tmp_path),
            agent_id="agent",
        )

    tool = ScriptedModel.tool_call
    alice_model = ScriptedModel(
        [
            tool("session_history", {}),
            tool("session_search", {"query": "登录测试"}),
            tool("session_list", {}),
            "done",
        ]
    )
    alice = agent(alice_model)
    ctx = RuntimeContext(user_id="alice", session_id="s1")
    try:
        await alice.call("请修复登录测试 (ALICE-SECRET)", ctx)
        results = [m.text for m in await alice.history(ctx) if m.role == "tool"]
    finally:
        await alice.store.aclose()
    history, search, listing = results
    assert history.startswith("[Session record: entries 0–1; end of the record]")
    assert "请修复登录测试 (ALICE-SECRET)" in history and "calls session_history({})" in history
    # The user's message, and the session_history result that quoted it (also recorded).
    assert search.startswith("2 hit(s)") and search.count("- this session") == 2
    assert ", user message " in search and ", tool message " in search
    assert listing.startswith("1 session(s)") and "'s1' (this session)" in listing
    assert (tmp_path / ".harness" / "sessions.db").is_file()

    bob_model = ScriptedModel(
        [tool("session_search", {"query": "ALICE-SECRET"}), tool("session_history", {}), "ok"]
    )
    bob = agent(bob_model)
    bob_ctx = RuntimeContext(user_id="bob", session_id="s1")
    try:
        await bob.call("hello", bob_ctx)
        bob_search, bob_history = [m.text for m in await bob.history(bob_ctx) if m.role == "tool"]
    finally:
        await bob.store.aclose()
    # Bob's only hit is his own tool call naming the query; Alice's message never shows.
    assert bob_search.startswith("1 hit(s)") and ", assistant message " in bob_search
    assert "user message" not in bob_search and "请修复" not in bob_search
    assert "hello" in bob_history and "(ALICE-SECRET)" not in bob_history
    assert "登录" not in bob_history
