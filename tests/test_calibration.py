"""Calibration from usage: the correction converges, stays bounded and shows in manifests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import ContextManifest, ContextPolicy, HarnessAgent
from harness.accounting import estimate_request
from harness.tokens.calibration import MAX_FACTOR, MIN_FACTOR, updated_factor
from providers import ScriptedModel


def echo(text: str) -> str:
    """Echo text back."""
    return text


async def test_factor_converges_within_five_rounds_to_a_provider_counting_20_percent_more() -> None:
    seen: list[ContextManifest] = []
    script = [ScriptedModel.tool_call("echo", {"text": f"round {i} " * 40}) for i in range(6)]
    model = ScriptedModel([*script, "done"], usage_factor=1.2)
    agent = HarnessAgent(
        model=model,
        tools=[echo],
        stack=[],
        policy=ContextPolicy(calibrate=True, observer=seen.append),
    )
    await agent.call("go")
    factors = [m.calibration for m in seen]
    assert factors[0] == 1.0
    assert abs(factors[5] - 1.2) / 1.2 <= 0.03
    assert agent.state().calibration["scripted"] > 1.15
    assert seen[5].counting_method.endswith("*calibrated")
    # The manifest's estimate is the uncalibrated estimate times the factor in use.
    base = agent.policy.estimator
    assert base is not None
    raw = estimate_request(model.requests[5], base)
    assert abs(seen[5].estimated_input_tokens - raw * factors[5]) <= 0.01 * raw + 30


async def test_without_calibrate_the_factor_stays_one() -> None:
    seen: list[ContextManifest] = []
    model = ScriptedModel(
        [ScriptedModel.tool_call("echo", {"text": "x"}), "done"], usage_factor=1.5
    )
    agent = HarnessAgent(
        model=model, tools=[echo], stack=[], policy=ContextPolicy(observer=seen.append)
    )
    await agent.call("go")
    assert [m.calibration for m in seen] == [1.0, 1.0]


@given(
    st.floats(min_value=MIN_FACTOR, max_value=MAX_FACTOR),
    st.integers(min_value=0, max_value=10**7),
    st.integers(min_value=0, max_value=10**7),
)
def test_factor_never_leaves_its_bounds(factor: float, estimated: int, reported: int) -> None:
    assert (
        MIN_FACTOR <= updated_factor(factor, estimated=estimated, reported=reported) <= MAX_FACTOR
    )


def test_a_learned_factor_is_never_below_a_ratio_seen_and_a_contradiction_raises_it() -> None:
    """Issue 23: the learned factor only falls toward the worst ratio × margin, never below."""
    from harness.tokens.calibration import LEARN_MARGIN, LearnedRatio

    ratio = LearnedRatio()
    factors = [ratio.observe(estimated=1000, reported=r) for r in (450, 430, 460, 440, 450)]
    assert factors == sorted(factors, reverse=True)  # it only falls
    assert all(f >= 0.46 * LEARN_MARGIN - 1e-9 for f in factors[2:])  # never below a ratio seen
    assert factors[-1] < 0.5
    raised = ratio.observe(estimated=1000, reported=700)  # above the calibrated count
    assert raised == pytest.approx(0.7 * LEARN_MARGIN)


def test_a_model_learns_per_api_base_and_counts_with_the_most_cautious() -> None:
    """Two servers of one model name: the model counts with the higher learned factor."""
    from harness.tokens.calibration import UsageLearner

    learner = UsageLearner()
    learner.observe("m", "http://a", estimated=1000, reported=300)
    learner.observe("m", "http://b", estimated=1000, reported=600)
    assert learner.factor_for("m") >= 0.6 * 1.05
    assert learner.factor_for("other") == 1.0


def test_usage_reported_for_an_unknown_model_calibrates_its_next_requests() -> None:
    """`observe_usage` learns; `counted_near_limit` counts the model's next request with it."""
    from harness import Message, ModelRequest
    from harness.accounting import counted_near_limit, observe_usage
    from harness.tokens.calibration import LEARNED

    model = "mystery-model-issue-23"
    request = ModelRequest(
        model=model,
        history=(Message.user("hello there " * 200),),
        policy=ContextPolicy().resolve(model),
        input_limit=8_000,
    )
    raw = estimate_request(request)
    try:
        observe_usage(request, "http://local", raw // 2)
        counted, tokens = counted_near_limit(request)
        assert counted.estimator.method == "bound:unknown*calibrated"
        assert raw // 2 <= tokens < raw
        observe_usage(counted, "http://local", raw)  # a contradiction: back up at once
        assert counted_near_limit(request)[1] >= raw
    finally:
        LEARNED.forget()
