"""The stateless call's prefix cache: what the stack made of a history, found again.

A stateless `acompletion` caches the working history the stack made (the summary that
replaced early turns, trimmed results) under the chain hash of the caller's messages it
stands for, scoped by the model and its server (``api_base``), input limit, tools, stack
configuration and user (`cache_scope`): in process (`PrefixCache`, an LRU) or in the session store
(`StorePrefixCache`). `_open_store` resolves a store argument (an instance or a URL, one
store per URL per process) for both the cache and the stateful mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from harness.errors import ConfigurationError, StateConflict
from harness.messages import Message
from harness.request import ModelRequest
from harness.sessions import open_store
from harness.sessions.store import MessageEvent, SessionInfo, SessionKey, SessionStore, StoredState

CACHE_SUFFIX: Final = ":prefix-cache"
"""Appended to the agent id for the store's prefix-cache entries."""


CACHE_TITLE: Final = "prefix cache (stateless acompletion; not a conversation)"
"""The title of every prefix-cache entry in the store (what ``sessions list`` shows)."""


def _scoped(scope: str, chained: str) -> str:
    """Return the prefix-cache key of a conversation (its last chain hash) under ``scope``."""
    return hashlib.sha256(f"{scope}:{chained}".encode()).hexdigest()


def _changed(prepared: Sequence[Message], original: Sequence[Message]) -> bool:
    return len(prepared) != len(original) or any(
        a.id != b.id for a, b in zip(prepared, original, strict=True)
    )


def cache_scope(request: ModelRequest, stack_fingerprint: str, api_base: str | None = None) -> str:
    """Return what a cached preparation depends on besides the messages, as a hash.

    The model and the server it is served by (``api_base``: one model name on two servers
    is two models), the input limit, the tools and the stack's configuration (each layer's
    class and settings, hashed once per composed stack): a summary made under one of them
    is not reused under another. Entries are also kept per user (`PrefixCache`).
    """
    facts = [
        request.model,
        (api_base or "").rstrip("/"),
        request.input_limit,
        [t.to_openai() for t in request.tools],
        stack_fingerprint,
    ]
    return hashlib.sha256(msgspec.json.encode(facts)).hexdigest()


