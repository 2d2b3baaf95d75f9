"""The drop-in call: `acompletion` (and `completion`) with the stack before the request.

An app that calls ``litellm.acompletion(model=..., messages=[...], tools=[...])`` changes one
import and gets context management: the same arguments, the same return value (litellm's
``ModelResponse``, or litellm's stream with ``stream=True``), the same exceptions — and the
request the provider receives has been through the middleware stack (default:
`middleware.default_stack()`): tool results offloaded, the budget fitted, the history
compacted, pairs validated. The request's manifest rides on the answer::

    response = await acompletion(model="gpt-4o-mini", messages=messages, tools=tools)
    manifest = manifest_of(response)  # response._hidden_params["harness_manifest"]

**What becomes what.** System (and ``developer``) dicts become the request's System parts,
in order — never history, so never summarised away. The other dicts are the history
(checked; a malformed one is refused with `InvalidInputError` before anything is sent).
OpenAI tool dicts become `ToolSchema`s for the budget and are sent as given (``strict``
included). ``api_base``, ``api_key``, ``timeout`` and ``context_window`` configure the client; every other
keyword is sent to the provider as litellm would. The caller's list is never changed.

**Stateless** (the default): the caller's messages are the history. What the stack made
of them — the summary that replaced early turns, trimmed or shortened results — is cached
under a hash of the caller's messages it stands for (a chain hash over each message's
role, content, tool calls and call id, so ids and provider extras do not matter). The next
call, which sends the same history grown by a reply and a new turn, starts from the cached
version of its longest known prefix plus the new messages: the same summary comes back,
and no new summary request is made until the history outgrows it again. An entry is only
found by a call with the same model, input limit, tools and stack configuration (they are
hashed into its key), so a summary made for one setup never answers another. The cache
lives in the session store when ``store=`` is given (`StorePrefixCache`: one small entry
per prefix under the agent id ``<agent_id>:prefix-cache``, titled as a cache, at most
``max_entries`` per user and agent, dropped after ``ttl_s``), else in an in-process LRU;
either way it is scoped by ``user_id``, so one user's summary never answers another's.

**Stateful** (``session_id=...``): the session store (``store=``, a `SessionStore` or its
URL; default: one private in-memory SQLite store per process) keeps the full record, the
working history, every manifest, between calls — per (``user_id``, ``agent_id``,
``session_id``), as `HarnessAgent` does. Send either the whole conversation each time (as
with litellm: what extends the record is appended) or only the new turns. A non-streamed
reply is recorded at once; a streamed one when the next call sends it back. New turns are
committed only with a request the stack accepted: one it refuses (an orphan tool result, a
turn over the budget) is logged as a `RefusalEvent` and leaves the stored history as it was,
so the next valid request on the session works (through the proxy hook too).

**Errors** are litellm's own for provider failures (our typed error is added as a note);
a request that cannot be prepared raises the harness's `ContextBuildError` subclasses.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from functools import cache
from typing import Any, Final

import anyio
import msgspec

from harness.accounting import build_manifest, failed_manifest, report_manifest
from harness.chain import compose
from harness.errors import (
    ConfigurationError,
    InvalidInputError,
    ProviderError,
    StateConflict,
)
from harness.manifest import ContextManifest
from harness.messages import Message, ToolSchema, history_message
from harness.policy import ContextPolicy, discovered_input_limit, requested_output
from harness.request import (
    ModelClientLike,
    ModelRequest,
    ModelResponse,
    RequestIds,
    RunScope,
    SystemPart,
)
from harness.sessions.recorder import SessionRecorder
from harness.sessions.store import (
    MessageEvent,
    SessionInfo,
    SessionKey,
    SessionStore,
    StoredState,
    open_store,
)
from harness.state import AgentState, SessionScratch, StateKey
from harness.types import Handler, Middleware

__all__ = [
    "MANIFEST_KEY",
    "PrefixCache",
    "StorePrefixCache",
    "acompletion",
    "completion",
    "manifest_of",
    "prepare_messages",
]

MANIFEST_KEY: Final = "harness_manifest"
"""The key of the manifest in the answer's ``_hidden_params``."""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """How much of a stateful caller's conversation the session's record holds."""

    count: int = 0
    """How many caller-visible messages the record has."""
    hash: str = ""
    """The chain hash of the last of them (`chain_hashes`)."""


