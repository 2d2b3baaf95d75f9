"""The hosts' own scenarios, re-run through `HarnessMiddleware` in a real ``create_agent``.

Each test restates, in our own code, a scenario that LangChain's or deepagents' public test
suites assert for their own middleware (named in the test's docstring):

- LangChain ``SummarizationMiddleware`` (``libs/langchain_v1/tests/unit_tests/agents/middleware/
  implementations/test_summarization.py``), ``ContextEditingMiddleware``
  (``…/test_context_editing.py``) and the agent-streaming isolation of internal model calls
  (``…/middleware/core/test_streaming_isolation.py``);
- deepagents' summarisation (``libs/deepagents/tests/unit_tests/middleware/
  test_summarization_middleware.py``), large-result eviction and ``PatchToolCallsMiddleware``
  (``libs/deepagents/tests/unit_tests/test_middleware.py``).

Where the contract is of the same kind it must hold here; where we deliberately differ, the
README's "Where HarnessMiddleware differs from LangChain's and deepagents' middleware" says
so and why (and tests below pin the difference where it is observable). The model is
LangChain's own fake chat model scripted by a function (`tests._langchain_fakes`); nothing of
ours is mocked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import count
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool

from harness import ContextManifest, ContextPolicy
from harness.adapters.langchain import HarnessMiddleware
from middleware import Compaction, ToolResultOffload, default_stack
from tests._langchain_fakes import FunctionChat, is_summary_request, with_script

LIMIT = 2_000
POINTER = re.compile(r'read_file\(path="([^"]+)"')


@tool
def search(q: str) -> str:
    """Search the documents.

    Args:
        q: the query.
    """
    return f"hits for {q}"


def _answer(messages: list[BaseMessage]) -> AIMessage:
    return AIMessage("Final answer.")


def _agent(
    harness: HarnessMiddleware, model: FunctionChat | None = None, **kwargs: Any
) -> tuple[Any, FunctionChat]:
    model = model or with_script(_answer)
    return create_agent(model, tools=[search], middleware=[harness], **kwargs), model


def _long_history(rounds: int = 12) -> list[AnyMessage]:
    messages: list[AnyMessage] = [HumanMessage("Plan the migration of our database.")]
    for i in range(rounds):
        messages += [
            AIMessage("", tool_calls=[{"id": f"c{i}", "name": "search", "args": {"q": f"t{i}"}}]),
            ToolMessage(f"row {i} " * 60, tool_call_id=f"c{i}", name="search"),
            AIMessage(f"Table {i} is fine. " * 15),
            HumanMessage(f"Continue with table {i + 1}."),
        ]
    return messages


def _compacting(**kwargs: Any) -> HarnessMiddleware:
    """A middleware with a small window and an agent id of its own (no cached summaries)."""
    return HarnessMiddleware(
        policy=ContextPolicy(max_input_tokens=LIMIT), agent_id=f"host-{next(_IDS)}", **kwargs
    )


_IDS = count()


def _pairs_hold(messages: Sequence[BaseMessage]) -> bool:
    calls = [str(c["id"]) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    results = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    return sorted(calls) == sorted(results)


def _summaries(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if "SUMMARY-TEXT" in m.text]


# ---------------------------------------------------- LangChain SummarizationMiddleware
async def test_below_the_trigger_the_request_is_sent_as_it_is() -> None:
    """test_summarization_middleware_no_summarization_cases: nothing to do, nothing changed."""
    agent, model = _agent(_compacting())
    history: list[AnyMessage] = [HumanMessage("Hello"), AIMessage("Hi"), HumanMessage("How?")]
    out = await agent.ainvoke({"messages": history})
    sent = model.received[-1]
    assert len(model.received) == 1  # no summary request
    assert len(sent) == 3 and all(s is o for s, o in zip(sent, out["messages"], strict=False))


async def test_over_the_trigger_one_marked_summary_replaces_early_turns() -> None:
    """test_summarization_middleware_full_workflow / _helper_methods: early turns become one
    HumanMessage marked ``lc_source="summarization"``; the newest messages stay as they were."""
    history = _long_history()
    agent, model = _agent(_compacting())
    out = await agent.ainvoke({"messages": history})
    sent = model.agent_requests()[-1]
    summaries = _summaries(sent)
    assert len(summaries) == 1 and isinstance(summaries[0], HumanMessage)
    assert summaries[0].additional_kwargs.get("lc_source") == "summarization"
    assert sent[-1] is out["messages"][len(history) - 1]  # the newest turn, the same object
    kept = sent[sent.index(summaries[0]) + 1 :]
    assert kept and all(any(k is o for o in out["messages"]) for k in kept)
    # deliberate difference: the graph's state keeps the whole conversation
    assert [m.text for m in out["messages"][: len(history)]] == [m.text for m in history]


async def test_the_cutoff_never_separates_a_call_from_its_results() -> None:
    """test_summarization_middleware_many_parallel_tool_calls_safety and
    _token_retention_preserves_ai_tool_pairs: ten parallel results stay with their call."""
    history: list[AnyMessage] = [HumanMessage("Check every table.")]
    for turn in range(4):
        calls = [
            {"id": f"p{turn}-{i}", "name": "search", "args": {"q": f"t{i}"}} for i in range(10)
        ]
        history += [
            AIMessage("Checking ten tables.", tool_calls=calls),
            *(ToolMessage(f"result {i} " * 20, tool_call_id=c["id"]) for i, c in enumerate(calls)),
            HumanMessage(f"Now round {turn + 1}."),
        ]
    stack = default_stack(
        compaction=Compaction(trigger_messages=20, keep_tokens=0, keep_messages=5)
    )
    agent, model = _agent(_compacting(stack=stack))
    await agent.ainvoke({"messages": history})
    sent = model.agent_requests()[-1]
    assert _summaries(sent) and _pairs_hold(sent)
    assert all(_pairs_hold(r) for r in model.agent_requests())


async def test_a_single_current_request_is_not_summarised() -> None:
    """test_summarization_middleware_skips_when_no_safe_cutoff: nothing older to drop."""
    stack = default_stack(compaction=Compaction(trigger_messages=6, keep_tokens=0, keep_messages=2))
    agent, model = _agent(_compacting(stack=stack))
    await agent.ainvoke({"messages": [HumanMessage("Current request. " * 50)]})
    assert [is_summary_request(r) for r in model.received] == [False]


async def test_a_failing_summary_model_does_not_end_the_run() -> None:
    """test_summarization_middleware_summary_creation (error handling): the run goes on."""
    model = with_script(_answer)
    model.summary_error = True
    manifests: list[ContextManifest] = []
    harness = HarnessMiddleware(
        policy=ContextPolicy(max_input_tokens=LIMIT, observer=manifests.append),
        agent_id="host-failing-summary",
    )
    agent, _ = _agent(harness, model)
    out = await agent.ainvoke({"messages": _long_history()})
    assert out["messages"][-1].content == "Final answer."
    agent_manifests = [m for m in manifests if m.purpose == "agent"]
    assert agent_manifests[-1].estimated_input_tokens <= agent_manifests[-1].input_limit
    assert _pairs_hold(model.agent_requests()[-1])


async def test_image_urls_survive_into_the_summary_request() -> None:
    """test_create_summary_preserves_image_urls (sync and async in the host)."""
    url = "https://example.com/shared-image.png"
    history = _long_history()
    history[4] = HumanMessage(
        [
            {"type": "text", "text": "Continue with the table shown here."},
            {"type": "image_url", "image_url": {"url": url}},
        ]
    )
    agent, model = _agent(_compacting())
    await agent.ainvoke({"messages": history})
    summary_requests = [r for r in model.received if is_summary_request(r)]
    assert summary_requests
    assert any(url in str(m.content) for r in summary_requests for m in r)


class _Calls(BaseCallbackHandler):
    """Records the tags and metadata of every chat-model call of a run."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, Any], str]] = []

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.calls.append((list(tags or []), dict(metadata or {}), messages[0][-1].text))


