"""A session without a user id is its own scope: search and listing see that session alone.

Two anonymous sessions (and, as a control, one of a named user) hold distinct secrets, on
a SQLite file and on a real PostgreSQL server. Each anonymous session's ``session_search``
and ``session_list`` (the tools the model calls) find its own secret and nothing of the
other's; a named user still sees all of that user's sessions.
"""

from __future__ import annotations

import json
import uuid

from harness.messages import Message, ToolCall
from harness.request import RunScope
from harness.sessions import MessageEvent, SessionKey, SessionStore, StoredState
from harness.state import AgentState
from harness.tools import ToolContext
from middleware import SessionTools

ONE = SessionKey("", "agent", "anon-1")
TWO = SessionKey("", "agent", "anon-2")
TWO_OTHER_AGENT = SessionKey("", "other-agent", "anon-1")  # same session id, another agent
CAROL = SessionKey("carol", "agent", "c1")
CAROL_2 = SessionKey("carol", "agent", "c2")


async def run_tool(store: SessionStore, key: SessionKey, name: str, args: dict[str, object]) -> str:
    tools = {t.name: t for t in SessionTools().tools()}
    ctx = ToolContext(
        state=AgentState(session_id=key.session_id),
        call=ToolCall(id="x", name=name),
        run=RunScope(store=store, key=key),
        user_id=key.user_id,
        session_id=key.session_id,
    )
    return await tools[name].run(json.dumps(args), ctx)


async def test_anonymous_sessions_search_and_list_only_themselves(store: SessionStore) -> None:
    secrets = {key: f"walrus{uuid.uuid4().hex[:10]}" for key in (ONE, TWO, TWO_OTHER_AGENT)}
    secrets[CAROL] = secrets[CAROL_2] = f"walrus{uuid.uuid4().hex[:10]}"
    for key, secret in secrets.items():
        events = [MessageEvent(message=Message.user(f"the walrus code is {secret}"))]
        await store.commit(
            key, expected_version=0, events=events, state=StoredState(title=f"title {secret}")
        )
    for key in (ONE, TWO, TWO_OTHER_AGENT):
        others = [s for k, s in secrets.items() if k != key]
        for query in ("walrus", "walrus code", "wa"):  # indexed, several terms, short (LIKE)
            found = await run_tool(store, key, "session_search", {"query": query, "limit": 50})
            assert secrets[key] in found, (key, query, found)
            assert not any(s in found for s in others), (key, query, found)
        listed = await run_tool(store, key, "session_list", {})
        assert listed.startswith("1 session(s)") and secrets[key] in listed, listed
        assert not any(s in listed for s in others), listed
    # A named user still sees every session of theirs.
    found = await run_tool(store, CAROL, "session_search", {"query": "walrus", "limit": 50})
    assert "'c2'" in found and secrets[ONE] not in found
    assert (await run_tool(store, CAROL, "session_list", {})).startswith("2 session(s)")


async def test_within_narrows_the_store_to_one_session(store: SessionStore) -> None:
    for key in (ONE, TWO, CAROL):
        events = [MessageEvent(message=Message.user(f"hello from {key.session_id}"))]
        await store.commit(key, expected_version=0, events=events, state=StoredState())
    hits = await store.search("", "hello", within=ONE)
    assert [h.session_id for h in hits] == ["anon-1"]
    assert [i.session_id for i in await store.sessions("", within=TWO)] == ["anon-2"]
    # A key of another user than the one asked for finds nothing.
    assert await store.search("", "hello", within=CAROL) == []
    assert await store.sessions("carol", within=ONE) == []
    # Without it, the operator's view (the CLI) still lists by user id.
    assert len(await store.sessions("")) == 2
