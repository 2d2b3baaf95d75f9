"""Issue 23: a model of no known tokenizer learns its ratio from the usage the server reports.

Through litellm to the real local server (`openai_server`, which counts prompt tokens with
o200k and refuses a request over its window): the conservative bound (``bound:unknown``)
counts about 2.2x what the server does, so without learning a conversation uses under half
of the 8k window. With the ratio learned per (model, api_base) from the reported usage,
after a few requests at least 80 % of the window is usable and no request is over it by the
server's count.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.adapters import acompletion, manifest_of

from .openai_server import OpenAIServer

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fresh_learning")]

WINDOW = 8192
MODEL = "openai/mystery-coder-8k"
MAX_TOKENS = 256
TURN = "We need to check the river gauge readings against the flood model again. " * 8


def _conversation(turns: int, tag: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"{tag} turn {n}: {TURN}"})
        messages.append({"role": "assistant", "content": f"noted {n}: {TURN}"})
    messages.append({"role": "user", "content": "and now?"})
    return messages


async def test_an_unknown_model_learns_its_ratio_and_uses_the_window() -> None:
    with OpenAIServer(model="mystery-coder-8k", window=WINDOW, metadata="vllm") as server:
        manifests = []
        counts = []  # the server's count of each call's agent request (its last request)
        for n in range(18):
            response = await acompletion(
                model=MODEL,
                messages=_conversation(8 + n, "issue-23"),
                api_base=server.base_url,
                api_key="test",
                max_tokens=MAX_TOKENS,
            )
            manifests.append(manifest_of(response))
            counts.append(server.prompt_tokens[-1])
    assert server.over_window == []  # 0 requests over the window by the server's count
    agent = [m for m in manifests if m is not None and m.purpose == "agent"]
    assert agent[-1].calibration < 0.6  # learned: the bound counts about 2.2x the server
    assert agent[-1].counting_method == "bound:unknown*calibrated"
    # The budget, in the server's tokens, is the input limit times what the server counts
    # per token of ours. Learning starts at the bound's 2.2x; from the sixth request on it
    # is settled (summary requests in between, at 75 % of the limit, learn too).
    pairs = list(zip(agent[:16], counts[:16], strict=True))
    for manifest, counted in pairs:
        assert counted <= manifest.estimated_input_tokens  # never under-counted
    usable = min(m.input_limit * counted / m.estimated_input_tokens for m, counted in pairs[5:])
    assert usable + MAX_TOKENS >= 0.8 * WINDOW, usable
    first = pairs[0][0].input_limit * pairs[0][1] / pairs[0][0].estimated_input_tokens
    assert first + MAX_TOKENS < 0.5 * WINDOW  # the bound alone, before any usage
