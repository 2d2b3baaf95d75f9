"""The context manifest: what one model request was prepared from, without prompt text.

One manifest is produced per model request: on success just before the client is called,
on failure when preparation stops. It is handed to the policy's observer and emitted as a
``context_build`` event. It carries ids, counts, revisions and hashes — never the prompt.

What preparation changed is a `Transform` each: a kind the producing module declares once
(a `TransformKind` ``Final``, with whether it leaves material out) and a target. Readers use
its fields; stored and printed, a transform is the ``kind:target`` string it always was.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import TYPE_CHECKING, Any, Final, Literal, overload

import msgspec

from harness.errors import Validation

ItemKind = Literal["system", "message", "tool_schema", "block"]
CacheVerdict = Literal["agree", "provider_miss", "break_confirmed", "unexpected_hit"]
"""How a provider's reported cached input compares with what our layout expected."""


class ManifestItem(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One thing the request was built from."""

    kind: ItemKind
    """``system``, ``message``, ``tool_schema`` or ``block``."""
    source_id: str
    """Where it came from: ``system/<name>``, ``history/<message id>``, ``tool/<name>``,
    ``source/<source>/<block>``, ``workspace/MEMORY.md`` …"""
    tokens: int
    """Its estimated token count."""
    placement: str | None = None
    """``system``, ``history``, ``tools``, ``TASK_STATE``, ``RUNTIME_STATE``, ``HARNESS_CONTEXT``."""
    revision: str | None = None
    """The block's revision label, when it has one."""
    content_hash: str | None = None
    """A hash of the content, to compare versions without the text."""
    role: str | None = None
    """For messages: the role."""


class TransformKind(str):
    """A kind of `Transform`, declared once as a ``Final`` by the module that makes it.

    It is its name (a string without ``:``) and says whether a transform of this kind
    left material out of the request (``omitted``): what Tracing reports as an omission,
    the context view lists as "left out" and the proxy sends in ``x-harness-omitted``.
    Declaring a kind makes it known by name, so a stored ``kind:target`` reads with its
    ``omitted`` again once the declaring module is imported; declaring a name twice gives
    the same kind, and declaring it again with another ``omitted`` is a `ValueError`.

    Args:
        name: the kind's name, e.g. ``"omitted_for_budget"``.
        omitted: whether a transform of this kind means something was left out.

    Raises:
        ValueError: an empty name, a name with ``:``, or a name declared with another
            ``omitted``.
    """

    omitted: bool
    """Whether a transform of this kind means something was left out of the request."""
    declared: bool
    """Whether a module declared it (``False``: only read from a stored string so far)."""

    def __new__(cls, name: str, *, omitted: bool = False) -> TransformKind:
        """Declare the kind ``name`` (or return it, declared before alike)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a transform kind is a non-empty name without ':', got {name!r}")
        known = _KINDS.get(name)
        if known is not None:
            if known.omitted != omitted:
                raise ValueError(
                    f"transform kind {name!r} is declared with omitted={known.omitted}"
                )
            return known
        kind = _KINDS[str(name)] = _kind(cls, name, omitted=omitted, declared=True)
        return kind

    @staticmethod
    def named(name: str) -> TransformKind:
        """Return the kind declared as ``name``, or an undeclared one (not omitted)."""
        return _KINDS.get(name) or _kind(TransformKind, name, omitted=False, declared=False)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return TransformKind.named, (str(self),)


def _kind(cls: type[TransformKind], name: str, *, omitted: bool, declared: bool) -> TransformKind:
    kind = str.__new__(cls, name)
    kind.omitted, kind.declared = omitted, declared
    return kind


_KINDS: Final[dict[str, TransformKind]] = {}
"""Every declared kind by name (what `TransformKind.named` looks up)."""


class Transform(str):
    """One thing preparation changed: a ``kind`` and a ``target``, read as fields.

    A transform is also its string, ``kind:target``: it equals that string, prints as it
    and is stored as it (`enc_hook`, `dec_hook`), so the manifests in the store and the
    public JSON are what they were. Make one from the producer's kind,
    ``Transform(DROPPED_FOR_BUDGET, block.source_id)``; `Transform.parse` reads the string
    back.

    Args:
        kind: the kind, declared by the producing module.
        target: what was changed (a message id, a source id, a count …).
    """

    target: str
    """What it was done to: the text after the first ``:`` (``""`` in a string without one)."""
    _kind: TransformKind

    def __new__(cls, kind: TransformKind, target: object) -> Transform:
        """Make the transform ``kind:target``."""
        text = str(target)
        made = str.__new__(cls, f"{kind}:{text}")
        made._kind, made.target = kind, text
        return made

    @property
    def kind(self) -> TransformKind:
        """What was done, declared by the module that did it."""
        kind = self._kind
        if not kind.declared:  # read before its module declared it: look again
            kind = self._kind = TransformKind.named(kind)
        return kind

    @property
    def omitted(self) -> bool:
        """Whether this left material out of the request (declared by its kind)."""
        return self.kind.omitted

    @classmethod
    def parse(cls, text: str) -> Transform:
        """Return the transform ``text`` (``kind:target``) is, with the declared kind."""
        if type(text) is Transform:
            return text
        name, _, target = str(text).partition(":")
        made = str.__new__(cls, text)
        made._kind, made.target = TransformKind.named(name), target
        return made

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return Transform.parse, (str(self),)


CHUNK: Final = 64
"""Items per shared chunk of `ManifestItems` (a power of two: positions split by shift and mask)."""
_SHIFT: Final = CHUNK.bit_length() - 1


def _chunked(flat: tuple[ManifestItem, ...]) -> tuple[tuple[ManifestItem, ...], ...]:
    """Split ``flat`` into chunks of `CHUNK` items, the last one shorter."""
    return tuple(flat[i : i + CHUNK] for i in range(0, len(flat), CHUNK))


if TYPE_CHECKING:
    _SequenceBase = Sequence[ManifestItem]
else:  # a plain class, registered below: an ABC subclass costs ~0.2 µs more to create
    _SequenceBase = object


class ManifestItems(_SequenceBase):
    """A manifest's items: an immutable sequence that shares its chunks with the last manifest.

    Each manifest lists every thing its request was built from, one item per history message,
    and stands alone: a reader needs no other manifest to know what a request held. Copying
    that list into a tuple every round made a warm round cost a pointer per message of the
    history (the one O(history) step left, 60–90 µs at 10,000 messages). This sequence keeps
    its items in chunks of `CHUNK`; consecutive manifests of a session share every chunk
    that did not change (`ItemsDraft`), so a round builds only the chunk its new items fall
    in, plus a tuple of one pointer per chunk.

    It reads like a tuple: ``len``, indexing, slices (a `ManifestItems`), iteration, ``+``,
    and it equals a tuple or another `ManifestItems` of the same items (and hashes alike).
    msgspec encodes it through `enc_hook` and decodes it through `dec_hook` as a plain array
    (`ContextManifest.to_dict` and the session store pass them), so the stored and printed
    form is the same JSON array as before.
    """

    __slots__ = ("_chunks", "_len")

    _chunks: tuple[tuple[ManifestItem, ...], ...]
    _len: int

    def __init__(self, items: Iterable[ManifestItem] = ()) -> None:
        flat = tuple(items)
        self._chunks = _chunked(flat)
        self._len = len(flat)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> ManifestItem: ...

    @overload
    def __getitem__(self, index: slice) -> ManifestItems: ...

    def __getitem__(self, index: int | slice) -> ManifestItem | ManifestItems:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step == 1:
                return self._span(start, stop)
            return ManifestItems(
                islice(self, start, stop, step) if step > 0 else tuple(self)[index]
            )
        if type(index) is not int:  # a bool, a NumPy integer …: what tuples take
            index = operator.index(index)
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("manifest item index out of range")
        return self._chunks[index >> _SHIFT][index & (CHUNK - 1)]

    def _span(self, start: int, stop: int) -> ManifestItems:
        """Return items ``start`` to ``stop`` (in range), reading only the chunks they lie in.

        A prefix, or a span that starts on a chunk's first item, shares the full chunks; any
        other span is chunked anew from its own items — never a walk from the first item (a
        round's manifest delta is the short tail of a long manifest).
        """
        if stop <= start:
            return NO_ITEMS
        chunks = self._chunks
        first, offset = start >> _SHIFT, start & (CHUNK - 1)
        whole, rest = stop >> _SHIFT, stop & (CHUNK - 1)
        if not offset:  # aligned: the full chunks are shared, the last one cut
            kept = chunks[first:whole]
            if rest:
                kept += (chunks[whole][:rest],)
            return _wrapped(kept, stop - start)
        if first == whole:  # within one chunk
            return _wrapped((chunks[first][offset:rest],), stop - start)
        parts = [chunks[first][offset:], *chunks[first + 1 : whole]]
        if rest:
            parts.append(chunks[whole][:rest])
        return _wrapped(_chunked(tuple(chain.from_iterable(parts))), stop - start)

    def __iter__(self) -> Iterator[ManifestItem]:
        return chain.from_iterable(self._chunks)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ManifestItems):
            return self._len == other._len and all(
                mine is theirs or mine == theirs
                for mine, theirs in zip(self._chunks, other._chunks, strict=True)
            )
        if isinstance(other, tuple):
            return self._len == len(other) and tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Iterable[ManifestItem]) -> ManifestItems:
        if not isinstance(other, (ManifestItems, tuple, list)):
            return NotImplemented
        draft = ItemsDraft(self)
        draft.extend(other)
        return draft.items()

    def __radd__(self, other: Iterable[ManifestItem]) -> ManifestItems:
        if not isinstance(other, (tuple, list)):
            return NotImplemented
        return ManifestItems(chain(other, self))

    def __contains__(self, value: object) -> bool:
        return any(value in chunk for chunk in self._chunks)

    def __reversed__(self) -> Iterator[ManifestItem]:
        return reversed(tuple(self))

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Return the first position of ``value`` (as `tuple.index`)."""
        return tuple(self).index(value, start, self._len if stop is None else stop)

    def count(self, value: Any) -> int:
        """Return how many items equal ``value``."""
        return sum(chunk.count(value) for chunk in self._chunks)

    def __repr__(self) -> str:
        return f"ManifestItems({tuple(self)!r})"

    def __reduce__(self) -> tuple[type[ManifestItems], tuple[tuple[ManifestItem, ...]]]:
        return ManifestItems, (tuple(self),)

    def shared_with(self, other: ManifestItems) -> int:
        """Return how many leading items ``other`` shares with this one (the same or equal)."""
        shared = 0
        for mine, theirs in zip(self._chunks, other._chunks, strict=False):
            if mine is theirs:
                shared += len(mine)
                continue
            for a, b in zip(mine, theirs, strict=False):
                if a is not b and a != b:
                    return shared
                shared += 1
            if len(mine) != len(theirs):
                return shared
        return shared


Sequence.register(ManifestItems)

NO_ITEMS: Final = ManifestItems()
"""The empty item sequence."""


class ItemsDraft:
    """A growing list of items that hands out `ManifestItems` sharing its full chunks.

    A session's running tally keeps one draft: it cuts the draft back to the prefix the new
    history shares with the last one (`cut`), appends the new messages' items (`extend`) and
    builds the manifest's sequence with the tail items (`items`); `update` does all three in
    one call. A full chunk is made once and shared by every later manifest that keeps it, so
    building costs the open chunk and one pointer per chunk, not one per item.
    """

    __slots__ = ("_frozen", "_full", "_open")

    def __init__(self, items: Iterable[ManifestItem] = ()) -> None:
        self._full: list[tuple[ManifestItem, ...]] = []
        self._open: list[ManifestItem] = []
        self._frozen: tuple[tuple[ManifestItem, ...], ...] | None = ()
        """``tuple(self._full)``, kept while no chunk is added or cut (``None``: stale)."""
        if isinstance(items, ManifestItems) and items._chunks:
            chunks = items._chunks
            last = chunks[-1]
            if len(last) == CHUNK:
                self._full.extend(chunks)
            else:
                self._full.extend(chunks[:-1])
                self._open.extend(last)
            self._frozen = None
        else:
            self.extend(tuple(items))

    def __len__(self) -> int:
        return (len(self._full) << _SHIFT) + len(self._open)

    def cut(self, length: int) -> None:
        """Keep only the first ``length`` items (no more than there are)."""
        full = self._full
        whole = length >> _SHIFT
        if whole == len(full):  # the usual case: the cut falls in the open chunk
            rest = length & (CHUNK - 1)
            if rest > len(self._open):
                raise ValueError(f"cannot cut {len(self)} items to {length}")
            del self._open[rest:]
        elif whole < len(full):
            self._open = list(full[whole][: length & (CHUNK - 1)])
            del full[whole:]
            self._frozen = None
        else:
            raise ValueError(f"cannot cut {len(self)} items to {length}")

    def extend(self, items: Sequence[ManifestItem]) -> None:
        """Append ``items``."""
        opened = self._open
        if len(opened) + len(items) < CHUNK:  # the usual case: they fit in the open chunk
            opened.extend(items)
            return
        for item in items:
            opened.append(item)
            if len(opened) == CHUNK:
                self._full.append(tuple(opened))
                opened.clear()
                self._frozen = None

    def update(
        self, keep: int, new: Sequence[ManifestItem], tail: tuple[ManifestItem, ...]
    ) -> ManifestItems:
        """`cut` to ``keep``, `extend` by ``new`` and return the `items` with ``tail``.

        One call for a round's manifest: while the kept and new items stay in the open chunk
        (a short working history, or the common round of a long one) the cut and the
        extension are two list operations in place; each method call more cost a warm round
        about 0.5 µs, out of the cache.
        """
        opened = self._open
        rest = keep - (len(self._full) << _SHIFT)
        if 0 <= rest <= len(opened) and rest + len(new) < CHUNK:  # the open chunk stays open
            del opened[rest:]
            opened.extend(new)
        else:
            self.cut(keep)
            self.extend(new)
        return self.items(tail)

    def items(self, tail: tuple[ManifestItem, ...] = ()) -> ManifestItems:
        """Return the draft's items followed by ``tail`` (which the draft does not keep)."""
        frozen = self._frozen
        if frozen is None:
            frozen = self._frozen = tuple(self._full)
        opened = self._open
        length = (len(frozen) << _SHIFT) + len(opened) + len(tail)
        if len(opened) + len(tail) <= CHUNK:
            return _wrapped((*frozen, (*opened, *tail)) if opened or tail else frozen, length)
        return _wrapped(frozen + _chunked((*opened, *tail)), length)


_new = object.__new__


def _wrapped(chunks: tuple[tuple[ManifestItem, ...], ...], length: int) -> ManifestItems:
    """Wrap ``chunks``: every one but the last holds `CHUNK` items, the last 1 to `CHUNK`."""
    made: ManifestItems = _new(ManifestItems)
    made._chunks = chunks
    made._len = length
    return made


def enc_hook(value: object) -> object:
    """Encode `ManifestItems` as a plain array and a `Transform` (or its kind) as its string.

    msgspec's ``enc_hook`` for manifests.
    """
    if isinstance(value, ManifestItems):
        return list(value)  # a list: what `msgspec.to_builtins` makes of a tuple
    if isinstance(value, str):  # a Transform or a TransformKind
        return str(value)
    raise NotImplementedError(f"cannot encode objects of type {type(value).__name__}")


def dec_hook(kind: type, value: Any) -> object:
    """Decode a plain array into `ManifestItems`, a string into a `Transform`.

    msgspec's ``dec_hook`` for manifests.
    """
    if kind is ManifestItems:
        return ManifestItems(msgspec.convert(value, tuple[ManifestItem, ...]))
    if kind is Transform and isinstance(value, str):
        return Transform.parse(value)
    raise NotImplementedError(f"cannot decode objects of type {kind!r}")


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage as the provider reported it, and its cost by litellm's price table.

    What a provider bills: fresh input (``prompt_tokens - cached_tokens - cache_write_tokens``
    on providers that count cache reads and writes inside the prompt, as litellm reports them),
    cache reads and writes, and output (reasoning included).
    """

    prompt_tokens: int = 0
    """Input tokens the provider counted."""
    completion_tokens: int = 0
    """Output tokens (reasoning tokens included)."""
    total_tokens: int = 0
    """Their sum as reported."""
    cached_tokens: int = 0
    """Input tokens served from the provider's prompt cache (OpenAI's
    ``prompt_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``)."""
    cache_write_tokens: int = 0
    """Input tokens written to the prompt cache (Anthropic's ``cache_creation_input_tokens``)."""
    reasoning_tokens: int = 0
    """Output tokens spent on reasoning (``completion_tokens_details.reasoning_tokens``)."""
    cost_usd: float | None = None
    """The request's cost in US dollars by litellm's price table (cache reads and writes at
    their own prices); ``None`` when the table does not know the model."""
    cache_reported: bool = False
    """Whether the provider reported its cached input at all (a ``cached_tokens`` of 0 then
    means nothing was served from its cache; without it, the provider says nothing)."""

    def __add__(self, other: Usage) -> Usage:
        """Return the sum of two usages (a cost is ``None`` only when both are)."""
        cost = (
            None
            if self.cost_usd is None and other.cost_usd is None
            else (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        )
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost_usd=cost,
            cache_reported=self.cache_reported or other.cache_reported,
        )


class ContextManifest(msgspec.Struct, frozen=True, kw_only=True):
    """The per-request context build record (see DESIGN.md for the field meanings)."""

    call_id: str
    """The id of this model-request preparation (not the session or run id)."""
    purpose: str
    """Why the model is called: ``agent``, ``summary`` …"""
    model: str
    """The model name the request is for."""
    estimated_input_tokens: int
    """The estimated input size; -1 when building failed before counting."""
    input_limit: int
    """The input budget in force; -1 when unknown because building failed early."""
    counting_method: str
    """How tokens were counted (``approximate:o200k``, ``tiktoken:o200k_base`` …) or ``unavailable``."""
    exact: bool
    """Whether the counting method is the provider's exact tokenizer."""
    items: ManifestItems = NO_ITEMS
    """What the request was built from, in render order (a tuple-like sequence; a tuple
    given here is wrapped)."""
    transforms: tuple[Transform, ...] = ()
    """What preparation changed, e.g. ``tool_result_offload:<id>``, ``omitted_for_budget:<id>``
    (a string given here is parsed)."""
    validation: Validation = "passed"
    """``passed`` or the reason the request was not sent."""
    agent_id: str = ""
    """The agent's id."""
    session_id: str = ""
    """The session's id."""
    run_id: str = ""
    """The id of the agent call this request belongs to."""
    calibration: float = 1.0
    """The usage-calibrated correction factor applied to estimates (1.0 = none)."""
    error: str | None = None
    """The error class name when validation is not ``passed``."""
    created_at: float = msgspec.field(default_factory=time.time)
    """Unix time the manifest was made."""
    cache_break: str | None = None
    """What in this request differs from the session's previous agent request, so that the
    provider's prompt cache cannot serve past it (`harness.accounting.cache_break`):
    ``model``, ``tools:<name>``, ``system:<part>``, ``reference:<source>`` or
    ``history:<message id>`` with the transform that rewrote it, e.g.
    ``history:m12 (tool_result_offload:m12)``; ``None``: the previous request is a prefix of
    this one (or there was none)."""
    cache_expected: int | None = None
    """The input tokens our layout expected the provider's prompt cache to serve: what this
    request shares with the session's previous agent request (up to ``cache_break``), by
    this manifest's estimator (`harness.accounting.cache_verdict`); 0 for a session's first
    request, ``None`` on manifests stored before it was recorded."""
    cache_verdict: CacheVerdict | None = None
    """How the provider's reported cached input compares with ``cache_expected``, once it
    answered: ``agree``, ``provider_miss`` (the prefix was kept, the provider served much
    less: its cache expired, another replica), ``break_confirmed`` (``cache_break`` named a
    break and the provider served no more than the prefix before it) or ``unexpected_hit``
    (it served more than the session's previous request explains); ``None`` when the
    provider reports no cached tokens or has not answered."""
    usage: Usage | None = None
    """What the provider reported for this request, once it answered (`Usage`): set on the
    manifest a response carries and on the one stored with the session; ``None`` on the
    ``context_build`` event (emitted before the request is sent) and when nothing was
    reported."""

    def __post_init__(self) -> None:
        given: Iterable[ManifestItem] = self.items
        if not isinstance(given, ManifestItems):  # a tuple or list given by hand
            msgspec.structs.force_setattr(self, "items", ManifestItems(given))
        transforms = self.transforms
        if transforms and not all(type(t) is Transform for t in transforms):  # given by hand
            msgspec.structs.force_setattr(
                self, "transforms", tuple(Transform.parse(t) for t in transforms)
            )

    def to_dict(self) -> dict[str, object]:
        """Return the manifest as plain JSON-ready data."""
        result: dict[str, object] = msgspec.to_builtins(self, enc_hook=enc_hook)
        return result

    def to_json(self) -> bytes:
        """Return the manifest as JSON (`from_json` reads it back)."""
        return _ENCODER.encode(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> ContextManifest:
        """Return the manifest `to_json` wrote."""
        return _DECODER.decode(data)


_ENCODER: Final = msgspec.json.Encoder(enc_hook=enc_hook)
_DECODER: Final = msgspec.json.Decoder(ContextManifest, dec_hook=dec_hook)
