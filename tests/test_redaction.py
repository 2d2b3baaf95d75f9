"""Redaction finds secrets only on the lines that hold a hint, and finds all of them there."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.redaction import DEFAULT_SECRETS, _by_lines, _compiled, redact

SECRETS = [
    "password=hunter2",
    'api_key: "abc123"',
    "Authorization: Bearer abcdefgh12345678",
    "sk-" + "A" * 24,
    "AKIA" + "B" * 16,
    "ghp_" + "c" * 36,
    "TOKEN = 'xyz'",
]
NOISE = ["def key_of(x):", "tokens = []", "a" * 50, "İstanbul ß", "", "x=1", "\r", "\x0b"]


def reference(text: str) -> str:
    """What redact returns, computed line by line for every pattern (the slow, plain way)."""
    for compiled, marker, keep, hints in _compiled(DEFAULT_SECRETS):

        def sub(match: object, marker: str = marker, keep: bool = keep) -> str:
            return (match.group("keep") or "") + marker if keep else marker  # type: ignore[attr-defined]

        text = compiled.sub(sub, text) if not hints else _by_lines(text, compiled, sub, hints)
    return text


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(SECRETS + NOISE) | st.text(max_size=20), max_size=12))
def test_redacting_hinted_lines_equals_redacting_every_line(pieces: list[str]) -> None:
    text = "\n".join(pieces)
    assert redact(text) == reference(text)


def test_every_kind_of_secret_is_redacted_and_clean_text_is_returned_as_is() -> None:
    text = "\n".join(["first line", *SECRETS, "last line"])
    clean = redact(text)
    for secret in ("hunter2", "abc123", "abcdefgh12345678", "A" * 24, "B" * 16, "c" * 36, "xyz"):
        assert secret not in clean
    assert clean.startswith("first line\n") and clean.endswith("\nlast line")
    plain = "\n".join(NOISE) * 100
    assert redact(plain) is plain  # nothing matched: the same object, nothing copied
