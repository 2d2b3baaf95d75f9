"""The process-wide count caches, and the estimator base class that counts through them.

Caches are keyed by content, never by id alone (`message_key`), so one cache can serve
many sessions and users, and a round costs O(new content). The estimators that count
alike — the default approximate one of a family, the bound, a family's exact tokenizer —
share **one process-wide cache per counting method** (`CountCache`), so a fresh agent or a
stateless ``acompletion`` over a history seen before pays a lookup per message, not a count.
A cache holds 64-bit keys and counts, never text, and is bounded (`CACHE_LIMIT`).

`CachedEstimator` is the base of every estimator: it counts messages (with their framing
and images), tool schemas and blocks over a subclass's ``count``, through these caches.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

import msgspec

from harness.blocks import ContextBlock
from harness.messages import Message, ToolSchema
from harness.tokens._estimator import (
    MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TOOL_SCHEMA_OVERHEAD,
    TokenEstimator,
    message_key,
)
from harness.tokens._images import image_tokens

CACHE_LIMIT = 500_000
"""Entries one count cache holds (about 100 bytes each); the oldest quarter goes when full."""
MAX_NAME = 64
"""Names up to this long have their counts cached (`CachedEstimator._name`)."""


class CountCache:
    """The counts of one counting method: content key (64-bit hash) → tokens, bounded.

    Shared by every estimator of the method (`shared_cache`): its counts hold no text and
    depend on nothing but the content, so sharing across sessions and users is safe. When
    full, the oldest quarter of the entries is dropped (insertion order), not all of them,
    so a busy process never recounts everything at once.
    """

    __slots__ = ("blocks", "limit", "messages", "names", "tools")

    def __init__(self, limit: int = CACHE_LIMIT) -> None:
        self.limit = limit
        self.messages: dict[int, int] = {}
        self.blocks: dict[int, int] = {}
        self.tools: dict[int, int] = {}
        self.names: dict[int, int] = {}
        """Tool and participant names (a few per agent, in every new tool call and result)."""

    def clear(self) -> None:
        """Forget every count (benchmarks measuring a cold start call `clear_count_caches`)."""
        self.messages.clear()
        self.blocks.clear()
        self.tools.clear()
        self.names.clear()


def remember(counts: dict[int, int], key: int, tokens: int, limit: int) -> None:
    """Store ``tokens`` under ``key``, first dropping the oldest quarter when ``counts`` is full."""
    if len(counts) >= limit:
        try:
            oldest = list(islice(counts, max(1, limit // 4)))
        except RuntimeError:  # another thread changed it meanwhile (free-threaded builds)
            oldest = []  # the next insertion tries again
        for old in oldest:
            counts.pop(old, None)  # another thread may have dropped it already
    counts[key] = tokens


_SHARED_CACHES: dict[str, CountCache] = {}


def shared_cache(method: str) -> CountCache:
    """Return the process-wide cache of counting method ``method`` (made on first use)."""
    found = _SHARED_CACHES.get(method)
    if found is None:
        found = _SHARED_CACHES.setdefault(method, CountCache())
    return found


def clear_count_caches() -> None:
    """Forget every shared count (for benchmarks that measure a cold process)."""
    for counts in list(_SHARED_CACHES.values()):
        counts.clear()


class CachedEstimator:
    """Base class: message, tool and block counting with content-keyed caches over `count`."""

    method = "base"
    exact = False
    floor = 1.0
    """A lower bound of count ÷ exact count for any text."""
    images = "bound"
    """The image rule: ``openai``, ``anthropic`` or ``bound`` (see `image_tokens`)."""

    def __init__(self, *, shared_as: str | None = None) -> None:
        # content key (64-bit hash) → tokens: about 100 bytes per cached message. Private
        # unless the estimator counts exactly as every other of ``shared_as`` does.
        self.cache = CountCache() if shared_as is None else shared_cache(shared_as)
        """The counts of messages, blocks and tool schemas (see `CountCache`)."""
        self._messages = self.cache.messages
        self._limit = self.cache.limit

    def _share(self, method: str) -> None:
        """Count into the process-wide cache of ``method`` (only for estimators that count alike)."""
        self.cache = shared_cache(method)
        self._messages = self.cache.messages
        self._limit = self.cache.limit

    @property
    def exact_counter(self) -> TokenEstimator | None:
        """The family's shared exact estimator (``None`` here: subclasses say)."""
        return None

    def count(self, text: str) -> int:  # pragma: no cover - abstract
        """Return the token count of ``text``."""
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        """Return the token count of ``message``, framing included.

        Cached by `message_key` — a fingerprint of every counted field — so another message
        with the same id and other content (another session, a rewrite) is counted afresh.
        """
        key = message_key(message)
        counts = self._messages
        tokens = counts.get(key)
        if tokens is None:
            tokens = self._count_message(message)
            if len(counts) < self._limit:  # `remember`, inline: once per new message
                counts[key] = tokens
            else:
                remember(counts, key, tokens, self._limit)
        return tokens

    def _count_message(self, message: Message) -> int:
        content = message.content
        if isinstance(content, str):
            tokens = MESSAGE_OVERHEAD + self.count(content)
        else:  # no content counts as "" (a turn of only calls), parts as their text
            tokens = MESSAGE_OVERHEAD + self.count("" if content is None else message.text)
            if content is not None:
                tokens += sum(
                    image_tokens(part, self.images) for part in content if part.text is None
                )
        calls = message.tool_calls
        if calls:
            count, name = self.count, self._name
            for call in calls:
                tokens += TOOL_CALL_OVERHEAD + name(call.name) + count(call.arguments)
        if message.reasoning_content:
            tokens += self.count(message.reasoning_content)
        if message.name:
            tokens += 1 + self._name(message.name)
        return tokens

    def _name(self, name: str) -> int:
        """Return the count of a tool or participant name, cached by its (keyed) hash.

        An agent has a few names and every new tool call and result carries one: a new
        message costs a lookup for it instead of a count.
        """
        if len(name) > MAX_NAME:
            return self.count(name)
        key = hash(name)
        names = self.cache.names
        tokens = names.get(key)
        if tokens is None:
            tokens = self.count(name)
            remember(names, key, tokens, self._limit)
        return tokens

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Return the total count of ``messages``."""
        count_message = self.count_message
        return sum(count_message(m) for m in messages)

    def count_tools(self, tools: Iterable[ToolSchema]) -> int:
        """Return the token cost of the tool schemas (cached by a hash of their JSON)."""
        total = 0
        counts = self.cache.tools
        for tool in tools:
            encoded = msgspec.json.encode(tool)
            key = hash(encoded)
            tokens = counts.get(key)
            if tokens is None:
                tokens = TOOL_SCHEMA_OVERHEAD + self.count(encoded.decode())
                remember(counts, key, tokens, self._limit)
            total += tokens
        return total

    def count_block(self, block: ContextBlock) -> int:
        """Return the token count of ``block`` as rendered (cached by its source id and text)."""
        key = hash((block.source_id, block.text))
        counts = self.cache.blocks
        tokens = counts.get(key)
        if tokens is None:
            tokens = 2 + self.count(block.source_id) + self.count(block.text)
            remember(counts, key, tokens, self._limit)
        return tokens