RECORD_KEY: Final = StateKey("adapters/record", SessionRecord, former=("adapters.record",))
"""Where a stateful session keeps its `SessionRecord`."""
CACHE_SUFFIX: Final = ":prefix-cache"
"""Appended to the agent id for the store's prefix-cache entries."""
CACHE_TITLE: Final = "prefix cache (stateless acompletion; not a conversation)"
"""The title of every prefix-cache entry in the store (what ``sessions list`` shows)."""
LOOKBACK: Final = 64
"""How many shorter prefixes a call looks up for a cached working history."""
CLIENT_KEYS: Final = ("api_base", "api_key", "timeout", "context_window")
"""Keywords that configure the client instead of travelling as provider settings."""


# --------------------------------------------------------------------------- the call
async def acompletion(
    model: str,
    messages: Sequence[Any],
    tools: Sequence[Mapping[str, Any] | ToolSchema] | None = None,
    *,
    stack: Sequence[Middleware] | None = None,
    policy: ContextPolicy | None = None,
    session_id: str | None = None,
    user_id: str = "",
    store: SessionStore | str | None = None,
    agent_id: str = "acompletion",
    prefix_cache: PrefixCache | None = None,
    **litellm_kwargs: Any,
) -> Any:
    """Call the model like ``litellm.acompletion``, with the stack applied to the request.

    Args:
        model: the litellm model name (``gpt-4o-mini``, ``openai/<name>`` with ``api_base`` …).
        messages: OpenAI-format message dicts (or litellm ``Message`` objects); not changed.
        tools: OpenAI tool dicts (or `ToolSchema`s).
        stack: the middleware list, outermost first (default: `middleware.default_stack()`).
        policy: budget, estimator and observer (default: `ContextPolicy()`).
        session_id: keep the session in ``store`` between calls (stateful); ``None``: the
            messages are the whole history (stateless).
        user_id: whose request this is: sessions and cached summaries are scoped by it.
        store: a `SessionStore` or its URL, for sessions and (stateless) cached summaries.
        agent_id: the agent id sessions and manifests are recorded under.
        prefix_cache: where stateless calls cache what the stack made of a history
            (default: a `StorePrefixCache` of ``store`` when given, else an in-process LRU).
        **litellm_kwargs: everything else ``litellm.acompletion`` takes (``stream``,
            ``temperature``, ``max_tokens``, ``api_base``, ``api_key``, ``timeout`` …).

    Returns:
        litellm's ``ModelResponse`` (or its stream when ``stream=True``), with the
        manifest under ``_hidden_params["harness_manifest"]`` (see `manifest_of`).

    Raises:
        InvalidInputError: a message or tool is malformed (nothing was sent).
        ContextBuildError: the request could not be prepared (budget, pairs …).
        Exception: a provider failure, as the exception litellm raises for it.
    """
    stream = bool(litellm_kwargs.pop("stream", False))
    if "base_url" in litellm_kwargs and "api_base" not in litellm_kwargs:
        litellm_kwargs["api_base"] = litellm_kwargs.pop("base_url")
    client_kwargs = {k: litellm_kwargs.pop(k) for k in CLIENT_KEYS if k in litellm_kwargs}
    schemas, tool_dicts = tools_from_openai(tools or ())
    from providers.passthrough import PassthroughClient

    client = PassthroughClient(model, tool_dicts=tool_dicts, **client_kwargs)
    call = _Call(client=client, send=client.send, stream=stream)
    await _through_stack(
        call, model, messages, schemas, litellm_kwargs or None,
        stack=stack, policy=policy, session_id=session_id, user_id=user_id, store=store,
        agent_id=agent_id, prefix_cache=prefix_cache,
    )  # fmt: skip
    _attach(call.raw, call.manifest)
    return call.raw


