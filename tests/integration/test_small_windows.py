"""Small windows through the agent, the default stack, litellm and the local server.

The default reserves (4,096 output + 1,024 margin) used to refuse every model under ~5k
tokens; they now scale with the window, and a window too small for the default stack is
refused when the agent is built, before anything is sent, naming the setting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import ConfigurationError, ContextPolicy, HarnessAgent, RuntimeContext
from providers import LiteLLMClient

from .openai_server import OpenAIServer, count_prompt_tokens, reply

pytestmark = pytest.mark.integration

ANSWER = "Answer: " + "the result is fine " * 15
"""About 65 tokens: each turn grows the history by a question and this answer."""


def _agent(server: OpenAIServer, model: str, window: int, tmp_path: Path) -> HarnessAgent:
    client = LiteLLMClient(model, api_base=server.base_url, api_key="test", context_window=window)
    return HarnessAgent(model=client, system_prompt="You are helpful.", workspace=tmp_path)


@pytest.mark.parametrize(
    ("model", "window"),
    # 1,500 with a family we have no tokenizer for: the cautious estimate leaves a summary
    # request no room for the previous summary beside messages, so it is merged after.
    [("openai/small-model", 2_000), ("openai/small-model", 1_500), ("openai/gpt-4o-mini", 1_000)],
)
async def test_a_small_window_model_runs_a_session_of_several_turns(
    openai_server: OpenAIServer, tmp_path: Path, model: str, window: int
) -> None:
    openai_server.default = reply(ANSWER)
    agent = _agent(openai_server, model, window, tmp_path)
    ctx = RuntimeContext(session_id="small")
    for turn in range(12):  # outgrows even an exact count of a 2,000 window
        answer = await agent.call(
            f"Question {turn}: " + "please explain this topic in detail " * 8, ctx
        )
        assert answer.text == ANSWER
    summaries = [b for b in openai_server.requests if b.get("max_tokens")]
    assert summaries  # the history outgrew the window and was compacted
    for body in openai_server.requests:  # prompt + requested output within the window
        assert count_prompt_tokens(body) + int(body.get("max_tokens") or 0) <= window


async def test_a_window_too_small_for_the_default_stack_is_refused_before_sending(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match=r"ContextPolicy\.min_window") as caught:
        _agent(openai_server, "openai/gpt-4o-mini", 700, tmp_path)
    assert "summary_chunk_tokens" not in str(caught.value)
    assert openai_server.requests == []
    # A caller with a leaner stack lowers the setting it names.
    assert ContextPolicy(min_window=500).input_limit(700) == 700 - 175 - 87
