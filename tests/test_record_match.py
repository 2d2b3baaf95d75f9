"""`harness.adapters._record_match`: where a caller's resend stands against its session's view."""

from __future__ import annotations

from harness import Message
from harness.adapters._record_match import (
    TAIL,
    SessionRecord,
    content_digests,
    match,
    view_after,
)
from harness.messages import ContentPart, ToolCall


def _view(digests: list[str]) -> SessionRecord:
    return view_after(digests, {i: f"id{i}" for i in range(len(digests))}, record_hash="h")


def test_a_message_is_what_it_says_not_how_it_is_encoded() -> None:
    text = Message(role="assistant", content="done")
    parts = Message(role="assistant", content=(ContentPart(type="text", text="done"),))
    spaced = Message(
        role="assistant", tool_calls=(ToolCall(id="a", name="f", arguments='{"x": 1}'),)
    )
    tight = Message(role="assistant", tool_calls=(ToolCall(id="b", name="f", arguments='{"x":1}'),))
    other = Message(role="assistant", tool_calls=(ToolCall(id="a", name="f", arguments='{"x":2}'),))
    d = content_digests([text, parts, spaced, tight, other, Message.user("done")])
    assert d[0] == d[1] and d[2] == d[3]
    assert d[2] != d[4] and d[0] != d[5]  # other arguments, another role


def test_a_grown_resend_adds_only_its_new_messages() -> None:
    view = _view(["a", "b", "c"])
    found = match(["a", "b", "c", "d", "e"], view)
    assert found.new == (3, 4) and not found.dropped and not found.diverged
    assert found.matched == {0: "id0", 1: "id1", 2: "id2"}


def test_a_trimmed_resend_or_a_suffix_overlaps_the_views_end() -> None:
    view = _view([f"m{i}" for i in range(10)])
    found = match(["m6", "m7", "m8", "m9", "new"], view)
    assert found.new == (4,) and not found.diverged and not found.dropped


def test_a_retry_after_a_recorded_reply_drops_that_reply_from_the_working_history() -> None:
    view = _view(["u1", "a1", "u2", "a2"])  # a2: recorded, never received
    found = match(["u1", "a1", "u2"], view)
    assert found.new == () and found.dropped == ("id3",) and found.diverged


def test_an_edited_message_is_new_and_its_old_version_leaves() -> None:
    view = _view(["u1", "a1", "u2", "a2"])
    found = match(["u1", "a1", "u2-edited", "a2", "u3"], view)
    assert found.new == (2, 4) and found.dropped == ("id2",) and found.diverged


def test_a_caller_sending_only_new_turns_never_rewinds_the_session() -> None:
    view = _view(["hi", "a1", "u2", "a2"])
    assert match(["hi"], view).new == (0,)  # the same words again: a new turn
    assert match(["u9"], view).new == (0,)


def test_only_the_newest_messages_are_compared() -> None:
    digests = [f"m{i}" for i in range(TAIL + 50)]
    view = _view(digests)
    assert len(view.digests) == TAIL and view.count == TAIL + 50
    found = match([*digests, "new"], view)
    assert found.new == (TAIL + 50,) and not found.diverged
