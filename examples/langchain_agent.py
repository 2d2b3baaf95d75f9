"""A LangChain v1 agent (``create_agent``) with the harness as its middleware.

`HarnessMiddleware` runs the stack on every model request of the agent (``ainvoke`` and,
in the last turn, ``invoke``): long tool results
trimmed, early turns summarised once the conversation outgrows the budget, tool calls never
sent without their results, ``reasoning_content`` kept — on the request LangChain's model
receives, never on the graph's state (LangGraph keeps the whole conversation). Each
request's manifest goes to ``ContextPolicy(observer=...)``.

Runs offline with LangChain's own fake chat model (``GenericFakeChatModel``), taught to
accept tools and to remember what it received; a second fake model writes the summaries::

    pip install '.[langchain]'        # from a checkout (or: uv sync --extra langchain)
    python examples/langchain_agent.py
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from itertools import count, cycle
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import anyio
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool
from pydantic import Field

from harness import ContextManifest, ContextPolicy
from harness.adapters.langchain import HarnessMiddleware, LangChainModelClient
from middleware import Compaction, default_stack

LIMIT = 1_500
"""A small input budget, so that this short demo shows the harness at work."""


class FakeChat(GenericFakeChatModel):
    """LangChain's fake chat model, with tools accepted and every request remembered."""

    received: list[list[BaseMessage]] = Field(default_factory=list)
    """Every list of messages it was sent, in order."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeChat:
        """Accept the agent's tools (the script decides the calls)."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up in the shop's database.

    Args:
        order_id: the order number.
    """
    return f"order {order_id}: 3 items, shipped, tracking 1Z999. " * 25


def script() -> Iterator[AIMessage]:
    """The agent model's answers: look the order up (thinking first), then answer."""
    for n in count():
        yield AIMessage(
            "",
            tool_calls=[{"id": f"call_{n}", "name": "lookup_order", "args": {"order_id": str(n)}}],
            additional_kwargs={"reasoning_content": f"I should look order {n} up."},
        )
        yield AIMessage(f"Order {n} has shipped.", additional_kwargs={"reasoning_content": "ok"})


async def main() -> tuple[Any, list[AnyMessage | dict[str, Any]]]:
    """Ask about eight orders in one conversation; show what the model received each time.

    Returns:
        The agent and the conversation, for one more turn from sync code (`sync_turn`).
    """
    model = FakeChat(messages=script())
    summariser = GenericFakeChatModel(messages=cycle([AIMessage("Summary: orders checked.")]))
    manifests: list[ContextManifest] = []
    harness = HarnessMiddleware(
        stack=default_stack(compaction=Compaction(model=LangChainModelClient(summariser))),
        policy=ContextPolicy(max_input_tokens=LIMIT, observer=manifests.append),
    )
    agent = create_agent(model, tools=[lookup_order], middleware=[harness])
    messages: list[AnyMessage | dict[str, Any]] = []
    for n in range(8):
        messages.append(HumanMessage(f"Where is order {n}? I have been waiting a week."))
        state = await agent.ainvoke({"messages": messages})
        messages = state["messages"]
        answer = state["messages"][-1].content
        sent = model.received[-1]
        manifest = [m for m in manifests if m.purpose == "agent"][-1]
        print(
            f"turn {n}: {answer!r} — the graph holds {len(messages)} messages, "
            f"the model received {len(sent)} ({manifest.estimated_input_tokens} of "
            f"{manifest.input_limit} tokens) {list(manifest.transforms)}"
        )
    for sent in model.received:
        calls = {c["id"] for m in sent if isinstance(m, AIMessage) for c in m.tool_calls}
        results = {m.tool_call_id for m in sent if isinstance(m, ToolMessage)}
        assert calls == results, "a tool call was sent without its result"
        thinking = [m for m in sent if isinstance(m, AIMessage) and m.tool_calls]
        assert all("reasoning_content" in m.additional_kwargs for m in thinking)
    summaries = sum(1 for m in manifests if m.purpose == "summary")
    print(f"every request had its tool pairs and reasoning; {summaries} summary requests")
    return agent, messages


def sync_turn(agent: Any, messages: list[AnyMessage | dict[str, Any]]) -> None:
    """One more turn from synchronous code: ``invoke`` runs the same stack."""
    messages = [*messages, HumanMessage("And order 8?")]
    state = agent.invoke({"messages": messages})
    print(f"sync invoke: {state['messages'][-1].content!r}")


if __name__ == "__main__":
    sync_turn(*anyio.run(main))