async def prepare_messages(
    model: str,
    messages: Sequence[Any],
    tools: Sequence[Mapping[str, Any] | ToolSchema] | None = None,
    *,
    client: ModelClientLike,
    stack: Sequence[Middleware] | None = None,
    policy: ContextPolicy | None = None,
    session_id: str | None = None,
    user_id: str = "",
    store: SessionStore | str | None = None,
    agent_id: str = "acompletion",
    settings: dict[str, Any] | None = None,
    prefix_cache: PrefixCache | None = None,
) -> tuple[list[dict[str, Any]], ContextManifest | None]:
    """Run the stack on a message list and return what to send instead, without sending it.

    For callers that send the request themselves (the litellm proxy hook): the same
    preparation as `acompletion` — System from system dicts, the stack, the prefix cache
    or the session record — and the messages the model should receive, as OpenAI dicts.
    In a session the reply is recorded when the next call sends it back.

    Args:
        model: the model name (for the estimator and the window).
        messages: OpenAI-format message dicts; not changed.
        tools: OpenAI tool dicts (they count against the budget).
        client: the model client summaries are requested from (and whose window counts).
        stack: as for `acompletion`.
        policy: as for `acompletion`.
        session_id: as for `acompletion`.
        user_id: as for `acompletion`.
        store: as for `acompletion`.
        agent_id: as for `acompletion`.
        settings: the provider settings of the request (``max_tokens`` reserves output).
        prefix_cache: as for `acompletion`.

    Returns:
        The messages to send and the request's manifest.

    Raises:
        InvalidInputError: a message or tool is malformed.
        ContextBuildError: the request could not be prepared (budget, pairs …).
    """

    async def capture(request: ModelRequest, stream: bool) -> tuple[Any, ModelResponse]:
        rendered = [m.to_openai() for m in request.render()]
        return rendered, ModelResponse(message=Message(role="assistant", content=""))

    call = _Call(client=client, send=capture, stream=True)
    schemas, _ = tools_from_openai(tools or ())
    await _through_stack(
        call, model, messages, schemas, settings,
        stack=stack, policy=policy, session_id=session_id, user_id=user_id, store=store,
        agent_id=agent_id, prefix_cache=prefix_cache,
    )  # fmt: skip
    rendered: list[dict[str, Any]] = call.raw
    return rendered, call.manifest


async def _through_stack(
    call: _Call,
    model: str,
    messages: Sequence[Any],
    schemas: tuple[ToolSchema, ...],
    settings: dict[str, Any] | None,
    *,
    stack: Sequence[Middleware] | None,
    policy: ContextPolicy | None,
    session_id: str | None,
    user_id: str,
    store: SessionStore | str | None,
    agent_id: str,
    prefix_cache: PrefixCache | None = None,
) -> None:
    """Build the request, run the stack (stateless or in a session), fill in ``call``."""
    system, converted, hashes = _split(messages, scope=f"{user_id}\0{agent_id}")
    resolved = (policy or ContextPolicy()).resolve(model)
    limit, guessed = await discovered_input_limit(
        resolved, call.client, model, max_output=requested_output(settings)
    )
    composed = _composed(stack)
    template = ModelRequest(
        model=model,
        system=system,
        tools=schemas,
        settings=settings,
        policy=resolved,
        input_limit=limit,
        transforms=guessed,
    )
    token = _CURRENT_CALL.set(call)
    try:
        if session_id is None:
            if prefix_cache is None:
                prefix_cache = (
                    StorePrefixCache(_open_store(store))
                    if store is not None
                    else DEFAULT_PREFIX_CACHE
                )
            scope = cache_scope(template, composed.fingerprint)
            await _stateless(
                composed.handler, template, call, converted, hashes, user_id, agent_id,
                prefix_cache, scope,
            )  # fmt: skip
        else:
            key = SessionKey(user_id, agent_id, session_id)
            await _stateful(
                composed.handler, template, call, converted, hashes, key, _open_store(store)
            )
    finally:
        _CURRENT_CALL.reset(token)


