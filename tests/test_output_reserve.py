"""The output reserve follows the request's ``max_tokens`` / ``max_completion_tokens``."""

from __future__ import annotations

from typing import Any

import pytest

from harness.errors import ConfigurationError
from harness.policy import DEFAULT_INPUT_TOKENS, ContextPolicy, requested_output


def test_requested_max_tokens_replaces_the_default_reserve() -> None:
    policy = ContextPolicy()
    asked = requested_output({"max_tokens": 16_000})

    limit = policy.input_limit(128_000, max_output=asked)

    assert limit == 128_000 - 16_000 - 1024
    assert limit + 16_000 + policy.safety_margin <= 128_000  # input and output fit the window
    assert policy.input_limit(128_000) == 128_000 - 4096 - 1024  # the old call is unchanged


def test_a_small_max_tokens_leaves_more_room_for_input() -> None:
    assert ContextPolicy().input_limit(8192, max_output=256) == 8192 - 256 - 1024


def test_explicit_cap_and_unknown_window_still_rule() -> None:
    policy = ContextPolicy(max_input_tokens=50_000)
    assert policy.input_limit(128_000, max_output=100_000) == 128_000 - 100_000 - 1024
    assert policy.input_limit(None, max_output=16_000) == 50_000
    assert ContextPolicy().input_limit(None, max_output=16_000) == DEFAULT_INPUT_TOKENS


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (None, None),
        ({}, None),
        ({"temperature": 0.2}, None),
        ({"max_tokens": 16_000}, 16_000),
        ({"max_completion_tokens": 32_000}, 32_000),
        ({"max_output_tokens": 8_192}, 8_192),
        ({"max_tokens": 1_000, "max_completion_tokens": 20_000}, 20_000),
        ({"max_tokens": 0}, None),
        ({"max_tokens": True}, None),
        ({"max_tokens": "16000"}, None),
        ({"max_tokens": None, "max_completion_tokens": 500}, 500),
    ],
)
def test_requested_output_reads_the_settings(
    settings: dict[str, Any] | None, expected: int | None
) -> None:
    assert requested_output(settings) == expected


def test_a_reserve_larger_than_the_window_names_max_tokens() -> None:
    with pytest.raises(ConfigurationError, match="max_tokens \\(8000\\)"):
        ContextPolicy().input_limit(8192, max_output=8000)


@pytest.mark.parametrize("bad", [0, -5, True, 1.5])
def test_bad_max_output_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_output"):
        ContextPolicy().input_limit(128_000, max_output=bad)


def test_the_agent_reserves_the_output_its_settings_ask_for() -> None:
    from harness import HarnessAgent
    from providers import ScriptedModel

    asked = HarnessAgent(model=ScriptedModel(window=128_000), settings={"max_tokens": 16_000})
    default = HarnessAgent(model=ScriptedModel(window=128_000))
    assert asked.input_limit == 128_000 - 16_000 - 1_024
    assert default.input_limit == 128_000 - 4_096 - 1_024
