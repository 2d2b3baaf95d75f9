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
in order — never history, so never summarised away; their content blocks (and a
message-level ``cache_control``) are sent as blocks with their provider options while the
stack leaves their text as it is, what the stack adds to System as further blocks. The other dicts are the history
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
with litellm) or only the new turns, trimmed or not: the messages are matched against the
record by content (`harness.adapters._record_match`), so only what is new is appended,
once — a reply sent back as content parts or with re-encoded arguments is the reply
recorded; a retried turn, an edited or removed message changes the working history (the
record keeps everything) and marks the manifest ``client_history_diverged:…``. A non-streamed
reply is recorded at once; a streamed one when the next call sends it back. New turns are
committed only with a request the stack accepted: one it refuses (an orphan tool result, a
turn over the budget) is logged as a `RefusalEvent` and leaves the stored history as it was,
so the next valid request on the session works (through the proxy hook too).

**Errors** are litellm's own for every provider failure (our typed error is added as a
note): the exception litellm raised, also when the stack's own retry could not help (an
overflow with nothing left to compact, or still too long after compaction), and a new one of
litellm's class where litellm raised nothing (an overflow shown only by the stop reason is
``ContextWindowExceededError``, a model it cannot route ``BadRequestError``);
a request that cannot be prepared raises the harness's `ContextBuildError` subclasses.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from functools import cache
from typing import Any, Final

import anyio
import msgspec

from harness.accounting import answered, build_manifest, failed_manifest, report_manifest
from harness.adapters._conversion import asplit, chain_hashes, tools_from_openai
from harness.adapters._record_match import (
    TAIL,
    Match,
    SessionRecord,
    content_digests,
    diverged_transform,
    legacy_view,
    match,
    rebuilt_working,
    view_after,
    with_reply,
)
from harness.adapters.prefix_cache import (
    DEFAULT_PREFIX_CACHE,
    PrefixCache,
    StorePrefixCache,
    _changed,
    _fingerprint,
    _open_store,
    _scoped,
    cache_scope,
)
from harness.chain import compose
from harness.errors import ProviderError, StateConflict
from harness.events import usage_event
from harness.manifest import ContextManifest
from harness.messages import Message, ToolSchema
from harness.policy import ContextPolicy, discovered_input_limit, requested_output
from harness.request import ModelRequest, ModelResponse, RequestIds, RunScope
from harness.sessions.recorder import SessionRecorder, merge_learned, save_learned
from harness.sessions.store import SessionKey, SessionStore
from harness.state import AgentState, SessionScratch, StateKey
from harness.types import Handler, Middleware, ModelClient

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