def completion(
    model: str,
    messages: Sequence[Any],
    tools: Sequence[Mapping[str, Any] | ToolSchema] | None = None,
    **kwargs: Any,
) -> Any:
    """Call `acompletion` from synchronous code (one event loop per call).

    Takes what `acompletion` takes. With ``stream=True`` the stream is read inside the call
    and an iterator over its chunks is returned.
    """

    async def run() -> Any:
        answer = await acompletion(model, messages, tools, **kwargs)
        return [chunk async for chunk in answer] if kwargs.get("stream") else answer

    answer = anyio.run(run, backend="asyncio")  # litellm runs on asyncio only
    return iter(answer) if kwargs.get("stream") else answer


def manifest_of(response: Any) -> ContextManifest | None:
    """Return the manifest `acompletion` attached to ``response`` (or its stream), if any."""
    hidden = getattr(response, "_hidden_params", None)
    found = hidden.get(MANIFEST_KEY) if isinstance(hidden, Mapping) else None
    return found if isinstance(found, ContextManifest) else None


# ------------------------------------------------------------------- the two modes
Sender = Callable[[ModelRequest, bool], Awaitable[tuple[Any, ModelResponse]]]
"""Sends a prepared request (streamed or not): the caller's answer object and ours."""


class _Call:
    """What one call learns from its innermost handler."""

    def __init__(self, *, client: ModelClientLike, send: Sender, stream: bool) -> None:
        self.client = client
        self.send = send
        self.stream = stream
        self.raw: Any = None
        self.manifest: ContextManifest | None = None
        self.reply: Message | None = None
        self.sent = False
        """Whether the stack passed the request on to be sent (else it refused it)."""


_CURRENT_CALL: ContextVar[_Call] = ContextVar("harness.adapters.call")
"""The call the innermost handler works for (set around each run of a composed stack)."""


async def _innermost(request: ModelRequest) -> ModelResponse:
    """The innermost handler of every call: manifest, send, remember the answer."""
    call = _CURRENT_CALL.get()
    manifest = build_manifest(request)
    report_manifest(manifest, request)
    call.sent = True
    raw, response = await call.send(request, call.stream)
    call.raw, call.manifest, call.reply = raw, manifest, response.message
    return response.replace(manifest=manifest)


class _Composed:
    """A stack composed once, with its configuration's fingerprint (for cache keys)."""

    def __init__(self, stack: Sequence[Middleware]) -> None:
        self.stack = list(stack)  # holds the layers, so their ids stay theirs
        self.handler = compose(self.stack, _innermost)
        self.fingerprint = hashlib.sha256(
            msgspec.json.encode([_fingerprint(layer) for layer in self.stack])
        ).hexdigest()


_COMPOSED: OrderedDict[tuple[int, ...], _Composed] = OrderedDict()
MAX_COMPOSED: Final = 64
"""How many composed stacks are kept (a caller passing one stack object reuses its entry)."""


def _composed(stack: Sequence[Middleware] | None) -> _Composed:
    """Return ``stack`` composed (default: one shared `default_stack()`), composing it once.

    Composing checks the stack's order constraints, which costs milliseconds; a call
    passing the same middleware objects again reuses the composed handler.
    """
    if stack is None:
        stack = _default_stack()
    key = tuple(map(id, stack))
    found = _COMPOSED.get(key)
    if found is None:
        found = _COMPOSED[key] = _Composed(stack)
        while len(_COMPOSED) > MAX_COMPOSED:
            _COMPOSED.popitem(last=False)
    _COMPOSED.move_to_end(key)
    return found


@cache
def _default_stack() -> list[Middleware]:
    """The default stack, built once: middleware hold configuration only."""
    from middleware import default_stack

    return default_stack()


