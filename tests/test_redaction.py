"""Redaction: every secret shape is caught, ordinary agent text survives, hints change nothing.

The shapes (`tests._secret_shapes`) are vendor tokens, passwords assigned to secret-named keys
and credentials inside URLs, in the surroundings agents write (env files, YAML, JSON, code,
Chinese text with no spaces, full-width punctuation, markdown). The session stores are checked
on the same set in `tests/sessions/test_redaction_at_rest.py`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.messages import Message, ToolCall
from harness.sessions import redaction
from harness.sessions.redaction import (
    DEFAULT_SECRETS,
    SecretPattern,
    _by_lines,
    _compiled,
    _literals,
    clear_redaction_cache,
    redact,
    redact_message,
)

from ._secret_shapes import CASES, KEYS, PASSWORDS, TOKENS

SECRETS = [
    "password=hunter2",
    'api_key: "abc123"',
    "Authorization: Bearer abcdefgh12345678",
    "sk-" + "A" * 24,
    "AKIA" + "B" * 16,
    "ghp_" + "c" * 36,
    "TOKEN = 'xyz'",
    "DB_PASSWORD=hunter2",
    "中文sk-" + "d" * 24,
    "password：hunter2",
]
NOISE = ["def key_of(x):", "tokens = []", "a" * 50, "İstanbul ß", "", "x=1", "\r", "\x0b"]

ORDINARY = [
    "commit 3f2a9c1e4b5d6f7a8b9c0d1e2f3a4b5c6d7e8f90",
    "sha=3f2a9c1e4b5d6f7a8b9c0d1e2f3a4b5c6d7e8f90",
    "request id: 123e4567-e89b-12d3-a456-426614174000",
    "(Current directory: /SWE-agent__test-repo)",
    "path=/usr/lib/python3.11/site-packages/marshmallow/fields.py",
    '"url": "http://127.0.0.1:4000/v1/chat/completions"',
    "max_tokens=4096",
    "DEFAULT_MAX_CONTEXT_TOKENS = 50_000",
    "token_count: 12",
    "tokens counted: 12 of the budget",
    "def login(user: str, password: str) -> None:",
    "token: Optional[str] = None",
    "token = get_token()",
    "password = self.password",
    "client = Client(api_key=args.api_key)",
    "self._api_key = api_key",
    "api_key: the provider's API key; by default litellm reads it",
    '"SecretPattern": "harness.fragments.editing",',
    "summariser = GenericFakeChatModel(messages=iter(()))",
    "password_file: /run/secrets/db",
    "export PGPASSWORD=$DB_PASSWORD",
    "令牌桶算法：每秒补充十个令牌",
]
"""Agent text that looks close to a secret and is none."""


def reference(text: str) -> str:
    """What redact returns, computed the plain way: every pattern, in order, no gate, no screen
    and no cache, line by line for every hinted pattern."""
    for rule in _compiled(DEFAULT_SECRETS):
        text = _by_lines(text, rule, rule.hints) if rule.hints else rule.apply(text)
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
    assert "d" * 24 not in clean
    assert clean.startswith("first line\n") and clean.endswith("\nlast line")
    plain = "\n".join(NOISE) * 100
    assert redact(plain) is plain  # nothing matched: the same object, nothing copied


def test_every_secret_shape_is_redacted() -> None:
    assert len(CASES) >= 100
    missed = [text for text, secret in CASES if secret in redact(text)]
    assert missed == []


_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "swe-agent-trajectories"


def _trajectory_texts() -> list[str]:
    """The message texts of the real agent runs in ../shared/data (none in a clone of its own)."""
    texts: list[str] = []
    for path in sorted(_DATA.glob("*.traj")) if _DATA.is_dir() else ():
        history = json.loads(path.read_text())["history"]
        texts += [m["content"] for m in history if isinstance(m.get("content"), str)]
    return texts


def test_ordinary_agent_text_is_not_redacted() -> None:
    assert [t for t in ORDINARY if redact(t) != t] == []
    assert [t for t in _trajectory_texts() if redact(t) != t] == []


def test_what_names_a_secret_stays_and_json_stays_valid() -> None:
    assert redact("DB_PASSWORD=hunter2") == "DB_PASSWORD=[REDACTED:password]"
    url = "postgres://app:hunter2@db:5432/app"
    assert redact(url) == "postgres://app:[REDACTED:url_credentials]@db:5432/app"
    config = '{"id_token": "abc.def", "client_secret": "s3cr3t"}'
    assert json.loads(redact(config)) == {
        "id_token": "[REDACTED:password]",
        "client_secret": "[REDACTED:password]",
    }
    stripe = TOKENS["stripe live"]  # detect-secrets' regex takes 24 characters: widened
    assert redact(f"key {stripe} end") == "key [REDACTED:stripe_key] end"


def test_a_tool_call_argument_under_a_secret_key_is_redacted_whole() -> None:
    arguments = json.dumps({"password": "correct horse battery", "note": "keep"})
    call = ToolCall(id="c1", name="login", arguments=arguments)
    clean = redact_message(Message.assistant("", tool_calls=(call,)))
    assert json.loads(clean.tool_calls[0].arguments) == {
        "password": "[REDACTED:password]",
        "note": "keep",
    }


_BOUNDARY = st.sampled_from([*" \t\n,;)]}<>\"'`|。，：（）「」中文密钥是", "\r\n"])
"""What may stand right beside a secret (not ``(`` or ``[`` after it: ``x=name(`` is code)."""
_AROUND = st.text(st.characters(codec="utf-8"), max_size=40)
_EMBEDDED = (
    st.sampled_from(sorted(TOKENS.values())).map(lambda t: (t, t))
    | st.tuples(st.sampled_from(KEYS), st.sampled_from(PASSWORDS)).map(
        lambda kv: (f"{kv[0]}={kv[1]}", kv[1])
    )
    | st.tuples(st.sampled_from(KEYS), st.sampled_from(PASSWORDS)).map(
        lambda kv: (f'"{kv[0]}": "{kv[1]}"', kv[1])
    )
)


@settings(max_examples=200, deadline=None)
@given(_AROUND, _BOUNDARY, _EMBEDDED, _BOUNDARY, _AROUND)
def test_a_secret_in_any_surrounding_text_is_redacted(
    before: str, left: str, embedded: tuple[str, str], right: str, after: str
) -> None:
    shape, secret = embedded
    text = before + left + shape + right + after
    assert secret not in redact(text)


_VALUES = st.sampled_from(
    [
        *TOKENS.values(),
        *PASSWORDS,
        "3739671ad08541e759230997bf0e50dcb8059d05ef4c64c23bbb9a37a0829f24",
        "AbCdEfGhIjKlMnOpQrSt1234",
        "test_a_very_long_function_name_2",
        "a" * 30 + "1",
    ]
)
_GLUE = st.sampled_from(["=", ": ", ':"', " = '", "=>", "：", "\n", " ", "\t", "--token ", "://u:"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_GLUE, _VALUES | st.sampled_from(ORDINARY)), max_size=8))
def test_gates_and_screens_change_nothing(pieces: list[tuple[str, str]]) -> None:
    # The str membership tests and the screened lines only skip work that finds nothing.
    text = "".join(glue + value for glue, value in pieces)
    clear_redaction_cache()
    assert redact(text) == reference(text)


def test_a_secret_word_inside_a_redacted_value_starts_no_second_match() -> None:
    # Hypothesis found it: the anchored rule tried a match at every "pass", also inside the
    # value the first match took, and cut the following aws_key marker in two.
    text = (
        '=export PGPASSWORD=$DB_PASSWORD:"export PGPASSWORD=$DB_PASSWORD'
        ':"AKIAK00S4N46L67PAAX1:"AKIAK00S4N46L67PAAX1'
    )
    clear_redaction_cache()
    assert redact(text) == reference(text)
    assert redact(text).endswith('"[REDACTED:aws_key]:"[REDACTED:aws_key]')


def test_gates_change_nothing_on_every_secret_shape_and_ordinary_text() -> None:
    clear_redaction_cache()
    texts = [text for text, _ in CASES] + ORDINARY + _trajectory_texts()[:300]
    assert [t for t in texts if redact(t) != reference(t)] == []


def test_the_literal_pieces_every_match_holds() -> None:
    assert _literals(re.compile(r"(ghp|gho|ghu)_[A-Za-z0-9]{36}")) == ("gh",)
    # The most selective requirement: one of the branch's pieces beats a shorter run.
    found = _literals(re.compile(r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[0-9]{16}"))
    assert set(found or ()) == {"live", "test"}
    assert set(_literals(re.compile(r"AKIA[0-9]{16}|ya29\.[a-z]+")) or ()) == {"AKIA", "ya29."}
    assert _literals(re.compile(r"-----BEGIN [A-Z ]*KEY")) == ("-----BEGIN ",)
    # Case-insensitive literals match other cases; no literal at all: the rule always runs.
    assert _literals(re.compile(r"(?i)bearer [a-z]+")) is None
    assert _literals(re.compile(r"x(?i:token)")) == ("x",)
    assert _literals(re.compile(r"[=:][A-Za-z0-9]{20}")) is None
    assert _literals(re.compile(r"a|[bc]")) is None


def test_a_pattern_set_of_ones_own_is_gated_and_cached_apart() -> None:
    clear_redaction_cache()
    ticket = (SecretPattern("ticket", r"TCK-[0-9]{6}"),)
    shouty = (SecretPattern("shout", r"(?i)hunter[0-9]"),)
    text = "see TCK-123456 and HUNTER2"
    assert redact(text) == text
    assert redact(text, ticket) == "see [REDACTED:ticket] and HUNTER2"
    assert redact(text, shouty) == "see TCK-123456 and [REDACTED:shout]"
    assert redact(text, ticket) == "see [REDACTED:ticket] and HUNTER2"  # from the cache
    assert redact(text) is text


def test_the_cache_stays_within_its_bound_and_returns_the_callers_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clear_redaction_cache()
    monkeypatch.setattr(redaction, "CACHE_CHARS", 20_000)
    texts = [f"line {i}: " + "ordinary words " * 30 for i in range(200)]
    for text in texts:
        assert redact(text) is text
    assert 0 < redaction._cached_chars <= 20_000
    assert len(redaction._CACHE) < len(texts)
    copy = "".join(list(texts[-1]))  # equal, another object: the caller's own comes back
    assert copy is not texts[-1] and redact(copy) is copy
    secret = "DB_PASSWORD=hunter2"
    assert redact(secret) == redact(secret) == "DB_PASSWORD=[REDACTED:password]"
    clear_redaction_cache()
    assert redaction._cached_chars == 0 and not redaction._CACHE
