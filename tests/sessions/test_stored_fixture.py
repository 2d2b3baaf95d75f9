"""A session store written by older code loads unchanged (kernel layout, acceptance 5).

``tests/fixtures/stored_sessions.db`` was written by the code of issue 22 step 1 (the moves)
with ``tests/fixtures/make_stored_sessions.py``; it is never rewritten. Whatever the state
keys, the stored types and the manifest fields became since, today's code reads it: the
middleware state comes back as its own types, the manifests with their items and
transforms, and a new commit keeps every value it did not change exactly as it was stored.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness import HarnessAgent, Message, RuntimeContext, SessionKey, open_store
from harness.agent.permissions import PermissionRule, ToolPermissions, permission_denial
from harness.manifest import ContextManifest, dec_hook, enc_hook
from harness.messages import ToolCall
from harness.sessions.manifest_log import resolve
from harness.sessions.recorder import SessionRecorder
from harness.sessions.store import ManifestEvent, SessionStore
from harness.state import AgentState
from middleware import default_stack, enable_task_list
from middleware.task_state.state import (
    PlanMode,
    Requirement,
    TaskContext,
    TodoItem,
    Verification,
    plan_mode,
    task_context,
    todo_items,
)
from providers import ScriptedModel

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "stored_sessions.db"
AGENT = SessionKey("u1", "agent", "s1")
ADAPTER = SessionKey("u1", "acompletion", "trip")
STORED_KEYS = {
    AGENT: {
        "task_state/todos",
        "task_state/plan_mode",
        "task_state/task",
        "permissions/approved",
        "compaction.requested",
        "agent.running_tool_calls",
    },
    ADAPTER: {"adapters.record"},
}
"""The extension keys the old code stored, by session."""


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A copy of the fixture (opening a store may change its file: WAL, indexes)."""
    shutil.copy(FIXTURE, tmp_path / "sessions.db")
    return f"sqlite:///{tmp_path}/sessions.db"


async def _stored_extensions(store: SessionStore, key: SessionKey) -> dict[str, Any]:
    found = await store.load(key)
    assert found is not None
    return dict(found[0].extensions)


def _check_task_state(state: AgentState) -> None:
    assert todo_items(state) == (
        TodoItem(content="list the files", status="in_progress", id="1"),
        TodoItem(content="read the log", status="pending", id="2"),
    )
    assert plan_mode(state) == PlanMode(active=True, plan_file="PLAN.md")
    task = task_context(state)
    assert isinstance(task, TaskContext)
    assert (task.goal, task.scope) == ("tidy the build", "src/")
    assert task.requirements == (
        Requirement(id="R1", text="the build passes"),
        Requirement(
            id="R2",
            text="keep the log short",
            status="proposed",
            proposed_by="model",
            note="it is read often",
        ),
    )
    assert task.verifications == (
        Verification(
            check="unit-tests", passed=True, subject="src/app.py", version="v2", detail="12 passed"
        ),
    )
    assert task.subject_versions == {"src/app.py": "v2"}


async def _check_approved(state: AgentState) -> None:
    """The approval of ``shell`` holds: an ``ask`` call runs without an approver."""
    ask = ToolPermissions(rules=(PermissionRule(tool="*", decision="ask"),))
    shell = ToolCall(id="c1", name="shell", arguments='{"command": "ls"}')
    other = ToolCall(id="c2", name="dump", arguments="{}")
    assert await permission_denial(ask, None, shell, state) is None
    assert await permission_denial(ask, None, other, state) is not None


def _compaction_request(state: AgentState) -> object:
    from middleware.compaction import REQUEST_KEY

    return state.get(REQUEST_KEY)


def _adapter_record(state: AgentState) -> tuple[int, str]:
    from harness.adapters.completion import RECORD_KEY

    record = state.get(RECORD_KEY)
    assert record is not None
    return record.count, record.hash


def _running_owner(state: AgentState) -> object:
    from harness.agent.loop import RUNNING_KEY

    return state.get(RUNNING_KEY)


