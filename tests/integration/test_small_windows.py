"""Small windows through the agent, the default stack, litellm and the local server.

The default reserves (4,096 output + 1,024 margin) used to refuse every model under ~5k
tokens; they now scale with the window, and a window too small for the default stack is
refused when the agent is built, before anything is sent, naming the setting.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness import ConfigurationError, ContextPolicy, HarnessAgent, RuntimeContext
from harness.manifest import ContextManifest
from providers import LiteLLMClient

from .openai_server import OpenAIServer, Raw, Reply, count_prompt_tokens, reply, tool_call

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


RESULT_ROWS = " ".join(f"row{i} value ok" for i in range(36))
"""About 150 tokens (o200k) per tool result: under every offload limit of a small window."""
POINTER = re.compile(r'saved to "(?P<path>[^"]+)"\. Read it with read_file, limit=(?P<page>\d+)')


def lookup(key: str) -> str:
    """Look up a key.

    Args:
        key: the key to look up.
    """
    return f"{key}: {RESULT_ROWS}"


def tool_session(rounds: int) -> Any:
    """Call ``lookup`` ``rounds`` times, read one offloaded result back, then answer."""
    state = {"calls": 0, "reads": 0}

    def answer(body: dict[str, Any]) -> Reply | Raw:
        if body.get("tool_choice") == "none" or not body.get("tools"):
            return reply("SUMMARY: looked up keys k1 onwards; keep going.")
        last = body["messages"][-1]
        found = POINTER.search(str(last.get("content"))) if last.get("role") == "tool" else None
        if found and state["reads"] == 0:
            state["reads"] += 1
            args = {"path": found["path"], "offset": 0, "limit": int(found["page"])}
            return tool_call("read_file", args)
        state["calls"] += 1
        if state["calls"] > rounds:
            return reply("done")
        return tool_call("lookup", {"key": f"k{state['calls']}"})

    return answer


def _paired(body: dict[str, Any]) -> bool:
    calls = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    return sorted(calls) == sorted(results)


@pytest.mark.parametrize("window", [1_000, 1_200])
async def test_a_ten_round_tool_session_runs_in_a_small_window_of_an_unknown_model(
    openai_server: OpenAIServer, tmp_path: Path, window: int, fresh_learning: None
) -> None:
    # An unknown family is counted with the cautious bound: System, the tool schemas (with
    # read_file's ~170 tokens) and the newest ~150-token result with its call left no room,
    # and the round was refused (ContextBudgetExceeded at round 2, below a 1,450 window).
    # Now read_file is offered short in a small window, a newest result that does not fit
    # is offloaded to the workspace and the round prepared again, and the session goes on.
    openai_server.default = tool_session(10)
    manifests: list[ContextManifest] = []
    client = LiteLLMClient(
        "openai/small-model", api_base=openai_server.base_url, api_key="test", context_window=window
    )
    agent = HarnessAgent(
        model=client,
        system_prompt="You are helpful.",
        tools=[lookup],
        workspace=tmp_path,
        policy=ContextPolicy(observer=manifests.append),
        max_rounds=30,
    )
    answer = await agent.call("look up the keys k1 to k10", RuntimeContext(session_id="tools"))
    assert answer.text == "done"
    bodies = openai_server.requests
    results = [m for m in bodies[-1]["messages"] if m["role"] == "tool"]
    assert results and all(_paired(b) for b in bodies)
    for body in bodies:  # prompt + requested output within the window
        assert count_prompt_tokens(body) + int(body.get("max_tokens") or 0) <= window
    kinds = {t.kind for m in manifests for t in m.transforms}
    # The newest results were offloaded to fit: past the share limit (a quarter of the input
    # limit, by the cautious count), else because they did not fit beside what must stay …
    assert kinds & {"tool_result_offload", "newest_result_offload"}
    assert window > 1_000 or "newest_result_offload" in kinds
    if "newest_result_offload" in kinds:  # the pointer names a page size that fits
        pointers = [POINTER.search(str(m.get("content"))) for b in bodies for m in b["messages"]]
        path = next(p["path"] for p in pointers if p is not None)
        assert (tmp_path / path).read_text().endswith(f": {RESULT_ROWS}")  # byte for byte
        reads = [
            m["content"] for b in bodies for m in b["messages"]
            if m["role"] == "tool" and str(m.get("content")).startswith(f"[{path}: characters 0–")
        ]  # fmt: skip
        assert reads  # … and the model read one back in a page that fits
    assert {m.validation for m in manifests} == {"passed"}
