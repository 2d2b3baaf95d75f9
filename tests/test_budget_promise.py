"""The budget promise, end to end: no request the model receives is over its limit by exact count.

Random histories of every script and encoding we know of (Hangul, Thai, Devanagari, emoji,
CJK extensions, base64, hex dumps, digit and whitespace runs …), sizes up to 90,000
characters, hostile and repeated tool-call ids, dangling calls and orphan results, run
through `HarnessAgent` with the default stack and small budgets. Every request the
`ScriptedModel` receives — the agent's and the summariser's — is counted with the family's
exact tokenizer, independently of the stack's own estimate. A refusal is accepted only when
it is justified: `ContextBudgetExceeded` only when System, the tool schemas, the pinned task
and the newest user message alone exceed the limit by exact count.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Sequence

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.shapes import SHAPES
from harness import (
    AgentState,
    ContextBudgetExceeded,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    RuntimeContext,
    ToolCall,
)
from harness.accounting import acounted_near_limit, estimate_request
from harness.tokens import approximate, exact_for_family
from middleware import PairValidation, default_stack
from providers import ScriptedModel
from tests._texts import KINDS, generate

EXACT = exact_for_family("o200k")
MODEL = "gpt-4o"  # an o200k model: its exact tokenizer ships offline


HOSTILE_IDS = ["../../etc/passwd", "x" * 1500, "调用/1", "", "a b\nc", "call_1", "call_1"]


@st.composite
def texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(KINDS))
    n = draw(st.sampled_from([0, 5, 60, 400, 3_000, 20_000, 90_000]))
    return generate(kind, n, draw(st.integers(0, 2**16)))


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """A history with every kind of content and, sometimes, broken pairs and hostile ids."""
    out = [Message.user(draw(texts()) or "start")]
    for turn in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["tools", "tools", "text", "user", "dangling", "orphan"]))
        if kind == "user":
            out.append(Message.user(draw(texts()) or "next"))
        elif kind == "text":
            out.append(Message.assistant(draw(texts()) or "ok"))
        elif kind == "orphan":
            out.append(Message.tool(f"orphan{turn}", draw(texts()), name="shell"))
        else:
            calls = [
                ToolCall(
                    id=draw(st.sampled_from([*HOSTILE_IDS, f"c{turn}_{k}"])),
                    name="shell",
                    arguments=json.dumps({"cmd": draw(texts())[:3000]}, ensure_ascii=False),
                )
                for k in range(draw(st.integers(1, 3)))
            ]
            out.append(Message.assistant(None, tool_calls=calls))
            if kind == "tools":
                out.extend(Message.tool(c.id, draw(texts()), name=c.name) for c in calls)
    return out


def pairs_valid(history: Sequence[Message]) -> bool:
    open_calls: list[str] = []
    for message in history:
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                return False
            open_calls.remove(message.tool_call_id)
            continue
        if open_calls:
            return False
        open_calls = [c.id for c in message.tool_calls]
    return not open_calls


def shell(cmd: str) -> str:
    """Run a shell command.

    Args:
        cmd: the command line.
    """
    return f"ran {cmd}"


def minimum_exceeds(agent: HarnessAgent, history: Sequence[Message], limit: int) -> bool:
    """Whether System, tools, the pinned task and the newest user message exceed ``limit``."""
    pinned = [history[0]] if history and history[0].role == "user" else []
    newest = [m for m in history if m.role == "user"][-1:]
    minimum = ModelRequest(
        model=MODEL,
        system=agent._system,
        history=tuple(dict.fromkeys([*pinned, *newest])),
        tools=agent._schemas,
        policy=ContextPolicy().resolve(MODEL),
        input_limit=limit,
    )
    return estimate_request(minimum, EXACT) > limit


def run(history: list[Message], limit: int) -> None:
    model = ScriptedModel(model=MODEL, window=200_000, default="ok")
    with tempfile.TemporaryDirectory() as folder:
        agent = HarnessAgent(
            model=model,
            system_prompt="SYSTEM-RULES: be careful.",
            tools=[shell],
            stack=default_stack(pairs=PairValidation(mode="repair")),
            policy=ContextPolicy(max_input_tokens=limit),
            workspace=folder,
            keep_full_history=True,  # the oracle reads the full history as added (not redacted)
        )
        ctx = RuntimeContext(user_id="u", session_id="s")
        agent.states[agent.key(ctx)] = AgentState(
            session_id="s", full_history=list(history), working_history=list(history)
        )
        try:
            anyio.run(agent.call, "continue", ctx)
        except ContextBudgetExceeded:
            everything = agent.state(ctx).full_history
            assert minimum_exceeds(agent, everything, limit), "refused although the minimum fits"
            return
        finally:
            for request in model.requests:
                exact = estimate_request(request, EXACT)
                assert exact <= request.input_limit, (
                    f"a {request.ids.purpose} request of {exact} tokens (exact) was sent "
                    f"against a limit of {request.input_limit}"
                )
                if request.ids.purpose == "agent":
                    assert pairs_valid(request.history)
                    assert request.system[0].text.startswith("SYSTEM-RULES")
        full = agent.state(ctx).full_history
        assert [(m.id, m.content) for m in full[: len(history)]] == [
            (m.id, m.content) for m in history
        ]
        assert model.agent_requests, "the agent sent nothing and raised nothing"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(histories(), st.sampled_from([3_000, 8_000, 16_000, 40_000]))
def test_every_request_fits_by_exact_count(history: list[Message], limit: int) -> None:
    run(history, limit)


def test_a_tool_result_of_hangul_under_a_small_limit_is_not_sent_over_budget() -> None:
    hangul = generate("hangul", 20_000, 1)
    call = ToolCall(id="c1", name="shell", arguments='{"cmd": "cat notes.txt"}')
    history = [
        Message.user("read the notes"),
        Message.assistant(None, tool_calls=[call]),
        Message.tool("c1", hangul, name="shell"),
        Message.assistant("I read them."),
    ]
    run(history, 16_000)


def test_accented_words_at_a_32000_limit_are_not_sent_over_it() -> None:
    """Issue 21: random accented words cost 0.40x their exact tokens by the estimate.

    66,000 characters of them estimate under 0.6 x 32,000 (the old fast path's "fits for
    sure") and are about 43,000 tokens by exact count: the old stack sent them at a 32,000
    limit. By construction now, not by a floor fitted on the shapes we thought of.
    """
    latin = SHAPES["latin"](random.Random(7), 66_000)
    assert estimate_request_text(latin) < 0.6 * 32_000 < 32_000 < EXACT.count(latin)
    run([Message.user(latin), Message.assistant("I read it.")], 32_000)


def estimate_request_text(text: str) -> int:
    """The default estimator's count of ``text`` (what the old fast path decided on)."""
    return approximate("o200k").count(text)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_counting_a_16_mb_message_never_stops_the_event_loop(anyio_backend: str) -> None:
    """Issue 21: counting 16 MB of one character held the loop for 12-14 s.

    A ticker on the same loop keeps ticking while BudgetFit's counting entry point
    (`count_off_loop`, then `counted_near_limit`) counts it: estimate, ceiling and the exact
    count (it is over the limit) all run in a worker thread. A behaviour test, not a speed
    target: the bound on the gap is generous.
    """
    huge = Message.user("q" * 16_000_000 + anyio_backend)  # its own content: nothing cached
    policy = ContextPolicy().resolve(MODEL)
    # A limit the estimate is near (not over it by far: `FAR_OVER`), so the exact count
    # decides; the estimate is made here first, so the thread's work is the exact count.
    limit = policy.estimator.count_message(huge) if policy.estimator is not None else 0
    request = ModelRequest(model=MODEL, history=(huge,), policy=policy, input_limit=limit)
    EXACT.count("warm")  # the tokenizer loaded (that too happens off the loop, once)
    gaps: list[float] = []
    done = anyio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await anyio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ticker)
        counted, tokens = await acounted_near_limit(request)
        done.set()
    assert counted.estimator.exact and tokens > 0
    assert len(gaps) > 10 and max(gaps) < 1.0, f"the loop stopped for {max(gaps):.2f} s"
