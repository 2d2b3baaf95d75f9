"""ContextSources: load dynamic business material before every model request.

Place in the stack: after WorkspaceMaterials and before TaskState, outside the budget
layers, so that what a source returns is counted and selected by BudgetFit like any other
block.

A source is registered with `context_source(name, load, ...)`. Its ``load`` is called at
**every** preparation (never at registration or build time), so a tool's effect is visible
in the next round. Sources are loaded concurrently and their blocks added in registration
order. Sources return blocks only: they can never add System text.

Result rules (from the reference behaviour):

- an empty list means "no material"; ``None`` means the source failed;
- an exception, ``None`` or a timeout stops preparation with `SourceError` — unless the
  source is ``on_failure="omit"``: then it is left out for this request, without reusing an
  older value, and ``source_unavailable:source/<name>/:<reason>`` is recorded. A
  cancellation the source raises itself is such a failure (reason
  ``error:CancelledError``); only a cancellation of the enclosing scope (the agent call
  was cancelled) propagates;
- structural errors always raise `SourceError`: a result that is not a list of
  `ContextBlock`, a duplicate block id within a source, or a required block from an
  ``omit`` source (rejected at registration too, through ``required=True``);
- ``load`` may be a plain (sync) function: it runs in a worker thread, so a blocking call
  stalls no other session. Its timeout still applies: at the timeout the request stops
  waiting, the thread finishes on its own and its result is discarded.
- a block's manifest id is ``source/<name>/<block id>``; its revision defaults to a content
  hash.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import ClassVar, Final, Literal

import anyio
import msgspec

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError, SourceError
from harness.manifest import Transform, TransformKind
from harness.request import ModelRequest, ModelResponse
from harness.types import Concern, Handler

SOURCE_UNAVAILABLE: Final = TransformKind("source_unavailable", omitted=True)
"""A source that failed with ``on_failure="omit"``, its material left out:
``source_unavailable:<prefix>:<reason>``."""

OnFailure = Literal["fail", "omit"]
DEFAULT_SOURCE_TIMEOUT = 5.0
"""Seconds a source may take before it counts as failed."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class ContextRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a source is told about the request it loads for (check access with these ids)."""

    agent_id: str = ""
    """The agent's id."""
    user_id: str = ""
    """The end user's id: sources must check this user may see what they return."""
    session_id: str = ""
    """The conversation's id."""
    run_id: str = ""
    """The id of the agent call."""
    call_id: str = ""
    """The id of this model-request preparation."""
    purpose: str = "agent"
    """Why the model is called (``agent`` for the loop)."""


SourceResult = list[ContextBlock] | tuple[ContextBlock, ...] | None
SourceLoader = Callable[[ContextRequest], Awaitable[SourceResult] | SourceResult]
"""``async def load(request)`` or a plain function (run in a worker thread)."""


class ContextSource(msgspec.Struct, frozen=True, kw_only=True):
    """A registered dynamic source (build it with `context_source`)."""

    name: str
    """Unique name; block ids in the manifest are ``source/<name>/<block id>``."""
    load: SourceLoader
    """``load(ContextRequest) -> list[ContextBlock] | None``, async or sync (then run in a
    worker thread); read-only, safe to repeat."""
    timeout: float = DEFAULT_SOURCE_TIMEOUT
    """Seconds before the load counts as failed."""
    on_failure: OnFailure = "fail"
    """``fail`` stops preparation; ``omit`` leaves the source out of this request."""
    required: bool = False
    """Declares that the source returns required blocks (not allowed with ``omit``)."""

    @property
    def prefix(self) -> str:
        """The manifest id prefix of this source's blocks: ``source/<name>/``."""
        return f"source/{self.name}/"


