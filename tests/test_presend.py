"""The pre-send check (`harness.presend`) on agent requests and on summary requests.

Each test asserts on what the scripted model actually received (``model.requests``).
"""

from __future__ import annotations

import random

import pytest

from harness import (
    ContextBudgetExceeded,
    HarnessAgent,
    Message,
    ModelRequest,
    RuntimeContext,
    compose,
)
from harness.accounting import estimate_request
from harness.errors import InvalidToolPairs
from harness.messages import ToolCall
from harness.policy import requested_output
from harness.presend.pairs import check_pairs
from harness.request import RunScope
from harness.tokens import estimator_for
from middleware import Compaction, PairValidation, default_stack
from middleware.compaction._in_place import IN_PLACE_PROMPT
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")
EXACT = estimator_for("gpt-4o", exact=True)
_WORDS = [
    "build",
    "test",
    "error",
    "file",
    "path",
    "value",
    "result",
    "output",
    "trace",
    "warning",
    "module",
]


def text(words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) + str(rng.randint(0, 99)) for _ in range(words))


def summaries(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.ids.purpose == "summary"]


def exact_tokens(request: ModelRequest) -> int:
    return estimate_request(request.replace(run=None), EXACT)


def in_place(request: ModelRequest) -> bool:
    return request.history[-1].text == IN_PLACE_PROMPT


async def test_an_in_place_summary_asks_no_more_output_than_the_window_leaves() -> None:
    # A 128k window and a long conversation of texts (nothing to trim): the in-place summary
    # asked for its summary cap (~30k tokens) on top of a prefix sized to the agent's limit
    # (which reserved 4k), 113k + 30k > 128k. Now its max_tokens is reserved from its input.
    model = ScriptedModel(["done"], model="gpt-4o", window=128_000, summary="SUMMARY")
    agent = HarnessAgent(model=model, stack=default_stack(compaction=Compaction(memory=None)))
    agent.state(CTX).append(
        *(
            Message.user(text(1_200, i)) if i % 2 == 0 else Message.assistant(text(1_200, i))
            for i in range(70)
        )
    )
    await agent.call("go on", CTX)
    asks = summaries(model)
    assert asks and in_place(asks[0])
    for ask in asks:
        asked = requested_output(ask.settings)
        assert asked is not None
        assert exact_tokens(ask) + asked <= 128_000
    assert model.agent_requests[-1].history[0].text.endswith("SUMMARY")


async def test_an_in_place_summary_of_a_history_with_broken_pairs_is_sent_repaired() -> None:
    # An orphan result and a dangling call in the early part (what acompletion callers
    # send): the in-place summary request carries that history, and reached the model with
    # the broken pairs before PairValidation ever saw a request. Now it is repaired.
    calls = [
        m
        for i in range(6)
        for m in (
            Message.assistant(
                None,
                tool_calls=[ToolCall(id=f"c{i}", name="shell", arguments="{}")],
                reasoning_content=f"thinking {i}",
                id=f"a{i}",
            ),
            Message.tool(f"c{i}", f"output {i}", name="shell"),
        )
    ]
    dangling = Message.assistant(
        None,
        tool_calls=[ToolCall(id="lost", name="shell", arguments="{}")],
        reasoning_content="why",
        id="dangling",
    )
    history = [
        Message.user("the task"),
        Message.tool("gone", "a result whose call is not here", name="shell"),
        *calls[:4],
        dangling,
        Message.user("and then"),
        *calls[4:],
    ]
    model = ScriptedModel(["done"], model="gpt-4o", summary="SUMMARY")
    compaction = Compaction(
        trigger_messages=10, keep_tokens=0, keep_messages=4, trim_min_tokens=None, memory=None
    )
    stack = default_stack(compaction=compaction, pairs=PairValidation(mode="repair"))
    agent = HarnessAgent(model=model, stack=stack)
    agent.state(CTX).append(*history)
    await agent.call("go on", CTX)
    (ask,) = summaries(model)
    assert in_place(ask) and check_pairs(ask.history).ok
    assert "pair_repair:orphan:gone" in ask.transforms
    assert "pair_repair:dangling:lost" in ask.transforms
    sent = {m.id: m for m in ask.history}
    assert sent["dangling"].reasoning_content == "why"  # reasoning stays on every turn
    assert all(sent[f"a{i}"].reasoning_content == f"thinking {i}" for i in range(2))
    assert all(check_pairs(r.history).ok for r in model.requests)


async def test_max_tokens_above_the_models_output_limit_is_lowered_for_every_request() -> None:
    # The agent's max_tokens is over what the model answers with (a provider refuses it),
    # and a separate summariser with a small output limit got no max_tokens at all.
    summariser = ScriptedModel(model="gpt-4o-mini", window=64_000, max_output=1_000)
    model = ScriptedModel(["done"], model="gpt-4o", window=128_000, max_output=16_384)
    compaction = Compaction(
        trigger_messages=10, keep_tokens=0, keep_messages=4, model=summariser, memory=None
    )
    agent = HarnessAgent(
        model=model, stack=default_stack(compaction=compaction), settings={"max_tokens": 50_000}
    )
    agent.state(CTX).append(*(Message.user(f"note {i}") for i in range(12)))
    await agent.call("go on", CTX)
    (sent,) = model.agent_requests
    assert sent.settings == {"max_tokens": 16_384}
    assert "max_tokens_clamped:16384" in sent.transforms
    asks = summariser.requests
    assert asks and all(0 < (requested_output(r.settings) or 0) <= 1_000 for r in asks)


async def test_the_innermost_handler_refuses_broken_pairs_without_pair_validation() -> None:
    # A stack without PairValidation sent a dangling call as it was.
    model = ScriptedModel(["ok"])
    chain = compose([], model.complete)
    call = Message.assistant(None, tool_calls=[ToolCall(id="c1", name="shell", arguments="{}")])
    request = ModelRequest(model="scripted", history=(Message.user("go"), call))
    with pytest.raises(InvalidToolPairs) as caught:
        await chain(request)
    assert caught.value.dangling_calls == ("c1",) and model.requests == []


async def test_a_request_whose_max_tokens_leaves_its_prompt_no_room_is_not_sent() -> None:
    # The input limit was set for a smaller max_tokens; the window counts as it is asked.
    model = ScriptedModel(["ok"], model="gpt-4o", window=8_000)
    chain = compose([], model.complete)
    request = ModelRequest(
        model="gpt-4o",
        history=(Message.user(text(1_500, 1)),),
        settings={"max_tokens": 6_000},
        input_limit=6_000,
        run=RunScope(client=model),
    )
    assert exact_tokens(request) > 2_000  # prompt + max_tokens > 8,000
    with pytest.raises(ContextBudgetExceeded) as caught:
        await chain(request)
    assert caught.value.limit == 2_000 and model.requests == []
    fits = request.replace(settings={"max_tokens": 1_000})
    await chain(fits)
    (sent,) = model.requests
    assert exact_tokens(sent) + 1_000 <= 8_000
