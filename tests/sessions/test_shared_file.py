"""Nothing lost on a shared SQLite file: several stores per process, other processes, the CLI.

On POSIX, closing any descriptor of a file releases every ``fcntl`` lock the process holds on
it, a live SQLite connection's included. A second store opening the file beside a first one
(it used to open and close the file to check it was readable) released the first one's
shared lock; the next program to close the database took itself for the last user,
checkpointed and deleted the WAL, and the first store's later commits went to the deleted
WAL: acknowledged, never readable. A database deleted or replaced under a running store is
reported (`StoreFileLost`) instead of taking commits into a file no one opens again.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from harness.errors import StoreFileLost
from harness.fragments.model import FragmentScope
from harness.messages import Message
from harness.sessions import MessageEvent, SessionKey, SessionStore, StoredState, open_store
from harness.sessions.store import FragmentStore

from .test_durability import PROJECT, _check_log, _committed, _spawn

KEY = SessionKey("u", "agent", "s")
OTHER = SessionKey("u", "agent", "other")


async def _commit(store: SessionStore, key: SessionKey, state: StoredState, text: str) -> None:
    event = MessageEvent(message=Message.user(text))
    state.working_ids = (*state.working_ids, event.message.id)
    state.version = await store.commit(
        key, expected_version=state.version, events=[event], state=state
    )


async def _version_in_another_process(path: Path, key: SessionKey) -> int:
    """Open the database in a new process (and close it there); return the session's version."""
    code = (
        "import sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1])\n"
        "row = conn.execute('SELECT version FROM sessions WHERE session_id = ?', "
        "(sys.argv[2],)).fetchone()\n"
        "conn.close()\n"
        "print(row[0] if row else 0)\n"
    )
    done = await anyio.run_process([sys.executable, "-c", code, str(path), key.session_id])
    return int(done.stdout)


async def test_a_second_store_on_the_file_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    first = open_store(f"sqlite://{path}")
    state = StoredState()
    await _commit(first, KEY, state, "one")
    second = open_store(f"sqlite://{path}")  # opened beside the first store, in this process
    try:
        assert await second.load(OTHER) is None
        # Another program opens and closes the database: it must see the first store's shared
        # lock and leave the WAL alone, so the first store's next commit is readable.
        assert await _version_in_another_process(path, KEY) == 1
        await _commit(first, KEY, state, "two")
        assert await _version_in_another_process(path, KEY) == 2
        await _commit(second, OTHER, StoredState(), "three")
        await _commit(first, KEY, state, "four")
        assert await _version_in_another_process(path, KEY) == 3
    finally:
        await second.aclose()
        await first.aclose()


async def test_a_deleted_workspace_is_reported_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    path = workspace / ".harness" / "sessions.db"
    store = open_store(f"sqlite://{path}")
    state = StoredState()
    acknowledged = 0
    for i in range(6):
        await _commit(store, KEY, state, f"round {i}")
        acknowledged += 1
    trash = tmp_path / "trash"
    workspace.rename(trash)  # the workspace goes away under the running session
    refused = 0
    for i in range(30):
        with pytest.raises(StoreFileLost) as caught:
            await _commit(store, KEY, StoredState(version=state.version), f"late {i}")
        refused += 1
    error = caught.value
    assert (error.reason, error.path) == ("deleted", str(path))
    assert "was deleted" in error.message and "NOT stored" in error.message
    assert "open a new one" in error.message
    with pytest.raises(StoreFileLost):
        await store.load(KEY)
    await store.aclose()
    assert (acknowledged, refused) == (6, 30)
    # Every acknowledged round is in the file that was there; no refused one is.
    kept = open_store(f"sqlite://{trash / '.harness' / 'sessions.db'}")
    try:
        loaded = await kept.load(KEY)
        assert loaded is not None and loaded[0].version == acknowledged
        assert sorted(m.text for m in loaded[1].values()) == [f"round {i}" for i in range(6)]
    finally:
        await kept.aclose()


