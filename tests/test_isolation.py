"""Isolation: nothing one user's session writes reaches another user's requests.

Many users run concurrently on **one** agent with **one** workspace and the default stack
with a small budget, so every channel that writes runs: tool-result offload (files in the
workspace), compaction with its long-term-memory hook (facts to memory files) and the
workspace materials that load memory into the next call. Each user plants a unique secret
in every channel; every request the model receives — agent and summary — is then checked
for any other user's secret. A positive control checks that each user's own secret does
come back through memory, so the test would see a leak through that channel.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from harness import (
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    RuntimeContext,
    ToolContext,
    Workspace,
)
from middleware import default_stack
from middleware.compaction import Compaction
from middleware.memory import WorkspaceMemory
from middleware.tool_result_offload import ToolResultOffload
from providers import ScriptedModel

TOOL_ROUNDS = 6


def request_text(request: ModelRequest) -> str:
    """Everything of a request the model sees, as one string."""
    parts = [p.text for p in request.system]
    for message in request.history:
        parts.append(message.text)
        parts.extend(f"{c.name} {c.arguments}" for c in message.tool_calls)
    parts.extend(b.text for b in request.blocks)
    return "\n".join(parts)


def build(workspace: Workspace, secrets: dict[str, str]) -> tuple[HarnessAgent, ScriptedModel]:
    def lookup(topic: str, ctx: ToolContext) -> str:
        """Look a topic up (returns a long report with the caller's secret).

        Args:
            topic: what to look up.
            ctx: injected.
        """
        secret = secrets[ctx.user_id] if ctx.user_id else secrets[ctx.session_id]
        return f"report on {topic} for {secret}\n" + f"{secret} data row\n" * 200

    def write_note(path: str, ctx: ToolContext) -> str:
        """Pretend to write a note (its path becomes a remembered "file changed").

        Args:
            path: the note's path.
            ctx: injected.
        """
        return f"wrote {path}"

    rounds: dict[str, int] = {}  # model requests so far, per agent call

    def script(request: ModelRequest) -> Message | str:
        secret = secrets[request.ids.user_id or request.ids.session_id]
        done = rounds[request.ids.run_id] = rounds.get(request.ids.run_id, -1) + 1
        if done >= TOOL_ROUNDS:
            return f"Decision: the answer for this user is {secret}."
        if done == 0:
            return ScriptedModel.tool_call("write_note", {"path": f"notes/{secret}.md"})
        return ScriptedModel.tool_call("lookup", {"topic": f"{secret} part {done}"})

    model = ScriptedModel(default=script, window=32_000)
    stack = default_stack(
        offload=ToolResultOffload(max_result_chars=3_000, preview_chars=300),
        compaction=Compaction(trigger_messages=10, keep_tokens=0, keep_messages=4),
    )
    agent = HarnessAgent(
        model=model,
        tools=[lookup, write_note],
        stack=stack,
        workspace=workspace,
        policy=ContextPolicy(max_input_tokens=6_000),
        max_rounds=20,
    )
    return agent, model


async def run_users(
    agent: HarnessAgent, contexts: dict[str, RuntimeContext], secrets: dict[str, str]
) -> None:
    """Run every user's two calls concurrently."""

    async def one_user(key: str) -> None:
        ctx = contexts[key]
        await agent.call(f"Remember: my code word is {secrets[key]}. Look it all up.", ctx)
        if ctx.user_id:  # the user's memory outlives the session: ask from a new one
            ctx = RuntimeContext(user_id=ctx.user_id, session_id=f"{ctx.session_id}-next")
        await agent.call("Now tell me what you found.", ctx)

    async with anyio.create_task_group() as tg:
        for key in contexts:
            tg.start_soon(one_user, key)


def leaks(model: ScriptedModel, owner_of: dict[str, str]) -> list[str]:
    """Return a line for every request carrying another user's secret."""
    found = []
    for request in model.requests:
        owner = request.ids.user_id or request.ids.session_id
        text = request_text(request)
        for other, secret in owner_of.items():
            if other != owner and secret in text:
                found.append(f"{request.ids.purpose} request of {owner} carries {other}'s secret")
    return found


@pytest.mark.parametrize("users", [200])
async def test_concurrent_users_on_one_agent_and_workspace_never_see_each_other(
    tmp_path: Path, users: int
) -> None:
    workspace = Workspace(tmp_path / "shared")
    workspace.write_text("MEMORY.md", "# Project memory\n- The project uses Python 3.11.\n")
    secrets = {f"user-{u:03d}": f"SECRET-{u:03d}-{uuid.uuid4().hex}" for u in range(users)}
    agent, model = build(workspace, secrets)
    contexts = {
        key: RuntimeContext(user_id=key, session_id=f"session-{u}") for u, key in enumerate(secrets)
    }
    await run_users(agent, contexts, secrets)

    assert leaks(model, secrets) == []
    # Every channel ran: offloads, summaries, memory records, memory loaded next call.
    transforms = [t for r in model.agent_requests for t in r.transforms]
    assert sum(t.startswith("tool_result_offload:") for t in transforms) >= users * 4
    assert sum(t.startswith("history_compaction:") for t in transforms) >= users
    assert sum(t.startswith("memory_record:") for t in transforms) >= users
    assert sum(r.ids.purpose == "summary" for r in model.requests) >= users
    store = WorkspaceMemory()
    for key, secret in secrets.items():
        own = [r for r in model.agent_requests if r.ids.user_id == key]
        memory_path = store.path(own[0].ids)
        assert secret in workspace.read_text(memory_path)
        # Positive control: the user's own memory comes back in their next session (a
        # session is not shown the facts its own compactions wrote: its summary has them).
        second_call = [r for r in own if r.history[-1].text == "Now tell me what you found."]
        memory_blocks = [b for b in second_call[0].blocks if b.category == "memory"]
        assert any(secret in b.text for b in memory_blocks), key
        # The project's hand-written memory reaches every user.
        assert any("Python 3.11" in b.text for b in memory_blocks)
    # One memory file per user, none at the root besides the project's own.
    assert len(workspace.list("memory/users", recursive=True)) == users
    assert "SECRET" not in workspace.read_text("MEMORY.md")


async def test_anonymous_sessions_are_kept_apart_too(tmp_path: Path) -> None:
    """Without user ids, memory is per session: two sessions never share facts."""
    workspace = Workspace(tmp_path)
    secrets = {f"anon-{u}": f"SECRET-anon-{u}-{uuid.uuid4().hex}" for u in range(20)}
    agent, model = build(workspace, secrets)
    contexts = {key: RuntimeContext(session_id=key) for key in secrets}
    await run_users(agent, contexts, secrets)
    assert leaks(model, secrets) == []
    assert len(workspace.list("memory/sessions", recursive=True)) == 20
    assert not workspace.exists("memory/users")


async def test_agent_scope_is_shared_only_when_configured(tmp_path: Path) -> None:
    """``WorkspaceMemory(scope="agent")``: every user of the agent sees the facts."""
    workspace = Workspace(tmp_path)
    agent, model = build(workspace, {"first": "SECRET-first", "second": "SECRET-second"})
    (compaction,) = [m for m in agent.stack if isinstance(m, Compaction)]
    compaction.settings = compaction.settings.replace(memory=WorkspaceMemory(scope="agent"))
    await agent.call("Remember: the first user's code word is SECRET-first.", ctx("first"))
    await agent.call("Hello.", ctx("second"))
    seen = [r for r in model.agent_requests if r.ids.user_id == "second"]
    assert any("SECRET-first" in b.text for b in seen[0].blocks if b.category == "memory")
    assert workspace.list("memory/agents", recursive=True)
    assert not workspace.exists("memory/users")


def ctx(user: str) -> RuntimeContext:
    return RuntimeContext(user_id=user, session_id=f"s-{user}")


async def test_two_users_with_the_same_session_id_never_share_a_history() -> None:
    from harness import HarnessAgent, RuntimeContext
    from providers import ScriptedModel

    model = ScriptedModel(default="ok")
    agent = HarnessAgent(model=model, stack=[])
    await agent.call("ALICE-SECRET", RuntimeContext(user_id="alice", session_id="default"))
    await agent.call("hello", RuntimeContext(user_id="bob", session_id="default"))
    bobs = model.agent_requests[-1]
    assert [m.text for m in bobs.history] == ["hello"]
    alices = await agent.history(RuntimeContext(user_id="alice", session_id="default"))
    assert alices[0].text == "ALICE-SECRET"
