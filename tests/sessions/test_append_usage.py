"""`UsageStore.append_usage`: a request's usage joins the log after its round, on both backends.

The litellm proxy hook learns a request's usage only after the round that prepared it was
committed (litellm reports it to a logging callback). The record must land in the session's
log and usage rows without touching its state or version, so the next round's commit — from
the version it loaded before — goes through as if nothing had happened.
"""

from __future__ import annotations

import math

import anyio
import pytest

from harness.errors import InvalidInputError
from harness.manifest import Usage
from harness.messages import Message
from harness.sessions import (
    Event,
    MessageEvent,
    SessionKey,
    SessionStore,
    StoredState,
    UsageEvent,
    UsageStore,
)

KEY = SessionKey("alice", "litellm-proxy", "s1")


def round_of(n: int) -> list[Event]:
    return [
        MessageEvent(message=Message.user(f"question {n}")),
        MessageEvent(message=Message.assistant(f"answer {n}")),
    ]


def usage_of(
    call_id: str, prompt: int = 1200, output: int = 35, cost: float | None = 2.1e-4
) -> UsageEvent:
    return UsageEvent(
        call_id=call_id,
        purpose="agent",
        model="gpt-4o-mini",
        usage=Usage(
            prompt_tokens=prompt,
            completion_tokens=output,
            total_tokens=prompt + output,
            cached_tokens=1024,
            reasoning_tokens=3,
            cost_usd=cost,
            cache_reported=True,
        ),
    )


def usage_store(store: SessionStore) -> UsageStore:
    assert isinstance(store, UsageStore)
    return store


async def test_usage_after_the_round_leaves_state_and_version_alone(store: SessionStore) -> None:
    state = StoredState(working_ids=(), title="first", extensions={"todos": []})
    assert await store.commit(KEY, expected_version=0, events=round_of(1), state=state) == 1
    before = await store.load(KEY)

    assert await usage_store(store).append_usage(KEY, usage_of("call-1")) is True

    assert await store.load(KEY) == before  # same state, same version
    found = await store.usage(KEY)
    (request,) = found.requests
    assert (request.seq, request.call_id, request.purpose, request.model) == (
        3,
        "call-1",
        "agent",
        "gpt-4o-mini",
    )
    assert request.usage.prompt_tokens == 1200 and request.usage.completion_tokens == 35
    assert (request.usage.cached_tokens, request.usage.reasoning_tokens) == (1024, 3)
    assert request.usage.cost_usd == pytest.approx(2.1e-4)
    # The next round commits from the version it loaded; its events follow the usage record.
    assert await store.commit(KEY, expected_version=1, events=round_of(2), state=state) == 2
    logged = await store.events(KEY, limit=100)
    assert [e.seq for e in logged] == [1, 2, 3, 4, 5]
    stored = logged[2].event
    assert isinstance(stored, UsageEvent) and stored.call_id == "call-1"
    assert stored.usage == usage_of("call-1").usage  # cache_reported included
    assert [type(e.event).__name__ for e in logged] == [
        "MessageEvent",
        "MessageEvent",
        "UsageEvent",
        "MessageEvent",
        "MessageEvent",
    ]
    assert [s.events for s in await store.sessions("alice")] == [5]


async def test_a_call_is_billed_once(store: SessionStore) -> None:
    await store.commit(KEY, expected_version=0, events=round_of(1), state=StoredState())
    target = usage_store(store)
    assert await target.append_usage(KEY, usage_of("call-1")) is True
    assert await target.append_usage(KEY, usage_of("call-1", prompt=9999)) is False
    assert await target.append_usage(KEY, usage_of("call-2", prompt=800, cost=None)) is True
    found = await store.usage(KEY)
    assert [(r.call_id, r.usage.prompt_tokens) for r in found.requests] == [
        ("call-1", 1200),
        ("call-2", 800),
    ]
    assert found.total.prompt_tokens == 2000
    assert found.total.cost_usd == pytest.approx(2.1e-4)  # the unpriced call adds nothing


async def test_no_session_no_record_and_other_users_stay_apart(store: SessionStore) -> None:
    await store.commit(KEY, expected_version=0, events=round_of(1), state=StoredState())
    target = usage_store(store)
    bob = SessionKey("bob", KEY.agent_id, KEY.session_id)
    assert await target.append_usage(bob, usage_of("call-1")) is False
    assert await target.append_usage(SessionKey("alice", "agent", "gone"), usage_of("c")) is False
    assert await store.sessions("bob") == []  # nothing created for bob
    assert await store.load(SessionKey("alice", "agent", "gone")) is None
    assert (await store.usage(KEY)).requests == ()
    assert await store.purge(KEY)
    assert await target.append_usage(KEY, usage_of("call-1")) is False  # a purged session
    assert await store.load(KEY) is None


async def test_usage_racing_rounds_keeps_the_log_gap_free(store: SessionStore) -> None:
    await store.commit(KEY, expected_version=0, events=round_of(0), state=StoredState())
    target = usage_store(store)

    async def rounds() -> None:
        for n in range(1, 9):
            await store.commit(KEY, expected_version=n, events=round_of(n), state=StoredState())

    async def usages() -> None:
        for n in range(8):
            assert await target.append_usage(KEY, usage_of(f"call-{n}"))

    async with anyio.create_task_group() as group:
        group.start_soon(rounds)
        group.start_soon(usages)

    logged = await store.events(KEY, limit=100)
    assert [e.seq for e in logged] == list(range(1, 2 * 9 + 8 + 1))
    found = await store.usage(KEY)
    assert [r.call_id for r in found.requests] == [f"call-{n}" for n in range(8)]
    usage_seqs = [e.seq for e in logged if isinstance(e.event, UsageEvent)]
    assert [r.seq for r in found.requests] == usage_seqs
    loaded = await store.load(KEY)
    assert loaded is not None and loaded[0].version == 9


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (usage_of(""), "empty call_id"),
        (UsageEvent(call_id="c", purpose="", model="m", usage=Usage()), "empty purpose"),
        (UsageEvent(call_id="c", purpose="agent", model="", usage=Usage()), "empty model"),
        (usage_of("c", prompt=-1), "prompt_tokens=-1"),
        (usage_of("c", cost=-0.5), "cost_usd=-0.5"),
        (usage_of("c", cost=math.nan), "cost_usd=nan"),
        (usage_of("c", cost=math.inf), "cost_usd=inf"),
    ],
)
async def test_a_bad_record_is_refused_and_nothing_written(
    store: SessionStore, bad: UsageEvent, named: str
) -> None:
    await store.commit(KEY, expected_version=0, events=round_of(1), state=StoredState())
    with pytest.raises(InvalidInputError) as refused:
        await usage_store(store).append_usage(KEY, bad)
    assert named in str(refused.value)
    assert (await store.usage(KEY)).requests == ()
    assert len(await store.events(KEY)) == 2


async def test_not_a_usage_event_is_refused(store: SessionStore) -> None:
    await store.commit(KEY, expected_version=0, events=round_of(1), state=StoredState())
    with pytest.raises(InvalidInputError, match="takes a UsageEvent, got MessageEvent"):
        await usage_store(store).append_usage(KEY, round_of(2)[0])  # type: ignore[arg-type]
    assert len(await store.events(KEY)) == 2
