"""The cost-aware compaction trigger: its rule, and its decisions through the real agent loop.

The rule (`middleware.compaction._cost`) compacts once the rent the rounds paid for carrying
more than a compacted history reaches the price of compacting. The agent tests replay the
same scripted session under different prices and compare where the first compaction comes.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harness import ConfigurationError, ContextPolicy, HarnessAgent, RuntimeContext
from harness.events import AgentEvent, CompactionReport
from harness.types import TokenPrices
from middleware.compaction import Compaction
from middleware.compaction._cost import compaction_cost
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")
M = 1e-6

OPENAI = TokenPrices(input=2.5 * M, cached_input=1.25 * M, cache_write=2.5 * M, output=10 * M)
"""gpt-4o's shape: cached input at 0.5×, cache writes at the input price."""
ANTHROPIC = TokenPrices(input=3 * M, cached_input=0.3 * M, cache_write=3.75 * M, output=15 * M)
"""Sonnet's shape: cached input at 0.1×, cache writes at 1.25×."""
NO_CACHE = TokenPrices(input=3 * M, cached_input=3 * M, cache_write=3 * M, output=15 * M)
"""A provider that caches nothing (Anthropic without cache marks)."""


# ------------------------------------------------------------------- the rule
def test_the_rent_counts_only_what_exceeds_the_compacted_history() -> None:
    cost = compaction_cost(
        OPENAI,
        rounds=[1_000, 5_000, 9_000, 12_000],
        new=1_000,
        compacted=6_000,
        summary_cached=10_000,
        summary_fresh=200,
        summary_output=500,
    )
    # rent: r·((9,000 − 6,000) + (12,000 − 6,000)); rounds under C pay none
    assert cost.rent == pytest.approx(1.25 * M * 9_000)
    # price: the summary request + (w − r)·(C − g)
    summary = 1.25 * M * 10_000 + 2.5 * M * 200 + 10 * M * 500
    assert cost.price == pytest.approx(summary + 1.25 * M * 5_000)
    assert cost.rent < cost.price and not cost.pays


def test_the_rule_compacts_in_the_first_round_whose_rent_reaches_the_price() -> None:
    def due(rounds: list[int], prices: TokenPrices) -> bool:
        return compaction_cost(
            prices,
            rounds=rounds,
            new=500,
            compacted=4_000,
            summary_cached=rounds[-1],
            summary_fresh=200,
            summary_output=300,
        ).pays

    growth = [4_000 + 500 * i for i in range(60)]
    openai = next(i for i in range(1, 61) if due(growth[:i], OPENAI))
    anthropic = next(i for i in range(1, 61) if due(growth[:i], ANTHROPIC))
    uncached = next(i for i in range(1, 61) if due(growth[:i], NO_CACHE))
    assert all(not due(growth[:i], OPENAI) for i in range(1, openai))  # never before
    # Cheap cache reads and dear writes make carrying cheap and compacting dear: later.
    assert uncached < openai < anthropic
    # At a steady growth g the rule fires where (H − C)² ≈ 2·g·price / r (module docstring).
    h = growth[openai - 1]
    price = compaction_cost(
        OPENAI,
        rounds=[h],
        new=500,
        compacted=4_000,
        summary_cached=h,
        summary_fresh=200,
        summary_output=300,
    ).price
    assert (h - 4_000) ** 2 == pytest.approx(2 * 500 * price / OPENAI.cached_input, rel=0.25)


def test_another_summariser_is_priced_at_its_own_prices() -> None:
    args: dict[str, Any] = {
        "rounds": [20_000],
        "new": 500,
        "compacted": 4_000,
        "summary_cached": 0,
        "summary_fresh": 16_000,
        "summary_output": 500,
    }
    own = compaction_cost(ANTHROPIC, **args)
    cheap = TokenPrices(input=0.1 * M, cached_input=0.1 * M, cache_write=0.1 * M, output=0.4 * M)
    other = compaction_cost(ANTHROPIC, summary_prices=cheap, **args)
    assert other.rent == own.rent and other.price < own.price
    assert other.price == pytest.approx(0.1 * M * 16_000 + 0.4 * M * 500 + 3.45 * M * 3_500)


@pytest.mark.parametrize(
    "kwargs", [{"trigger": "costly"}, {"trigger": "cost", "prices": {"input": 1.0}}]
)
def test_bad_cost_settings_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Compaction(**kwargs)


def test_the_cost_trigger_says_so() -> None:
    c = Compaction(trigger="cost")
    assert c.settings.cost_aware and c.settings.token_trigger == 0.75  # the fallback
    assert "trigger='cost'" in repr(c)
    assert not Compaction().settings.cost_aware


