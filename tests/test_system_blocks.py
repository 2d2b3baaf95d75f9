"""System parts that carry the caller's content blocks (``cache_control``) render as blocks."""

from __future__ import annotations

from harness.messages import ContentPart
from harness.request import ModelRequest, SystemPart

CACHED = ContentPart(type="text", text="Be careful.", data={"cache_control": {"type": "ephemeral"}})


def _system(*parts: SystemPart) -> object:
    return ModelRequest(model="gpt-4o", system=parts).render()[0].to_openai()["content"]


def test_blocks_whose_text_a_layer_kept_are_sent_as_given_beside_plain_parts() -> None:
    app = SystemPart(name="system/0", text="Be careful.", blocks=(CACHED,))
    ours = SystemPart(name="AGENTS.md", text="Run the tests.")
    assert _system(app, ours) == [
        {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Run the tests."},
    ]


def test_text_a_layer_put_around_the_blocks_becomes_further_blocks() -> None:
    edited = SystemPart(name="system/0", text="Today: Monday. Be careful. Bye.", blocks=(CACHED,))
    assert _system(edited) == [
        {"type": "text", "text": "Today: Monday. "},
        {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": " Bye."},
    ]


def test_rewritten_text_is_sent_as_the_new_text_without_the_stale_options() -> None:
    rewritten = SystemPart(name="system/0", text="Be bold.", blocks=(CACHED,))
    assert _system(rewritten) == [{"type": "text", "text": "Be bold."}]