def _streamed(chunks: Sequence[Any]) -> str:
    return "".join(str(m.content) for m, _ in chunks if isinstance(m, AIMessageChunk))


async def test_summary_calls_are_marked_and_kept_out_of_the_stream_async() -> None:
    """test_streaming_isolation + test_create_summary_passes_lc_source_metadata: an internal
    model call is marked ``lc_source="summarization"`` and its tokens never reach the stream."""
    recorder = _Calls()
    agent, _ = _agent(_compacting())
    config: Any = {"callbacks": [recorder]}
    chunks = [
        c
        async for c in agent.astream({"messages": _long_history()}, config, stream_mode="messages")
    ]
    summary_calls = [c for c in recorder.calls if is_summary_request([HumanMessage(c[2])])]
    assert summary_calls
    assert all(
        "nostream" in tags and metadata.get("lc_source") == "summarization"
        for tags, metadata, _ in summary_calls
    )
    assert _streamed(chunks) == "Final answer."


def test_summary_calls_are_kept_out_of_the_stream_sync() -> None:
    """The same through ``agent.stream`` (the host runs its isolation tests sync and async)."""
    agent, model = _agent(_compacting())
    chunks = list(agent.stream({"messages": _long_history()}, stream_mode="messages"))
    assert any(is_summary_request(r) for r in model.received)
    assert _streamed(chunks) == "Final answer."