async def _run(handler: Handler, request: ModelRequest) -> tuple[Message, ...] | None:
    """Run ``handler`` on ``request`` and return the history the round keeps.

    Provider failures leave as litellm's exceptions.
    """
    try:
        return (await handler(request)).kept
    except ProviderError as exc:
        native = exc.__cause__
        if isinstance(native, Exception) and type(native).__module__.startswith(
            ("litellm", "openai", "httpx")
        ):
            native.add_note(f"context-harness: {exc}")
            raise native from None
        raise
    except Exception as exc:
        report_manifest(failed_manifest(request, exc), request)
        raise


async def _stateless(
    handler: Handler,
    template: ModelRequest,
    call: _Call,
    converted: list[Message],
    chained: list[str],
    user_id: str,
    agent_id: str,
    cache: PrefixCache,
    scope: str,
) -> None:
    # The cache keys: each message's chain hash under the scope, for the last LOOKBACK only.
    tail = max(0, len(chained) - LOOKBACK)
    hashes = [_scoped(scope, h) for h in chained[tail:]]
    start = 0
    cached: tuple[Message, ...] = ()
    found = await cache.find(user_id, agent_id, hashes)
    if found is not None:
        start, cached = tail + found[0], found[1]
    history = (*cached, *converted[start:])
    state = AgentState(full_history=list(converted), working_history=list(history))
    key = SessionKey(user_id, agent_id, "")
    run = RunScope(client=call.client, key=key, session=_SCRATCHES.get(key))
    ids = RequestIds(agent_id=agent_id, user_id=user_id, run_id=run.run_id)
    request = template.replace(ids=ids, history=history, state=state, run=run)
    prepared = await _run(handler, request)
    if prepared is not None and hashes and (cached or _changed(prepared, converted)):
        await cache.put(user_id, agent_id, hashes[-1], prepared)


async def _stateful(
    handler: Handler,
    template: ModelRequest,
    call: _Call,
    converted: list[Message],
    hashes: list[str],
    key: SessionKey,
    store: SessionStore,
) -> None:
    recorder, state = await SessionRecorder.load(store, key)
    record = state.get(RECORD_KEY) or SessionRecord()
    count, last = record.count, record.hash
    if count and len(converted) >= count and hashes[count - 1] == last:
        new = converted[count:]  # the whole conversation, extending the record
        new_hashes = hashes[count:]
    else:
        new_hashes = chain_hashes(converted, start=last) if last else hashes
        new = [m.replace(id=h[:16]) for m, h in zip(converted, new_hashes, strict=True)]
    if new:
        state.append(*new)
        for message in new:
            if message.role in ("user", "tool"):
                recorder.mark_turn(message)
        count, last = count + len(new), new_hashes[-1]
    run = RunScope(
        emit=recorder.note, client=call.client, store=store, key=key, session=_SCRATCHES.get(key)
    )
    ids = RequestIds(
        agent_id=key.agent_id, user_id=key.user_id, session_id=key.session_id, run_id=run.run_id
    )
    request = template.replace(
        ids=ids,
        history=tuple(state.working_history),
        state=state,
        state_version=state.version,
        run=run,
    )
    try:
        prepared = await _run(handler, request)
    except Exception as exc:
        with anyio.CancelScope(shield=True):
            if call.sent:  # the stack accepted the request: its turns are the session's
                recorder.note_error(exc)
                state.set(RECORD_KEY, SessionRecord(count=count, hash=last))
                await recorder.commit(state)
            else:  # refused: logged, and the stored history stays as it was
                try:
                    await recorder.refuse(state, exc)
                except StateConflict as conflict:  # the caller needs the refusal's reason
                    exc.add_note(f"context-harness: the refusal was not logged ({conflict})")
        raise
    if prepared is not None and state.version == request.state_version:
        state.commit_working(prepared)
    if not call.stream and call.reply is not None:
        last = chain_hashes([call.reply], start=last)[0]
        state.append(call.reply.replace(id=last[:16]))
        count += 1
    state.set(RECORD_KEY, SessionRecord(count=count, hash=last))
    await recorder.commit(state)


