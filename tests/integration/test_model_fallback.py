"""ModelFallback through litellm and HTTP: a failed round is prepared again for the fallback.

The server answers the primary model with a real 5xx; the fallback has a much smaller window,
so the round it receives must be fitted to that window (compacted), not the primary's
messages resent as they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import (
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    Message,
    ProviderAuthError,
    ProviderUnavailable,
    RuntimeContext,
)
from harness.errors import ConfigurationError
from middleware import Fallback, ModelFallback, OverflowRetry, Tracing, default_stack
from providers import LiteLLMClient

from .openai_server import INVALID_API_KEY, SERVER_ERROR, OpenAIServer, count_prompt_tokens, error

pytestmark = pytest.mark.integration

SMALL = 3_000
"""The fallback's window: the primary's history is twice as large."""


def _agent(
    server: OpenAIServer, tmp_path: Path, seen: list[ContextManifest], *fallbacks: str | Fallback
) -> HarnessAgent:
    stack = default_stack(overflow=OverflowRetry())
    assert isinstance(stack[0], Tracing)
    stack.insert(1, ModelFallback(*fallbacks))  # right inside Tracing
    agent = HarnessAgent(
        model=LiteLLMClient(
            "openai/primary",
            api_base=server.base_url,
            api_key="test",
            max_retries=0,
            context_window=128_000,
        ),
        stack=stack,
        workspace=str(tmp_path),
        policy=ContextPolicy(observer=seen.append),
    )
    return agent


def _history(agent: HarnessAgent, ctx: RuntimeContext) -> None:
    agent.state(ctx).append(
        *[
            m
            for i in range(10)
            for m in (
                Message.user(f"question {i}: " + "details " * 300),
                Message.assistant(f"answer {i}: " + "findings " * 300),
            )
        ]
    )


async def test_a_down_primary_falls_back_with_the_round_fitted_to_the_fallback_window(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    seen: list[ContextManifest] = []
    agent = _agent(openai_server, tmp_path, seen, Fallback("openai/small", window=SMALL))
    ctx = RuntimeContext(session_id="fb")
    _history(agent, ctx)
    openai_server.push(error(503, SERVER_ERROR))
    answer = await agent.call("what next?", ctx)
    assert answer.text == "ok"
    bodies = openai_server.requests
    primary, *rest = bodies
    assert primary["model"] == "primary" and count_prompt_tokens(primary) > 2 * SMALL
    assert rest and all(b["model"] == "small" for b in rest)
    assert all(count_prompt_tokens(b) < SMALL for b in rest)  # fitted, not resent
    final = [m for m in seen if m.purpose == "agent"][-1]
    assert final.model == "openai/small" and final.input_limit < SMALL
    assert "model_fallback:openai/small" in final.transforms
    # the next call starts on the primary again
    await agent.call("and then?", ctx)
    assert openai_server.requests[-1]["model"] == "primary"


async def test_an_auth_error_is_raised_not_hidden_behind_another_model(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    agent = _agent(openai_server, tmp_path, [], "openai/small")
    openai_server.push(error(401, INVALID_API_KEY))
    with pytest.raises(ProviderAuthError):
        await agent.call("hi", RuntimeContext(session_id="auth"))
    assert [b["model"] for b in openai_server.requests] == ["primary"]


async def test_when_every_model_fails_the_error_names_each(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    agent = _agent(openai_server, tmp_path, [], "openai/second", "openai/third")
    openai_server.push(*[error(503, SERVER_ERROR)] * 3)
    with pytest.raises(ProviderUnavailable) as caught:
        await agent.call("hi", RuntimeContext(session_id="down"))
    assert [b["model"] for b in openai_server.requests] == ["primary", "second", "third"]
    text = str(caught.value)
    assert "tried 3 models" in text and "openai/second" in text and "openai/third" in text


def test_bad_settings_are_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigurationError, match="at least one"):
        ModelFallback()
    with pytest.raises(ConfigurationError, match="positive int"):
        ModelFallback(Fallback("openai/x", window=0))
    with pytest.raises(ConfigurationError, match="ProviderError"):
        ModelFallback("openai/x", on=[ValueError])  # type: ignore[list-item]
