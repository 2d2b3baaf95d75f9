"""Two writers on one session: a retried turn is stored once; a running tool call is its owner's.

Two agents with their own store objects on one real SQLite file stand for two processes (and
one test runs a real child process); the store-level guarantees (a turn id logged once, on
SQLite and PostgreSQL) are in ``tests/sessions/test_contract.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import HarnessAgent, RuntimeContext, StateConflict
from harness.messages import Message
from harness.sessions import MessageEvent, SessionKey, StoredState, WarningEvent, open_store
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u1", session_id="s1")
KEY = SessionKey("u1", "agent", "s1")


async def user_turns(url: str) -> list[MessageEvent]:
    """Return the session's logged user messages, read by a new store object."""
    store = open_store(url)
    try:
        events = [e.event for e in await store.events(KEY, limit=1_000)]
    finally:
        await store.aclose()
    return [e for e in events if isinstance(e, MessageEvent) and e.message.role == "user"]


async def test_a_turn_retried_after_a_conflict_is_stored_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    other = open_store(url)  # another process's store on the same file

    async def probe() -> str:
        """Look around (meanwhile another writer commits the session)."""
        loaded = await other.load(KEY)
        assert loaded is not None
        state = loaded[0]
        await other.commit(
            KEY,
            expected_version=state.version,
            events=[WarningEvent(code="other", text="another writer")],
            state=state,
        )
        return "looked"

    model = ScriptedModel([ScriptedModel.tool_call("probe", {}), "lost", "done"])
    agent = HarnessAgent(model=model, tools=[probe], store=url)
    try:
        with pytest.raises(StateConflict):
            await agent.call("check the build", CTX)  # round 2's commit conflicts
        agent.tools.pop("probe")  # the retry must not commit behind our back again
        assert (await agent.call("check the build", CTX)).text == "done"
    finally:
        await other.aclose()
    (turn,) = await user_turns(url)
    assert turn.message.text == "check the build" and turn.turn_id == turn.message.id
    sent = model.agent_requests[-1].history
    assert [m.text for m in sent if m.role == "user"] == ["check the build"]


async def test_a_turn_id_retried_by_another_process_is_not_appended_again(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    ctx = RuntimeContext(user_id="u1", session_id="s1", turn_id="turn-1")
    first = HarnessAgent(model=ScriptedModel(["first answer"]), store=url)
    await first.call("what is 2 + 2?", ctx)  # committed; say its answer never reached the caller
    model = ScriptedModel(["second answer", "third answer"])
    second = HarnessAgent(model=model, store=url)  # another process, the same turn id
    assert (await second.call("what is 2 + 2?", ctx)).text == "second answer"
    (turn,) = await user_turns(url)
    assert turn.turn_id == turn.message.id == "turn-1"
    request = model.agent_requests[0]
    assert [m.text for m in request.history] == ["what is 2 + 2?", "first answer"]
    # A new turn (another id) with the same text is a new turn.
    await second.call("what is 2 + 2?", RuntimeContext(user_id="u1", session_id="s1"))
    assert len(await user_turns(url)) == 2


async def test_the_same_text_after_a_call_that_ended_well_is_a_new_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    agent = HarnessAgent(model=ScriptedModel(["one", "two"]), store=url)
    await agent.call("continue", CTX)
    await agent.call("continue", CTX)
    turns = await user_turns(url)
    assert [t.message.text for t in turns] == ["continue", "continue"]
    assert len({t.turn_id for t in turns}) == 2


async def test_the_store_refuses_a_turn_twice_even_without_the_agent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    await HarnessAgent(model=ScriptedModel(["ok"]), store=url).call(
        "hello", RuntimeContext(user_id="u1", session_id="s1", turn_id="t-1")
    )
    store = open_store(url)
    try:
        loaded = await store.load(KEY)
        assert loaded is not None
        again = Message.user("hello", id="t-1")
        with pytest.raises(StateConflict, match="holds the turn"):
            await store.commit(
                KEY,
                expected_version=loaded[0].version,
                events=[MessageEvent(message=again, turn_id="t-1")],
                state=StoredState(working_ids=loaded[0].working_ids),
            )
    finally:
        await store.aclose()
