"""SQLite's commit path: on the event loop when nothing can make it wait, else in a worker thread.

A commit runs on the calling thread only while the write lock is free; when another
connection holds it, the commit must wait for it in a worker thread (the loop keeps running)
and then succeed. SQLite's automatic WAL checkpoint is off on the store's connection, so the
store must checkpoint itself: the WAL stops growing with the number of commits.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio

from harness.messages import Message
from harness.sessions import MessageEvent, SessionKey, StoredState, open_store
from harness.sessions.sqlite import CHECKPOINT_EVERY

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
