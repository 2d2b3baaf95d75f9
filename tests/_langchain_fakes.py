"""A LangChain chat model for agent tests: LangChain's own fake, answering with a function.

Shared by the LangChain test files that script a model by what it receives (a fake *model*
of the host's, never a stand-in for one of our classes). A summary request of the harness
(its summary, merge or in-place prompt) is answered ``SUMMARY-TEXT`` without calling the
script; every request is remembered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

SUMMARY_MARKS = (
    "You are compacting the conversation",
    "summarise consecutive parts",
    "The conversation above is being compacted",
)
"""Phrases of the harness's summary prompts: how the fake model tells them apart."""

Script = Callable[[list[BaseMessage]], AIMessage]


def is_summary_request(messages: Sequence[BaseMessage]) -> bool:
    """Return whether ``messages`` is one of the harness's summary requests."""
    return bool(messages) and any(mark in messages[-1].text for mark in SUMMARY_MARKS)


class FunctionChat(GenericFakeChatModel):
    """LangChain's fake chat model answering with ``script(messages)``; tools accepted."""

    script: Any = None
    received: list[list[BaseMessage]] = Field(default_factory=list)
    """Every request, summary requests included."""
    summary_error: bool = False
    """Fail every summary request (``ValueError``), as a broken summary model would."""

    bound: list[list[str]] = Field(default_factory=list)
    """The names of the tools each model call was bound with, in order."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FunctionChat:
        self.bound.append([getattr(t, "name", None) or str(t.get("name", "")) for t in tools])
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append(list(messages))
        if is_summary_request(messages):
            if self.summary_error:
                raise ValueError("the summary model is down")
            answer = AIMessage("SUMMARY-TEXT")
        else:
            answer = self.script(messages)
        return ChatResult(generations=[ChatGeneration(message=answer)])

    def agent_requests(self) -> list[list[BaseMessage]]:
        """Return the requests that were not summary requests."""
        return [r for r in self.received if not is_summary_request(r)]


def with_script(script: Script) -> FunctionChat:
    """Return a `FunctionChat` answering with ``script``."""
    return FunctionChat(messages=iter(()), script=script)
