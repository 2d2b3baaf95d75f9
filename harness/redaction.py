"""Secrets out of everything the harness stores: API keys, bearer tokens, passwords, keys.

One set of patterns (`DEFAULT_SECRETS`, configurable) serves every writer: fragment writes
(`harness.fragments.FragmentPolicy`) and the session recorder (every message, summary,
rewritten copy, warning and error on its way to the store). A match becomes
``[REDACTED:<name>]``; a pattern's ``keep`` group stays (``password=[REDACTED:password]``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import msgspec

from harness.messages import Message


class SecretPattern(msgspec.Struct, frozen=True):
    """A secret to redact: a name and a regular expression.

    The whole match is replaced by ``[REDACTED:<name>]``, or, when the pattern has a group
    named ``keep``, that group followed by the replacement (``password=[REDACTED:password]``).

    ``hints`` make redaction cheap: a regular expression that cannot start with a literal
    scans every position of the text (tens of milliseconds for an 80,000-character tool
    result), so a pattern with hints runs only on the lines that contain one of them
    (case-insensitively) — each of its matches must then lie within one line.
    """

    name: str
    pattern: str
    hints: tuple[str, ...] = ()
    """Literal pieces, one of which every match contains (``()``: run on the whole text)."""


DEFAULT_SECRETS: Final = (
    SecretPattern(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    ),
    SecretPattern("api_key", r"\bsk-[A-Za-z0-9_\-]{16,}", ("sk-",)),
    SecretPattern("aws_key", r"\bAKIA[0-9A-Z]{16}\b", ("akia",)),
    SecretPattern(
        "github_token", r"\bgh[pousr]_[A-Za-z0-9]{30,}", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
    ),
    SecretPattern("bearer", r"(?i)(?P<keep>\bbearer[ \t]+)[A-Za-z0-9._~+/\-]{8,}=*", ("bearer",)),
    SecretPattern(
        "password",
        r"(?i)(?P<keep>\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?token)"
        r"[\"']?[ \t]*[=:][ \t]*)(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&]+)",
        ("passw", "pwd", "secret", "token", "key"),
    ),
)
"""API keys (``sk-…``, AWS, GitHub), bearer tokens, ``password=…``-style assignments, PEM
private keys."""


def redact(text: str, secrets: Iterable[SecretPattern] = DEFAULT_SECRETS) -> str:
    """Return ``text`` with every match of ``secrets`` replaced by ``[REDACTED:<name>]``."""
    lower: str | None = None
    for compiled, marker, keep, hints in _compiled(tuple(secrets)):

        def sub(match: re.Match[str], marker: str = marker, keep: bool = keep) -> str:
            return (match.group("keep") or "") + marker if keep else marker

        if not hints:
            text = compiled.sub(sub, text)
            lower = None
            continue
        lower = text.lower() if lower is None else lower
        if len(lower) != len(text):  # a character whose lower case is longer: line by line
            changed = _by_lines(text, compiled, sub, hints)
        else:
            changed = _on_hinted_lines(text, lower, compiled, sub, hints)
        if changed is not text:
            text, lower = changed, None
    return text


def _on_hinted_lines(
    text: str,
    lower: str,
    compiled: re.Pattern[str],
    sub: Callable[[re.Match[str]], str],
    hints: tuple[str, ...],
) -> str:
    """Run ``compiled`` only on the lines of ``text`` where ``lower`` holds a hint.

    The hints are found with ``str.find`` (C speed over the whole text); only the lines
    around them are matched, so a long text with no secret costs one scan per hint.
    """
    spans: set[tuple[int, int]] = set()
    for hint in hints:
        at = lower.find(hint)
        while at >= 0:
            start = lower.rfind("\n", 0, at) + 1
            end = lower.find("\n", at)
            end = len(lower) if end < 0 else end + 1
            spans.add((start, end))
            at = lower.find(hint, end)
    if not spans:
        return text
    out: list[str] = []
    done = 0
    changed = False
    for start, end in sorted(spans):
        if start < done:
            continue  # the same line, found by another hint
        line = text[start:end]
        clean = compiled.sub(sub, line)
        changed = changed or clean != line
        out.append(text[done:start])
        out.append(clean)
        done = end
    if not changed:
        return text
    out.append(text[done:])
    return "".join(out)


def _by_lines(
    text: str,
    compiled: re.Pattern[str],
    sub: Callable[[re.Match[str]], str],
    hints: tuple[str, ...],
) -> str:
    """Run ``compiled`` on each line of ``text`` that holds a hint (case-folded line by line)."""
    lines = text.splitlines(keepends=True)
    changed = False
    for i, line in enumerate(lines):
        folded = line.lower()
        if any(h in folded for h in hints):
            clean = compiled.sub(sub, line)
            if clean != line:
                lines[i], changed = clean, True
    return "".join(lines) if changed else text


@functools.lru_cache(maxsize=32)
def _compiled(
    secrets: tuple[SecretPattern, ...],
) -> tuple[tuple[re.Pattern[str], str, bool, tuple[str, ...]], ...]:
    """Compile a pattern set once (redaction runs on every message the store receives)."""
    out = []
    for secret in secrets:
        compiled = re.compile(secret.pattern)
        keep = "keep" in compiled.groupindex
        hints = tuple(h.lower() for h in secret.hints if h)
        out.append((compiled, f"[REDACTED:{secret.name}]", keep, hints))
    return tuple(out)


def redact_message(message: Message, secrets: Sequence[SecretPattern] = DEFAULT_SECRETS) -> Message:
    """Return ``message`` with secrets redacted in its text, reasoning and tool-call arguments.

    Used by everything that writes messages to a store (`harness.sessions.SessionRecorder`);
    the same message object comes back when nothing matched, so a clean round copies nothing.
    Tool-call arguments are redacted value by value, so they stay valid JSON.
    """
    if not secrets:
        return message
    patterns = tuple(secrets)
    changes: dict[str, object] = {}
    content = message.content
    if isinstance(content, str):
        clean = redact(content, patterns)
        if clean != content:
            changes["content"] = clean
    elif content:
        parts = tuple(
            msgspec.structs.replace(p, text=redact(p.text, patterns)) if p.text else p
            for p in content
        )
        if any(a.text != b.text for a, b in zip(parts, content, strict=True)):
            changes["content"] = parts
    if message.reasoning_content:
        clean = redact(message.reasoning_content, patterns)
        if clean != message.reasoning_content:
            changes["reasoning_content"] = clean
    if message.tool_calls:
        calls = tuple(
            msgspec.structs.replace(c, arguments=_redact_arguments(c.arguments, patterns))
            for c in message.tool_calls
        )
        if any(a.arguments != b.arguments for a, b in zip(calls, message.tool_calls, strict=True)):
            changes["tool_calls"] = calls
    return message.replace(**changes) if changes else message


def _redact_arguments(arguments: str, secrets: tuple[SecretPattern, ...]) -> str:
    if redact(arguments, secrets) == arguments:
        return arguments
    try:
        decoded = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return redact(arguments, secrets)

    def keyed(key: str, value: object) -> object:
        if isinstance(value, str):  # {"password": "..."}: judged as "password=..."
            named = redact(f"{key}={value}", secrets)
            if named.startswith(f"{key}=") and named != f"{key}={value}":
                return named[len(key) + 1 :]
        return walk(value)

    def walk(value: object) -> object:
        if isinstance(value, str):
            return redact(value, secrets)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: keyed(k, v) if isinstance(k, str) else walk(v) for k, v in value.items()}
        return value

    return msgspec.json.encode(walk(decoded)).decode()