async def test_the_models_profile_window_bounds_every_request() -> None:
    """test_summarization_middleware_profile_inference_triggers_summary: the model's profile
    (``max_input_tokens``) is the window when nothing else says."""
    model = with_script(_answer)
    model.profile = {"max_input_tokens": 3_000}
    manifests: list[ContextManifest] = []
    agent, _ = _agent(HarnessMiddleware(policy=ContextPolicy(observer=manifests.append)), model)
    await agent.ainvoke({"messages": _long_history(20)})
    agent_manifests = [m for m in manifests if m.purpose == "agent"]
    assert agent_manifests and all(0 < m.input_limit <= 3_000 for m in agent_manifests)
    assert all(m.estimated_input_tokens <= m.input_limit for m in agent_manifests)
    assert _summaries(model.agent_requests()[-1])


async def test_a_provider_overflow_summarises_and_retries_once() -> None:
    """deepagents test_context_overflow_triggers_summarization: the model's own overflow
    error makes the next attempt compact, and the run succeeds."""
    attempts: list[int] = []

    def script(messages: list[BaseMessage]) -> AIMessage:
        attempts.append(len(messages))
        if len(attempts) == 1:
            raise ContextOverflowError("prompt is too long for this model")
        return AIMessage("Final answer.")

    agent, model = _agent(HarnessMiddleware(policy=ContextPolicy(max_input_tokens=60_000)))
    model.script = script
    out = await agent.ainvoke({"messages": _long_history()})
    assert out["messages"][-1].content == "Final answer."
    assert len(attempts) == 2 and attempts[1] < attempts[0]
    assert _summaries(model.agent_requests()[-1])


# ------------------------------------------------- LangChain ContextEditingMiddleware
def _trimming(**kwargs: Any) -> HarnessMiddleware:
    trimming = Compaction(
        trim_protect_tokens=50, trim_min_tokens=50, trigger_messages=40, keep_tokens=0,
        keep_messages=30,
    )  # fmt: skip
    offload = ToolResultOffload(max_result_share=None)
    stack = default_stack(compaction=trimming, offload=offload)
    return HarnessMiddleware(stack=stack, policy=ContextPolicy(max_input_tokens=LIMIT), **kwargs)


def _results_history() -> list[AnyMessage]:
    history: list[AnyMessage] = [HumanMessage("Research the outage.")]
    for i in range(4):
        history += [
            AIMessage("", tool_calls=[{"id": f"s{i}", "name": "search", "args": {"q": f"q{i}"}}]),
            ToolMessage(f"result {i}: " + "log line of the outage. " * 60, tool_call_id=f"s{i}"),
        ]
    return history


