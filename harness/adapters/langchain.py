"""`HarnessMiddleware`: the stack as a LangChain v1 ``AgentMiddleware``.

A ``create_agent(model, tools, middleware=[HarnessMiddleware()])`` agent gets, before every
model call, what `harness.acompletion` gives a litellm app: System from its system message,
tool results offloaded, the budget fitted, the history compacted (summaries from the
agent's own model, cached by a hash of what they replace, per user), pairs validated, and a
manifest (``policy=ContextPolicy(observer=...)``). LangGraph keeps the conversation, so the
middleware is stateless: it rewrites the request LangChain's model receives, never the
graph's state.

Messages the stack leaves as they were are passed on as the very objects LangChain gave
(``additional_kwargs`` such as ``reasoning_content`` survive); only summaries and rewritten
messages are new. Install with ``pip install 'context-harness[langchain]'``; this module is
imported only when used.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware import ModelRequest as LCModelRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AnyMessage,
    SystemMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.utils.function_calling import convert_to_openai_tool

from harness.adapters.completion import chain_hashes, prepare_messages
from harness.messages import Message, ToolCall
from harness.policy import ContextPolicy
from harness.request import ModelRequest, ModelResponse
from harness.sessions.store import SessionStore
from harness.types import Middleware

__all__ = ["HarnessMiddleware", "LangChainModelClient", "model_name"]


class LangChainModelClient:
    """A LangChain chat model as our model client (for summary requests).

    Args:
        chat: the LangChain chat model.
        name: the model name for estimation (default: the model's own name).
    """

    def __init__(self, chat: BaseChatModel, name: str | None = None) -> None:
        self.chat = chat
        self.model = name or model_name(chat)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` through the LangChain model and return its answer."""
        rendered = [m.to_openai() for m in request.render()]
        answer = await self.chat.ainvoke(convert_to_messages(rendered))
        calls = getattr(answer, "tool_calls", None) or ()
        return ModelResponse(
            message=Message.assistant(
                answer.text if isinstance(answer.text, str) else str(answer.content),
                tool_calls=[
                    ToolCall(id=str(c.get("id") or ""), name=c["name"], arguments=_json(c))
                    for c in calls
                ],
            ),
            model=self.model,
        )

    def context_window(self, model: str | None = None) -> int | None:
        """Return the model's input window from its LangChain profile, when it has one."""
        profile = getattr(self.chat, "profile", None)
        window = profile.get("max_input_tokens") if isinstance(profile, dict) else None
        return window if isinstance(window, int) and window > 0 else None


class HarnessMiddleware(AgentMiddleware):
    """Run the context-harness stack on every model request of a LangChain v1 agent.

    Args:
        stack: the middleware list (default: `middleware.default_stack()`).
        policy: budget, estimator and observer (default: `ContextPolicy()`).
        store: where cached summaries live (default: an in-process LRU).
        user_of: returns whose request it is (from ``request.runtime`` or state); cached
            summaries are scoped by it. Default: everyone is ``""``.
        agent_id: the agent id for manifests and the cache.
    """

    def __init__(
        self,
        *,
        stack: Sequence[Middleware] | None = None,
        policy: ContextPolicy | None = None,
        store: SessionStore | str | None = None,
        user_of: Callable[[LCModelRequest], str] | None = None,
        agent_id: str = "langchain",
    ) -> None:
        super().__init__()
        self.stack = list(stack) if stack is not None else None
        self.policy = policy
        self.store = store
        self.user_of = user_of
        self.agent_id = agent_id

    async def awrap_model_call(
        self,
        request: LCModelRequest,
        handler: Callable[[LCModelRequest], Awaitable[Any]],
    ) -> Any:
        """Prepare ``request`` with the stack, then let LangChain's model answer it."""
        originals: list[AnyMessage] = list(request.messages)
        dicts: list[dict[str, Any]] = []
        if request.system_message is not None:
            dicts.append({"role": "system", "content": request.system_message.text})
        dicts.extend(convert_to_openai_messages(originals))
        tools = [t if isinstance(t, dict) else convert_to_openai_tool(t) for t in request.tools]
        client = LangChainModelClient(request.model)
        prepared, _ = await prepare_messages(
            client.model,
            dicts,
            tools,
            client=client,
            stack=self.stack,
            policy=self.policy,
            user_id=self.user_of(request) if self.user_of is not None else "",
            store=self.store,
            agent_id=self.agent_id,
            settings=dict(request.model_settings) or None,
        )
        system = None
        if prepared and prepared[0]["role"] == "system":
            system = SystemMessage(content=prepared.pop(0)["content"])
        messages = _back_to_langchain(prepared, originals, dicts[len(dicts) - len(originals) :])
        return await handler(request.override(messages=messages, system_message=system))


def _back_to_langchain(
    prepared: list[dict[str, Any]],
    originals: list[AnyMessage],
    original_dicts: list[dict[str, Any]],
) -> list[AnyMessage]:
    """Return the prepared messages as LangChain messages, reusing the unchanged originals."""
    by_hash: dict[str, list[AnyMessage]] = {}
    for message, data in zip(originals, original_dicts, strict=True):
        by_hash.setdefault(_hash(data), []).append(message)
    out: list[AnyMessage] = []
    for data in prepared:
        same = by_hash.get(_hash(data))
        out.append(same.pop(0) if same else cast("AnyMessage", convert_to_messages([data])[0]))
    return out


def _hash(data: dict[str, Any]) -> str:
    clean = {k: v for k, v in data.items() if v is not None or k in ("role", "content")}
    return chain_hashes([Message.from_openai(clean)])[0]


def _json(call: Any) -> str:
    return json.dumps(call.get("args") or {})


def model_name(chat: BaseChatModel) -> str:
    """Return a LangChain chat model's name (``model_name``, ``model``, else its class)."""
    for attribute in ("model_name", "model"):
        value = getattr(chat, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(chat).__name__