# ---------------------------------------------------------------- converting input
def split_messages(
    messages: Sequence[Any], *, scope: str = ""
) -> tuple[tuple[SystemPart, ...], list[Message]]:
    """Return the System parts and the history messages of an OpenAI message list.

    System and ``developer`` messages become System parts (``system/<position>``) in
    order; the rest become checked history messages with ids derived from the
    conversation up to them (`chain_hashes`), so the same conversation gets the same ids.
    ``messages`` is not changed. ``scope`` (e.g. the user and agent) keeps the kept
    conversions of one caller apart from another's.

    Raises:
        InvalidInputError: ``messages`` is not a list of message dicts, or one is malformed.
    """
    system, history, _ = _split(messages, scope=scope)
    return system, history


def _split(
    messages: Sequence[Any], *, scope: str
) -> tuple[tuple[SystemPart, ...], list[Message], list[str]]:
    """`split_messages`, plus the chain hash of each history message.

    A caller resends its whole conversation with every request, so the conversion of the
    part it sent before is taken from the last conversion of that conversation
    (`_Conversion`) when the raw dicts are equal, and only the rest is converted and hashed.
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidInputError(
            f"messages must be a list of OpenAI message dicts, got {type(messages).__name__}"
        )
    messages = list(messages)  # pointers: one list to slice and compare
    key, before = _CONVERSIONS.find(messages, scope)
    kept = before.shared(messages) if before is not None else 0
    done = before.cut(kept) if before is not None else _Conversion()
    system = list(done.system)
    history: list[Message] = []
    for position in range(kept, len(messages)):
        data = _as_dict(messages[position], position)
        if data.get("role") in ("system", "developer"):
            text = Message.from_openai({**data, "role": "system"}).text
            system.append(SystemPart(name=f"system/{position}", text=text))
            done.system_at.append(len(system))
            done.history_at.append(len(done.history) + len(history))
            continue
        try:
            history.append(history_message(Message.from_openai(data)))
        except InvalidInputError as exc:
            raise InvalidInputError(f"messages[{position}]: {exc}", position=position) from exc
        done.system_at.append(len(system))
        done.history_at.append(len(done.history) + len(history))
    hashes = chain_hashes(history, start=done.hashes[-1] if done.hashes else "")
    done.system = system
    done.history.extend(m.replace(id=h[:16]) for m, h in zip(history, hashes, strict=True))
    done.hashes.extend(hashes)
    if key is not None and done.keep(messages, kept):
        _CONVERSIONS.put(key, done)
    return tuple(system), list(done.history), list(done.hashes)


class _Conversion:
    """One conversation as last converted: copies of its raw dicts and what they became.

    ``system_at[i]`` and ``history_at[i]`` are how many System parts and history messages
    the first ``i`` raw messages made. The raw dicts are copies (a caller may change its
    own afterwards); a conversion depends on the dicts alone, so an equal dict converts
    alike for any caller.
    """

    __slots__ = ("hashes", "history", "history_at", "raw", "system", "system_at")

    def __init__(self) -> None:
        self.raw: list[Any] = []
        self.system: list[SystemPart] = []
        self.history: list[Message] = []
        self.hashes: list[str] = []
        self.system_at: list[int] = [0]
        self.history_at: list[int] = [0]

    def shared(self, messages: list[Any]) -> int:
        """Return how many leading raw messages of ``messages`` equal those converted here."""
        raw, n = self.raw, min(len(self.raw), len(messages))
        if raw[:n] == messages[:n]:  # the usual case: the conversation grew (a C-speed compare)
            return n
        low, high = 0, n  # raw[:low] equal, raw[:high] not
        while high - low > 1:
            middle = (low + high) // 2
            if raw[:middle] == messages[:middle]:
                low = middle
            else:
                high = middle
        return low

    def cut(self, kept: int) -> _Conversion:
        """Return a new conversion of the first ``kept`` raw messages only."""
        out = _Conversion()
        out.raw = self.raw[:kept]
        out.system = self.system[: self.system_at[kept]]
        out.history = self.history[: self.history_at[kept]]
        out.hashes = self.hashes[: self.history_at[kept]]
        out.system_at = self.system_at[: kept + 1]
        out.history_at = self.history_at[: kept + 1]
        return out

    def keep(self, messages: list[Any], kept: int) -> bool:
        """Take copies of ``messages[kept:]``; return whether they could be copied."""
        try:
            copies = msgspec.json.decode(msgspec.json.encode(messages[kept:]))
        except (TypeError, ValueError, msgspec.MsgspecError):
            return False
        self.raw.extend(copies)
        return True


class _Conversions:
    """The last conversion of recent conversations, by caller and opening messages (bounded).

    Keyed by a hash of the caller's scope (user and agent) and the first two raw messages:
    one caller's conversations that open alike share an entry (each then finds the other's
    conversion and keeps what is equal); another caller's never meet them.
    Holds at most `MAX_CONVERSATIONS` conversations and `MAX_MESSAGES` messages in all:
    about twice their text (the raw copies and the messages).
    """

    MAX_CONVERSATIONS: Final = 256
    MAX_MESSAGES: Final = 100_000

    def __init__(self) -> None:
        self._by_opening: OrderedDict[bytes, _Conversion] = OrderedDict()
        self._messages = 0
        self._lock = threading.Lock()  # proxies may prepare in worker threads

    def find(self, messages: list[Any], scope: str) -> tuple[bytes | None, _Conversion | None]:
        """Return the key of ``messages``' conversation in ``scope`` and its last conversion."""
        if not messages or not all(type(m) is dict for m in messages):
            return None, None
        try:
            opening = msgspec.json.encode(messages[:2])
        except (TypeError, ValueError, msgspec.MsgspecError):
            return None, None
        key = hashlib.blake2b(scope.encode() + b"\0" + opening, digest_size=16).digest()
        with self._lock:
            found = self._by_opening.get(key)
            if found is not None:
                self._by_opening.move_to_end(key)
        return key, found

    def put(self, key: bytes, conversion: _Conversion) -> None:
        """Keep ``conversion`` as the last of its conversation; drop the oldest beyond bounds."""
        if len(conversion.raw) > self.MAX_MESSAGES:
            return
        with self._lock:
            old = self._by_opening.pop(key, None)
            if old is not None:
                self._messages -= len(old.raw)
            self._by_opening[key] = conversion
            self._messages += len(conversion.raw)
            while (
                len(self._by_opening) > self.MAX_CONVERSATIONS or self._messages > self.MAX_MESSAGES
            ):
                _, dropped = self._by_opening.popitem(last=False)
                self._messages -= len(dropped.raw)

    def clear(self) -> None:
        """Forget every conversion."""
        with self._lock:
            self._by_opening.clear()
            self._messages = 0


