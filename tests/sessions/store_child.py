"""A child process for the durability and two-process tests (run as a script, not collected).

``python store_child.py rounds URL SESSION [N]`` resumes the session and commits rounds of three
events (forever, or N of them), printing ``committed <last seq> <version>`` after each commit returns — the
parent kills it with SIGKILL at a random moment.

``python store_child.py pair URL SESSION`` opens one store, commits a round of session
``SESSION-a``, then opens a second store on the same database in this process (as two agents
on one workspace do) and commits rounds of ``SESSION-a`` and ``SESSION-b`` on the two stores
side by side, forever, printing ``committed <session> <last seq> <version>`` after each.

``python store_child.py race URL SESSION`` loads the session, prints ``loaded <version>``,
waits for a line on stdin, commits one round and prints ``committed …`` or ``conflict``.
"""

from __future__ import annotations

import sys

import anyio

from harness.errors import StateConflict
from harness.messages import Message
from harness.sessions import (
    Event,
    MessageEvent,
    SessionKey,
    SessionStore,
    StoredState,
    ToolRunEvent,
    open_store,
)


def round_events(first_seq: int, tag: str) -> list[Event]:
    """Three events whose texts name the seq they will get, so the parent can check them."""
    return [
        MessageEvent(message=Message.user(f"seq {first_seq} {tag}")),
        MessageEvent(message=Message.assistant(f"seq {first_seq + 1} {tag}")),
        ToolRunEvent(name="probe", call_id=f"seq {first_seq + 2}", duration_s=0.0),
    ]


async def rounds(url: str, session: str, limit: int = 0) -> None:
    store = open_store(url)
    await commit_rounds(store, session, limit)
    await store.aclose()


async def commit_rounds(
    store: SessionStore, session: str, limit: int = 0, *, named: bool = False, pause: float = 0.0
) -> None:
    """Resume ``session`` and commit ``limit`` rounds (0: forever), reporting each."""
    key = SessionKey("durable", "agent", session)
    loaded = await store.load(key)
    state = StoredState() if loaded is None else loaded[0]
    listed = [s for s in await store.sessions(key.user_id) if s.session_id == session]
    seq = listed[0].events if listed else 0
    done = 0
    while limit == 0 or done < limit:
        done += 1
        events = round_events(seq + 1, "rounds")
        ids = [e.message.id for e in events if isinstance(e, MessageEvent)]
        state.working_ids = (*state.working_ids, *ids)
        state.version = await store.commit(
            key, expected_version=state.version, events=events, state=state
        )
        seq += len(events)
        print(f"committed {session + ' ' if named else ''}{seq} {state.version}", flush=True)
        await anyio.sleep(pause)


async def pair(url: str, session: str) -> None:
    first = open_store(url)
    await commit_rounds(first, f"{session}-a", 1, named=True)
    second = open_store(url)  # a second store on the file while the first one has it open
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: commit_rounds(first, f"{session}-a", named=True, pause=0.01))
        group.start_soon(lambda: commit_rounds(second, f"{session}-b", named=True, pause=0.01))


async def race(url: str, session: str) -> None:
    store = open_store(url)
    key = SessionKey("durable", "agent", session)
    loaded = await store.load(key)
    state = StoredState() if loaded is None else loaded[0]
    listed = [s for s in await store.sessions(key.user_id) if s.session_id == session]
    seq = listed[0].events if listed else 0
    print(f"loaded {state.version}", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    events = round_events(seq + 1, "race")
    try:
        version = await store.commit(
            key, expected_version=state.version, events=events, state=state
        )
    except StateConflict:
        print("conflict", flush=True)
    else:
        print(f"committed {seq + len(events)} {version}", flush=True)
    await store.aclose()


if __name__ == "__main__":
    mode, url, session = sys.argv[1:4]
    if mode == "rounds":
        anyio.run(rounds, url, session, int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    elif mode == "pair":
        anyio.run(pair, url, session)
    else:
        anyio.run(race, url, session)
