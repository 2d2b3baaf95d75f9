"""LangChain's contracts through `HarnessMiddleware`, driven by real ``create_agent`` agents.

The model is LangChain's own ``GenericFakeChatModel``, taught to accept tools, to remember
every request it receives and (when asked) to refuse an input over a size with LangChain's
``ContextOverflowError``, as the provider packages do. Nothing of ours is mocked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import count, cycle
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field

from harness import ContextManifest, ContextPolicy
from harness.adapters.langchain import HarnessMiddleware, LangChainModelClient
from middleware import Compaction, PairValidation, ToolResultOffload, default_stack
from tests._langchain_fakes import is_summary_request

LIMIT = 2_000


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model: tools accepted, requests remembered, overflow on demand.

    A summary request (the harness's summary prompt) is answered ``SUMMARY-TEXT``; every
    other request takes the next scripted answer.
    """

    received: list[list[BaseMessage]] = Field(default_factory=list)
    overflow_above: int | None = None
    """Refuse (``ContextOverflowError``) an input of more characters than this."""
    overflows: int = 0

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:
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
            return ChatResult(generations=[ChatGeneration(message=AIMessage("SUMMARY-TEXT"))])
        size = sum(len(m.text) for m in messages)
        if self.overflow_above is not None and size > self.overflow_above:
            self.overflows += 1
            raise ContextOverflowError(f"input of {size} characters is over the window")
        return super()._generate(messages, stop, run_manager, **kwargs)


@tool
def run_sql(q: str) -> str:
    """Run a query.

    Args:
        q: the SQL text.
    """
    return f"rows for {q}"


def _history(rounds: int = 12) -> list[Any]:
    messages: list[AnyMessage] = [HumanMessage("Plan the migration of our database.")]
    for i in range(rounds):
        messages += [
            AIMessage(
                "",
                tool_calls=[{"id": f"c{i}", "name": "run_sql", "args": {"q": f"select {i}"}}],
                additional_kwargs={"reasoning_content": f"I should query table {i}."},
            ),
            ToolMessage(f"row {i} " * 60, tool_call_id=f"c{i}"),
            AIMessage(f"Table {i} is fine. " * 15),
            HumanMessage(f"Continue with table {i + 1}."),
        ]
    return messages


def _summarised(messages: Sequence[BaseMessage]) -> bool:
    return any("SUMMARY-TEXT" in m.text for m in messages)


def _pairs_hold(messages: Sequence[BaseMessage]) -> bool:
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    calls |= {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.invalid_tool_calls}
    results = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return calls == results


def _fresh_id() -> str:
    """An agent id of its own, so that no test finds another's cached summaries."""
    return f"test-{next(_IDS)}"


_IDS = count()


def _agent_requests(model: ScriptedChat) -> list[list[BaseMessage]]:
    return [r for r in model.received if not is_summary_request(r)]


# ------------------------------------------------------------------ 1. sync agents
def _compacting_agent() -> tuple[Any, ScriptedChat, list[ContextManifest]]:
    model = ScriptedChat(messages=iter([AIMessage("Final answer.")]))
    manifests: list[ContextManifest] = []
    harness = HarnessMiddleware(
        policy=ContextPolicy(max_input_tokens=LIMIT, observer=manifests.append),
        agent_id=_fresh_id(),
    )
    agent = create_agent(model, tools=[run_sql], middleware=[harness])
    return agent, model, manifests


def test_a_sync_agent_invoke_gets_the_prepared_request() -> None:
    agent, model, manifests = _compacting_agent()
    out = agent.invoke({"messages": _history()})
    assert out["messages"][-1].content == "Final answer."
    sent = _agent_requests(model)[-1]
    assert _summarised(sent) and len(sent) < len(_history()) and _pairs_hold(sent)
    agent_manifests = [m for m in manifests if m.purpose == "agent"]
    assert agent_manifests[-1].validation == "passed"
    assert agent_manifests[-1].estimated_input_tokens <= LIMIT


