"""Compaction control: the window-aware default, the off switch, manual requests, lifecycle events.

Through the real agent loop and the ScriptedModel (which reports usage like a provider);
the CLI through ``python -m harness`` on a real SQLite file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness import ContextPolicy, HarnessAgent, ModelRequest, RuntimeContext
from harness.accounting import estimate_request
from harness.events import AgentEvent
from harness.markers import SUMMARY
from harness.sessions import CompactionRunEvent, SessionKey, open_store
from middleware import Compaction, SessionTools
from middleware.compaction._settings import DEFAULT_TRIGGER, DEFAULT_TRIGGER_MESSAGES
from middleware.tracing import Tracing
from providers import ScriptedModel

ROOT = Path(__file__).resolve().parents[2]


async def harness_cli(*args: str) -> Completed:
    """Run ``python -m harness ARGS`` from the checkout; return its status and text output."""
    done = await anyio.run_process([sys.executable, "-m", "harness", *args], cwd=ROOT, check=False)
    return Completed(done.returncode, done.stdout.decode(), done.stderr.decode())


class Completed(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


CTX = RuntimeContext(user_id="u", session_id="s")
WORDS = "a few words of conversation here. "


def summaries(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.ids.purpose == "summary"]


def agent_for(
    limit: int, compaction: Compaction, **kw: object
) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel(default="ok", model="gpt-4o")
    agent = HarnessAgent(
        model=model,
        stack=[compaction],
        policy=ContextPolicy(max_input_tokens=limit),
        **kw,  # type: ignore[arg-type]
    )
    return agent, model


async def talk(agent: HarnessAgent, turns: int, words: int = 1, ctx: RuntimeContext = CTX) -> None:
    for i in range(turns):
        await agent.call(f"turn {i}: " + WORDS * words, ctx)


async def test_the_default_trigger_is_a_share_of_the_window_not_fifty_messages() -> None:
    # 60 short turns = 120 messages: far below 75 % of a large window, so nothing is due —
    # where the former default (50 messages) summarised twice.
    agent, model = agent_for(100_000, Compaction(memory=None))
    await talk(agent, 60)
    assert summaries(model) == []
    fixed, fixed_model = agent_for(100_000, Compaction(trigger_messages=50, memory=None))
    await talk(fixed, 60)
    assert summaries(fixed_model)  # an explicit message trigger keeps working as before
    # In a small window the same default compacts once the request passes 75 % of it.
    small, small_model = agent_for(4_000, Compaction(memory=None))
    await talk(small, 30, words=20)
    assert summaries(small_model)
    assert DEFAULT_TRIGGER == 0.75 and DEFAULT_TRIGGER_MESSAGES == 200


async def test_the_message_guard_still_fires_on_many_tiny_messages() -> None:
    agent, model = agent_for(1_000_000, Compaction(memory=None))
    await talk(agent, DEFAULT_TRIGGER_MESSAGES // 2 + 1)
    assert len(summaries(model)) == 1


async def test_auto_off_compacts_only_what_would_not_fit() -> None:
    agent, model = agent_for(4_000, Compaction(auto=False, trigger_messages=10, memory=None))
    await talk(agent, 22, words=20)  # past 10 messages and past 75 %, still within the budget
    assert summaries(model) == []
    assert estimate_request(model.requests[-1]) > DEFAULT_TRIGGER * 4_000
    await talk(agent, 10, words=20)  # the history alone outgrows the input limit
    assert summaries(model)  # the budget promise holds with auto compaction off
    for request in model.requests:
        assert request.input_limit <= 4_000


async def test_a_manual_request_compacts_once_with_its_focus_and_lifecycle_events() -> None:
    seen: list[AgentEvent] = []
    agent, model = agent_for(100_000, Compaction(memory=None, observer=seen.append))
    await talk(agent, 10)
    assert summaries(model) == []
    token = await agent.compact(CTX, focus="the database schema")
    events = [e async for e in agent.stream_events("go on", CTX)]
    (asked,) = summaries(model)
    assert "Focus the summary on: the database schema" in asked.history[-1].text
    kinds = [e.kind for e in events]
    assert kinds.index("compaction_started") < kinds.index("compaction_finished")
    agent_build = next(
        i for i, e in enumerate(events)
        if e.kind == "context_build" and e.manifest is not None and e.manifest.purpose == "agent"
    )  # fmt: skip
    summary_usage = next(i for i, e in enumerate(events) if e.kind == "usage")
    assert events[summary_usage].purpose == "summary"  # the summary request's bill, in between
    assert summary_usage < kinds.index("compaction_finished") < agent_build
    finished = next(e.compaction for e in events if e.kind == "compaction_finished")
    assert finished is not None and finished.reason == "requested"
    assert finished.focus == "the database schema"
    assert finished.messages_before == 21 and finished.messages_after < finished.messages_before
    assert finished.tokens_after < finished.tokens_before and finished.summarised > 0
    summary = next(m for m in agent.state(CTX).working_history if m.meta(SUMMARY))
    assert finished.summary_id == summary.id and token
    assert [e.kind for e in seen] == ["compaction_started", "compaction_finished"]
    await talk(agent, 3)
    assert len(summaries(model)) == 1  # honoured once
    # the session log keeps both phases
    logged = await agent.store.events(agent.key(CTX), kinds=("compaction_run",))
    phases = [e.event.phase for e in logged if isinstance(e.event, CompactionRunEvent)]
    assert phases == ["started", "finished"]


async def test_the_model_asks_with_session_tools_compact_conversation() -> None:
    call = ScriptedModel.tool_call("compact_conversation", {"focus": "open bugs"})
    model = ScriptedModel([*(["ok"] * 6), call], default="ok", model="gpt-4o")
    tools = SessionTools(compact_tool=True)
    assert "compact_conversation" in [t.name for t in tools.tools()]
    assert "compact_conversation" not in [t.name for t in SessionTools().tools()]
    agent = HarnessAgent(
        model=model,
        stack=[tools, Compaction(memory=None)],
        policy=ContextPolicy(max_input_tokens=100_000),
    )
    await talk(agent, 7)
    (asked,) = summaries(model)
    assert "Focus the summary on: open bugs" in asked.history[-1].text


async def test_spans_carry_compaction_events() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = HarnessAgent(
        model=ScriptedModel(default="ok", model="gpt-4o"),
        stack=[Tracing(tracer_provider=provider), Compaction(trigger_messages=6, keep_tokens=0,
               keep_messages=2, memory=None)],
        policy=ContextPolicy(max_input_tokens=100_000),
    )  # fmt: skip
    await talk(agent, 4)
    names = [e.name for s in exporter.get_finished_spans() for e in s.events]
    assert "context_harness.compaction_started" in names
    finished = [
        e for s in exporter.get_finished_spans() for e in s.events
        if e.name == "context_harness.compaction_finished"
    ]  # fmt: skip
    assert finished and finished[0].attributes is not None
    summarised = finished[0].attributes["context_harness.compaction.summarised"]
    assert isinstance(summarised, int) and summarised > 0


async def test_the_cli_asks_and_another_process_compacts(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'sessions.db'}"
    agent, _ = agent_for(100_000, Compaction(memory=None), store=url)
    await talk(agent, 6)
    assert agent.store is not None
    await agent.store.aclose()
    asked = await harness_cli(
        "sessions",
        "compact",
        "--store",
        url,
        "--user",
        "u",
        "--session",
        "s",
        "--focus",
        "what was decided",
    )
    assert asked.returncode == 0, asked.stderr
    assert "compaction requested" in asked.stdout
    missing = await harness_cli(
        "sessions", "compact", "--store", url, "--user", "u", "--session", "nope"
    )
    assert missing.returncode == 1 and "no session 'nope'" in missing.stderr
    fresh, model = agent_for(100_000, Compaction(memory=None), store=url)  # another process
    await talk(fresh, 1)
    (summary_request,) = summaries(model)
    assert "Focus the summary on: what was decided" in summary_request.history[-1].text
    assert fresh.store is not None
    store = open_store(url)
    try:
        logged = await store.events(SessionKey("u", "agent", "s"), kinds=("state",))
    finally:
        await store.aclose()
    assert logged  # the request is in the session's log
    await fresh.store.aclose()


async def test_context_pressure_tells_the_model_how_full_its_window_is() -> None:
    from middleware import ContextPressure

    model = ScriptedModel(default="ok", model="gpt-4o")
    agent = HarnessAgent(
        model=model,
        stack=[ContextPressure(), Compaction(memory=None)],
        policy=ContextPolicy(max_input_tokens=4_000),
    )
    await talk(agent, 30, words=20)
    texts = [
        next(b.text for b in r.blocks if b.id == "context_pressure")
        for r in model.requests
        if r.ids.purpose == "agent"
    ]
    shares = [int(t.split("(")[1].split("%")[0]) for t in texts]
    assert shares[0] < shares[5] and "summarised at about 75%" in texts[0]
    assert any("being summarised now" in t for t in texts)  # the round that compacted
    assert summaries(model) and all(
        b.id != "context_pressure" for r in summaries(model) for b in r.blocks
    )
    assert any("Context window:" in m.text for m in model.requests[-1].render())  # sent
