"""ContextPolicy: the input limit arithmetic and validation."""

from __future__ import annotations

import pytest

from harness import ConfigurationError, ContextPolicy
from harness.policy import DEFAULT_INPUT_TOKENS


def test_window_minus_reserves() -> None:
    assert ContextPolicy().input_limit(128_000) == 128_000 - 4096 - 1024


def test_unknown_window_falls_back_to_64k() -> None:
    assert ContextPolicy().input_limit(None) == DEFAULT_INPUT_TOKENS == 64_000


def test_explicit_max_is_bounded_by_the_window() -> None:
    policy = ContextPolicy(max_input_tokens=24_000, reserve_output=4096, safety_margin=1024)
    assert policy.input_limit(None) == 24_000
    assert policy.input_limit(20_000) == 20_000 - 4096 - 1024


@pytest.mark.parametrize(
    "kwargs",
    [{"max_input_tokens": 0}, {"reserve_output": -1}, {"safety_margin": -5}],
)
def test_bad_values_are_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError):
        ContextPolicy(**kwargs)  # type: ignore[arg-type]


def test_reserves_larger_than_the_window_are_rejected() -> None:
    unscaled = ContextPolicy(output_fraction=1.0, margin_fraction=1.0)
    with pytest.raises(ConfigurationError, match="smaller than reserve_output"):
        unscaled.input_limit(4000)


def test_the_default_reserves_scale_down_with_a_small_window() -> None:
    policy = ContextPolicy()
    assert policy.input_limit(4000) == 4000 - 1000 - 500  # was refused: 4,096 + 1,024
    assert policy.input_limit(2000) == 2000 - 500 - 250
    assert policy.input_limit(16_384) == 16_384 - 4096 - 1024  # from here on, the numbers
    with pytest.raises(ConfigurationError, match="min_window"):
        policy.input_limit(999)
    assert ContextPolicy(min_window=0).input_limit(400) == 400 - 100 - 50


def test_resolve_picks_the_models_family() -> None:
    methods = {
        model: getattr(ContextPolicy().resolve(model).estimator, "method", None)
        for model in ("claude-sonnet-4", "gpt-4o", "gpt-4-turbo", "deepseek/deepseek-chat")
    }
    assert methods == {
        "claude-sonnet-4": "approximate:anthropic",
        "gpt-4o": "approximate:o200k",
        "gpt-4-turbo": "approximate:cl100k",
        "deepseek/deepseek-chat": "approximate:deepseek",
    }
