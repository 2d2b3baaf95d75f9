"""SQLite's commit path: on the event loop when nothing can make it wait, else in a worker thread.

A commit runs on the calling thread only while the write lock is free; when another
connection holds it, the commit must wait for it in a worker thread (the loop keeps running)
and then succeed. SQLite's automatic WAL checkpoint is off on the store's connection, so the
store must checkpoint itself: the WAL stops growing with the number of commits. The working
ids are rows written as changes (`StoredState.unchanged`); that they always load back whole
is part of the store contract (tests/sessions/test_contract.py).
Sessions committing side by side commit in worker threads (overlapping with the others'
work on the loop); one session alone commits on the loop.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import msgspec

from harness.messages import Message
from harness.sessions import MessageEvent, SessionKey, StoredState, open_store
from harness.sessions.recorder import SessionRecorder
from harness.sessions.sqlite.store import CHECKPOINT_EVERY, SqliteStore

KEY = SessionKey("u", "agent", "s")


def _round(i: int) -> list[MessageEvent]:
    return [MessageEvent(message=Message.user(f"round {i} " + "text " * 40, id=f"m{i}"))]


async def test_a_commit_waits_for_another_writer_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    store = open_store(f"sqlite:///{path}")
    version = await store.commit(KEY, expected_version=0, events=_round(0), state=StoredState())
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    ticks = 0
    done: list[int] = []

    async def commit() -> None:
        state = StoredState(working_ids=("m0", "m1"))
        done.append(
            await store.commit(KEY, expected_version=version, events=_round(1), state=state)
        )

    try:
        with anyio.fail_after(5):  # a commit waiting on the loop thread would block it 30 s
            async with anyio.create_task_group() as tg:
                tg.start_soon(commit)
                for _ in range(20):  # the loop runs while the commit waits
                    await anyio.sleep(0.01)
                    ticks += 1
                assert done == []
                other.rollback()
    finally:
        other.close()
    assert ticks == 20 and done == [version + 1]
    loaded = await store.load(KEY)
    assert loaded is not None and loaded[0].working_ids == ("m0", "m1")
    assert len(await store.events(KEY, limit=10)) == 2
    await store.aclose()


async def test_the_wal_is_checkpointed_by_the_store(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    wal = anyio.Path(f"{path}-wal")
    store = open_store(f"sqlite:///{path}")
    version = 0
    sizes: list[int] = []
    for i in range(3 * CHECKPOINT_EVERY):
        state = StoredState(working_ids=(f"m{i}",))
        version = await store.commit(KEY, expected_version=version, events=_round(i), state=state)
        if i in (CHECKPOINT_EVERY - 2, 3 * CHECKPOINT_EVERY - 1):
            sizes.append((await wal.stat()).st_size)
    # Without checkpoints the WAL would hold every commit (3× the first size); after one it
    # is written again from its start.
    assert sizes[1] < 1.5 * sizes[0]
    assert len(await store.events(KEY, limit=10_000)) == 3 * CHECKPOINT_EVERY
    await store.aclose()


async def test_a_session_stored_before_version_5_moves_its_ids_to_rows(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = open_store(f"sqlite:///{path}")
    await store.commit(KEY, expected_version=0, events=_round(0), state=StoredState())
    await store.aclose()
    with sqlite3.connect(path) as conn:  # as version 4 wrote it: the ids in the state blob
        blob = msgspec.json.encode(StoredState(working_ids=("m0", "x", "y")))
        conn.execute("UPDATE sessions SET state = ?, working_n = NULL", (blob,))
        conn.execute("DELETE FROM working")
    conn.close()
    store = open_store(f"sqlite:///{path}")
    loaded = await store.load(KEY)
    assert loaded is not None and loaded[0].working_ids == ("m0", "x", "y")
    state = StoredState(working_ids=("m0", "x", "y", "m1"), unchanged=3)
    await store.commit(KEY, expected_version=1, events=_round(1), state=state)
    loaded = await store.load(KEY)
    assert loaded is not None and loaded[0].working_ids == ("m0", "x", "y", "m1")
    await store.aclose()


async def test_a_recorder_whose_ids_did_not_all_resolve_rewrites_them(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    state = StoredState(working_ids=("m0", "ghost", "m1"))
    events = [*_round(0), *_round(1)]
    await store.commit(KEY, expected_version=0, events=events, state=state)
    recorder, agent_state = await SessionRecorder.load(store, KEY)
    assert [m.id for m in agent_state.working_history] == ["m0", "m1"]
    agent_state.append(Message.user("next", id="m2"))
    await recorder.commit(agent_state)
    loaded = await store.load(KEY)
    assert loaded is not None and loaded[0].working_ids == ("m0", "m1", "m2")
    await store.aclose()


async def test_one_session_commits_on_the_loop_and_sessions_side_by_side_in_a_thread(
    tmp_path: Path,
) -> None:
    # Which thread runs each commit's INSERT INTO events, seen by SQLite's own trace hook.
    store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
    versions = {
        KEY: await store.commit(KEY, expected_version=0, events=_round(0), state=StoredState())
    }
    threads: list[int] = []
    assert isinstance(store, SqliteStore)
    conn = store._conn  # the store's one connection, open after the first commit
    assert conn is not None
    conn.set_trace_callback(
        lambda sql: threads.append(threading.get_ident()) if "INTO events" in sql else None
    )
    loop = threading.get_ident()

    async def commit(key: SessionKey, i: int) -> None:
        versions[key] = await store.commit(
            key, expected_version=versions.get(key, 0), events=_round(i), state=StoredState()
        )

    await anyio.sleep(0.1)  # the first commit is no longer "close together" with the next
    for i in range(1, 6):  # one session alone: every commit on the loop's thread
        await commit(KEY, i)
    assert threads == [loop] * 5

    threads.clear()
    other = SessionKey("u", "agent", "other")
    for i in range(6, 12):  # two sessions taking turns within SIDE_BY_SIDE_S: worker threads
        await commit(other if i % 2 else KEY, i)
    # (At most a commit slower than SIDE_BY_SIDE_S on a loaded machine may break the turns.)
    assert len(threads) == 6 and sum(t != loop for t in threads[1:]) >= 4

    threads.clear()
    await anyio.sleep(0.1)  # the other session went quiet: back on the loop
    await commit(KEY, 12)
    await commit(KEY, 13)
    assert threads == [loop, loop]
    await store.aclose()
