"""Message conversion: lossless round trips with OpenAI/litellm dicts, and clear errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import ContentPart, InvalidInputError, Message, ToolCall
from harness.messages import agent_input, clean_text

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


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"content": "hi"}, "unknown message role None"),
        ({"role": "user", "content": ["plain string part"]}, "string 'type'"),
        ({"role": "user", "content": [{"type": "text", "text": 7}]}, "'text' must be a string"),
        ({"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "f"}}]}, "id"),
        ({"role": "user", "content": "x", "audio": object()}, "cannot be stored as JSON"),
        ({"role": "tool", "tool_call_id": "c\ud800", "content": "r"}, "not valid Unicode"),
        ("not a dict", "must be a dict"),
    ],
)
def test_malformed_dicts_say_what_is_wrong(bad: Any, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        Message.from_openai(bad)


@given(st.text())
def test_clean_text_is_the_identity_on_valid_text(text: str) -> None:
    assert clean_text(text) == text


@given(st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010)))
def test_clean_text_always_gives_valid_utf8(text: str) -> None:
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert len(cleaned) <= len(text)


def test_clean_text_joins_pairs_and_replaces_lone_surrogates() -> None:
    assert clean_text("a\ud83d\ude00b\ud800c\udfff") == "a\U0001f600b\ufffdc\ufffd"


def test_from_openai_cleans_text_once() -> None:
    message = Message.from_openai(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "x\udc80"}],
            "reasoning_content": "r\ud800",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": "\ud800"}'}}],
        }
    )
    assert message.text == "x\ufffd"
    assert message.reasoning_content == "r\ufffd"
    assert message.tool_calls[0].arguments == '{"a": "\ufffd"}'
    assert message.checked() is message  # clean already: nothing to do the second time


@pytest.mark.parametrize(
    "bad",
    [
        Message(role="user", content=[ContentPart(type="text", text="list, not tuple"), 3]),  # type: ignore[arg-type]
        Message(role="assistant", tool_calls=({"id": "c"},)),  # type: ignore[arg-type]
        Message(role="tool", tool_call_id=5, content="r"),  # type: ignore[arg-type]
        Message(role="user", content="x", reasoning_content=b"r"),  # type: ignore[arg-type]
        Message(role="user", content="x", extra=["not", "a", "dict"]),  # type: ignore[arg-type]
    ],
)
def test_checked_refuses_messages_built_with_wrong_types(bad: Message) -> None:
    with pytest.raises(InvalidInputError):
        bad.checked()


def test_agent_input_accepts_the_three_forms_and_nothing_else() -> None:
    assert agent_input("hi").text == "hi"
    assert agent_input({"role": "user", "content": "hi"}).text == "hi"
    message = Message.user("hi")
    assert agent_input(message) is message
    with pytest.raises(InvalidInputError, match="system_prompt"):
        agent_input(Message.system("rules"))
    with pytest.raises(InvalidInputError, match="decode the bytes"):
        agent_input(b"hi")


def test_ids_do_not_repeat_after_an_apps_random_seed_or_in_a_forked_child() -> None:
    import os
    import random

    from harness.messages import new_id

    random.seed(0)
    first = new_id()
    random.seed(0)
    assert new_id() != first  # an app seeding `random` for its own reasons repeats no id
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one id to the parent, then out without pytest's teardown
        os.write(write, new_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 16 and int(child, 16) >= 0
    assert child != new_id()  # the child's generator was reseeded, not a copy of ours