def context_source(
    name: str,
    load: SourceLoader,
    *,
    timeout: float = DEFAULT_SOURCE_TIMEOUT,
    on_failure: OnFailure = "fail",
    required: bool = False,
) -> ContextSource:
    """Return a validated `ContextSource`.

    Args:
        name: unique source name (letters, digits, ``_``, ``.``, ``-``; up to 64).
        load: ``load(ContextRequest)`` returning a list of `ContextBlock` (empty: no
            material) or ``None`` (failure). It is called before every model request; an
            ``async def`` runs on the event loop, a plain function in a worker thread.
        timeout: seconds before a load counts as failed (default 5).
        on_failure: ``fail`` (default) stops preparation with `SourceError`; ``omit``
            leaves the source out of that request and records ``source_unavailable``.
        required: declare that the source returns required blocks; rejected together
            with ``on_failure="omit"``.

    Raises:
        ConfigurationError: for a bad name, a non-callable ``load``, a timeout that is not
            a positive finite number, an unknown ``on_failure``, or ``omit`` with
            ``required=True``.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"source name {name!r} must be 1–64 letters, digits, '_', '.' or '-' and start "
            "with a letter or digit (it becomes part of 'source/<name>/<block id>')"
        )
    if not callable(load):
        raise ConfigurationError(
            f"source {name!r}: load must be a function of a ContextRequest (async, or sync to "
            f"run in a worker thread), got {load!r}"
        )
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigurationError(
            f"source {name!r}: timeout must be a positive number of seconds, got {timeout!r}"
        )
    if on_failure not in ("fail", "omit"):
        raise ConfigurationError(
            f"source {name!r}: on_failure must be 'fail' or 'omit', got {on_failure!r}"
        )
    if on_failure == "omit" and required:
        raise ConfigurationError(
            f"source {name!r} declares required blocks, so it cannot be on_failure='omit': "
            "a required block may not silently disappear; use on_failure='fail' or make "
            "its blocks optional"
        )
    return ContextSource(
        name=name, load=load, timeout=float(timeout), on_failure=on_failure, required=required
    )


class _Failed(msgspec.Struct, frozen=True):
    """How a load failed; ``structural`` failures raise whatever ``on_failure`` says."""

    reason: str
    detail: str
    error: BaseException | None = None
    structural: bool = False


_NOT_LOADED = _Failed("not_loaded", "was cancelled before it finished loading")


class ContextSources:
    """Load the registered sources before every model request and add their blocks.

    Args:
        sources: sources built with `context_source`, in the order their blocks are added.
        purposes: request purposes the sources are loaded for (default: only the agent loop;
            auxiliary requests such as summaries do not load business sources).

    Raises:
        ConfigurationError: when two sources share a name or an element is not a
            `ContextSource`.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.ADDS_CONTEXT})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self,
        *,
        sources: Iterable[ContextSource] = (),
        purposes: Collection[str] = ("agent",),
    ) -> None:
        registered: list[ContextSource] = []
        seen: set[str] = set()
        for position, source in enumerate(sources):
            if not isinstance(source, ContextSource):
                raise ConfigurationError(
                    f"sources[{position}] is {source!r}; build sources with "
                    "context_source(name, load, ...)"
                )
            if source.name in seen:
                raise ConfigurationError(
                    f"two context sources are named {source.name!r}; source names must be "
                    "unique, rename one of them"
                )
            seen.add(source.name)
            registered.append(source)
        if isinstance(purposes, str):
            raise ConfigurationError(
                f"purposes must be a collection of purposes, not the string {purposes!r}; "
                f"write purposes=({purposes!r},)"
            )
        self.sources: tuple[ContextSource, ...] = tuple(registered)
        self.purposes = frozenset(purposes)

    def __repr__(self) -> str:
        return f"ContextSources(sources={[s.name for s in self.sources]!r})"

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Load every source and pass the request on with their blocks appended."""
        if not self.sources or request.ids.purpose not in self.purposes:
            return await call_next(request)
        return await call_next(await self.load(request))

    async def load(self, request: ModelRequest) -> ModelRequest:
        """Return ``request`` with the sources' blocks (and any omissions) added.

        Raises:
            SourceError: a ``fail`` source failed or timed out, or a source returned
                malformed blocks.
        """
        ids = request.ids
        context = ContextRequest(
            agent_id=ids.agent_id,
            user_id=ids.user_id,
            session_id=ids.session_id,
            run_id=ids.run_id,
            call_id=ids.call_id,
            purpose=ids.purpose,
        )
        results: list[object] = [_NOT_LOADED] * len(self.sources)

        async with anyio.create_task_group() as tg:

            async def run(position: int, source: ContextSource) -> None:
                outcome = await _load_one(source, context)
                results[position] = outcome
                if isinstance(outcome, _Failed) and (
                    outcome.structural or source.on_failure == "fail"
                ):
                    tg.cancel_scope.cancel()  # the build fails: stop the other loads now

            for position, source in enumerate(self.sources):
                tg.start_soon(run, position, source)

        for source, result in zip(self.sources, results, strict=True):
            if result is _NOT_LOADED:
                continue  # stopped because another source failed; that one is reported
            if isinstance(result, _Failed) and (result.structural or source.on_failure == "fail"):
                raise SourceError(
                    f"context source {source.name!r} {result.detail}",
                    source=source.name,
                    reason=result.reason,
                    transforms=request.transforms,
                ) from result.error
        blocks: list[ContextBlock] = []
        transforms: list[Transform] = []
        for source, result in zip(self.sources, results, strict=True):
            if isinstance(result, _Failed):
                transforms.append(Transform(SOURCE_UNAVAILABLE, f"{source.prefix}:{result.reason}"))
                continue
            blocks.extend(_checked(source, result, request.transforms + tuple(transforms)))
        if not blocks and not transforms:
            return request
        return request.replace(
            blocks=request.blocks + tuple(blocks),
            transforms=request.transforms + tuple(transforms),
        )


async def _load_one(source: ContextSource, context: ContextRequest) -> object:
    """Run one load under its timeout; return its raw result or a `_Failed`.

    A cancellation of an enclosing scope (the agent call, or the other loads stopped
    because one failed) propagates; a cancellation the source raised itself is a failure.
    """
    try:
        with anyio.fail_after(source.timeout):
            if _is_async(source.load):
                result: object = source.load(context)
            else:
                result = await anyio.to_thread.run_sync(
                    source.load, context, abandon_on_cancel=True
                )
            if inspect.isawaitable(result):  # a sync callable that returns an awaitable
                result = await result
    except TimeoutError as exc:
        return _Failed("timeout", _fix(source, f"timed out after {source.timeout:g}s"), exc)
    except Exception as exc:  # a failing source is reported, never swallowed
        name = type(exc).__name__
        return _Failed(f"error:{name}", _fix(source, f"raised {name}: {exc}"), exc)
    except anyio.get_cancelled_exc_class() as exc:
        if anyio.current_effective_deadline() == -math.inf:
            raise  # an enclosing scope was cancelled: not this source's failure
        name = type(exc).__name__
        return _Failed(
            f"error:{name}",
            _fix(source, f"raised {name} itself, without being cancelled from outside"),
            exc,
        )
    if result is None:
        return _Failed(
            "none", _fix(source, "returned None, which means failure (return [] for no material)")
        )
    return result


def _is_async(load: object) -> bool:
    """Whether ``load`` is an async function (or an object with an ``async __call__``)."""
    call = vars(type(load)).get("__call__")
    return inspect.iscoroutinefunction(load) or inspect.iscoroutinefunction(call)


def _fix(source: ContextSource, what: str) -> str:
    return (
        f"{what}; fix the source, raise its timeout (now {source.timeout:g}s), or register "
        "it with on_failure='omit' if requests can do without it"
    )


def _checked(
    source: ContextSource, result: object, transforms: tuple[Transform, ...]
) -> list[ContextBlock]:
    """Validate a source's blocks and give them their manifest ids."""
    if not isinstance(result, list | tuple):
        raise SourceError(
            f"context source {source.name!r} returned {type(result).__name__}; return a "
            "list of ContextBlock ([] for no material, None for failure)",
            source=source.name,
            reason="malformed",
            transforms=transforms,
        )
    seen: set[str] = set()
    out: list[ContextBlock] = []
    for block in result:
        if not isinstance(block, ContextBlock):
            raise SourceError(
                f"context source {source.name!r} returned {type(block).__name__} in its "
                "list; return ContextBlock.runtime(...) or ContextBlock.reference(...) values",
                source=source.name,
                reason="malformed",
                transforms=transforms,
            )
        if block.id in seen:
            raise SourceError(
                f"context source {source.name!r} returned two blocks with id {block.id!r}; "
                "block ids must be unique within a source",
                source=source.name,
                reason="duplicate_id",
                block_id=block.id,
                transforms=transforms,
            )
        seen.add(block.id)
        if block.required and source.on_failure == "omit":
            raise SourceError(
                f"context source {source.name!r} is on_failure='omit' but returned the "
                f"required block {block.id!r}; register it with on_failure='fail' "
                "(and required=True) or return optional blocks",
                source=source.name,
                reason="required_from_omit",
                block_id=block.id,
                transforms=transforms,
            )
        out.append(block.replace(source_id=f"{source.prefix}{block.id}"))
    return out
