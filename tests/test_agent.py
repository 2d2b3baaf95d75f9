"""The ReAct loop through the real chain and the ScriptedModel."""

from __future__ import annotations

import pytest

from harness import (
    ConfigurationError,
    ContextBudgetExceeded,
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    MaxRoundsExceeded,
    ModelRequest,
    ModelResponse,
    RuntimeContext,
)
from harness.types import Handler
from providers import ScriptedModel


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def explode() -> str:
    """Always fails."""
    raise ValueError("boom")


class CountCalls:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        self.calls += 1
        return await call_next(request)


async def test_multi_round_tool_use_feeds_results_back() -> None:
    model = ScriptedModel(
        [
            ScriptedModel.tool_call("add", {"a": 1, "b": 2}, id="c1"),
            ScriptedModel.tool_call("add", {"a": 3, "b": 4}, id="c2"),
            "3 and 7",
        ]
    )
    agent = HarnessAgent(model=model, tools=[add], stack=[])
    reply = await agent.call("add things")
    assert reply.text == "3 and 7"
    last = model.requests[-1].history
    assert [m.role for m in last] == ["user", "assistant", "tool", "assistant", "tool"]
    assert [m.text for m in last if m.role == "tool"] == ["3", "7"]
    assert last[2].tool_call_id == "c1"


async def test_the_stack_runs_once_per_model_request() -> None:
    counter = CountCalls()
    model = ScriptedModel([ScriptedModel.tool_call("add", {"a": 1, "b": 1}), "done"])
    agent = HarnessAgent(model=model, tools=[add], stack=[counter])
    await agent.call("go")
    assert counter.calls == len(model.requests) == 2


async def test_a_raising_tool_returns_an_error_result_and_the_loop_goes_on() -> None:
    model = ScriptedModel([ScriptedModel.tool_call("explode"), "recovered"])
    agent = HarnessAgent(model=model, tools=[explode], stack=[])
    assert (await agent.call("try")).text == "recovered"
    tool_result = model.requests[1].history[-1]
    assert tool_result.text == "Error: ValueError: boom"


async def test_an_unknown_tool_is_reported_to_the_model() -> None:
    model = ScriptedModel([ScriptedModel.tool_call("nope"), "ok"])
    agent = HarnessAgent(model=model, tools=[add], stack=[])
    await agent.call("x")
    assert "no tool named 'nope'" in model.requests[1].history[-1].text


async def test_max_rounds_raises_a_typed_error_with_pairs_intact() -> None:
    model = ScriptedModel(default=ScriptedModel.tool_call("add", {"a": 1, "b": 1}))
    agent = HarnessAgent(model=model, tools=[add], stack=[], max_rounds=3)
    with pytest.raises(MaxRoundsExceeded, match="max_rounds"):
        await agent.call("loop forever")
    assert len(model.requests) == 3
    history = await agent.history()
    assert history[-1].role == "tool"  # every call got its result


async def test_events_come_in_order_with_a_manifest_before_each_request() -> None:
    model = ScriptedModel([ScriptedModel.tool_call("add", {"a": 2, "b": 2}, text="adding"), "four"])
    agent = HarnessAgent(model=model, tools=[add], stack=[])
    events = [event async for event in agent.stream_events("2+2?")]
    assert [(e.kind, e.round) for e in events] == [
        ("context_build", 0),
        ("text_delta", 0),
        ("usage", 0),  # what the provider reported for the request, once it answered
        ("text", 0),
        ("tool_call", 0),
        ("tool_result", 0),
        ("context_build", 1),
        ("text_delta", 1),
        ("usage", 1),
        ("text", 1),
        ("final", 1),
    ]


async def test_manifest_goes_to_the_observer_and_has_no_prompt_text() -> None:
    seen: list[ContextManifest] = []
    model = ScriptedModel(["secret answer"])
    agent = HarnessAgent(
        model=model,
        system_prompt="SECRET-SYSTEM",
        stack=[],
        policy=ContextPolicy(observer=seen.append),
    )
    await agent.call("SECRET-USER", RuntimeContext(session_id="s9", user_id="u1"))
    (manifest,) = seen
    assert manifest.validation == "passed"
    assert manifest.session_id == "s9"
    assert manifest.estimated_input_tokens > 0
    assert manifest.input_limit == 128_000 - 4096 - 1024
    assert {item.kind for item in manifest.items} == {"system", "message"}
    encoded = repr(manifest.to_dict())
    assert "SECRET" not in encoded


async def test_runtime_context_is_never_sent_to_the_model() -> None:
    model = ScriptedModel(["ok"])
    agent = HarnessAgent(model=model, stack=[])
    ctx = RuntimeContext(user_id="alice-4711", session_id="fix-login-001", attributes={"k": "v-99"})
    await agent.call("hello", ctx)
    rendered = repr([m.to_openai() for m in model.requests[0].render()])
    assert (
        "alice-4711" not in rendered and "fix-login-001" not in rendered and "v-99" not in rendered
    )