async def test_the_stored_state_comes_back_as_its_types(store_url: str) -> None:
    store = open_store(store_url)
    try:
        assert set(await _stored_extensions(store, AGENT)) == STORED_KEYS[AGENT]
        assert set(await _stored_extensions(store, ADAPTER)) == STORED_KEYS[ADAPTER]
        _, state = await SessionRecorder.load(store, AGENT)
        _check_task_state(state)
        await _check_approved(state)
        token = _compaction_request(state)
        assert isinstance(token, str) and len(token) == 16
        owner = _running_owner(state)
        assert isinstance(owner, dict) and owner["calls"] and isinstance(owner["pid"], int)
        assert state.calibration == {"scripted": 1.25}
        assert (
            [m.role for m in state.working_history]
            == [
                "user",
                "user",  # the summary
                "assistant",
                "tool",
                "assistant",
            ][: len(state.working_history)]
        )
        _, adapted = await SessionRecorder.load(store, ADAPTER)
        count, last = _adapter_record(adapted)
        assert count == 4 and isinstance(last, str) and len(last) == 64
        assert [m.text for m in adapted.working_history][-1] == "Take a coat."
    finally:
        await store.aclose()


async def test_the_stored_manifests_come_back_with_items_and_transforms(store_url: str) -> None:
    store = open_store(store_url)
    try:
        logged = await store.events(AGENT, limit=100, kinds=("manifest",))
        manifests = resolve([e.event for e in logged if isinstance(e.event, ManifestEvent)])
    finally:
        await store.aclose()
    assert [m.purpose for m in manifests] == ["agent", "agent", "agent", "summary", "agent"]
    assert all(m.validation == "passed" and len(m.items) > 5 for m in manifests)
    # On the wire (and in the store) a transform is its "kind:target" text.
    wire = [list(msgspec.to_builtins(m, enc_hook=enc_hook)["transforms"]) for m in manifests]
    assert wire[0] == ["source_unavailable:source/tickets/:none"]
    assert wire[2][1].startswith("tool_result_offload:call_")
    assert wire[4] == ["source_unavailable:source/tickets/:none", "history_compaction:4"]
    for manifest in manifests:
        assert not any(isinstance(t, dict | list) for t in manifest.transforms)
        again = msgspec.json.decode(
            msgspec.json.encode(manifest, enc_hook=enc_hook),
            type=ContextManifest,
            dec_hook=dec_hook,
        )
        assert again == manifest
        assert [i.source_id for i in again.items] == [i.source_id for i in manifest.items]


async def test_a_new_commit_keeps_what_it_did_not_change(store_url: str) -> None:
    store = open_store(store_url)
    try:
        before = await _stored_extensions(store, AGENT)
        recorder, state = await SessionRecorder.load(store, AGENT)
        _check_task_state(state)  # read every value once: reading must not rewrite it
        await _check_approved(state)
        _compaction_request(state)
        _running_owner(state)
        state.append(Message.user("one more turn"))
        await recorder.commit(state)
        assert await _stored_extensions(store, AGENT) == before
        _, again = await SessionRecorder.load(store, AGENT)
        _check_task_state(again)
        await _check_approved(again)
        assert _compaction_request(again) == _compaction_request(state)
        events = await store.events(AGENT, limit=100, kinds=("state",))
        assert len(events) == 4  # the old code's; reading wrote none
    finally:
        await store.aclose()


async def test_an_agent_resumes_the_stored_session(store_url: str) -> None:
    model = ScriptedModel(["resumed"])
    agent = HarnessAgent(model=model, stack=default_stack(task=enable_task_list()), store=store_url)
    ctx = RuntimeContext(user_id="u1", session_id="s1", agent_id="agent")
    try:
        assert (await agent.call("and now?", ctx)).text == "resumed"
        state = await agent.load(ctx)
        _check_task_state(state)
        await _check_approved(state)
        (request,) = model.agent_requests
        assert "list the files" in " ".join(b.text for b in request.blocks)
        # the upgraded file's usage starts with this round (rows logged before have none)
        found = await agent.store.usage(agent.key(ctx))
        assert [r.purpose for r in found.requests].count("agent") == 1
        assert found.total.prompt_tokens == sum(r.usage.prompt_tokens for r in found.requests)
    finally:
        await agent.store.aclose()