async def test_a_replaced_database_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = open_store(f"sqlite://{path}")
    state = StoredState()
    await _commit(store, KEY, state, "one")
    other = tmp_path / "restored.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    os.replace(other, path)  # e.g. a backup moved over it
    with pytest.raises(StoreFileLost) as caught:
        await _commit(store, KEY, state, "two")
    assert (caught.value.reason, caught.value.path) == ("replaced", str(path))
    assert "replaced by another file" in caught.value.message
    await store.aclose()


async def test_a_deleted_write_ahead_log_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = open_store(f"sqlite://{path}")
    state = StoredState()
    await _commit(store, KEY, state, "one")
    os.unlink(f"{path}-wal")
    with pytest.raises(StoreFileLost) as caught:
        await _commit(store, KEY, state, "two")
    assert (caught.value.reason, caught.value.path) == ("deleted", f"{path}-wal")
    assert "releases SQLite's locks" in caught.value.message
    await store.aclose()


# ------------------------------------------------------- stores, the CLI and SIGKILL on one file
WRITERS = 2
"""Writer processes killed with SIGKILL between two CLI writes (each process costs ~0.3 s)."""


class _Reader(threading.Thread):
    """Collects a child's complete stdout lines as they come."""

    def __init__(self, child: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self.child, self.lines = child, list[str]()

    def run(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            self.lines.append(line)

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 30
        while len(self.lines) < count:
            assert self.child.poll() is None, self.child.stderr and self.child.stderr.read()
            assert time.monotonic() < deadline, self.lines
            time.sleep(0.005)


def _cli_add(url: str, text: str) -> None:
    command = ["fragments", "add", "--store", url, "--session", "cli", "--content", text]
    done = subprocess.run(
        [sys.executable, "-m", "harness", *command],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("add f-"), done.stderr


def test_stores_the_cli_and_killed_writers_on_one_file_lose_nothing(
    store_url: str, backend: str
) -> None:
    rng = random.Random(f"{backend}-shared")
    pair = _spawn("pair", store_url, "pair")  # two stores in one process
    reader = _Reader(pair)
    reader.start()
    reported: dict[str, int] = {}
    added = []
    try:
        reader.wait_for(3)  # the second store has opened the file, both have committed
        for when in ("before", "after"):
            # The CLI writes while only the two stores have the file open: it must not take
            # itself for the database's last user when it closes (the WAL stays).
            _cli_add(store_url, f"added {when} the kills")
            added.append(f"added {when} the kills")
            reader.wait_for(len(reader.lines) + 4)  # both stores commit after the CLI
            if when == "after":
                break
            writers = [_spawn("rounds", store_url, f"killed-{i}") for i in range(WRITERS)]
            for i, writer in enumerate(writers):
                assert writer.stdout is not None
                first = writer.stdout.readline()
                assert first.startswith("committed "), writer.stderr and writer.stderr.read()
                time.sleep(rng.uniform(0.0, 0.05))
                writer.send_signal(signal.SIGKILL)
                out, err = writer.communicate()
                assert writer.returncode == -signal.SIGKILL and err == "", err
                reported[f"killed-{i}"] = max(_committed(first + out))
        assert pair.poll() is None, pair.stderr and pair.stderr.read()
    finally:
        pair.send_signal(signal.SIGKILL)
        pair.wait()
        reader.join()
    assert pair.stderr is not None and pair.stderr.read() == ""
    for line in reader.lines:
        if line.endswith("\n"):
            session, seq = line.split()[1:3]
            reported[session] = max(reported.get(session, 0), int(seq))
    assert len(reported) == 2 + WRITERS and reported["pair-a"] > 3 and reported["pair-b"] > 3
    for session, last in reported.items():  # every acknowledged round is there, in order
        assert anyio.run(_check_log, store_url, session, last) >= last
    assert anyio.run(_fragment_contents, store_url) == added
    if backend == "sqlite":
        path = store_url.removeprefix("sqlite://")
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()


async def _fragment_contents(url: str) -> list[str]:
    store = open_store(url)
    assert isinstance(store, FragmentStore)
    try:
        _, listed = await store.fragments(FragmentScope.of_session(SessionKey("", "agent", "cli")))
    finally:
        await store.aclose()
    return [f.content for f in listed]
