"""Every request the model receives passes the pre-send check: agent requests and summaries.

A fuzz over random histories — orphan results, dangling calls, big tool outputs,
``reasoning_content`` — random windows, model output limits and ``max_tokens``, with the
in-place, the transcript and a separate-model summariser. Each run goes through the real
agent loop and the default stack; the scripted clients record every request they receive,
and each one is checked with the family's exact tokenizer: pairs valid, reasoning kept,
prompt + ``max_tokens`` within the window, ``max_tokens`` within the model's output limit.
"""

from __future__ import annotations

import contextlib
import random
from typing import Literal

import msgspec
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from harness import ContextPolicy, HarnessAgent, Message, ModelRequest, RuntimeContext
from harness.accounting import estimate_request
from harness.errors import ConfigurationError, ContextBuildError, ProviderError
from harness.messages import ToolCall
from harness.policy import requested_output
from harness.presend.pairs import check_pairs
from harness.tokens import estimator_for
from middleware import Compaction, PairValidation, default_stack
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")
Summariser = Literal["in_place", "transcript", "separate"]

_WORDS = tuple(
    [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "build",
        "test",
        "error",
        "passed",
        "failed",
        "file",
        "path",
        "src",
        "main",
        "config",
        "value",
        "return",
        "function",
        "class",
        "import",
        "module",
        "result",
        "output",
        "line",
        "trace",
        "warning",
        "42",
        "7",
        "1999",
        "0x1f",
        "lorem",
        "ipsum",
        "dolor",
        "amet",
        "コード",
        "测试",
        "данные",
    ]
)


class Case(msgspec.Struct, frozen=True, kw_only=True):
    """One fuzzed run: the model's limits, the request settings and the history's shape."""

    window: int
    max_output: int
    max_tokens: int | None
    summariser: Summariser
    pairs: Literal["fail", "repair"]
    units: tuple[tuple[str, int, int], ...]
    """(kind, size in words, calls or seed) per unit."""
    seed: int


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def history_of(case: Case) -> tuple[Message, ...]:
    """Return the history a case describes (deterministic in its seed)."""
    rng = random.Random(case.seed)
    out: list[Message] = []
    for index, (kind, size, calls) in enumerate(case.units):
        if kind == "user":
            out.append(Message.user(_text(rng, size)))
        elif kind == "assistant":
            out.append(
                Message.assistant(_text(rng, size), reasoning_content=_text(rng, 12) or None)
            )
        elif kind == "orphan":  # a result whose call is not in the history
            out.append(Message.tool(f"gone{index}", _text(rng, size), name="shell"))
        else:  # calls: some answered, some dangling (the last unit often), big outputs
            ids = [f"c{index}_{k}" for k in range(calls)]
            out.append(
                Message.assistant(
                    None,
                    tool_calls=[
                        ToolCall(id=i, name="shell", arguments=f'{{"command": "cmd {i}"}}')
                        for i in ids
                    ],
                    reasoning_content=_text(rng, 8),
                )
            )
            for k, call_id in enumerate(ids):
                if kind == "dangling" and k == calls - 1:
                    continue
                out.append(Message.tool(call_id, _text(rng, size), name="shell"))
    return tuple(out)


def random_case(rng: random.Random) -> Case:
    """Draw a case; its history is often over its budget (so Compaction summarises).

    From a plain `random.Random`, so a measurement outside pytest draws the same cases as
    the property test (whose ``Random`` hypothesis controls).
    """
    window = rng.randint(6_000, 160_000)
    share = None if rng.random() < 0.3 else rng.uniform(0.01, 0.4)
    kinds = ["user", "assistant", "calls", "calls", "dangling", "orphan"]
    return Case(
        window=window,
        max_output=rng.randint(400, 12_000),
        max_tokens=None if share is None else max(16, int(window * share)),
        summariser=rng.choice(["in_place", "transcript", "separate"]),
        pairs=rng.choice(["fail", "repair"]),
        units=tuple(
            (rng.choice(kinds), rng.randint(5, 6_000), rng.randint(1, 3))
            for _ in range(rng.randint(2, 30))
        ),
        seed=rng.randint(0, 2**16),
    )


def violations(request: ModelRequest, client: ScriptedModel, reasoning: set[str]) -> list[str]:
    """Return what is wrong with one received request (empty: nothing)."""
    found = []
    if not check_pairs(request.history).ok:
        found.append("pairs")
    if any(
        m.role == "assistant" and m.id in reasoning and not m.reasoning_content
        for m in request.history
    ):
        found.append("reasoning")
    exact = estimate_request(request.replace(run=None), estimator_for(request.model, exact=True))
    asked = requested_output(request.settings)
    # Without max_tokens the room kept for the answer is the policy's reserve for this window.
    reserve = asked if asked is not None else request.policy.output_reserve(client.window)
    if client.window is not None and exact + reserve > client.window:
        found.append("window")
    if asked is not None and client.max_output is not None and asked > client.max_output:
        found.append("max_output")
    return found


async def run_case(case: Case) -> list[tuple[str, list[str]]]:
    """Run one case through the agent; return (purpose, violations) per received request."""
    model = ScriptedModel(
        model="gpt-4o", window=case.window, max_output=case.max_output, default="done"
    )
    other = ScriptedModel(model="gpt-4o-mini", window=case.window // 2 + 4_000, max_output=2_000)
    compaction = Compaction(
        model=other if case.summariser == "separate" else None,
        in_place_summary=case.summariser == "in_place",
        memory=None,
    )
    stack = default_stack(compaction=compaction, pairs=PairValidation(mode=case.pairs))
    history = history_of(case)
    reasoning = {m.id for m in history if m.role == "assistant" and m.reasoning_content}
    try:
        agent = HarnessAgent(
            model=model,
            system_prompt="You are a careful engineer.",
            stack=stack,
            policy=ContextPolicy(),
            settings={"max_tokens": case.max_tokens} if case.max_tokens else None,
            max_rounds=2,
        )
    except ConfigurationError:  # max_tokens leaves no room in the window: refused up front
        return []
    agent.state(CTX).append(*history)
    with contextlib.suppress(ContextBuildError, ProviderError):
        await agent.call("go on", CTX)  # refusing is allowed; sending something broken is not
    return [
        (r.ids.purpose, violations(r, client, reasoning))
        for client in (model, other)
        for r in client.requests
    ]


@settings(
    max_examples=40,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],  # explain: too slow
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rng=st.randoms(use_true_random=False))
async def test_every_request_the_model_receives_passes_the_presend_check(
    rng: random.Random,
) -> None:
    received = await run_case(random_case(rng))
    broken = [(purpose, found) for purpose, found in received if found]
    assert not broken, f"{len(broken)} of {len(received)} requests broke the promises: {broken}"