def test_a_sync_agent_stream_works() -> None:
    agent, model, _ = _compacting_agent()
    updates = list(agent.stream({"messages": _history()}, stream_mode="updates"))
    assert updates[-1]["model"]["messages"][-1].content == "Final answer."
    assert _summarised(_agent_requests(model)[-1])


async def test_a_sync_invoke_inside_a_running_event_loop_works() -> None:
    agent, model, _ = _compacting_agent()
    out = agent.invoke({"messages": _history()})  # a sync caller inside a running loop
    assert out["messages"][-1].content == "Final answer."
    assert _summarised(_agent_requests(model)[-1])


# ------------------------------------------------- 2. the stream carries the answer only
def _streamed_text(chunks: Sequence[Any]) -> str:
    return "".join(
        str(message.content) for message, _ in chunks if isinstance(message, AIMessageChunk)
    )


def test_the_messages_stream_carries_only_the_answer_sync() -> None:
    agent, model, _ = _compacting_agent()
    chunks = list(agent.stream({"messages": _history()}, stream_mode="messages"))
    assert _summarised(_agent_requests(model)[-1])  # a summary was made …
    assert _streamed_text(chunks) == "Final answer."  # … and not streamed


async def test_the_messages_stream_carries_only_the_answer_async() -> None:
    agent, model, _ = _compacting_agent()
    chunks = [c async for c in agent.astream({"messages": _history()}, stream_mode="messages")]
    assert _summarised(_agent_requests(model)[-1])
    assert _streamed_text(chunks) == "Final answer."


async def test_a_summary_call_is_marked_as_langchain_marks_its_own() -> None:
    from langchain_core.callbacks import AsyncCallbackHandler

    seen: list[tuple[list[str], dict[str, Any]]] = []

    class Recorder(AsyncCallbackHandler):
        async def on_chat_model_start(
            self,
            serialized: dict[str, Any],
            messages: list[list[BaseMessage]],
            *,
            tags: list[str] | None = None,
            metadata: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> None:
            seen.append((list(tags or []), dict(metadata or {})))

    summariser = GenericFakeChatModel(messages=cycle([AIMessage("SUMMARY-TEXT")]))
    client = LangChainModelClient(summariser)
    from harness.messages import Message
    from harness.request import ModelRequest

    answer = await client.complete(
        ModelRequest(model="fake", history=(Message.user("Summarize this."),)),
    )
    assert answer.message.text == "SUMMARY-TEXT"
    summariser.callbacks = [Recorder()]
    await client.complete(ModelRequest(model="fake", history=(Message.user("Summarize."),)))
    tags, metadata = seen[-1]
    assert "nostream" in tags and metadata.get("lc_source") == "summarization"


# ------------------------------------------------------------- 3. invalid tool calls
def _truncated_call_script() -> Iterator[AIMessage]:
    yield AIMessage(
        "",
        tool_calls=[{"id": "ok1", "name": "run_sql", "args": {"q": "select 1"}}],
        invalid_tool_calls=[
            {
                "id": "bad1",
                "name": "run_sql",
                "args": '{"q": "select * from orders where',
                "error": "truncated JSON",
                "type": "invalid_tool_call",
            }
        ],
    )
    yield AIMessage("Recovered.")


@pytest.mark.parametrize("mode", ["fail", "repair"])
async def test_an_invalid_tool_call_keeps_langchains_error_result(mode: str) -> None:
    model = ScriptedChat(messages=_truncated_call_script())
    stack = default_stack(pairs=PairValidation(mode="repair")) if mode == "repair" else None
    agent = create_agent(model, tools=[run_sql], middleware=[HarnessMiddleware(stack=stack)])
    out = await agent.ainvoke({"messages": [HumanMessage("count the orders")]})
    assert out["messages"][-1].content == "Recovered."
    sent = model.received[-1]
    errors = [m for m in sent if isinstance(m, ToolMessage) and m.tool_call_id == "bad1"]
    assert len(errors) == 1 and errors[0].status == "error"  # LangChain's own result, kept
    assert "no result: interrupted" not in errors[0].text
    calling = [m for m in sent if isinstance(m, AIMessage) and m.invalid_tool_calls]
    assert calling and calling[0].invalid_tool_calls[0]["id"] == "bad1"
    assert _pairs_hold(sent)


# ------------------------------------------------------------------ 4. dangling calls
def _interrupted_history() -> list[Any]:
    return [
        HumanMessage("Count the orders."),
        AIMessage("", tool_calls=[{"id": "gone", "name": "run_sql", "args": {"q": "count"}}]),
        HumanMessage("Never mind that; just say hello."),
    ]


async def test_an_interrupted_call_gets_a_result_before_the_next_user_turn() -> None:
    model = ScriptedChat(messages=iter([AIMessage("Hello.")]))
    agent = create_agent(model, tools=[run_sql], middleware=[HarnessMiddleware()])
    out = await agent.ainvoke({"messages": _interrupted_history()})
    assert out["messages"][-1].content == "Hello."
    sent = model.received[-1]
    assert [type(m).__name__ for m in sent] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "HumanMessage",
    ]
    result = sent[2]
    assert isinstance(result, ToolMessage) and result.tool_call_id == "gone"
    assert "interrupted" in result.text and "run_sql" in result.text and "gone" in result.text
    assert result.status == "error" and result.name == "run_sql"
    assert not any(isinstance(m, ToolMessage) for m in out["messages"])  # the graph's own


