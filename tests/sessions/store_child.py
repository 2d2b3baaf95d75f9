"""A child process for the durability and two-process tests (run as a script, not collected).

``python store_child.py rounds URL SESSION [N]`` resumes the session and commits rounds of three
events (forever, or N of them), printing ``committed <last seq> <version>`` after each commit returns — the
parent kills it with SIGKILL at a random moment.

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
        print(f"committed {seq} {state.version}", flush=True)
    await store.aclose()


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
    else:
        anyio.run(race, url, session)