async def test_old_tool_outputs_are_shortened_and_the_newest_kept() -> None:
    """test_clear_tool_outputs_and_inputs / test_respects_keep_last_tool_results: older
    outputs are shortened, the newest is sent whole, the calls keep their arguments."""
    history = _results_history()
    agent, model = _agent(_trimming())
    out = await agent.ainvoke({"messages": history})
    sent = model.agent_requests()[0]
    results = [m for m in sent if isinstance(m, ToolMessage)]
    assert results[-1] is out["messages"][len(history) - 1]  # the newest, whole
    shortened = [m for m in results[:-1] if len(m.text) < len(history[2].text)]
    assert shortened and all(POINTER.search(m.text) for m in shortened)
    calls = [c for m in sent if isinstance(m, AIMessage) for c in m.tool_calls]
    assert calls and all(c["args"] == {"q": "q" + str(c["id"])[1:]} for c in calls)  # kept
    assert out["messages"][: len(history)] == history  # deliberate: the state is not edited


async def test_below_the_trigger_no_tool_output_is_touched() -> None:
    """test_no_edit_when_below_trigger: one small result, nothing edited."""
    history: list[AnyMessage] = [
        HumanMessage("Search once."),
        AIMessage("", tool_calls=[{"id": "s0", "name": "search", "args": {}}]),
        ToolMessage("12345", tool_call_id="s0"),
    ]
    agent, model = _agent(_trimming())
    out = await agent.ainvoke({"messages": history})
    sent = model.agent_requests()[0]
    assert all(s is o for s, o in zip(sent, out["messages"], strict=False)) and len(sent) == 3


# ----------------------------------------------------------------- deepagents eviction
async def test_a_small_result_passes_unchanged() -> None:
    """test_intercept_short_toolmessage."""
    history: list[AnyMessage] = [
        HumanMessage("Find it."),
        AIMessage("", tool_calls=[{"id": "a", "name": "search", "args": {"q": "x"}}]),
        ToolMessage("x" * 1_000, tool_call_id="a"),
    ]
    agent, model = _agent(HarnessMiddleware())
    out = await agent.ainvoke({"messages": history})
    assert model.received[0][2] is out["messages"][2]


def _evicting() -> HarnessMiddleware:
    offload = ToolResultOffload(max_result_chars=4_000, preview_chars=500)
    return HarnessMiddleware(stack=default_stack(offload=offload))


async def test_an_evicted_result_keeps_name_id_artifact_status_and_metadata() -> None:
    """test_intercept_long_toolmessage(_preserves_name, _preserves_artifact_and_metadata)."""
    original = ToolMessage(
        "x" * 5_000,
        tool_call_id="test_123",
        name="example_tool",
        id="tool_msg_1",
        artifact={"urls": ["https://example.com"], "ids": [42]},
        status="error",
        additional_kwargs={"source": "unit-test"},
        response_metadata={"provider": "mock"},
    )
    history: list[AnyMessage] = [
        HumanMessage("Run it."),
        AIMessage("", tool_calls=[{"id": "test_123", "name": "example_tool", "args": {}}]),
        original,
    ]
    agent, model = _agent(_evicting())
    await agent.ainvoke({"messages": history})
    sent = model.received[0][2]
    assert isinstance(sent, ToolMessage) and "offloaded" in sent.text and POINTER.search(sent.text)
    assert (sent.id, sent.name, sent.status, sent.artifact) == (
        "tool_msg_1",
        "example_tool",
        "error",
        original.artifact,
    )
    assert sent.additional_kwargs == {"source": "unit-test"}
    assert sent.response_metadata == {"provider": "mock"}


async def test_a_large_text_block_result_is_evicted_as_text() -> None:
    """test_intercept_content_block_with_large_text (and _with_small_text: left alone)."""
    history: list[AnyMessage] = [
        HumanMessage("Fetch both."),
        AIMessage(
            "",
            tool_calls=[
                {"id": "big", "name": "search", "args": {}},
                {"id": "small", "name": "search", "args": {}},
            ],
        ),
        ToolMessage([{"type": "text", "text": "x" * 5_000}], tool_call_id="big"),
        ToolMessage([{"type": "text", "text": "small text"}], tool_call_id="small"),
    ]
    agent, model = _agent(_evicting())
    out = await agent.ainvoke({"messages": history})
    big, small = model.received[0][2:4]
    assert isinstance(big.content, str) and "offloaded" in big.content
    assert small is out["messages"][3]


