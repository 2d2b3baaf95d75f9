"""ContextSources through the real agent loop: what the model receives, and the failure rules."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Sequence

import anyio
import pytest

from harness import (
    AgentEvent,
    ContextBlock,
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    ModelRequest,
    ModelResponse,
    RuntimeContext,
    SourceError,
    content_hash,
)
from harness.chain import compose
from harness.errors import ConfigurationError
from harness.request import RequestIds
from middleware.context_sources import (
    ContextRequest,
    ContextSource,
    ContextSources,
    OnFailure,
    SourceLoader,
    SourceResult,
    context_source,
)
from providers import ScriptedModel


def agent_with(
    *sources: ContextSource,
    replies: Sequence[object] = ("ok",),
    tools: Sequence[object] = (),
    manifests: list[ContextManifest] | None = None,
) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel(list(replies))  # type: ignore[arg-type]
    agent = HarnessAgent(
        model=model,
        system_prompt="You help.",
        tools=list(tools),  # type: ignore[arg-type]
        stack=[ContextSources(sources=sources)],
        policy=ContextPolicy(observer=manifests.append if manifests is not None else None),
    )
    return agent, model


def fixed(*blocks: ContextBlock) -> ContextSource:
    async def load(request: ContextRequest) -> list[ContextBlock]:
        return list(blocks)

    return context_source("fixed", load)


async def test_blocks_reach_the_model_under_their_placements_with_source_ids() -> None:
    async def build(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.runtime("latest", "build: 2 tests failing")]

    async def guide(request: ContextRequest) -> list[ContextBlock]:
        return [
            ContextBlock.reference("login", "401 on expiry")
            .with_revision("guide-v3")
            .with_priority(20)
        ]

    manifests: list[ContextManifest] = []
    agent, model = agent_with(
        context_source("build-status", build),
        context_source("project-guide", guide),
        manifests=manifests,
    )
    await agent.call("fix login")
    (request,) = model.agent_requests
    assert [b.source_id for b in request.blocks] == [
        "source/build-status/latest",
        "source/project-guide/login",
    ]
    assert [b.where for b in request.blocks] == ["RUNTIME_STATE", "HARNESS_CONTEXT"]
    blocks_message = request.render()[-1].text
    assert "<RUNTIME_STATE>\n[source/build-status/latest]\nbuild: 2 tests failing" in blocks_message
    assert "<HARNESS_CONTEXT>\n[source/project-guide/login]\n401 on expiry" in blocks_message
    items = {i.source_id: i for i in manifests[0].items}
    assert items["source/project-guide/login"].revision == "guide-v3"
    assert items["source/build-status/latest"].revision == content_hash("build: 2 tests failing")


async def test_sources_never_add_system_text() -> None:
    agent, model = agent_with(fixed(ContextBlock.runtime("r", "RUNTIME FACT")))
    await agent.call("x")
    (request,) = model.agent_requests
    assert [p.name for p in request.system] == ["prompt"]
    assert "RUNTIME FACT" not in request.render()[0].text


async def test_sources_are_not_called_at_registration_but_at_every_preparation() -> None:
    calls: list[str] = []

    async def load(request: ContextRequest) -> list[ContextBlock]:
        calls.append(request.call_id)
        return []

    def noop() -> str:
        """Do nothing."""
        return "done"

    source = context_source("counted", load)
    agent, model = agent_with(source, replies=[ScriptedModel.tool_call("noop"), "ok"], tools=[noop])
    assert calls == []
    await agent.call("x")
    assert calls == [r.ids.call_id for r in model.agent_requests]
    assert len(calls) == 2


async def test_the_source_sees_the_request_ids() -> None:
    seen: list[ContextRequest] = []

    async def load(request: ContextRequest) -> list[ContextBlock]:
        seen.append(request)
        return []

    agent, model = agent_with(context_source("who", load))
    await agent.call("x", RuntimeContext(user_id="alice", session_id="fix-login-001"))
    (request,) = model.agent_requests
    assert seen == [
        ContextRequest(
            agent_id="agent",
            user_id="alice",
            session_id="fix-login-001",
            run_id=request.ids.run_id,
            call_id=request.ids.call_id,
            purpose="agent",
        )
    ]


async def test_material_is_refreshed_between_two_rounds_of_one_call() -> None:
    quota = {"left": 10}

    async def load(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.runtime("quota", f"remaining quota: {quota['left']}")]

    def spend(amount: int) -> str:
        """Spend quota.

        Args:
            amount: how much to spend.
        """
        quota["left"] -= amount
        return "spent"

    agent, model = agent_with(
        context_source("quota", load),
        replies=[ScriptedModel.tool_call("spend", {"amount": 3}), "ok"],
        tools=[spend],
    )
    await agent.call("x")
    first, second = model.agent_requests
    assert first.blocks[0].text == "remaining quota: 10"
    assert second.blocks[0].text == "remaining quota: 7"
    assert first.blocks[0].revision != second.blocks[0].revision


async def test_blocks_follow_registration_order_even_when_an_earlier_source_is_slower() -> None:
    started: list[str] = []

    def make(name: str, delay: float) -> ContextSource:
        async def load(request: ContextRequest) -> list[ContextBlock]:
            started.append(name)
            await anyio.sleep(delay)
            return [ContextBlock.reference("doc", name)]

        return context_source(name, load)

    agent, model = agent_with(make("slow", 0.05), make("fast", 0.0))
    await agent.call("x")
    assert started == ["slow", "fast"]
    assert [b.source_id for b in model.agent_requests[0].blocks] == [
        "source/slow/doc",
        "source/fast/doc",
    ]


async def test_an_empty_list_means_no_material() -> None:
    async def load(request: ContextRequest) -> list[ContextBlock]:
        return []

    agent, model = agent_with(context_source("empty", load))
    await agent.call("x")
    assert model.agent_requests[0].blocks == ()
    assert model.agent_requests[0].transforms == ()


async def failing_none(request: ContextRequest) -> SourceResult:
    return None


async def failing_raise(request: ContextRequest) -> SourceResult:
    raise ValueError("service down")


async def test_none_is_a_failure_that_stops_preparation() -> None:
    manifests: list[ContextManifest] = []
    agent, model = agent_with(context_source("flaky", failing_none), manifests=manifests)
    with pytest.raises(SourceError, match="returned None") as caught:
        await agent.call("x")
    assert caught.value.source == "flaky"
    assert caught.value.reason == "none"
    assert model.requests == []
    assert manifests[-1].validation == "build_failed"
    assert manifests[-1].error == "SourceError"


async def test_a_raising_source_stops_preparation() -> None:
    agent, model = agent_with(context_source("flaky", failing_raise))
    with pytest.raises(SourceError, match="service down") as caught:
        await agent.call("x")
    assert caught.value.reason == "error:ValueError"
    assert isinstance(caught.value.__cause__, ValueError)
    assert model.requests == []


@pytest.mark.parametrize(
    ("load", "reason"), [(failing_none, "none"), (failing_raise, "error:ValueError")]
)
async def test_an_omit_source_is_left_out_and_recorded(load: object, reason: str) -> None:
    async def other(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.runtime("fact", "kept")]

    manifests: list[ContextManifest] = []
    agent, model = agent_with(
        context_source("related-notes", load, on_failure="omit"),  # type: ignore[arg-type]
        context_source("other", other),
        manifests=manifests,
    )
    await agent.call("x")
    (request,) = model.agent_requests
    assert [b.source_id for b in request.blocks] == ["source/other/fact"]
    assert request.transforms == (f"source_unavailable:source/related-notes/:{reason}",)
    assert manifests[-1].transforms == request.transforms
    assert manifests[-1].validation == "passed"


async def test_omit_never_reuses_the_previous_value() -> None:
    answers: list[SourceResult] = [[ContextBlock.reference("note", "old value")], None]

    async def load(request: ContextRequest) -> SourceResult:
        return answers.pop(0)

    def noop() -> str:
        """Do nothing."""
        return "done"

    agent, model = agent_with(
        context_source("notes", load, on_failure="omit"),
        replies=[ScriptedModel.tool_call("noop"), "ok"],
        tools=[noop],
    )
    await agent.call("x")
    first, second = model.agent_requests
    assert [b.text for b in first.blocks] == ["old value"]
    assert second.blocks == ()
    assert second.transforms == ("source_unavailable:source/notes/:none",)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_slow_source_times_out_at_its_timeout(anyio_backend: str) -> None:
    seen: list[str] = []

    async def slow(request: ContextRequest) -> list[ContextBlock]:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            seen.append("cancelled")  # stopped by the timeout, not left running
            raise
        return []

    agent, model = agent_with(context_source("slow", slow, timeout=0.2))
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"timed out after 0\.2s") as caught:
        await agent.call("x")
    assert time.monotonic() - started >= 0.19  # it waited its timeout
    assert seen == ["cancelled"]
    assert caught.value.reason == "timeout"
    assert model.requests == []


async def test_a_slow_omit_source_is_left_out_after_its_timeout() -> None:
    seen: list[str] = []

    async def slow(request: ContextRequest) -> list[ContextBlock]:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            seen.append("cancelled")
            raise
        return [ContextBlock.reference("late", "never")]

    agent, model = agent_with(context_source("slow", slow, timeout=0.15, on_failure="omit"))
    started = time.monotonic()
    await agent.call("x")
    assert time.monotonic() - started >= 0.14 and seen == ["cancelled"]
    assert model.agent_requests[0].transforms == ("source_unavailable:source/slow/:timeout",)


async def test_a_failing_source_stops_the_other_loads_at_once() -> None:
    seen: list[str] = []

    async def slow(request: ContextRequest) -> list[ContextBlock]:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            seen.append("cancelled")  # the failure stopped it; it did not run to its end
            raise
        return []

    agent, _ = agent_with(context_source("slow", slow), context_source("flaky", failing_raise))
    with pytest.raises(SourceError) as caught:
        await agent.call("x")
    assert seen == ["cancelled"]
    assert caught.value.source == "flaky"


async def test_duplicate_block_ids_within_a_source_are_an_error_even_with_omit() -> None:
    async def load(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.reference("a", "1"), ContextBlock.reference("a", "2")]

    modes: tuple[OnFailure, ...] = ("fail", "omit")
    for on_failure in modes:
        agent, model = agent_with(context_source("dup", load, on_failure=on_failure))
        with pytest.raises(SourceError, match="two blocks with id 'a'") as caught:
            await agent.call("x")
        assert caught.value.reason == "duplicate_id"
        assert model.requests == []


async def test_the_same_block_id_in_two_sources_is_fine() -> None:
    agent, model = agent_with(
        fixed(ContextBlock.reference("a", "1")),
        context_source("second", _returning(ContextBlock.reference("a", "2"))),
    )
    await agent.call("x")
    assert [b.source_id for b in model.agent_requests[0].blocks] == [
        "source/fixed/a",
        "source/second/a",
    ]


def _returning(*blocks: ContextBlock) -> SourceLoader:
    async def load(request: ContextRequest) -> list[ContextBlock]:
        return list(blocks)

    return load


def test_duplicate_source_names_are_a_configuration_error() -> None:
    source = fixed()
    with pytest.raises(ConfigurationError, match="two context sources are named 'fixed'"):
        ContextSources(sources=[source, fixed()])


def test_omit_with_required_blocks_is_rejected_at_registration() -> None:
    with pytest.raises(ConfigurationError, match="cannot be on_failure='omit'"):
        context_source("x", failing_none, on_failure="omit", required=True)


async def test_an_omit_source_returning_a_required_block_fails_at_load_time() -> None:
    async def load(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.runtime("must", "x", required=True)]

    agent, model = agent_with(context_source("sneaky", load, on_failure="omit"))
    with pytest.raises(SourceError, match="required block") as caught:
        await agent.call("x")
    assert caught.value.reason == "required_from_omit"
    assert model.requests == []


@pytest.mark.parametrize("result", ["text", [ContextBlock.runtime("a", "1"), "not a block"]])
async def test_malformed_results_are_source_errors_even_with_omit(result: object) -> None:
    async def load(request: ContextRequest) -> object:
        return result

    agent, model = agent_with(context_source("bad", load, on_failure="omit"))  # type: ignore[arg-type]
    with pytest.raises(SourceError) as caught:
        await agent.call("x")
    assert caught.value.reason == "malformed"
    assert model.requests == []


async def test_a_sync_load_runs_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def load(request: ContextRequest) -> list[ContextBlock]:
        seen.append(threading.get_ident())
        return [ContextBlock.runtime("status", f"for {request.session_id}")]

    agent, model = agent_with(context_source("sync", load))
    await agent.call("x")
    assert seen and seen[0] != loop_thread
    assert [b.text for b in model.agent_requests[0].blocks] == ["for default"]


async def test_a_blocking_sync_source_stalls_no_other_session() -> None:
    def blocking(request: ContextRequest) -> list[ContextBlock]:
        time.sleep(0.3)  # a blocking client call, e.g. a sync database driver
        return [ContextBlock.runtime("slow", "done")]

    slow_agent, _ = agent_with(context_source("blocking", blocking))
    fast_agent, _ = agent_with()
    finished: list[str] = []
    ticks = 0

    async def call(agent: HarnessAgent, session: str) -> None:
        await agent.call("x", RuntimeContext(session_id=session))
        finished.append(session)

    async def tick() -> None:
        nonlocal ticks
        while "slow" not in finished:
            ticks += 1
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, slow_agent, "slow")
        tg.start_soon(tick)
        await anyio.sleep(0.05)  # the sync source is blocking in its thread by now
        tg.start_soon(call, fast_agent, "other")

    assert finished == ["other", "slow"]
    assert ticks >= 5  # a blocked event loop would have ticked once or twice


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_sync_source_still_times_out(anyio_backend: str) -> None:
    release = threading.Event()

    def stuck(request: ContextRequest) -> list[ContextBlock]:
        release.wait(10)
        return []

    agent, model = agent_with(context_source("stuck", stuck, timeout=0.2))
    try:
        with pytest.raises(SourceError, match=r"timed out after 0\.2s") as caught:
            await agent.call("x")
    finally:
        release.set()
    assert caught.value.reason == "timeout"
    assert model.requests == []


async def test_a_sync_load_returning_an_awaitable_is_awaited() -> None:
    async def fetch(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.reference("doc", "text")]

    def load(request: ContextRequest) -> Awaitable[list[ContextBlock]]:
        return fetch(request)

    agent, model = agent_with(context_source("wrapped", load))
    await agent.call("x")
    assert [b.source_id for b in model.agent_requests[0].blocks] == ["source/wrapped/doc"]


async def raise_cancelled(request: ContextRequest) -> list[ContextBlock]:
    raise anyio.get_cancelled_exc_class()()


async def test_a_required_source_raising_cancelled_itself_is_a_source_error() -> None:
    manifests: list[ContextManifest] = []
    agent, model = agent_with(
        context_source("policy", raise_cancelled, required=True), manifests=manifests
    )
    with pytest.raises(SourceError, match="without being cancelled from outside") as caught:
        await agent.call("x")
    assert caught.value.source == "policy"
    assert caught.value.reason == "error:CancelledError"
    assert model.requests == []
    assert manifests[-1].validation == "build_failed"


async def test_an_omit_source_raising_cancelled_itself_is_left_out_and_recorded() -> None:
    manifests: list[ContextManifest] = []
    agent, model = agent_with(
        context_source("notes", raise_cancelled, on_failure="omit"), manifests=manifests
    )
    await agent.call("x")
    (request,) = model.agent_requests
    assert request.transforms == ("source_unavailable:source/notes/:error:CancelledError",)
    assert manifests[-1].validation == "passed"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_cancelling_the_agent_call_cancels_in_flight_loads(anyio_backend: str) -> None:
    state = {"started": False, "cancelled": False}

    async def hang(request: ContextRequest) -> list[ContextBlock]:
        state["started"] = True
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            state["cancelled"] = True
            raise
        return []

    agent, model = agent_with(context_source("hang", hang, timeout=30))
    with anyio.move_on_after(0.1) as scope:
        await agent.call("x")
    assert scope.cancelled_caught
    assert state == {"started": True, "cancelled": True}
    assert model.requests == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "a/b"}, "source name"),
        ({"name": ""}, "source name"),
        ({"load": "nope"}, "load must be"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"on_failure": "ignore"}, "on_failure"),
    ],
)
def test_context_source_arguments_are_validated(kwargs: dict[str, object], match: str) -> None:
    arguments: dict[str, object] = {"name": "ok", "load": failing_none, **kwargs}
    with pytest.raises(ConfigurationError, match=match):
        context_source(**arguments)  # type: ignore[arg-type]


def test_only_context_sources_can_be_registered() -> None:
    with pytest.raises(ConfigurationError, match="context_source"):
        ContextSources(sources=[failing_none])  # type: ignore[list-item]


async def test_summary_requests_do_not_load_business_sources() -> None:
    calls: list[str] = []

    async def load(request: ContextRequest) -> list[ContextBlock]:
        calls.append(request.purpose)
        return [ContextBlock.runtime("a", "1")]

    received: list[ModelRequest] = []

    async def client(request: ModelRequest) -> ModelResponse:
        received.append(request)
        return await ScriptedModel(["ok"]).complete(request)

    handler = compose([ContextSources(sources=[context_source("s", load)])], client)
    policy = ContextPolicy().resolve("scripted")
    await handler(ModelRequest(model="scripted", ids=RequestIds(purpose="summary"), policy=policy))
    await handler(ModelRequest(model="scripted", ids=RequestIds(purpose="agent"), policy=policy))
    assert calls == ["agent"]
    assert [len(r.blocks) for r in received] == [0, 1]


async def test_a_source_failure_is_reported_as_a_context_build_event() -> None:
    agent, _ = agent_with(context_source("flaky", failing_raise))
    events: list[AgentEvent] = []
    with pytest.raises(SourceError):
        async for event in agent.stream_events("x"):
            events.append(event)
    builds = [e.manifest for e in events if e.kind == "context_build"]
    assert len(builds) == 1
    assert builds[0] is not None and builds[0].validation == "build_failed"