# ------------------------------------------------------- through the agent loop
def shell(command: str) -> str:
    """Run a shell command.

    Args:
        command: the command line.
    """
    return f"$ {command}\n" + "".join(
        f"{command} line {i}: some output text here\n" for i in range(60)
    )


LIMIT = 30_000


async def run(compaction: Compaction, model: ScriptedModel | None = None) -> list[CompactionReport]:
    """Run 60 shell rounds under ``compaction``; return its finished compactions."""
    reports: list[CompactionReport] = []

    def seen(event: AgentEvent) -> None:
        if event.kind == "compaction_finished" and event.compaction is not None:
            reports.append(event.compaction)

    compaction.observer = seen
    model = model or ScriptedModel()
    model.script.extend(
        [*(ScriptedModel.tool_call("shell", {"command": f"cmd{i}"}) for i in range(60)), "done"]
    )
    agent = HarnessAgent(
        model=model,
        system_prompt="You are a careful engineer.",
        tools=[shell],
        stack=[compaction],
        policy=ContextPolicy(max_input_tokens=LIMIT),
        max_rounds=100,
    )
    await agent.call("run the commands", CTX)
    agent_requests = model.agent_requests
    assert agent_requests[-1].history[-1].role == "tool"  # all 60 rounds ran
    return reports


def settings(**extra: Any) -> dict[str, Any]:
    return {"trim_min_tokens": None, "memory": None, **extra}


async def test_the_cost_trigger_compacts_where_the_prices_say() -> None:
    plain = await run(Compaction(**settings()))
    openai = await run(Compaction(trigger="cost", prices=OPENAI, **settings()))
    anthropic = await run(Compaction(trigger="cost", prices=ANTHROPIC, **settings()))
    assert plain and openai and anthropic
    assert plain[0].reason == "tokens" and 0.7 * LIMIT < plain[0].tokens_before < 0.8 * LIMIT
    # gpt-4o's prices make carrying a long history dear: the cost rule compacts earlier than
    # the 75 % threshold, and more often; Sonnet's make it cheap: later than gpt-4o's.
    assert openai[0].reason == "cost" and openai[0].tokens_before < plain[0].tokens_before
    assert len(openai) > len(plain)
    assert anthropic[0].tokens_before > openai[0].tokens_before
    # Each compaction shrinks the history (the rent starts again from the compacted size).
    for reports in (openai, anthropic):
        assert all(r.tokens_after < r.tokens_before for r in reports)


async def test_the_rounds_right_after_a_cost_compaction_do_not_compact() -> None:
    model = ScriptedModel()
    reports = await run(Compaction(trigger="cost", prices=OPENAI, **settings()), model)
    compacted = [
        i
        for i, r in enumerate(model.agent_requests)
        if any(t.startswith("history_compaction:") for t in r.transforms)
    ]
    assert len(compacted) == len(reports) >= 2
    assert all(b - a > 3 for a, b in itertools.pairwise(compacted))


async def test_without_prices_the_cost_trigger_is_the_plain_threshold() -> None:
    plain_model, cost_model = ScriptedModel(), ScriptedModel()
    plain = await run(Compaction(**settings()), plain_model)
    fallback = await run(Compaction(trigger="cost", **settings()), cost_model)  # no prices anywhere
    assert [(r.reason, r.tokens_before) for r in fallback] == [
        (r.reason, r.tokens_before) for r in plain
    ]
    assert [len(r.history) for r in cost_model.agent_requests] == [
        len(r.history) for r in plain_model.agent_requests
    ]


class PricedModel(ScriptedModel):
    """A scripted client that says its prices (`harness.types.KnowsPrices`)."""

    def token_prices(self, model: str | None = None) -> TokenPrices | None:
        return OPENAI


async def test_the_clients_prices_are_used_when_none_are_given() -> None:
    given = await run(Compaction(trigger="cost", prices=OPENAI, **settings()))
    asked = await run(Compaction(trigger="cost", **settings()), PricedModel())
    assert [(r.reason, r.tokens_before) for r in asked] == [
        (r.reason, r.tokens_before) for r in given
    ]


async def test_a_history_over_its_budget_compacts_whatever_the_prices() -> None:
    # Prices that make every compaction dear: the rent never reaches the price.
    dear = TokenPrices(input=1e-9, cached_input=1e-9, cache_write=1.0, output=1.0)
    reports = await run(Compaction(trigger="cost", prices=dear, **settings()))
    assert reports and all(r.reason == "tokens" for r in reports)
    assert all(r.tokens_before > 0.8 * LIMIT for r in reports)  # at the budget, not at 75 %