async def test_image_results_are_never_evicted() -> None:
    """test_intercept_content_block_non_text_type_not_evicted and
    test_mixed_content_small_text_large_image_not_evicted."""
    image = {"type": "image", "base64": "x" * 50_000, "mime_type": "image/png"}
    history: list[AnyMessage] = [
        HumanMessage("Screenshot it."),
        AIMessage("", tool_calls=[{"id": "img", "name": "search", "args": {}}]),
        ToolMessage([{"type": "text", "text": "small text"}, image], tool_call_id="img"),
    ]
    agent, model = _agent(_evicting())
    out = await agent.ainvoke({"messages": history})
    assert model.received[0][2] is out["messages"][2]


async def test_the_preview_shows_the_head_and_the_tail() -> None:
    """test_intercept_truncates_content_sample_lines / test_content_preview_edge_cases."""
    lines = [f"line {i}" for i in range(2_000)]
    history: list[AnyMessage] = [
        HumanMessage("Show the log."),
        AIMessage("", tool_calls=[{"id": "log", "name": "search", "args": {}}]),
        ToolMessage("\n".join(lines), tool_call_id="log"),
    ]
    offload = ToolResultOffload(max_result_chars=4_000, preview_chars=200)
    agent, model = _agent(HarnessMiddleware(stack=default_stack(offload=offload)))
    await agent.ainvoke({"messages": history})
    preview = model.received[0][2].text
    assert "line 0\n" in preview and "line 1999" in preview  # head and tail
    assert "\nline 1000\n" not in preview and "omitted" in preview  # the middle is not


@tool
def grep(pattern: str) -> str:
    """Search file contents.

    Args:
        pattern: the regular expression.
    """
    return "x" * 5_000


@tool
def execute(command: str) -> str:
    """Run a shell command.

    Args:
        command: the command line.
    """
    return "x" * 10_000 + "\n[Command succeeded with exit code 0]"


async def test_exempt_tools_are_not_evicted_and_the_others_are() -> None:
    """test_builtin_truncation_tool_not_evicted / test_non_builtin_truncation_tool_evicted /
    test_execute_tool_large_output_evicted."""
    offload = ToolResultOffload(max_result_chars=4_000, preview_chars=500, exempt_tools={"grep"})
    harness = HarnessMiddleware(stack=default_stack(offload=offload))
    calls = iter(
        [
            AIMessage(
                "",
                tool_calls=[
                    {"id": "g", "name": "grep", "args": {"pattern": "x"}},
                    {"id": "e", "name": "execute", "args": {"command": "make"}},
                ],
            ),
            AIMessage("done"),
        ]
    )
    model = with_script(lambda messages: next(calls))
    agent = create_agent(model, tools=[grep, execute], middleware=[harness])
    await agent.ainvoke({"messages": [HumanMessage("Build it.")]})
    by_call = {m.tool_call_id: m for m in model.received[-1] if isinstance(m, ToolMessage)}
    assert by_call["g"].text == "x" * 5_000
    assert "offloaded" in by_call["e"].text and POINTER.search(by_call["e"].text)


# ------------------------------------------------------------ deepagents summarisation
async def test_a_second_summary_takes_the_place_of_the_first() -> None:
    """test_second_summarization_after_first / test_filters_previous_summary_messages."""
    harness = _compacting()
    agent, model = _agent(harness)
    history = _long_history(12)
    out = await agent.ainvoke({"messages": history})
    longer = [*out["messages"], *_long_history(12)[1:], HumanMessage("And now?")]
    await agent.ainvoke({"messages": longer})
    sent = model.agent_requests()[-1]
    assert len(_summaries(sent)) == 1 and _pairs_hold(sent)