RECORD_KEY: Final = StateKey("adapters/record", SessionRecord, former=("adapters.record",))
"""Where a stateful session keeps its `SessionRecord`."""
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
    call = _Call(client=client, send=client.send, stream=stream, litellm_errors=True)
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
    client: ModelClient,
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
    system, converted, hashes, digests = await asplit(messages, scope=f"{user_id}\0{agent_id}")
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
            shared = _open_store(store) if store is not None else None
            if prefix_cache is None:
                prefix_cache = (
                    StorePrefixCache(shared) if shared is not None else DEFAULT_PREFIX_CACHE
                )
            if shared is not None:  # the calibration other callers and replicas learned
                await merge_learned(shared)
            scope = cache_scope(template, composed.fingerprint, _api_base_of(call.client))
            await _stateless(
                composed.handler, template, call, converted, hashes, user_id, agent_id,
                prefix_cache, scope,
            )  # fmt: skip
            if shared is not None:
                await save_learned(shared)
        else:
            key = SessionKey(user_id, agent_id, session_id)
            await _stateful(
                composed.handler, template, call, converted, (hashes, digests), key,
                _open_store(store),
            )  # fmt: skip
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

    def __init__(
        self, *, client: ModelClient, send: Sender, stream: bool, litellm_errors: bool = False
    ) -> None:
        self.client = client
        self.send = send
        self.stream = stream
        self.litellm_errors = litellm_errors
        """Whether every provider failure leaves as litellm's own exception (the drop-in)."""
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
    if response.usage is not None:  # a stream's usage is the caller's to read
        manifest = answered(manifest, response.usage)
        ids = request.ids
        event = usage_event(
            response.usage,
            call_id=ids.call_id,
            purpose=ids.purpose,
            model=response.model or request.model,
        )
        if event is not None and request.run is not None and request.run.emit is not None:
            request.run.emit(event)  # a session's record keeps it
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

    For the drop-in (``_Call.litellm_errors``), provider failures leave as litellm's own
    exceptions (`litellm_error`): the one litellm raised, found however deep in the chain of
    our typed errors, or one of litellm's classes made for a failure litellm raised nothing
    for; our error rides on it as a note. Other hosts get litellm's exception when it is the
    direct cause, else our typed error (which they map to their own).
    """
    try:
        return (await handler(request)).kept
    except ProviderError as exc:
        if _CURRENT_CALL.get().litellm_errors:
            from providers.passthrough import litellm_error

            native = litellm_error(exc, model=request.model)
            # One made for ``exc`` keeps it as its cause; litellm's own is raised as it was.
            raise native from (exc if native.__cause__ is exc else None)
        native_cause = exc.__cause__  # another host (LangChain) maps our typed errors itself
        if isinstance(native_cause, Exception) and type(native_cause).__module__.startswith(
            ("litellm", "openai", "httpx")
        ):
            native_cause.add_note(f"context-harness: {exc}")
            raise native_cause from None
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
    keys: tuple[list[str], list[str]],
    key: SessionKey,
    store: SessionStore,
) -> None:
    hashes, digests = keys
    recorder, state = await SessionRecorder.load(store, key)
    view = _view(state, hashes, digests)
    found = match(digests, view)
    new, last = _named(converted, hashes, found.new, view.hash)
    record_ids = dict(found.matched)
    record_ids.update(zip(found.new, (m.id for m in new), strict=True))
    transforms = template.transforms
    if new:
        state.append(*new)
        for message in new:
            if message.role in ("user", "tool"):
                recorder.mark_turn(message)
    if found.diverged:
        working, compacted = rebuilt_working(
            state.working_history[: len(state.working_history) - len(new)],
            _placed(found, new),
            found.dropped,
        )
        state.commit_working(working)
        transforms = (*transforms, diverged_transform(found, len(new), compacted))
    seen = view_after(digests, record_ids, record_hash=last)
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
        transforms=transforms,
    )
    try:
        prepared = await _run(handler, request)
    except Exception as exc:
        with anyio.CancelScope(shield=True):
            if call.sent:  # the stack accepted the request: its turns are the session's
                recorder.note_error(exc)
                state.set(RECORD_KEY, seen)
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
        reply = call.reply.replace(id=last[:16])
        state.append(reply)
        seen = with_reply(seen, content_digests([reply])[0], reply.id, last)
    state.set(RECORD_KEY, seen)
    await recorder.commit(state)


def _view(state: AgentState, hashes: list[str], digests: list[str]) -> SessionRecord:
    """Return the session's view of its caller (`SessionRecord`), also from older records."""
    record = state.get(RECORD_KEY) or SessionRecord()
    if not record.count or record.digests:
        return record
    count = record.count  # stored before views had digests: count and chain hash only
    if len(hashes) >= count and hashes[count - 1] == record.hash:
        ids = {i: hashes[i][:16] for i in range(max(0, count - TAIL), count)}
        return view_after(digests[:count], ids, record_hash=record.hash)
    return legacy_view(record, state.working_history)


def _named(
    converted: list[Message], hashes: list[str], new: tuple[int, ...], last: str
) -> tuple[list[Message], str]:
    """Return the new messages with record ids (continuing the record's chain) and its new end."""
    if not new:
        return [], last
    first = new[0]
    if new == tuple(range(first, len(converted))) and (
        (first == 0 and not last) or (first > 0 and hashes[first - 1] == last)
    ):  # the caller's chain is the record's: its ids are already the record's
        return converted[first:], hashes[-1]
    messages = [converted[i] for i in new]
    chained = chain_hashes(messages, start=last)
    return [m.replace(id=h[:16]) for m, h in zip(messages, chained, strict=True)], chained[-1]


def _placed(found: Match, new: list[Message]) -> list[tuple[Message, str | None, str | None]]:
    """Return each new message with the record ids of the matched messages around it."""
    order = sorted(found.matched)
    out: list[tuple[Message, str | None, str | None]] = []
    for index, message in zip(found.new, new, strict=True):
        at = bisect.bisect_left(order, index)
        before = found.matched[order[at - 1]] if at > 0 else None
        after = found.matched[order[at]] if at < len(order) else None
        out.append((message, before, after))
    return out


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


# ------------------------------------------------------------------------- helpers
def _api_base_of(client: ModelClient) -> str | None:
    """Return the base URL ``client`` sends to (a proxy's deployment's, behind a summary model)."""
    for candidate in (client, getattr(client, "deployment", None)):
        base = getattr(candidate, "api_base", None)
        if isinstance(base, str) and base:
            return base
    return None


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