async def test_a_failed_preparation_emits_a_failure_manifest_and_skips_the_model() -> None:
    async def too_big(request: ModelRequest, call_next: Handler) -> ModelResponse:
        raise ContextBudgetExceeded(
            "fixed material exceeds the budget; shrink it",
            required_tokens=10,
            limit=5,
            transforms=("omitted_for_budget:x",),
        )

    seen: list[ContextManifest] = []
    model = ScriptedModel(["never"])
    agent = HarnessAgent(model=model, stack=[too_big], policy=ContextPolicy(observer=seen.append))
    events = []
    with pytest.raises(ContextBudgetExceeded):
        async for event in agent.stream_events("hi"):
            events.append(event)
    assert model.requests == []
    (manifest,) = seen
    assert manifest.validation == "budget_exceeded"
    assert manifest.estimated_input_tokens == -1
    assert manifest.counting_method == "unavailable"
    assert manifest.transforms == ("omitted_for_budget:x",)
    assert [e.kind for e in events] == ["context_build"]


async def test_sessions_keep_separate_state() -> None:
    model = ScriptedModel(["a", "b", "c"])
    agent = HarnessAgent(model=model, stack=[])
    await agent.call("first", RuntimeContext(session_id="one"))
    await agent.call("second", RuntimeContext(session_id="two"))
    await agent.call("third", RuntimeContext(session_id="one"))
    assert [m.text for m in model.requests[2].history] == ["first", "a", "third"]
    assert [m.text for m in model.requests[1].history] == ["second"]


async def test_a_rewritten_history_is_committed_as_the_working_history() -> None:
    async def shorten(request: ModelRequest, call_next: Handler) -> ModelResponse:
        history = tuple(
            m.revise("short", content=m.text[:3]) if m.role == "user" and len(m.text) > 3 else m
            for m in request.history
        )
        return await call_next(request.replace(history=history))

    model = ScriptedModel(["one", "two"])
    agent = HarnessAgent(model=model, stack=[shorten])
    await agent.call("abcdef")
    state = agent.state()
    assert [m.text for m in state.working_history] == ["abc", "one"]
    assert [m.text for m in await agent.history()] == ["abcdef", "one"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_loop_runs_on_trio(anyio_backend: str) -> None:
    model = ScriptedModel([ScriptedModel.tool_call("add", {"a": 1, "b": 2}), "3"])
    agent = HarnessAgent(model=model, tools=[add], stack=[])
    assert (await agent.call("1+2")).text == "3"


async def test_a_call_cancelled_during_a_tool_leaves_a_history_the_next_call_can_send() -> None:
    import anyio

    started = anyio.Event()

    async def slow() -> str:
        """Take forever."""
        started.set()
        await anyio.sleep(60)
        return "never"

    model = ScriptedModel([ScriptedModel.tool_call("slow", id="c-slow"), "after"])
    agent = HarnessAgent(model=model, tools=[slow], stack=[])
    async with anyio.create_task_group() as group:
        group.start_soon(agent.call, "start")
        await started.wait()
        group.cancel_scope.cancel()
    assert (await agent.call("again")).text == "after"
    history = model.requests[-1].history
    assert [m.role for m in history] == ["user", "assistant", "tool", "user"]
    assert history[2].tool_call_id == "c-slow" and history[2].text == "no result: interrupted"


class DropFirstToolResult:
    """Sends (and so commits) the history without its first tool call and result."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        history = request.history
        if len(history) > 5:
            history = (history[0], *history[3:])
        return await call_next(request.replace(history=history))


@pytest.mark.parametrize("rewrite", [False, True])
async def test_a_round_commits_what_was_sent_and_an_unchanged_one_copies_nothing(
    rewrite: bool,
) -> None:
    calls = [ScriptedModel.tool_call("add", {"a": i, "b": 1}, id=f"c{i}") for i in range(3)]
    model = ScriptedModel([*calls, "done"])
    stack = [DropFirstToolResult()] if rewrite else []
    agent = HarnessAgent(model=model, tools=[add], stack=stack)
    ctx = RuntimeContext(session_id="s")
    working = agent.state(ctx).working_history
    await agent.call("add things", ctx)
    state = agent.state(ctx)
    sent = model.requests[-1].history
    assert len(sent) == (5 if rewrite else 7)
    assert state.working_history[:-1] == list(sent)  # what was sent, then the final reply
    assert state.working_history[-1].text == "done"
    assert (state.working_history is working) is not rewrite  # unchanged: kept, not copied


async def test_a_new_system_prompt_is_sent_from_the_next_request_on() -> None:
    agent: HarnessAgent

    def retune(style: str) -> str:
        """Change the agent's instructions."""
        agent.system_prompt = f"Answer {style}."
        return "changed"

    model = ScriptedModel([ScriptedModel.tool_call("retune", {"style": "tersely"}), "ok", "ok"])
    agent = HarnessAgent(model=model, system_prompt="Answer at length.", tools=[retune], stack=[])
    await agent.call("hello")
    sent = [[p.text for p in r.system] for r in model.requests]
    assert sent == [["Answer at length."], ["Answer tersely."]]  # the call's next round
    agent.system_prompt = ""
    await agent.call("again")
    assert model.requests[-1].system == () and agent.system_prompt == ""
    assert len(model.requests[-1].history) == 5  # the session went on: only System changed


def test_a_system_prompt_that_is_not_text_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="system_prompt must be a str"):
        HarnessAgent(model=ScriptedModel(["ok"]), system_prompt=["be brief"], stack=[])  # type: ignore[arg-type]
    agent = HarnessAgent(model=ScriptedModel(["ok"]), system_prompt="Be brief.", stack=[])
    with pytest.raises(ConfigurationError, match="got NoneType"):
        agent.system_prompt = None  # type: ignore[assignment]
    assert agent.system_prompt == "Be brief."  # a refused value changes nothing
