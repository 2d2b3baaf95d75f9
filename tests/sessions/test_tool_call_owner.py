"""Only the writer that started a tool call answers it as interrupted, unless it is provably gone.

Two agents with their own store objects on one store (SQLite file and PostgreSQL alike), a
real child process on one SQLite file, and a writer on "another machine" whose calls age.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from harness import HarnessAgent, RuntimeContext, SessionBusy, StateConflict
from harness.agent.loop import RUNNING_KEY
from harness.markers import INTERRUPTED_TEXT
from harness.messages import Message, ToolCall
from harness.sessions import MessageEvent, SessionKey, StoredState, open_store
from harness.sessions.codec import encode_extensions
from providers import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent.parent
CTX = RuntimeContext(user_id="u1", session_id="s1")
KEY = SessionKey("u1", "agent", "s1")


async def tool_results(url: str) -> list[str]:
    """Return the texts of the tool results the session logged, read by a new store object."""
    store = open_store(url)
    try:
        events = [e.event for e in await store.events(KEY, limit=1_000)]
    finally:
        await store.aclose()
    return [
        e.message.text for e in events if isinstance(e, MessageEvent) and e.message.role == "tool"
    ]


async def test_another_writer_cannot_interrupt_a_running_call(store_url: str) -> None:
    started, release = anyio.Event(), anyio.Event()

    async def build() -> str:
        """Run the build."""
        started.set()
        await release.wait()
        return "build passed"

    owner_model = ScriptedModel([ScriptedModel.tool_call("build", {}, id="c-build"), "built"])
    owner = HarnessAgent(model=owner_model, tools=[build], store=open_store(store_url))
    other_model = ScriptedModel(["after the build"])
    other = HarnessAgent(model=other_model, store=open_store(store_url))
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(owner.call, "build it", CTX)
            await started.wait()  # the call is committed and its tool runs
            with pytest.raises(SessionBusy) as busy:
                await other.call("status?", CTX)
            assert busy.value.call_ids == ("c-build",) and isinstance(busy.value, StateConflict)
            assert busy.value.writer == owner.writer_id
            assert await tool_results(store_url) == []  # nothing was written for the call
            release.set()
        assert owner.state(CTX).working_history[-1].text == "built"
        assert (await other.call("status?", CTX)).text == "after the build"
        (request,) = other_model.agent_requests
        assert [m.text for m in request.history if m.role == "tool"] == ["build passed"]
        assert await tool_results(store_url) == ["build passed"]
    finally:
        await owner.store.aclose()
        await other.store.aclose()


CHILD = textwrap.dedent(
    """
    import sys, anyio
    from harness import HarnessAgent, RuntimeContext
    from providers import ScriptedModel

    async def hang() -> str:
        '''Hang.'''
        print("TOOL-STARTED", flush=True)
        await anyio.sleep(120)
        return "never"

    async def main() -> None:
        model = ScriptedModel([ScriptedModel.tool_call("hang", {}, id="c-hang"), "never"])
        agent = HarnessAgent(model=model, tools=[hang], store=sys.argv[1])
        await agent.call("start", RuntimeContext(user_id="u1", session_id="s1"))

    anyio.run(main)
    """
)


def start_child_in_its_tool(url: str) -> subprocess.Popen[str]:
    """Start the child and return it once its tool runs (its round is committed)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert child.stdout is not None and child.stderr is not None
    line = child.stdout.readline()
    if line.strip() != "TOOL-STARTED":
        child.kill()
        raise AssertionError(child.stderr.read())
    return child


def kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL the child and reap it."""
    child.send_signal(signal.SIGKILL)
    child.wait()


async def test_a_call_of_a_live_process_waits_and_of_a_killed_one_is_interrupted(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    child = start_child_in_its_tool(url)
    model = ScriptedModel(["went on"])
    agent = HarnessAgent(model=model, store=url)
    try:
        with pytest.raises(SessionBusy):  # the child runs the call: it is not ours to answer
            await agent.call("are you there?", CTX)
    finally:
        kill(child)
    assert (await agent.call("are you there?", CTX)).text == "went on"
    (request,) = model.agent_requests
    answer = next(m for m in request.history if m.tool_call_id == "c-hang")
    assert answer.text == INTERRUPTED_TEXT


@pytest.mark.parametrize(("age_s", "busy"), [(60.0, True), (7_200.0, False)])
async def test_a_writer_on_another_machine_is_waited_for_until_its_calls_are_old(
    tmp_path: Path, age_s: float, busy: bool
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    call = ToolCall(id="c-far", name="deploy", arguments="{}")
    messages = [Message.user("deploy it"), Message.assistant(None, tool_calls=(call,))]
    owner = {
        "writer": "far-host:4242:agent1",
        "host": "far-host",
        "pid": 4242,
        "started": "1",
        "calls": ["c-far"],
        "at": time.time() - age_s,
    }
    store = open_store(url)
    try:
        await store.commit(
            KEY,
            expected_version=0,
            events=[MessageEvent(message=m) for m in messages],
            state=StoredState(
                working_ids=tuple(m.id for m in messages),
                extensions=encode_extensions({RUNNING_KEY.name: owner}),
            ),
        )
    finally:
        await store.aclose()
    model = ScriptedModel(["next"])
    agent = HarnessAgent(model=model, store=url, abandon_after_s=3_600)
    if busy:
        with pytest.raises(SessionBusy, match="far-host:4242:agent1"):
            await agent.call("and?", CTX)
        assert await tool_results(url) == []
    else:
        assert (await agent.call("and?", CTX)).text == "next"
        assert await tool_results(url) == [INTERRUPTED_TEXT]
