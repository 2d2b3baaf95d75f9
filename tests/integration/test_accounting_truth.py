"""Our request estimate against the truth: the exact tokenizer over the OpenAI chat format.

The local OpenAI-compatible server counts ``usage.prompt_tokens`` with tiktoken ``o200k_base``
over the JSON litellm sends, framed as OpenAI's cookbook describes for gpt-4o (3 tokens per
message, 1 more for a name, 3 priming the reply). `estimate_request` with the exact o200k
estimator must be an upper bound of that count, tight within a few tokens per message: that
checks `REPLY_PRIMING`, `MESSAGE_OVERHEAD` and the blocks' framing (`blocks_framing`,
`BLOCKS_FRAMING`) against the truth rather than against our own counter.
`ScriptedModel.prompt_tokens` (what ``overflow_above`` compares with) must count exactly what
the server counts.

Tool schemas are left out of the bound: the server counts them as the JSON of the ``tools``
list, which is its own convention, not OpenAI's (the cookbook's tool rule is smaller still).
"""

from __future__ import annotations

import json
import random

import pytest

from harness.accounting import BLOCKS_FRAMING, REPLY_PRIMING, blocks_framing, estimate_request
from harness.blocks import ContextBlock
from harness.messages import Message, ToolCall
from harness.request import ModelRequest, SystemPart, render_blocks
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator, estimator_for
from providers.litellm_client import LiteLLMClient
from providers.scripted import ScriptedModel

from .openai_server import OpenAIServer, count_prompt_tokens, count_tokens

pytestmark = pytest.mark.integration

MODEL = "openai/gpt-4o"
SYSTEM = (SystemPart(name="prompt", text="You are terse."),)
PER_MESSAGE = 3
"""How many tokens above the truth the estimate may be per rendered message."""
PER_CALL = 5
"""…and per tool call: our framing of a call (8) is above the server's (3)."""
PER_BLOCK = 2
"""…and per block (the blocks' own separators, which merge with their neighbours)."""


def exact() -> TokenEstimator:
    return estimator_for("gpt-4o", exact=True)


def body(request: ModelRequest) -> dict[str, object]:
    """The chat-completions body of ``request`` without tools (what the messages count)."""
    return {"messages": [m.to_openai() for m in request.render()]}


def slack(request: ModelRequest) -> int:
    """How far above the truth the estimate of ``request`` may be."""
    rendered = request.render()
    calls = sum(len(m.tool_calls) for m in rendered)
    return PER_MESSAGE * len(rendered) + PER_CALL * calls + PER_BLOCK * len(request.blocks)


def tool_history() -> tuple[Message, ...]:
    history = [Message.user("Please list the files in the repo and fix the failing test.")]
    for i in range(6):
        call = ToolCall(
            id=f"call_{i}", name="bash", arguments=json.dumps({"command": f"ls -la src/m_{i}"})
        )
        history.append(Message.assistant("Let me look." if i % 2 else None, tool_calls=[call]))
        history.append(
            Message(
                role="tool",
                content=f"total {i}\n-rw-r--r-- 1 root root 120 file_{i}.py\n",
                tool_call_id=f"call_{i}",
                name="bash",
            )
        )
    history.append(Message.assistant("Done: the test passes."))
    return tuple(history)


STABLE = ContextBlock.reference(
    "readme", source_id="workspace:README.md", text="# Project\nA small library.\n", stable=True
)
TASK = ContextBlock.runtime(
    "task", source_id="task", text="Fix the failing test.", placement="TASK_STATE"
)
RUNTIME = ContextBlock.runtime("mode", source_id="mode/plan", text="Plan mode is off.")
SOURCE = ContextBlock.reference("docs", source_id="source:docs", text="The API returns JSON.")

