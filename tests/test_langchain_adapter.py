"""The LangChain v1 adapter with LangChain's own fake chat model.

What LangChain's model receives is recorded by the handler LangChain would call; the
summariser is the same fake model (LangChain's ``GenericFakeChatModel``).
"""

from __future__ import annotations

import json
from itertools import cycle
from typing import Any

import pytest

pytest.importorskip("langchain.agents.middleware")

from langchain.agents.middleware import ModelRequest as LCModelRequest
from langchain.agents.middleware import ModelResponse as LCModelResponse
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from harness import ContextManifest, ContextPolicy
from harness.adapters.langchain import HarnessMiddleware

LIMIT = 2_000


def _history() -> list[Any]:
    messages: list[Any] = [HumanMessage("Plan the migration of our database.")]
    for i in range(12):
        messages += [
            AIMessage(
                "",
                tool_calls=[{"id": f"c{i}", "name": "run_sql", "args": {"q": f"select {i}"}}],
                additional_kwargs={"reasoning_content": f"I should query table {i}."},
            ),
            ToolMessage(f"row {i} " * 60, tool_call_id=f"c{i}"),
            AIMessage(
                f"Table {i} is fine. " * 15, additional_kwargs={"reasoning_content": f"r{i}"}
            ),
            HumanMessage(f"Continue with table {i + 1}."),
        ]
    return messages


async def test_the_model_receives_a_fitted_pair_valid_request_with_kwargs_intact() -> None:
    model = GenericFakeChatModel(messages=cycle([AIMessage("SUMMARY-FROM-FAKE")]))
    manifests: list[ContextManifest] = []
    middleware = HarnessMiddleware(
        policy=ContextPolicy(max_input_tokens=LIMIT, observer=manifests.append),
        user_of=lambda request: "alice",
    )
    original = _history()
    request = LCModelRequest(
        model=model,
        messages=list(original),
        system_message=SystemMessage("You are a careful DBA."),
        tools=[
            {
                "type": "function",
                "function": {"name": "run_sql", "parameters": {"type": "object"}},
            }
        ],
        state={"messages": original},
    )
    seen: list[LCModelRequest] = []

    async def handler(prepared: LCModelRequest) -> LCModelResponse:
        seen.append(prepared)
        return LCModelResponse(result=[AIMessage("done")])

    result = await middleware.awrap_model_call(request, handler)
    assert result.result[0].content == "done"
    sent = seen[0]
    assert sent.system_message is not None and sent.system_message.text == "You are a careful DBA."
    assert len(sent.messages) < len(original) and request.messages == original  # not mutated
    assert "SUMMARY-FROM-FAKE" in json.dumps([m.text for m in sent.messages])
    calls = {c["id"] for m in sent.messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in sent.messages if isinstance(m, ToolMessage)}
    assert calls == results
    kept = [m for m in sent.messages if isinstance(m, AIMessage)]
    assert kept and all("reasoning_content" in m.additional_kwargs for m in kept)
    assert any(m is o for m in sent.messages for o in original)  # unchanged ones passed as is
    agent = [m for m in manifests if m.purpose == "agent"]
    assert agent[-1].validation == "passed" and agent[-1].estimated_input_tokens <= LIMIT


async def test_a_create_agent_agent_runs_with_the_middleware() -> None:
    from langchain.agents import create_agent

    model = GenericFakeChatModel(messages=cycle([AIMessage("hello")]))
    agent = create_agent(model, tools=[], middleware=[HarnessMiddleware(read_tool=False)])
    out = await agent.ainvoke({"messages": [HumanMessage("hi")]})
    assert out["messages"][-1].content == "hello"
