"""The whole path over real HTTP: agent → default stack → LiteLLMClient → litellm → server.

Overflow recovery, calibration from reported usage, and the ``make run`` demo on a "real"
provider all run here against the local OpenAI-compatible server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ContextManifest,
    ContextOverflowError,
    ContextPolicy,
    HarnessAgent,
    Message,
    RuntimeContext,
    estimator_for,
)
from middleware import default_stack
from providers import LiteLLMClient

from .openai_server import (
    OpenAIServer,
    Raw,
    Reply,
    ToolCallSpec,
    context_length_exceeded,
    reply,
    tool_call,
)

pytestmark = pytest.mark.integration

CTX = RuntimeContext(session_id="e2e")


def _client(server: OpenAIServer) -> LiteLLMClient:
    return LiteLLMClient("openai/e2e-model", api_base=server.base_url, api_key="test")


def _agent_with_history(
    server: OpenAIServer, tmp_path: Path, tools: list[Callable[..., Any]] | None = None
) -> HarnessAgent:
    agent = HarnessAgent(
        model=_client(server),
        tools=tools or [],
        stack=default_stack(),
        workspace=str(tmp_path),
        policy=ContextPolicy(max_input_tokens=60_000),
    )
    earlier = []
    for i in range(20):
        earlier += [
            Message.user(f"earlier question {i} " * 20),
            Message.assistant(f"earlier answer {i} " * 20),
        ]
    agent.state(CTX).append(*earlier)
    return agent


async def test_a_real_context_length_exceeded_400_compacts_and_retries_once(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    runs: list[str] = []

    def probe() -> str:
        """Count executions."""
        runs.append("ran")
        return "probed"

    openai_server.push(
        tool_call("probe", {}),  # round 1: a tool runs once
        context_length_exceeded(),  # round 2: the provider overflows
        reply("## Goal\nsummary of the early conversation"),  # the compaction summary
        reply("done after compaction"),  # round 2, retried
    )
    agent = _agent_with_history(openai_server, tmp_path, tools=[probe])
    answer = await agent.call("go on", CTX)
    assert answer.text == "done after compaction"
    assert runs == ["ran"]  # the tool was not re-run by the retry
    bodies = openai_server.requests
    assert len(bodies) == 4
    overflowed, retried = bodies[1]["messages"], bodies[3]["messages"]
    assert len(retried) < len(overflowed)
    assert any("summary of the early conversation" in str(m.get("content")) for m in retried)
    assert (
        sum("go on" in str(m.get("content")) for m in retried) == 1
    )  # the task is not re-submitted
    # user, call, result, answer: nothing lost from the full record
    assert len(await agent.history(CTX)) == 40 + 4


async def test_an_overflow_on_the_retry_too_reaches_the_caller(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.push(context_length_exceeded(), reply("summary"), context_length_exceeded())
    agent = _agent_with_history(openai_server, tmp_path)
    with pytest.raises(ContextOverflowError):
        await agent.call("go on", CTX)
    assert openai_server.pending == 0


async def test_calibration_converges_to_a_provider_counting_20_percent_more(
    tmp_path: Path,
) -> None:
    seen: list[ContextManifest] = []

    def echo(text: str) -> str:
        """Echo text."""
        return text

    with OpenAIServer(token_factor=1.2) as server:
        server.push(
            *[tool_call("echo", {"text": f"step {i} " * 30}) for i in range(6)], reply("done")
        )
        agent = HarnessAgent(
            model=_client(server),
            tools=[echo],
            stack=default_stack(),
            workspace=str(tmp_path),
            # Our count is exact o200k; the server's is that tokenizer × 1.2.
            policy=ContextPolicy(
                estimator=estimator_for("gpt-4o", exact=True), calibrate=True, observer=seen.append
            ),
        )
        await agent.call("calibrate", CTX)
    factors = [m.calibration for m in seen]
    assert factors[0] == 1.0 and len(factors) == 7
    final = agent.state(CTX).calibration["openai/e2e-model"]
    assert abs(final - 1.2) / 1.2 <= 0.03
    assert all(0.7 <= f <= 2.0 for f in factors)
    assert abs(factors[5] - final) / final <= 0.03  # converged within 5 rounds
    assert seen[5].counting_method.endswith("*calibrated")


async def test_the_demo_runs_on_a_real_provider_path(
    openai_server: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli.demo import run_demo

    openai_server.push(tool_call("list_files", {"folder": ""}), reply("All done."))
    status = await run_demo(
        model="openai/e2e-model",
        api_base=openai_server.base_url,
        api_key="test",
        workspace=str(tmp_path),
    )
    out = capsys.readouterr().out
    assert status == 0
    assert "model openai/e2e-model via litellm" in out
    assert out.count("validation passed") == 2
    assert "assistant: All done." in out


async def test_a_429_with_retry_after_does_not_end_the_agent_call(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """One rate limit used to end the call; the client now waits what the provider asks."""
    openai_server.push(
        Raw(
            status=429,
            body={"error": {"message": "Rate limit reached for requests", "code": "rate_limit"}},
            headers={"retry-after": "0.01"},
        ),
        reply("answered after the rate limit"),
    )
    agent = HarnessAgent(
        model=_client(openai_server), stack=default_stack(), workspace=str(tmp_path)
    )

    events = [e async for e in agent.stream_events("hello", CTX)]

    final = events[-1].message
    assert final is not None and final.text == "answered after the rate limit"
    assert len(openai_server.requests) == 2
    warnings = [e for e in events if e.kind == "warning"]
    assert [(e.code, e.text) for e in warnings] == [("provider_retry", "provider_retry:429:0.01s")]
    assert final.metadata is None  # the record is on the response, not in the history


async def test_a_summary_is_asked_in_place_over_the_agents_own_prefix(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """Through litellm, the summary request starts as the agent's previous request did:
    the same tools and messages (a provider's prompt cache serves them), then one
    instruction, with ``tool_choice: none`` and the output capped."""
    from middleware import Compaction

    rounds = {"agent": 0}

    def answer(body: dict[str, Any]) -> Reply:
        if body.get("tool_choice") == "none":
            return Reply(text="## Session goal\nRun the commands.")
        rounds["agent"] += 1
        if rounds["agent"] <= 8:
            return Reply(tool_calls=(ToolCallSpec(name="shell", arguments={"n": rounds["agent"]}),))
        return Reply(text="done")

    def shell(n: int) -> str:
        """Run a command.

        Args:
            n: which one.
        """
        return f"output {n}\n" * 40

    openai_server.default = answer
    compaction = Compaction(trigger_messages=10, keep_tokens=0, keep_messages=4, memory=None)
    agent = HarnessAgent(
        model=_client(openai_server),
        tools=[shell],
        stack=default_stack(compaction=compaction),
        workspace=str(tmp_path),
    )
    assert (await agent.call("run the commands", CTX)).text == "done"

    bodies = openai_server.requests
    at = next(i for i, b in enumerate(bodies) if b.get("tool_choice") == "none")
    summary, previous = bodies[at], bodies[at - 1]
    assert summary["tools"] == previous["tools"] and summary["max_tokens"] > 0
    asked = summary["messages"]
    assert "do not call any tool" in asked[-1]["content"]
    assert asked[:-1] == previous["messages"][: len(asked) - 1]
    after = bodies[at + 1]["messages"]
    assert any("Run the commands." in str(m.get("content")) for m in after)
