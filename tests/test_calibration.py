"""Calibration from usage: the correction converges, stays bounded and shows in manifests."""

from __future__ import annotations

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
