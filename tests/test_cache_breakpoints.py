"""Where `place_breakpoints` puts prompt-cache marks, and what it never does."""

from __future__ import annotations

from typing import Any

from harness.blocks import ContextBlock
from harness.messages import Message, ToolCall
from harness.policy import ContextPolicy
from harness.request import ModelRequest, SystemPart
from providers.cache_breakpoints import (
    MAX_BREAKPOINTS,
    count_marks,
    place_breakpoints,
    wants_breakpoints,
)

MARK = {"type": "ephemeral"}


def _request(history: tuple[Message, ...], *, reference: bool = True) -> ModelRequest:
    blocks = (
        (
            ContextBlock(
                kind="reference",
                id="agents",
                source_id="workspace/AGENTS.md",
                text="rules",
                stable=True,
            ),
        )
        if reference
        else ()
    )
    return ModelRequest(
        model="anthropic/claude-sonnet-4-5",
        system=(SystemPart(name="prompt", text="be careful"),),
        history=history,
        blocks=blocks,
        policy=ContextPolicy(),
    )


def _wire(request: ModelRequest) -> tuple[list[Message], list[dict[str, Any]]]:
    rendered = request.render()
    return rendered, [m.to_openai() for m in rendered]


def test_all_four_pieces_are_marked_newest_history_first() -> None:
    rendered, messages = _wire(_request((Message.user("q"), Message.assistant("a"))))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    placed = place_breakpoints(rendered, messages, tools)
    assert placed == ("history", "system", "reference", "tools")
    assert messages[0]["cache_control"] == MARK  # System
    assert messages[1]["cache_control"] == MARK  # the reference message
    assert "cache_control" not in messages[2]  # an older history message
    assert messages[-1]["cache_control"] == MARK  # the newest history message
    assert tools[-1]["cache_control"] == MARK
    assert count_marks(messages, tools) == MAX_BREAKPOINTS


def test_the_callers_marks_count_against_the_limit_and_are_kept() -> None:
    own = {"type": "ephemeral", "ttl": "1h"}
    history = tuple(Message.user(f"q{i}", extra={"cache_control": own}) for i in range(3))
    rendered, messages = _wire(_request(history))
    placed = place_breakpoints(rendered, messages, None)
    assert placed == ("system",)  # the newest message is the caller's, already marked
    assert [m.get("cache_control") for m in messages[2:]] == [own, own, own]
    assert count_marks(messages, None) == 4


def test_no_room_no_marks_and_a_second_pass_adds_nothing() -> None:
    rendered, messages = _wire(_request((Message.user("q"),)))
    assert place_breakpoints(rendered, messages, None, limit=0) == ()
    assert count_marks(messages, None) == 0
    first = place_breakpoints(rendered, messages, None)
    assert first == ("history", "system", "reference")
    assert place_breakpoints(rendered, messages, None) == ()  # every piece already ends marked


def test_a_bare_tool_call_is_skipped_for_the_newest_message_with_content() -> None:
    call = ToolCall(id="c1", name="f", arguments="{}")
    history = (Message.user("q"), Message.assistant(tool_calls=[call]))
    rendered, messages = _wire(_request(history, reference=False))
    assert place_breakpoints(rendered, messages, None) == ("history", "system")
    assert messages[1]["cache_control"] == MARK  # the user message, not the bare call
    assert "cache_control" not in messages[2]


def test_the_callers_tool_schema_is_not_changed() -> None:
    rendered, messages = _wire(_request((Message.user("q"),)))
    schema: dict[str, Any] = {"type": "function", "function": {"name": "f"}}
    tools = [schema]
    place_breakpoints(rendered, messages, tools)
    assert "cache_control" not in schema and tools[0]["cache_control"] == MARK


def test_blocks_content_gets_the_mark_on_its_last_block() -> None:
    part = SystemPart(name="prompt", text="x")
    request = _request((Message.user("q"),)).replace(system=(part,))
    rendered = request.render()
    messages = [m.to_openai() for m in rendered]
    messages[0]["content"] = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    place_breakpoints(rendered, messages, None)
    assert messages[0]["content"][-1]["cache_control"] == MARK
    assert "cache_control" not in messages[0]["content"][0]


def test_auto_mode_marks_where_only_marked_prefixes_are_cached() -> None:
    assert wants_breakpoints("anthropic", "claude-sonnet-4-5")
    assert wants_breakpoints("bedrock", "anthropic.claude-3-5-sonnet")
    assert wants_breakpoints("vertex_ai", "claude-opus-4")
    assert not wants_breakpoints("vertex_ai", "gemini-2.5-pro")
    assert not wants_breakpoints("openai", "gpt-4o")
    assert not wants_breakpoints("deepseek", "deepseek-chat")