def test_an_interrupted_call_gets_a_result_sync() -> None:
    model = ScriptedChat(messages=iter([AIMessage("Hello.")]))
    agent = create_agent(model, tools=[run_sql], middleware=[HarnessMiddleware()])
    out = agent.invoke({"messages": _interrupted_history()})
    assert out["messages"][-1].content == "Hello." and _pairs_hold(model.received[-1])


async def test_interrupted_text_none_leaves_the_call_to_pair_validation() -> None:
    from harness.errors import InvalidToolPairs

    model = ScriptedChat(messages=iter([AIMessage("Hello.")]))
    harness = HarnessMiddleware(interrupted_text=None)
    agent = create_agent(model, tools=[run_sql], middleware=[harness])
    with pytest.raises(InvalidToolPairs):
        await agent.ainvoke({"messages": _interrupted_history()})
    assert model.received == []  # refused before LangChain's model was called


# ------------------------------------------------------------------ 5. overflow retry
def _overflowing_agent() -> tuple[Any, ScriptedChat, list[ContextManifest]]:
    # Within our budget, but over what the "provider" accepts: only a retry with forced
    # compaction gets through.
    model = ScriptedChat(
        messages=iter([AIMessage("Final answer.")]),
        overflow_above=5_000,
    )
    manifests: list[ContextManifest] = []
    harness = HarnessMiddleware(
        policy=ContextPolicy(max_input_tokens=60_000, observer=manifests.append),
        agent_id=_fresh_id(),
    )
    return create_agent(model, tools=[run_sql], middleware=[harness]), model, manifests


async def test_a_langchain_overflow_forces_compaction_and_retries_once() -> None:
    agent, model, manifests = _overflowing_agent()
    out = await agent.ainvoke({"messages": _history()})
    assert out["messages"][-1].content == "Final answer."
    assert model.overflows == 1
    last = _agent_requests(model)[-1]
    assert _summarised(last) and _pairs_hold(last)
    assert any("overflow_retry:1" in m.transforms for m in manifests if m.purpose == "agent")


def test_a_langchain_overflow_is_retried_sync() -> None:
    agent, model, _ = _overflowing_agent()
    out = agent.invoke({"messages": _history()})
    assert out["messages"][-1].content == "Final answer." and model.overflows == 1


