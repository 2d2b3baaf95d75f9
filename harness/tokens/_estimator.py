"""What a token estimator is, and what a message's count holds beyond its text.

`TokenEstimator` is the protocol every estimator meets (approximate, bound, exact); the
agent and the middleware depend on it alone. A message counts its text plus fixed framing
per message, tool call and tool schema (`MESSAGE_OVERHEAD` …).

A count is cached under `message_key`, a fingerprint of every counted field, never of an
id alone: it hashes the text or every part, every tool call's name and arguments, the
reasoning and the name. Python caches a string's hash on the string, so a key costs
O(parts), not O(text), and one cache can serve many sessions and users.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from harness.blocks import ContextBlock
from harness.messages import Message, ToolSchema

MESSAGE_OVERHEAD = 4
"""Tokens of framing per message (role markers, separators)."""
TOOL_CALL_OVERHEAD = 8
"""Tokens of framing per tool call (id, type, name and argument wrappers)."""
TOOL_SCHEMA_OVERHEAD = 8
"""Tokens of framing per tool schema."""


@runtime_checkable
class TokenEstimator(Protocol):
    """Counts tokens of text, messages, tool schemas and blocks."""

    method: str
    """A label for the manifest: ``approximate:o200k``, ``tiktoken:o200k_base``,
    ``bound:unknown`` …"""
    exact: bool
    """Whether counts are the provider's exact tokenizer's."""
    floor: float
    """A lower bound of count ÷ exact count for any text (1.0 for exact estimators)."""

    @property
    def exact_counter(self) -> TokenEstimator | None:
        """The family's shared exact estimator, or ``None`` (exact already, or none offline)."""
        ...

    def count(self, text: str) -> int:
        """Return the token count of ``text``."""
        ...

    def count_message(self, message: Message) -> int:
        """Return the token count of one message, framing included (cached)."""
        ...

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Return the total of `count_message` over ``messages``."""
        ...

    def count_tools(self, tools: Iterable[ToolSchema]) -> int:
        """Return the token cost of the tool schemas."""
        ...

    def count_block(self, block: ContextBlock) -> int:
        """Return the token count of one context block as rendered (cached)."""
        ...


def _frozen(value: Any) -> Any:
    """Return a hashable stand-in for a JSON-like value (strings keep their cached hash)."""
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value if isinstance(value, str | int | float | bool | None) else repr(value)


def message_key(message: Message) -> int:
    """Return a 64-bit fingerprint of everything in ``message`` that is counted.

    Covers the text or every content part (type, text and data), every tool call's name and
    arguments, the reasoning and the name. String hashes are keyed per process (SipHash) and
    cached on the strings, so the key costs O(parts) and cannot be forged across users.
    """
    content = message.content
    parts: Any
    if content is None or isinstance(content, str):
        parts = content
    else:
        parts = tuple((p.type, p.text, _frozen(p.data)) for p in content)
    # Most messages have no calls, most others one: neither runs a generator.
    tool_calls = message.tool_calls
    if not tool_calls:
        calls: tuple[tuple[str, str], ...] = ()
    elif len(tool_calls) == 1:
        calls = ((tool_calls[0].name, tool_calls[0].arguments),)
    else:
        calls = tuple([(c.name, c.arguments) for c in tool_calls])
    return hash((parts, calls, message.reasoning_content, message.name))