_CONVERSIONS: Final = _Conversions()


class _Scratches:
    """Each recent session's scratch space (`SessionScratch`), kept across its requests.

    A request's state is loaded anew each time (from the store, or from the caller's
    messages), so the running totals, the pair check's and the offload scan's last history
    live here instead, by `SessionKey` (a stateless caller's key has no session id: one per
    user and agent). They compare histories by content, so a loaded history shares what is
    equal. At most `MAX_SESSIONS`, the least recently used dropped first.
    """

    MAX_SESSIONS: Final = 256

    def __init__(self) -> None:
        self._by_key: OrderedDict[SessionKey, SessionScratch] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: SessionKey) -> SessionScratch:
        """Return ``key``'s scratch space, made on first use."""
        with self._lock:
            found = self._by_key.get(key)
            if found is None:
                found = self._by_key[key] = SessionScratch()
                while len(self._by_key) > self.MAX_SESSIONS:
                    self._by_key.popitem(last=False)
            else:
                self._by_key.move_to_end(key)
            return found

    def clear(self) -> None:
        """Forget every session's scratch space."""
        with self._lock:
            self._by_key.clear()


_SCRATCHES: Final = _Scratches()


def tools_from_openai(
    tools: Iterable[Mapping[str, Any] | ToolSchema],
) -> tuple[tuple[ToolSchema, ...], dict[str, Mapping[str, Any]]]:
    """Return the schemas of OpenAI tool dicts, and the dicts by tool name (to send as given).

    Raises:
        InvalidInputError: a tool is malformed, or two tools share a name.
    """
    schemas: list[ToolSchema] = []
    dicts: dict[str, Mapping[str, Any]] = {}
    for item in tools:
        schema = item if isinstance(item, ToolSchema) else ToolSchema.from_openai(item)
        if any(s.name == schema.name for s in schemas):
            raise InvalidInputError(f"two tools are named {schema.name!r}; names must be unique")
        schemas.append(schema)
        if isinstance(item, Mapping):
            dicts[schema.name] = (
                item if "function" in item else {"type": "function", "function": item}
            )
    return tuple(schemas), dicts