async def test_an_overflow_that_persists_reaches_the_caller_as_langchains_error() -> None:
    model = ScriptedChat(messages=cycle([AIMessage("never")]), overflow_above=10)
    harness = HarnessMiddleware(agent_id=_fresh_id())
    agent = create_agent(model, tools=[run_sql], middleware=[harness])
    with pytest.raises(ContextOverflowError):
        await agent.ainvoke({"messages": _history()})
    assert model.overflows == 2  # sent, compacted, resent once: then the error is the caller's


# --------------------------------------------------------- 6. messages keep their fields
def _failing_queries() -> list[Any]:
    history: list[AnyMessage] = [HumanMessage("Check the tables.")]
    for i in range(6):
        history += [
            AIMessage("", tool_calls=[{"id": f"t{i}", "name": "run_sql", "args": {"q": "x"}}]),
            ToolMessage(
                f"failure {i}: " + "stack frame line. " * 80,
                tool_call_id=f"t{i}",
                id=f"tool-msg-{i}",
                status="error",
                artifact={"rows": i},
                response_metadata={"took_ms": i},
                additional_kwargs={"origin": "db"},
            ),
            HumanMessage(f"And table {i + 1}?"),
        ]
    return history


async def _sent_after_compaction(
    history: list[Any], system: SystemMessage | None = None
) -> list[BaseMessage]:
    model = ScriptedChat(messages=iter([AIMessage("Done.")]))
    trimming = Compaction(
        trim_protect_tokens=50, trim_min_tokens=50, trigger_messages=14, keep_tokens=0,
        keep_messages=9,
    )  # fmt: skip
    harness = HarnessMiddleware(  # results of ~1,500 characters: trimmed, not offloaded
        stack=default_stack(compaction=trimming, offload=ToolResultOffload(max_result_share=None)),
        policy=ContextPolicy(max_input_tokens=LIMIT),
        agent_id=_fresh_id(),
    )
    agent = create_agent(model, tools=[run_sql], system_prompt=system, middleware=[harness])
    await agent.ainvoke({"messages": history})
    return _agent_requests(model)[-1]


async def test_a_trimmed_tool_result_keeps_id_artifact_status_and_metadata() -> None:
    history = _failing_queries()
    sent = await _sent_after_compaction(history)
    originals = {m.id: m for m in history if isinstance(m, ToolMessage)}
    results = [m for m in sent if isinstance(m, ToolMessage)]
    rewritten = [m for m in results if m.id not in originals or m is not originals[m.id]]
    assert rewritten, "expected old tool results to be trimmed"
    for message in rewritten:
        assert message.id in originals
        original = originals[message.id]
        assert message.text != original.text  # trimmed …
        assert message.status == "error" and message.artifact == original.artifact  # … kept
        assert message.response_metadata == original.response_metadata
        assert message.additional_kwargs == original.additional_kwargs


async def test_a_summary_carries_langchains_summarization_marker() -> None:
    sent = await _sent_after_compaction(_failing_queries())
    summaries = [m for m in sent if "SUMMARY-TEXT" in m.text]
    assert summaries and all(
        m.additional_kwargs.get("lc_source") == "summarization" for m in summaries
    )


async def test_a_system_message_keeps_its_content_blocks_and_kwargs() -> None:
    system = SystemMessage(
        content=[
            {
                "type": "text",
                "text": "You are a careful DBA.",
                "cache_control": {"type": "ephemeral"},
            }
        ],
        additional_kwargs={"tenant": "acme"},
    )
    sent = await _sent_after_compaction(_failing_queries(), system)
    assert sent[0].content == system.content
    assert sent[0].additional_kwargs == system.additional_kwargs


def test_a_system_text_the_stack_extends_keeps_the_original_blocks() -> None:
    from harness.adapters._langchain_messages import system_back

    block = {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}
    original = SystemMessage(content=[block], additional_kwargs={"tenant": "acme"})
    extended = system_back("Be careful.\n\nAGENTS.md says: run the tests.", original)
    assert extended is not None and extended.content[0] == block
    assert extended.text == "Be careful.\n\nAGENTS.md says: run the tests."
    assert extended.additional_kwargs == {"tenant": "acme"}
    assert system_back("Be careful.", original) is original
