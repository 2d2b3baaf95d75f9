"""The Agents SDK's Session contract, on `HarnessSession` over SQLite and a real PostgreSQL.

The contract is what the SDK's own tests assert of its ``SQLiteSession``
(``tests/memory/test_session.py`` and ``test_session_limit.py`` in openai-agents-python):
items come back in the order they were added; ``get_items(limit)`` gives the newest ``limit``
items, oldest first (all of them when fewer, none for 0 or less); ``pop_item`` returns the
newest item and removes it (``None`` when empty); ``clear_session`` empties the session;
sessions with different ids do not see each other; unicode and SQL-looking text come back as
given; concurrent appends lose nothing; ``session_settings.limit`` is the default limit and an
explicit limit wins. Then our own promises: a new process (a new store object) resumes the
session, pop and clear keep the append-only log, sessions are user-scoped (no user id: its own
scope), and secrets are redacted before anything is stored.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from agents import TResponseInputItem
from agents.memory import Session, SessionSettings

from harness.adapters import HarnessSession
from harness.sessions import MessageEvent, RemovalEvent, SessionKey, SessionStore, open_store

pytestmark = pytest.mark.integration


def items(*pairs: tuple[str, str]) -> list[TResponseInputItem]:
    return [cast("TResponseInputItem", {"role": role, "content": text}) for role, text in pairs]


def contents(found: list[TResponseInputItem]) -> list[Any]:
    return [cast("dict[str, Any]", item).get("content") for item in found]


def test_it_is_an_sdk_session() -> None:
    session = HarnessSession("s", store="sqlite://")
    assert isinstance(session, Session)
    assert session.session_id == "s"
    assert session.session_settings is None


async def test_add_get_and_clear(store: SessionStore) -> None:
    session = HarnessSession("direct_test", store=store)
    await session.add_items(items(("user", "Hello"), ("assistant", "Hi there!")))
    retrieved = await session.get_items()
    assert [(i.get("role"), i.get("content")) for i in map(dict, retrieved)] == [
        ("user", "Hello"),
        ("assistant", "Hi there!"),
    ]
    await session.clear_session()
    assert await session.get_items() == []
    await session.clear_session()  # clearing an empty session is fine
    await session.add_items([])  # and so is adding nothing
    assert await session.get_items() == []


async def test_pop_item_returns_the_newest_until_empty(store: SessionStore) -> None:
    session = HarnessSession("pop_test", store=store)
    assert await session.pop_item() is None
    await session.add_items(
        items(("user", "Hello"), ("assistant", "Hi there!"), ("user", "How are you?"))
    )
    assert len(await session.get_items()) == 3
    popped = await session.pop_item()
    assert popped == {"role": "user", "content": "How are you?"}
    assert contents(await session.get_items()) == ["Hello", "Hi there!"]
    assert await session.pop_item() == {"role": "assistant", "content": "Hi there!"}
    assert await session.pop_item() == {"role": "user", "content": "Hello"}
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_sessions_are_separate(store: SessionStore) -> None:
    one = HarnessSession("session_1", store=store)
    two = HarnessSession("session_2", store=store)
    await one.add_items(items(("user", "Session 1 message")))
    await two.add_items(items(("user", "Session 2 message 1"), ("user", "Session 2 message 2")))
    popped = await two.pop_item()
    assert popped is not None and popped.get("content") == "Session 2 message 2"
    assert contents(await one.get_items()) == ["Session 1 message"]
    assert contents(await two.get_items()) == ["Session 2 message 1"]


async def test_get_items_with_limit(store: SessionStore) -> None:
    session = HarnessSession("count_test", store=store)
    texts = ["Message 1", "Response 1", "Message 2", "Response 2", "Message 3", "Response 3"]
    await session.add_items(
        items(*((("user" if i % 2 == 0 else "assistant"), t) for i, t in enumerate(texts)))
    )
    assert contents(await session.get_items()) == texts
    assert contents(await session.get_items(limit=2)) == texts[-2:]
    assert contents(await session.get_items(limit=4)) == texts[-4:]
    assert contents(await session.get_items(limit=10)) == texts
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == []


async def test_session_settings_limit_is_the_default_and_an_explicit_limit_wins(
    store: SessionStore,
) -> None:
    session = HarnessSession("settings", store=store, session_settings=SessionSettings(limit=3))
    await session.add_items(items(*(("user", f"Message {i}") for i in range(10))))
    assert contents(await session.get_items()) == ["Message 7", "Message 8", "Message 9"]
    assert contents(await session.get_items(limit=2)) == ["Message 8", "Message 9"]


async def test_unicode_and_sql_looking_text_come_back_as_given(store: SessionStore) -> None:
    session = HarnessSession("special_chars_test", store=store)
    texts = [
        "こんにちは",
        "😊👍",
        "Привет",
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
    ]
    await session.add_items(items(*(("user", t) for t in texts)))
    assert contents(await session.get_items()) == texts


async def test_concurrent_appends_lose_nothing(store: SessionStore) -> None:
    # Ten writers, each with its own session object on the same session: every commit that
    # lost the race (StateConflict) is tried again on the new state.
    async def add(i: int) -> None:
        await HarnessSession("concurrent_test", store=store).add_items(
            items(("user", f"Message {i}"))
        )

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(add, i)
    found = contents(await HarnessSession("concurrent_test", store=store).get_items())
    assert sorted(found) == sorted(f"Message {i}" for i in range(10))


async def test_items_of_every_kind_round_trip(store: SessionStore) -> None:
    # What a Runner stores for a tool-using turn: the input, the model's call, the result,
    # a reasoning item and the answer (output messages carry content parts, ids and status).
    turn: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "look it up"}],
            "encrypted_content": "gAAAAAB" + "x" * 40,
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
            "id": "fc_1",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 °C"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Sunny in Paris.", "annotations": []}],
        },
    ]
    session = HarnessSession("kinds", store=store)
    await session.add_items(cast("list[TResponseInputItem]", turn))
    assert await session.get_items() == turn
    # the logged messages mirror the items, so the store's search finds them
    logged = [
        e.event.message
        for e in await store.events(session.key, kinds=["message"])
        if isinstance(e.event, MessageEvent)
    ]
    assert [m.role for m in logged] == ["user", "assistant", "assistant", "tool", "assistant"]
    assert logged[2].tool_calls[0].name == "get_weather"
    assert logged[3].tool_call_id == "call_1"
    assert [hit.message_id for hit in await store.search("", "Paris", within=session.key)]


async def test_a_new_store_resumes_the_session(store_url: str) -> None:
    async with HarnessSession("resume", store=store_url, user_id="alice") as first:
        await first.add_items(items(("user", "remember 42"), ("assistant", "ok")))
    async with HarnessSession("resume", store=store_url, user_id="alice") as again:
        assert contents(await again.get_items()) == ["remember 42", "ok"]
        await again.add_items(items(("user", "what number?")))
        assert contents(await again.get_items()) == ["remember 42", "ok", "what number?"]


async def test_pop_and_clear_keep_the_append_only_log(store: SessionStore) -> None:
    session = HarnessSession("log", store=store, user_id="alice")
    await session.add_items(items(("user", "a"), ("assistant", "b"), ("user", "c")))
    await session.pop_item()
    await session.clear_session()
    await session.add_items(items(("user", "d")))
    assert contents(await session.get_items()) == ["d"]
    logged = [e.event for e in await store.events(session.key)]
    texts = [e.message.text for e in logged if isinstance(e, MessageEvent)]
    assert texts == ["a", "b", "c", "d"]  # nothing left the log
    removals = [e for e in logged if isinstance(e, RemovalEvent)]
    assert [(r.how, len(r.message_ids)) for r in removals] == [
        ("pop_item", 1),
        ("clear_session", 2),
    ]
    ids = [e.message.id for e in logged if isinstance(e, MessageEvent)]
    assert removals[0].message_ids == (ids[2],)
    assert removals[1].message_ids == (ids[0], ids[1])
    # the full record, read on demand, still holds every message
    assert set(await store.messages(session.key, ids)) == set(ids)


async def test_sessions_are_user_scoped_and_anonymous_ones_their_own_scope(
    store: SessionStore,
) -> None:
    alice = HarnessSession("shared-id", store=store, user_id="alice")
    bob = HarnessSession("shared-id", store=store, user_id="bob")
    anonymous = HarnessSession("shared-id", store=store)
    other_agent = HarnessSession("shared-id", store=store, user_id="alice", agent_id="other")
    await alice.add_items(items(("user", "alice's secret plan")))
    await anonymous.add_items(items(("user", "anonymous note")))
    assert await bob.get_items() == []
    assert await other_agent.get_items() == []
    assert contents(await anonymous.get_items()) == ["anonymous note"]
    assert await bob.pop_item() is None
    await bob.clear_session()
    assert contents(await alice.get_items()) == ["alice's secret plan"]
    assert await store.search("bob", "plan") == []
    # an anonymous session's own reads find only itself, never a named user's session
    assert [h.session_id for h in await store.search("", "note", within=anonymous.key)] == [
        "shared-id"
    ]
    assert await store.search("", "plan", within=anonymous.key) == []


SECRET = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2


async def test_secrets_are_redacted_before_anything_is_stored(
    store: SessionStore, store_url: str
) -> None:
    session = HarnessSession("secrets", store=store, user_id="alice")
    await session.add_items(
        cast(
            "list[TResponseInputItem]",
            [
                {"role": "user", "content": f"my key is {SECRET}"},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "login",
                    "arguments": json.dumps({"user": "alice", "password": "hunter2-Xq9!"}),
                },
                {"type": "function_call_output", "call_id": "call_1", "output": f"token={SECRET}"},
            ],
        )
    )
    found = [cast("dict[str, Any]", i) for i in await session.get_items()]
    assert SECRET not in json.dumps(found)
    assert "[REDACTED:" in found[0]["content"]
    arguments = json.loads(found[1]["arguments"])  # still JSON
    assert arguments["user"] == "alice" and "hunter2" not in arguments["password"]
    assert found[1]["call_id"] == "call_1"  # shape keys stay
    # and at rest: the stored bytes never held them
    if store_url.startswith("sqlite://"):
        await store.aclose()
        path = store_url.removeprefix("sqlite://")
        with sqlite3.connect(path) as db:
            dump = "\n".join(db.iterdump())
        assert SECRET not in dump and "hunter2" not in dump
    else:
        dump = json.dumps([str(e) for e in await store.events(session.key)])
        assert SECRET not in dump and "hunter2" not in dump


async def test_bad_items_are_refused_and_nothing_is_stored(store: SessionStore) -> None:
    from harness.errors import InvalidInputError

    session = HarnessSession("bad", store=store)
    with pytest.raises(InvalidInputError, match=r"items\[1\]"):
        await session.add_items(cast("list[TResponseInputItem]", [{"role": "user"}, "text"]))
    assert await store.load(SessionKey("", "agents-sdk", "bad")) is None


def test_it_says_what_to_pass() -> None:
    from harness.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="session_id"):
        HarnessSession("", store="sqlite://")
    with pytest.raises(ConfigurationError, match="SessionStore or a URL"):
        HarnessSession("s", store=cast("Any", 42))
    assert open_store("sqlite://") is not None


def test_the_cli_shows_the_items_and_the_removals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli.main import main

    url = f"sqlite://{tmp_path / 'sessions.db'}"

    async def write() -> None:
        async with HarnessSession("cli", store=url, user_id="alice") as session:
            await session.add_items(items(("user", "first words"), ("assistant", "noted")))
            await session.pop_item()

    anyio.run(write)
    argv = ["sessions", "show", "--store", url, "--user", "alice", "--agent", "agents-sdk"]
    assert main([*argv, "--session", "cli"]) == 0
    shown = capsys.readouterr().out
    assert "first words" in shown and "noted" in shown
    assert "removal" in shown and "pop_item: 1 message left the working history" in shown