CASES: dict[str, ModelRequest] = {
    "one user message": ModelRequest(model=MODEL, history=(Message.user("hi"),)),
    "system and user": ModelRequest(model=MODEL, system=SYSTEM, history=(Message.user("hi"),)),
    "two system parts": ModelRequest(
        model=MODEL,
        system=(*SYSTEM, SystemPart(name="rules", text="Answer in English. Never use markdown.")),
        history=(Message.user("hi"),),
    ),
    "names": ModelRequest(
        model=MODEL,
        system=SYSTEM,
        history=(Message.user("hi", name="alice"), Message.assistant("hello", name="bot")),
    ),
    "tool calls and results": ModelRequest(model=MODEL, system=SYSTEM, history=tool_history()),
    "one changing block": ModelRequest(
        model=MODEL, system=SYSTEM, history=(Message.user("hi"),), blocks=(SOURCE,)
    ),
    "a stable block and three sections": ModelRequest(
        model=MODEL,
        system=SYSTEM,
        history=tool_history(),
        blocks=(STABLE, TASK, RUNTIME, SOURCE),
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_estimate_bounds_what_the_server_counts_and_stays_close(
    openai_server: OpenAIServer, name: str
) -> None:
    request = CASES[name]
    client = LiteLLMClient(MODEL, api_base=openai_server.base_url, api_key="test", timeout=5)
    response = await client.complete(request)
    assert response.usage is not None
    truth = response.usage.prompt_tokens
    assert truth == count_prompt_tokens(openai_server.last_request)
    assert ScriptedModel.prompt_tokens(request) == truth  # overflow_above's measure
    estimate = estimate_request(request, exact())
    assert truth <= estimate <= truth + slack(request), (truth, estimate, slack(request))


def test_plain_messages_are_counted_exactly() -> None:
    # No System parts, names, calls or blocks: REPLY_PRIMING and MESSAGE_OVERHEAD are all the
    # framing there is, and the estimate is the truth to the token.
    history = (Message.user("hi"), Message.assistant("Hello! How can I help?"), Message.user("x"))
    request = ModelRequest(model=MODEL, history=history)
    assert estimate_request(request, exact()) == count_prompt_tokens(body(request))
    assert count_prompt_tokens({"messages": []}) == REPLY_PRIMING
    for role in ("system", "user", "assistant", "tool"):
        one = count_prompt_tokens({"messages": [{"role": role, "content": ""}]})
        assert one - REPLY_PRIMING == MESSAGE_OVERHEAD  # 3 of framing and the role's token


def test_each_section_tag_costs_what_its_framing_says() -> None:
    for placement, block in (("TASK_STATE", TASK), ("RUNTIME_STATE", RUNTIME)):
        assert block.where == placement
        tags = count_tokens(f"<{placement}>\n") + count_tokens(f"\n</{placement}>")
        assert blocks_framing((block,)) == MESSAGE_OVERHEAD + tags + 1
    assert blocks_framing((STABLE, TASK, RUNTIME, SOURCE)) == BLOCKS_FRAMING
    assert blocks_framing(()) == 0


def _random_block(rng: random.Random, i: int) -> ContextBlock:
    words = [
        "the",
        "API",
        "returns",
        "JSON",
        "file",
        "path",
        "error",
        "test",
        "]",
        "[",
        "<",
        ">",
        "</",
        "\n",
    ]
    text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
    text += rng.choice(["", "\n", ".", "\n\n", " ", "]", ">"])
    source = rng.choice(["task", "mode/plan", f"source:docs/{i}", f"fragment:x{i}@1", "x"])
    kind = rng.choice(["stable", "task", "runtime", "reference"])
    if kind == "stable":
        return ContextBlock.reference(f"b{i}", source_id=source, text=text, stable=True)
    if kind == "task":
        return ContextBlock.runtime(f"b{i}", source_id=source, text=text, placement="TASK_STATE")
    if kind == "runtime":
        return ContextBlock.runtime(f"b{i}", source_id=source, text=text)
    return ContextBlock.reference(f"b{i}", source_id=source, text=text)


def test_any_mix_of_blocks_is_bounded_by_its_estimate() -> None:
    # The blocks' share of a request: the truth (with blocks minus without) never exceeds the
    # estimate's, whichever placements are present. 2 * (MESSAGE_OVERHEAD + 6), the framing
    # before, fell 23 tokens short with a stable block and three changing sections.
    rng = random.Random(7)
    est = exact()
    plain = ModelRequest(model=MODEL, history=(Message.user("hi"),))
    base = count_prompt_tokens(body(plain))
    for _ in range(300):
        blocks = tuple(_random_block(rng, i) for i in range(rng.randint(1, 8)))
        request = plain.replace(blocks=blocks)
        truth = count_prompt_tokens(body(request)) - base
        estimate = estimate_request(request, est) - estimate_request(plain, est)
        assert truth <= estimate <= truth + 2 * PER_MESSAGE + PER_BLOCK * len(blocks), (
            render_blocks(blocks),
            truth,
            estimate,
        )
