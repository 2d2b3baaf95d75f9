"""What both backends build from their rows alike (`harness.sessions._rows`), on each backend."""

from __future__ import annotations

from harness.messages import Message
from harness.sessions import MessageEvent, SessionKey, SessionStore, StoredState

KEY = SessionKey("alice", "agent", "rows")


async def test_a_relogged_id_resolves_to_its_latest_event_in_the_order_asked(
    store: SessionStore,
) -> None:
    messages = [Message.user(f"m{n}") for n in range(1200)]  # more ids than one IN (…) query
    ids = tuple(m.id for m in messages)
    await store.commit(
        KEY,
        expected_version=0,
        events=[MessageEvent(message=m) for m in messages],
        state=StoredState(working_ids=ids, unchanged=0),
    )
    again = Message.user("m700, logged again", id=ids[700])
    await store.commit(
        KEY,
        expected_version=1,
        events=[MessageEvent(message=again)],
        state=StoredState(working_ids=ids, unchanged=len(ids)),
    )

    loaded = await store.load(KEY)
    assert loaded is not None
    state, found = loaded
    assert state.working_ids == ids
    assert list(found) == list(ids)
    assert found[ids[700]] == again
    assert found[ids[699]] == messages[699]
    asked = [ids[1100], "no-such-id", ids[700], ids[3]]
    assert list(await store.messages(KEY, asked)) == [ids[1100], ids[700], ids[3]]
    assert (await store.messages(KEY, asked))[ids[700]] == again
