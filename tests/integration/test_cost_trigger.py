"""The cost-aware compaction trigger with litellm's price table, through a real local server.

`providers.LiteLLMClient` says a model's prices (`harness.types.KnowsPrices`) from litellm's
table; ``Compaction(trigger="cost")`` asks it. The same scripted session runs against the
local OpenAI-compatible server under a priced model name and an unpriced one (which falls
back to the plain 75 % threshold).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness import ContextPolicy, HarnessAgent, RuntimeContext
from harness.events import AgentEvent, CompactionReport
from harness.types import KnowsPrices
from middleware import Compaction
from providers import LiteLLMClient
from providers.litellm_client import load_litellm

from .openai_server import OpenAIServer, Raw, Reply, reply, tool_call

CTX = RuntimeContext(user_id="u", session_id="cost")
LIMIT = 30_000
ROUNDS = 60


def shell(command: str) -> str:
    """Run a shell command.

    Args:
        command: the command line.
    """
    return f"$ {command}\n" + "".join(f"{command} line {i}: some output here\n" for i in range(60))


def script() -> Any:
    """Answer summary requests (asked in place) with a summary, agent requests with a call."""
    calls = 0

    def answer(body: dict[str, Any]) -> Reply | Raw:
        nonlocal calls
        if body.get("tool_choice") == "none":
            return reply("SUMMARY: running commands cmd0 onwards; keep going.")
        calls += 1
        return tool_call("shell", {"command": f"cmd{calls}"}) if calls <= ROUNDS else reply("done")

    return answer


async def run(model: str) -> tuple[list[CompactionReport], LiteLLMClient]:
    reports: list[CompactionReport] = []

    def seen(event: AgentEvent) -> None:
        if event.kind == "compaction_finished" and event.compaction is not None:
            reports.append(event.compaction)

    with OpenAIServer(default=script()) as server:
        client = LiteLLMClient(model, api_base=server.base_url, api_key="test",
                               context_window=128_000)  # fmt: skip
        agent = HarnessAgent(
            model=client,
            system_prompt="You are a careful engineer.",
            tools=[shell],
            stack=[Compaction(trigger="cost", trim_min_tokens=None, memory=None, observer=seen)],
            policy=ContextPolicy(max_input_tokens=LIMIT),
            max_rounds=ROUNDS + 5,
        )
        await agent.call("run the commands", CTX)
    return reports, client


async def test_a_priced_model_compacts_by_its_prices_an_unpriced_one_by_the_threshold() -> None:
    priced, client = await run("openai/gpt-4o-mini")
    fallback, unpriced = await run("openai/no-such-model")
    assert isinstance(client, KnowsPrices)
    prices = client.token_prices()
    assert prices is not None and unpriced.token_prices() is None
    info = load_litellm().get_model_info("gpt-4o-mini")
    assert prices.input == pytest.approx(info["input_cost_per_token"])
    assert prices.cached_input == pytest.approx(info["cache_read_input_token_cost"])
    assert prices.cache_write == prices.input  # OpenAI's automatic cache: writes cost nothing more
    # gpt-4o-mini's cache halves the price of carrying: the rule compacts before the 75 %
    # threshold, which is what the unpriced model falls back to.
    assert priced and fallback
    assert priced[0].reason == "cost"
    assert fallback[0].reason == "tokens" and fallback[0].tokens_before > 0.7 * LIMIT
    assert priced[0].tokens_before < fallback[0].tokens_before
    assert len(priced) > len(fallback)


def test_anthropic_prices_depend_on_the_cache_marks() -> None:
    marked = LiteLLMClient("anthropic/claude-sonnet-4-5").token_prices()
    unmarked = LiteLLMClient("anthropic/claude-sonnet-4-5", cache_breakpoints=False).token_prices()
    assert marked is not None and unmarked is not None
    assert marked.cached_input < marked.input < marked.cache_write  # 0.1× reads, 1.25× writes
    # Without marks Anthropic caches nothing: every input token costs the input price.
    assert unmarked.cached_input == unmarked.cache_write == unmarked.input == marked.input