def _as_dict(item: Any, position: int) -> dict[str, Any]:
    """Return a message as a plain dict: a mapping, or a litellm/pydantic message object."""
    if isinstance(item, Mapping):
        data = dict(item)
    elif callable(getattr(item, "model_dump", None)):
        data = dict(item.model_dump())
    else:
        raise InvalidInputError(
            f"messages[{position}] must be a message dict such as "
            f"{{'role': 'user', 'content': '...'}}, got {type(item).__name__}",
            position=position,
        )
    # litellm's message objects carry empty keys (function_call=None …) the API never needs.
    return {k: v for k, v in data.items() if v is not None or k in ("role", "content")}


def chain_hashes(messages: Sequence[Message], *, start: str = "") -> list[str]:
    """Return, for each message, a hash of the conversation up to and including it.

    A message counts by its role, content, tool calls (id, name, arguments) and call id —
    not by its id, metadata or provider extras — so the dict a caller sends back hashes
    like the reply it came from.
    """
    out: list[str] = []
    digest = start.encode()
    for message in messages:
        content: Any = message.content
        if isinstance(content, tuple):
            content = [[p.type, p.text, p.data] for p in content]
        canonical = msgspec.json.encode(
            [
                message.role,
                content,
                [[c.id, c.name, c.arguments] for c in message.tool_calls],
                message.tool_call_id,
            ]
        )
        digest = hashlib.sha256(digest + b"\0" + canonical).hexdigest().encode()
        out.append(digest.decode())
    return out


def _scoped(scope: str, chained: str) -> str:
    """Return the prefix-cache key of a conversation (its last chain hash) under ``scope``."""
    return hashlib.sha256(f"{scope}:{chained}".encode()).hexdigest()


def _changed(prepared: Sequence[Message], original: Sequence[Message]) -> bool:
    return len(prepared) != len(original) or any(
        a.id != b.id for a, b in zip(prepared, original, strict=True)
    )


# ---------------------------------------------------------------- the prefix cache
def cache_scope(request: ModelRequest, stack_fingerprint: str) -> str:
    """Return what a cached preparation depends on besides the messages, as a hash.

    The model, the input limit, the tools and the stack's configuration (each layer's
    class and settings, hashed once per composed stack): a summary made under one of them
    is not reused under another.
    """
    facts = [
        request.model,
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


# ------------------------------------------------------------------------- helpers
_STORES: dict[str, SessionStore] = {}


def _open_store(store: SessionStore | str | None) -> SessionStore:
    """Return the store: the one given, one opened once per URL, or the process default."""
    if isinstance(store, SessionStore):
        return store
    url = "sqlite://" if store is None else store
    if url not in _STORES:
        _STORES[url] = open_store(url)
    return _STORES[url]


def _attach(raw: Any, manifest: ContextManifest | None) -> None:
    hidden = getattr(raw, "_hidden_params", None)
    if hidden is None:
        hidden = {}
        try:
            raw._hidden_params = hidden
        except (AttributeError, TypeError, ValueError):
            return
    if isinstance(hidden, dict):
        hidden[MANIFEST_KEY] = manifest
