"""Message conversion: lossless round trips with OpenAI/litellm dicts, and clear errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import ContentPart, InvalidInputError, Message, ToolCall

texts = st.text(max_size=60)
json_scalars = st.none() | st.booleans() | st.integers() | texts

tool_call_dicts = st.builds(
    lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
    st.text(min_size=1, max_size=20),
    st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    texts,
)
part_dicts = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, texts),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, texts),
)


@st.composite
def message_dicts(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    content: Any = draw(st.none() | texts | st.lists(part_dicts, max_size=3))
    out: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant":
        calls = draw(st.lists(tool_call_dicts, max_size=3))
        if calls:
            out["tool_calls"] = calls
        if draw(st.booleans()):
            out["reasoning_content"] = draw(texts)
    if role == "tool":
        out["tool_call_id"] = draw(st.text(min_size=1, max_size=20))
    if draw(st.booleans()):
        out["name"] = draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True))
    if draw(st.booleans()):
        out["refusal"] = draw(json_scalars)
    return out


@given(message_dicts())
def test_dict_to_message_to_dict_is_identity(data: dict[str, Any]) -> None:
    assert Message.from_openai(data).to_openai() == data


@given(message_dicts())
def test_message_to_dict_to_message_keeps_every_model_visible_field(data: dict[str, Any]) -> None:
    message = Message.from_openai(data)
    again = Message.from_openai(message.to_openai(), id=message.id)
    assert again == message


def test_reasoning_content_is_kept_verbatim() -> None:
    thinking = "  step 1\n\tstep 2  "
    message = Message.assistant("answer", reasoning_content=thinking)
    assert message.to_openai()["reasoning_content"] == thinking


def test_text_joins_text_parts_only() -> None:
    message = Message(
        role="user",
        content=(
            ContentPart(type="text", text="a"),
            ContentPart(type="image_url", data={"image_url": {"url": "x"}}),
            ContentPart(type="text", text="b"),
        ),
    )
    assert message.text == "ab"


def test_revise_gives_a_new_id_and_keeps_the_origin() -> None:
    message = Message.tool("c1", "x" * 100)
    trimmed = message.revise("trim", metadata={"trimmed": True}, content="x")
    assert trimmed.id != message.id
    assert trimmed.meta("origin_id") == message.id
    assert trimmed.meta("trimmed") is True
    assert message.metadata is None


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "robot", "content": "hi"},
        {"role": "user", "content": 3},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]},
        {"role": "assistant", "content": None, "tool_calls": "nope"},
        {"role": "tool", "content": "r", "tool_call_id": 5},
        {"role": "user", "content": [{"text": "no type"}]},
    ],
)
def test_malformed_dicts_raise_a_typed_error(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        Message.from_openai(bad)


def test_non_string_arguments_are_encoded_as_json() -> None:
    call = ToolCall.from_openai({"id": "1", "function": {"name": "f", "arguments": {"a": 1}}})
    assert call.arguments == '{"a":1}'
