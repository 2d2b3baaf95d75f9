"""The manifest names what broke the cached prefix (`harness.accounting.cache_break`)."""

from __future__ import annotations

from pathlib import Path

from harness import ContextManifest, ContextPolicy, HarnessAgent, Message, RuntimeContext
from harness.accounting.cache_break import CacheBreaks
from harness.policy import ContextPolicy as Policy
from harness.request import ModelRequest, RequestIds, SystemPart
from middleware import Compaction, default_stack
from providers import ScriptedModel


def _agent(tmp_path: Path, seen: list[ContextManifest], **compaction: int) -> HarnessAgent:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    settings = {"trigger_messages": 400, "keep_tokens": 0, "keep_messages": 4, **compaction}
    return HarnessAgent(
        model=ScriptedModel(default="ok"),
        tools=[add],
        stack=default_stack(compaction=Compaction(memory=None, **settings)),  # type: ignore[arg-type]
        system_prompt="be exact",
        workspace=str(tmp_path),
        policy=ContextPolicy(observer=seen.append),
    )


async def test_rounds_that_only_grow_break_nothing_and_a_system_change_is_named(
    tmp_path: Path,
) -> None:
    seen: list[ContextManifest] = []
    (tmp_path / "AGENTS.md").write_text("Run the tests before you commit.\n")
    agent = _agent(tmp_path, seen)
    ctx = RuntimeContext(session_id="s")
    for turn in range(3):
        await agent.call(f"question {turn}", ctx)
    assert [m.cache_break for m in seen] == [None, None, None]
    (tmp_path / "AGENTS.md").write_text("Run the tests and the linter before you commit.\n")
    await agent.call("question 3", ctx)
    assert seen[-1].cache_break is not None
    assert seen[-1].cache_break.startswith("system:"), seen[-1].cache_break
    assert "AGENTS.md" in seen[-1].cache_break
    await agent.call("question 4", ctx)
    assert seen[-1].cache_break is None  # the new System is the prefix again


async def test_a_compaction_names_the_first_message_it_replaced_and_why(tmp_path: Path) -> None:
    seen: list[ContextManifest] = []
    agent = _agent(tmp_path, seen, trigger_messages=12)
    ctx = RuntimeContext(session_id="s")
    earlier = [
        m
        for i in range(5)
        for m in (Message.user(f"old question {i}"), Message.assistant(f"old answer {i}"))
    ]
    agent.state(ctx).append(*earlier)
    first_id = earlier[0].id
    for turn in range(6):
        await agent.call(f"question {turn}", ctx)
    agent_manifests = [m for m in seen if m.purpose == "agent"]
    broke = [m.cache_break for m in agent_manifests if m.cache_break is not None]
    assert broke, [m.transforms for m in agent_manifests]
    assert broke[0].startswith(f"history:{first_id} (history_compaction:"), broke[0]
    assert len(broke) < len(agent_manifests) / 2  # only the compacting rounds
    # the in-place summary request is the agent's own prefix plus one instruction
    assert all(m.cache_break is None for m in seen if m.purpose == "summary")


def test_sessions_do_not_compare_with_each_other() -> None:
    breaks = CacheBreaks()
    policy = Policy()
    a = ModelRequest(
        model="m",
        ids=RequestIds(session_id="a"),
        system=(SystemPart(name="prompt", text="x"),),
        history=(Message.user("hi"),),
        policy=policy,
    )
    assert breaks.observe(a) is None
    other_model = a.replace(model="n")
    assert breaks.observe(other_model) is not None
    assert breaks.observe(other_model.replace(tools=())) is None
    dropped = other_model.replace(history=(Message.user("other"),))
    found = breaks.observe(dropped)
    assert found is not None and found.where == f"history:{a.history[0].id}"
    summary = dropped.replace(ids=RequestIds(purpose="summary"), model="x")
    assert breaks.observe(summary) is not None  # compared …
    assert breaks.observe(dropped) is None  # … but not remembered