def _fingerprint(value: Any, depth: int = 0) -> Any:
    """Return a stable, JSON-encodable picture of a middleware's configuration.

    Values, containers and Structs are kept; other objects become their class (plus their
    public attributes, a few levels deep) — never their ``repr``, which holds addresses.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth > 3:
        return _class_path(value)
    if isinstance(value, list | tuple):
        return [_fingerprint(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(str(_fingerprint(v, depth + 1)) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _fingerprint(v, depth + 1) for k, v in sorted(value.items(), key=str)}
    if isinstance(value, msgspec.Struct):
        fields = {f: _fingerprint(getattr(value, f), depth + 1) for f in value.__struct_fields__}
        return [_class_path(value), fields]
    if callable(value) and not hasattr(value, "__dict__"):
        return _class_path(value)
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        public = {k: v for k, v in attrs.items() if not k.startswith("_")}
        return [_class_path(value), _fingerprint(public, depth + 1)]
    return _class_path(value)


def _class_path(value: Any) -> str:
    kind = value if isinstance(value, type) else type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


class PrefixCache:
    """Working histories by (user, agent, hash of the caller's messages they stand for).

    The in-process default is a bounded LRU; `acompletion(store=...)` keeps them in the
    session store instead (`StorePrefixCache`). Entries of one user are never returned
    to another.

    Args:
        max_entries: how many working histories to keep (least recently used go first).
    """

    def __init__(self, max_entries: int = 256) -> None:
        if not isinstance(max_entries, int) or max_entries < 1:
            raise ConfigurationError(f"max_entries must be an int ≥ 1, got {max_entries!r}")
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, str], tuple[Message, ...]] = OrderedDict()

    async def find(
        self, user_id: str, agent_id: str, digests: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        """Return ``(k, history)`` for the longest prefix cached: ``digests[k - 1]``'s entry."""
        for k in range(len(digests), 0, -1):
            found = await self.get(user_id, agent_id, digests[k - 1])
            if found is not None:
                return k, found
        return None

    async def get(self, user_id: str, agent_id: str, digest: str) -> tuple[Message, ...] | None:
        """Return the working history cached for ``digest``, or ``None``."""
        key = (user_id, agent_id, digest)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    async def put(
        self, user_id: str, agent_id: str, digest: str, history: Sequence[Message]
    ) -> None:
        """Cache ``history`` as what the messages hashed to ``digest`` became."""
        self._entries[(user_id, agent_id, digest)] = tuple(history)
        self._entries.move_to_end((user_id, agent_id, digest))
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()


DEFAULT_PREFIX_CACHE: Final = PrefixCache()
"""The in-process cache of stateless calls made without a store."""


class StorePrefixCache(PrefixCache):
    """The prefix cache in a session store, so every process (or proxy) sharing it benefits.

    One entry is one small session of its user under the agent id ``<agent>:prefix-cache``,
    titled `CACHE_TITLE`. Retention is per (user, agent): a call finds its entries with one
    listing, ignores those older than ``ttl_s``, and a write removes the oldest beyond
    ``max_entries`` and the expired ones.

    Args:
        store: the session store.
        max_entries: entries kept per user and agent (the newest).
        ttl_s: seconds an entry stays usable after it was written.
    """

    def __init__(
        self, store: SessionStore, *, max_entries: int = 32, ttl_s: float = 86_400
    ) -> None:
        super().__init__(max_entries)
        if not isinstance(ttl_s, int | float) or not ttl_s > 0:
            raise ConfigurationError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
        self.store = store
        self.ttl_s = float(ttl_s)

    async def find(
        self, user_id: str, agent_id: str, digests: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        """Return ``(k, history)`` for the longest prefix with a live entry (one listing)."""
        live_entries, _ = await self._entries_of(user_id, agent_id)
        live = {info.session_id for info in live_entries}
        for k in range(len(digests), 0, -1):
            if digests[k - 1][:32] in live:
                found = await self.get(user_id, agent_id, digests[k - 1])
                if found is not None:
                    return k, found
        return None

    async def get(self, user_id: str, agent_id: str, digest: str) -> tuple[Message, ...] | None:
        """Return the working history stored for ``digest``, or ``None``."""
        found = await self.store.load(SessionKey(user_id, agent_id + CACHE_SUFFIX, digest[:32]))
        if found is None:
            return None
        stored, messages = found
        if not all(i in messages for i in stored.working_ids):
            return None
        return tuple(messages[i] for i in stored.working_ids)

    async def put(
        self, user_id: str, agent_id: str, digest: str, history: Sequence[Message]
    ) -> None:
        """Store ``history`` for ``digest``; drop expired entries and the oldest beyond the cap."""
        key = SessionKey(user_id, agent_id + CACHE_SUFFIX, digest[:32])
        state = StoredState(working_ids=tuple(m.id for m in history), title=CACHE_TITLE)
        with contextlib.suppress(StateConflict):  # an equal entry was written first
            await self.store.commit(
                key,
                expected_version=0,
                events=[MessageEvent(message=m) for m in history],
                state=state,
            )
        live, expired = await self._entries_of(user_id, agent_id)
        surplus = sorted(live, key=lambda i: i.updated_at)[: max(0, len(live) - self.max_entries)]
        for info in (*expired, *surplus):
            await self.store.purge(SessionKey(user_id, info.agent_id, info.session_id))

    async def _entries_of(
        self, user_id: str, agent_id: str
    ) -> tuple[list[SessionInfo], list[SessionInfo]]:
        """Return the user's entries for ``agent_id``: (live, expired)."""
        entries = await self.store.sessions(user_id, agent_id + CACHE_SUFFIX)
        oldest = time.time() - self.ttl_s
        live = [i for i in entries if i.updated_at >= oldest]
        return live, [i for i in entries if i.updated_at < oldest]


_STORES: dict[str, SessionStore] = {}


def _open_store(store: SessionStore | str | None) -> SessionStore:
    """Return the store: the one given, one opened once per URL, or the process default."""
    if isinstance(store, SessionStore):
        return store
    url = "sqlite://" if store is None else store
    if url not in _STORES:
        _STORES[url] = open_store(url)
    return _STORES[url]