async def test_old_long_tool_arguments_are_truncated_and_recent_ones_kept() -> None:
    """test_truncate_old_write_file_tool_call / _respects_recent_messages /
    _custom_truncation_text / _preserves_small_arguments."""
    history: list[AnyMessage] = [HumanMessage("Write the files.")]
    for i in range(10):
        history += [
            AIMessage(
                "",
                tool_calls=[
                    {
                        "id": f"w{i}",
                        "name": "write_file",
                        "args": {"path": f"f{i}.py", "content": f"# file {i}\n" + "x = 1\n" * 150},
                    }
                ],
            ),
            ToolMessage(f"wrote f{i}.py", tool_call_id=f"w{i}"),
        ]
    history.append(HumanMessage("Done?"))
    compaction = Compaction(
        truncate_args=True, max_arg_length=200, truncation_text="[cut]", trigger_messages=50,
        keep_tokens=0, keep_messages=4,
    )  # fmt: skip
    harness = HarnessMiddleware(
        stack=default_stack(compaction=compaction), policy=ContextPolicy(max_input_tokens=5_000)
    )
    agent, model = _agent(harness)
    await agent.ainvoke({"messages": history})
    sent = model.agent_requests()[-1]
    calls = [c for m in sent if isinstance(m, AIMessage) for c in m.tool_calls]
    assert calls and _pairs_hold(sent)
    last = history[-3]
    assert isinstance(last, AIMessage) and calls[-1]["args"] == last.tool_calls[0]["args"]
    cut = [c for c in calls if "[cut]" in str(c["args"].get("content", ""))]
    assert len(cut) == 9 and not _summaries(sent)  # truncation alone made it fit
    assert [c["args"]["path"] for c in cut] == [f"f{i}.py" for i in range(9)]  # short args kept


# ----------------------------------------------------------- deepagents PatchToolCalls
def _dangling(*turns: str) -> list[AnyMessage]:
    messages: list[AnyMessage] = [
        SystemMessage("You are a helpful assistant.", id="1"),
        HumanMessage("Hello, how are you?", id="2"),
    ]
    for i, call_id in enumerate(turns):
        messages += [
            AIMessage(
                "I'm doing well, thank you!",
                tool_calls=[
                    {
                        "id": call_id,
                        "name": "get_events_for_days",
                        "args": {"date_str": "2025-01-01"},
                    }
                ],
                id=f"ai-{i}",
            ),
            HumanMessage("What is the weather in Tokyo?", id=f"h-{i}"),
        ]
    return messages


async def test_nothing_is_patched_when_no_call_is_missing() -> None:
    """TestPatchToolCallsMiddleware.test_first_message / test_no_missing_tool_calls."""
    messages: list[AnyMessage] = [
        SystemMessage("You are a helpful assistant.", id="1"),
        HumanMessage("Hello, how are you?", id="2"),
        AIMessage("Fine.", tool_calls=[{"id": "123", "name": "search", "args": {}}], id="3"),
        ToolMessage("I have no events for that date.", tool_call_id="123", id="4"),
        HumanMessage("What is the weather in Tokyo?", id="5"),
    ]
    agent, model = _agent(HarnessMiddleware())
    await agent.ainvoke({"messages": messages})
    sent = model.received[0]
    assert sent[0].text == "You are a helpful assistant."  # the state's SystemMessage: System
    assert all(s is o for s, o in zip(sent[1:], messages[1:], strict=True))


@pytest.mark.parametrize("turns", [("123",), ("123", "456")])
async def test_each_missing_result_is_patched_before_the_next_turn(turns: tuple[str, ...]) -> None:
    """TestPatchToolCallsMiddleware.test_missing_tool_call / test_two_missing_tool_calls."""
    messages = _dangling(*turns)
    agent, model = _agent(HarnessMiddleware())
    out = await agent.ainvoke({"messages": messages})
    sent = model.received[0]
    kinds = [m.type for m in sent]
    assert kinds == ["system", "human", *(["ai", "tool", "human"] * len(turns))]
    for call_id in turns:
        result = next(m for m in sent if isinstance(m, ToolMessage) and m.tool_call_id == call_id)
        assert result.name == "get_events_for_days" and result.status == "error"
        assert "interrupted" in result.text
    # deliberate difference: the patch is on the request, the graph's state is not rewritten
    assert not any(isinstance(m, ToolMessage) for m in out["messages"])


def test_a_missing_result_is_patched_in_a_sync_agent() -> None:
    """The same through ``agent.invoke``."""
    agent, model = _agent(HarnessMiddleware())
    agent.invoke({"messages": _dangling("123")})
    assert _pairs_hold(model.received[0])
