"""Token estimation: a fast approximate default, exact tokenizers and a conservative bound.

**Approximate** (`ApproximateEstimator`, the default): a linear model with non-negative
weights over the whole text, read contiguously with C-speed primitives only:

- every UTF-16 code unit adds the weight of its low byte (for ASCII and Latin-1 that is
  the character itself: letters, digits, punctuation, spaces, newlines each cost their own)
  and the weight of its high byte — its 256-character *page*, which names the script
  (Cyrillic, Arabic, Devanagari, Thai, Hangul, CJK and its extensions, emoji via their
  surrogates, full-width and half-width forms, private use …);
- rare CJK ideographs — those the family's tokenizer does not encode as one token (a packed
  set per family: 2,515 of U+4E00–9FFF are one token for o200k, 549 for cl100k), and the
  supplementary planes — add an extra weight, so random common characters (about half of
  them two tokens for o200k) and real Chinese (nearly all one token, merged into words) are
  both priced;
- runs of one character (spaces, ``=``, ``-``, newlines, zeros …) are counted per block of
  32 and 256 characters at what the tokenizer really charges for them, since tokenizers
  merge such runs into a few long tokens (every 4th code unit is tested first: a block
  shows as eight samples in a row that are run characters, and the characters counted are
  only those seen in eight equal samples);
- *dense* ASCII text — whose main estimate (runs counted as runs) is at least
  ``dense_gate`` tokens per character: base64, hex, hashes, UUIDs, numbers, random ASCII,
  about 3 % of real agent messages — is counted with its own table plus the places where tokenizers start a new
  word piece (lowercase→uppercase, letter→digit, symbol→letter), counted with
  ``bytes.count`` on a class map. A per-character model cannot price both prose and base64.
- an ASCII text that repeats one unit of up to 32 characters holding a word start ("ok ok ok",
  "aee aee", "| a | b |") is one sample, which its weights can price at a quarter of its
  tokens: the family's exact tokenizer counts two blocks of four units and the rest is
  multiplied (`periodic_tokens`), without a tokenizer ``floor`` × its bytes. One bounded
  ``find`` of its first 8 bytes rules that out for nearly every other text.

Summing a weight table runs in C (``bytes.translate`` and ``zlib.adler32`` over 2 KB
chunks), so a count costs about as much as two copies of the text. The weights are fitted
per family by ``benchmarks/fit_estimator.py`` on one part of the data and checked on the
rest (``benchmarks/bench_estimation.py``).

**The floor.** For every estimator, ``floor`` is a lower bound of estimate ÷ exact count for
any text: a request whose estimate is below ``floor × limit`` fits for sure; nearer the limit
a caller recounts with ``exact_counter`` (one shared, lazily loaded exact estimator per
family). Exact estimators have ``floor = 1``. An approximate family's floor is the lowest
summed ratio of any text class seen out-of-sample on the wide evaluation set
(``benchmarks/textgen.py``), minus a margin (see `FAMILY_FLOOR`).

**Bound** (`BoundEstimator`, ``bound:unknown``): for models with no offline tokenizer
(Gemini, Llama, Mistral, Qwen …). Each weight is the largest of the four families' weights
and the result is divided by the smallest floor, so its count is at least every known
family's approximate count ÷ its floor, hence at least every known family's exact count.
It counts text as dense when any family would (its dense weights are the largest of every
family's dense and main weights), and an ideograph as rare when any family's is.

**Exact** (`ExactEstimator`): tiktoken (``o200k_base``, ``cl100k_base``) and the
``tokenizers`` JSON files for DeepSeek and Anthropic — all read from the files litellm ships,
never downloaded, and without importing litellm itself.

**Caches** are keyed by content, never by id alone: a message's key hashes its text or every
part, every tool call's name and arguments, its reasoning and its name (Python caches a
string's hash on the string, so a key costs O(parts), not O(text)). One cache can therefore
serve many sessions and users, and a round costs O(new content). The estimators that count
alike — the default approximate one of a family, the bound, a family's exact tokenizer —
share **one process-wide cache per counting method** (`CountCache`), so a fresh agent or a
stateless ``acompletion`` over a history seen before pays a lookup per message, not a count.
A cache holds 64-bit keys and counts, never text, and is bounded (`CACHE_LIMIT`).

**Images** (non-text parts) are counted by the provider's rule where it is known (OpenAI:
85 + 170 per 512-px tile; Anthropic: width × height / 750), read from the header of a
base64 data URL; an unknown size or provider counts the largest allowance (`image_tokens`).
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import math
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterable
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from zlib import adler32

import msgspec

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError
from harness.messages import ContentPart, Message, ToolSchema

MESSAGE_OVERHEAD = 4
"""Tokens of framing per message (role markers, separators)."""
TOOL_CALL_OVERHEAD = 8
"""Tokens of framing per tool call (id, type, name and argument wrappers)."""
TOOL_SCHEMA_OVERHEAD = 8
"""Tokens of framing per tool schema."""
FAMILIES = ("o200k", "cl100k", "deepseek", "anthropic")
"""The tokenizer families with an exact tokenizer shipped offline."""
CACHE_LIMIT = 500_000
"""Entries one count cache holds (about 100 bytes each); the oldest quarter goes when full."""
MAX_NAME = 64
"""Names up to this long have their counts cached (`CachedEstimator._name`)."""


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


# ------------------------------------------------------------------- content keys
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


# -------------------------------------------------------------------------- images
OPENAI_LOW_DETAIL = 85
"""Tokens of an OpenAI image at ``detail: low`` (and the base of every image)."""
OPENAI_TILE = 170
"""Tokens per 512-px tile of an OpenAI image at high detail."""
OPENAI_MAX_IMAGE = OPENAI_LOW_DETAIL + OPENAI_TILE * 8
"""The largest OpenAI image: 768 × 2048 after scaling is 2 × 4 tiles (1,445 tokens)."""
ANTHROPIC_MAX_IMAGE = 1600
"""Anthropic's cap: images are scaled to about 1.15 megapixels, ≈ 1,600 tokens."""
IMAGE_BOUND = max(OPENAI_MAX_IMAGE, ANTHROPIC_MAX_IMAGE)
"""What an image of unknown size or for an unknown provider counts: the largest allowance."""
_HEADER_CHARS = 65_536
"""Base64 characters decoded to find an image's size (48 KB: JPEG EXIF blocks come first)."""


def image_size(data: bytes) -> tuple[int, int] | None:
    """Return (width, height) from the header of a PNG, JPEG, GIF or WebP file, else None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(
                data[27:30], "little"
            )
        if kind == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return int(width) & 0x3FFF, int(height) & 0x3FFF
        return None
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
                i += 1 if marker == 0xFF else 2
                continue
            length = int.from_bytes(data[i + 2 : i + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(width), int(height)
            i += 2 + length
    return None


def _image_source(part: ContentPart) -> tuple[str | None, str | None]:
    """Return (base64 payload or None, detail or None) of an image part."""
    data = part.data or {}
    detail = None
    payload: str | None = None
    url: Any = data.get("image_url")
    if isinstance(url, dict):
        detail = url.get("detail")
        url = url.get("url")
    if isinstance(url, str) and url.startswith("data:") and "," in url[:200]:
        payload = url[url.index(",") + 1 :]
    source = data.get("source")
    if isinstance(source, dict) and isinstance(source.get("data"), str):
        payload = source["data"]
    return payload, detail if isinstance(detail, str) else None


def openai_image_tokens(width: int, height: int, detail: str | None = None) -> int:
    """Return OpenAI's count: fit in 2048², shortest side to 768, 85 + 170 per 512-px tile."""
    if detail == "low":
        return OPENAI_LOW_DETAIL
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return OPENAI_LOW_DETAIL + OPENAI_TILE * tiles


def anthropic_image_tokens(width: int, height: int) -> int:
    """Return Anthropic's count: width × height / 750, after scaling to its 1568-px edge."""
    w, h = float(width), float(height)
    if max(w, h) > 1568:
        w, h = w * 1568 / max(w, h), h * 1568 / max(w, h)
    return min(ANTHROPIC_MAX_IMAGE, math.ceil(w * h / 750))


def image_tokens(part: ContentPart, rule: str) -> int:
    """Return the token count of one non-text part under ``rule`` (openai, anthropic, bound).

    The size comes from the header of a base64 data URL (PNG, JPEG, GIF, WebP). An image of
    unknown size, a remote URL, another kind of part (audio …) or an unknown provider
    counts `IMAGE_BOUND`, the largest allowance; OpenAI's ``detail: low`` counts 85.
    """
    payload, detail = _image_source(part)
    if rule == "openai" and detail == "low":
        return OPENAI_LOW_DETAIL
    size = None
    if payload:
        head = payload[:_HEADER_CHARS]
        head = head[: len(head) - len(head) % 4]
        try:
            size = image_size(base64.b64decode(head))
        except (binascii.Error, ValueError, struct.error):
            size = None
    if size is None or min(size) <= 0:
        return IMAGE_BOUND
    if rule == "openai":
        return openai_image_tokens(*size, detail)
    if rule == "anthropic":
        return anthropic_image_tokens(*size)
    return max(openai_image_tokens(*size), anthropic_image_tokens(*size))


def image_rule(family: str) -> str:
    """Return the image rule of a tokenizer family (``bound`` when the provider's is unknown)."""
    return {"o200k": "openai", "cl100k": "openai", "anthropic": "anthropic"}.get(family, "bound")


# ------------------------------------------------------------------- count caches
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


# ------------------------------------------------------------------ the base class
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
        tokens = self._messages.get(key)
        if tokens is None:
            tokens = self._count_message(message)
            remember(self._messages, key, tokens, self._limit)
        return tokens

    def _count_message(self, message: Message) -> int:
        tokens = MESSAGE_OVERHEAD + self.count(message.text)
        if message.content is not None and not isinstance(message.content, str):
            tokens += sum(
                image_tokens(part, self.images) for part in message.content if part.text is None
            )
        for call in message.tool_calls:
            tokens += TOOL_CALL_OVERHEAD + self._name(call.name) + self.count(call.arguments)
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


# -------------------------------------------------------------- the approximate model
_MAX_WEIGHT = 31
_CHUNK = 2048
"""Bytes one ``adler32`` call sums: ``1 + _CHUNK · _MAX_WEIGHT`` stays under its modulus 65521."""
RUN_CHARS = " \t\n\r=-_*#.~0/+|:<>\\`'\"─━═"
"""Characters whose runs tokenizers merge into long tokens; counted per block (see `RUN_BLOCK`)."""
RUN_BLOCK = 32
"""A run of this many characters counts its measured cost instead of its characters' weights."""
RUN_LONG = 256
"""… and each block of this many, inside a longer run, its measured long-run cost."""
RUN_MIN_TEXT = RUN_BLOCK
"""Texts shorter than a block skip the run check."""
_RUN_MARK = bytes(
    1 if (b < 0x80 and chr(b) in RUN_CHARS) or b in (0x00, 0x01, 0x50) else 0 for b in range(256)
)
"""Marks the (low) bytes of run characters: one C scan tells whether any block can exist."""
_RUN_PROBE = b"\x01" * RUN_BLOCK
_STRIDE = 4
_SPARSE = RUN_BLOCK // _STRIDE
"""A run of `RUN_BLOCK` holds this many consecutive samples."""
_SPARSE_PROBE = b"\x01" * _SPARSE
_SPARSE_RUNS = tuple(bytes((byte,)) * _SPARSE for byte in range(256))
"""XOR of consecutive samples: this many zero bytes in a row mark four equal samples."""
_CJK_RUNS = re.compile("[\u4e00-\u9fff]+")
_ASTRAL_IDEOGRAPHS = re.compile("[\U00020000-\U0003ffff]")
_NOT_CJK_PAGES = bytes(b for b in range(256) if not (0x4E <= b <= 0x9F or 0xD8 <= b <= 0xDB))


def _hex_table(table: str, name: str) -> bytes:
    try:
        weights = bytes.fromhex(table)
    except ValueError as error:
        raise ConfigurationError(f"Coefficients.{name} must be hex digits: {error}") from None
    if len(weights) != 256 or max(weights) > _MAX_WEIGHT:
        raise ConfigurationError(
            f"Coefficients.{name} must hold 256 weights of 0–{_MAX_WEIGHT}; "
            "generate it with benchmarks/fit_estimator.py"
        )
    return weights


class Coefficients(msgspec.Struct, frozen=True, kw_only=True):
    """A linear model with non-negative weights over a text's UTF-16 code units.

    tokens ≈ fixed + unit · Σ table[low byte] + page_unit · Σ pages[high byte]
    + rare_cjk · (CJK ideographs outside GB2312) − run corrections (see `runs`).
    For ASCII and Latin-1 the low byte is the character and the page is 0.
    """

    table: str
    """512 hex digits: per low byte, its weight in units of ``unit`` (0–31)."""
    unit: float
    """Tokens per ``table`` step."""
    pages: str = "00" * 256
    """512 hex digits: per high byte (a 256-character page: a script), its weight (0–31)."""
    page_unit: float = 0.0
    """Tokens per ``pages`` step."""
    rare_cjk: float = 0.0
    """Extra tokens per rare CJK ideograph (see `rare_cjk_count`)."""
    cjk_single: str = ""
    """The ideographs U+4E00–9FFF the family's tokenizer encodes as one token, packed (see
    `pack_cjk`); the others are its rare ones. Empty: rare means outside GB2312."""
    fixed: float = 0.0
    """Tokens added once per text."""
    runs: tuple[tuple[str, float, float], ...] = ()
    """(character, tokens of a run of `RUN_BLOCK`, tokens per `RUN_LONG` characters of a long
    run): each block of such characters counts its run cost instead of its weights."""
    dense: str = "00" * 256
    """512 hex digits: per ASCII byte, its weight (0–31) in *dense* text — an ASCII text whose
    ``table`` estimate is at least ``dense_gate`` tokens per character (base64, hex, hashes,
    random ASCII, numbers), where the tokenizer's word pieces are short and the prose weights
    under-count. Ignored while ``dense_unit`` is 0."""
    dense_unit: float = 0.0
    """Tokens per ``dense`` step."""
    dense_gate: float = 0.0
    """Tokens per character (by ``table``) from which an ASCII text is dense."""
    dense_case: float = 0.0
    """Tokens per lowercase letter followed by an uppercase one, in dense text: tokenizers
    start a word piece there (base64 and random text are full of them)."""
    dense_digit: float = 0.0
    """Tokens per letter followed by a digit, in dense text (a digit starts a piece too)."""
    dense_symbol: float = 0.0
    """Tokens per symbol followed by a letter, in dense text."""

    def __post_init__(self) -> None:
        _hex_table(self.table, "table")
        _hex_table(self.pages, "pages")
        _hex_table(self.dense, "dense")
        numbers = (
            self.unit,
            self.page_unit,
            self.rare_cjk,
            self.fixed,
            self.dense_unit,
            self.dense_gate,
            self.dense_case,
            self.dense_digit,
            self.dense_symbol,
        )
        if min(numbers) < 0 or any(min(a, b) < 0 or len(c) != 1 for c, a, b in self.runs):
            raise ConfigurationError(
                "Coefficients must be non-negative (a negative weight lets a long text of "
                "one character count as nothing); refit with benchmarks/fit_estimator.py"
            )

    @property
    def weights(self) -> bytes:
        """The 256 integer low-byte weights."""
        return bytes.fromhex(self.table)

    def char_tokens(self, char: str, *, dense: bool = False) -> float:
        """Return the tokens one occurrence of ``char`` adds, outside runs and CJK rarity.

        With ``dense``, the weight it has in dense text (ASCII characters only).
        """
        if dense:
            return sum(self.dense_unit * bytes.fromhex(self.dense)[ord(c)] for c in char)
        total = 0.0
        for unit in char.encode("utf-16-le", "surrogatepass")[0::2]:
            total += self.unit * self.weights[unit]
        for page in char.encode("utf-16-le", "surrogatepass")[1::2]:
            total += self.page_unit * bytes.fromhex(self.pages)[page]
        return total


def _weigh(data: bytes) -> int:
    """Return the sum of ``data``'s bytes (each at most `_MAX_WEIGHT`), in C."""
    size = len(data)
    if size <= _CHUNK:
        return (adler32(data) & 0xFFFF) - 1
    view = memoryview(data)
    return sum((adler32(view[i : i + _CHUNK]) & 0xFFFF) - 1 for i in range(0, size, _CHUNK))


_LETTER_CLASSES = (
    bytes(
        ord("a")
        if chr(b).islower()
        else ord("A")
        if chr(b).isupper()
        else ord("0")
        if chr(b).isdigit()
        else ord(" ")
        if chr(b).isspace()
        else ord(".")
        for b in range(128)
    )
    + b" " * 128
)
"""Maps ASCII to its class: ``a`` lowercase, ``A`` uppercase, ``0`` digit, ``.`` other
visible, space otherwise."""


def dense_features(text: str) -> tuple[int, int, int]:
    """Return the transitions of ASCII ``text`` where tokenizers start a new word piece.

    (lowercase letters followed by an uppercase one, letters followed by a digit, symbols
    followed by a letter).
    """
    classes = text.encode("ascii").translate(_LETTER_CLASSES)
    return (
        classes.count(b"aA"),
        classes.count(b"a0") + classes.count(b"A0"),
        classes.count(b".a") + classes.count(b".A"),
    )


_WORD_CLASSES = bytes(0x20 if b in b" \t\n\v\f\r" else 0x61 for b in range(256))
"""Maps ASCII whitespace (what the tokenizers' ``\\s`` matches) to a space, the rest to ``a``:
``b" a"`` marks a word start, where every family's pre-tokenizer starts a new piece."""
PERIOD_MAX = RUN_BLOCK
"""The longest unit `period` looks for."""
_PERIOD_PROBE = 8
_PERIOD_END = PERIOD_MAX + _PERIOD_PROBE


def period(low: bytes) -> int:
    """Return the length of the unit of at most `PERIOD_MAX` bytes that ``low`` repeats, or 0.

    At least two units and a partial last one; the shortest such unit. The search for the
    first bytes' next occurrence is bounded, so a text that is not periodic costs nearly nothing;
    a text that only starts periodic (indentation, a ``====`` rule) fails on a window in its
    middle or at its end before the whole text is compared.
    """
    size = len(low)
    probe = low[:_PERIOD_PROBE]
    unit = low.find(probe, 1, _PERIOD_END)
    if unit == 1:  # it starts with a run: a unit within the run would make it all one run
        head = low[:_PERIOD_END]
        run = len(head) - len(head.lstrip(probe[:1]))
        if run == len(head):
            return 1 if low[1:] == low[:-1] else 0
        unit = low.find(probe, run + 1, _PERIOD_END)
    while unit > 0 and 2 * unit <= size:
        window = min(_PERIOD_END, size - unit)
        middle = (size - unit - window) // 2
        if (
            low[size - window :] == low[size - window - unit : size - unit]
            and low[middle : middle + window] == low[middle + unit : middle + unit + window]
            and low[unit:] == low[:-unit]
        ):
            return unit
        unit = low.find(probe, unit + 1, _PERIOD_END)
    return 0


_PERIODIC_BLOCK = 4
"""Units a block holds when `periodic_tokens` counts a periodic text by blocks."""


def periodic_tokens(low: bytes, unit: int, count: Callable[[str], int]) -> int:
    """Return the tokens of ASCII ``low``, which repeats a ``unit``-byte unit, by ``count``.

    ``count`` reads the first block of units with the partial rest and the next block; every
    further block costs what that next one did. A unit with a word start tokenizes alike in
    every repetition, so this is the exact count up to a token at the ends of blocks.
    """
    block = unit * _PERIODIC_BLOCK
    blocks, rest = divmod(len(low), block)
    if blocks <= 2:
        return count(low.decode("ascii"))
    head = count(low[: block + rest].decode("ascii"))
    step = count(low[: 2 * block + rest].decode("ascii")) - head
    return head + (blocks - 1) * step


def rare_cjk_count(text: str, single: str = "") -> int:
    """Return how many rare CJK ideographs ``text`` holds.

    Rare: in U+4E00–9FFF but not one token for the family (``single``, see `pack_cjk`) —
    or, without ``single``, not in GB2312, whose 6,763 characters cover nearly all of real
    Chinese text — or in the supplementary planes (extensions B and later).
    """
    if single:
        return len(_rare_cjk(single).findall(text))
    ideographs = "".join(_CJK_RUNS.findall(text))
    rare = len(ideographs) - len(ideographs.encode("gb2312", "ignore")) // 2
    return rare + len(_ASTRAL_IDEOGRAPHS.findall(text))


_CJK_FIRST = 0x4E00
_CJK_SIZE = 0xA000 - 0x4E00


def pack_cjk(single: Iterable[str]) -> str:
    """Return the set ``single`` of ideographs in U+4E00–9FFF as a bitmap, zlib and base85."""
    bits = bytearray(_CJK_SIZE // 8)
    for char in single:
        index = ord(char) - _CJK_FIRST
        if 0 <= index < _CJK_SIZE:
            bits[index // 8] |= 1 << (index % 8)
    return base64.b85encode(zlib.compress(bytes(bits), 9)).decode("ascii")


def _unpack_cjk(single: str) -> bytes:
    """Return the bitmap packed by `pack_cjk`."""
    try:
        bits = zlib.decompress(base64.b85decode(single))
    except (ValueError, zlib.error) as error:
        raise ConfigurationError(f"Coefficients.cjk_single is not a packed set: {error}") from None
    if len(bits) != _CJK_SIZE // 8:
        raise ConfigurationError("Coefficients.cjk_single must pack 20,992 bits (U+4E00–9FFF)")
    return bits


def _common_cjk(singles: Iterable[str]) -> str:
    """Return the ideographs that every packed set of ``singles`` holds, packed."""
    common = -1
    for single in singles:
        common &= int.from_bytes(_unpack_cjk(single), "little")
    bits = common.to_bytes(_CJK_SIZE // 8, "little")
    return pack_cjk(chr(_CJK_FIRST + i) for i in range(_CJK_SIZE) if bits[i // 8] >> (i % 8) & 1)


@cache
def _rare_cjk(single: str) -> re.Pattern[str]:
    """Return a pattern of one ideograph of U+4E00–9FFF not in ``single``, or astral."""
    bits = _unpack_cjk(single)
    ranges: list[str] = []
    start = None
    for index in range(_CJK_SIZE + 1):
        rare = index < _CJK_SIZE and not bits[index // 8] >> (index % 8) & 1
        if rare and start is None:
            start = index
        elif not rare and start is not None:
            ranges.append(f"{chr(_CJK_FIRST + start)}-{chr(_CJK_FIRST + index - 1)}")
            start = None
    return re.compile("[" + "".join(ranges) + "\U00020000-\U0003ffff]")


_Run = tuple[str, float, str, float]
"""(block, what a block saves, long block, what a long block saves more)."""


def _run_savings(text: str, sample: bytes, runs: dict[int, tuple[_Run, ...]]) -> float:
    """Return what the runs of one character in ``text`` save over their weights.

    ``sample`` holds every `_STRIDE`-th low byte of ``text``; ``runs`` maps a low byte to
    the runs of characters with that low byte. A run of `RUN_BLOCK` shows as `_SPARSE`
    equal samples: only characters seen so are counted, in the whole text.
    """
    saved = 0.0
    per_long = RUN_LONG // RUN_BLOCK
    for byte, byte_runs in runs.items():
        if _SPARSE_RUNS[byte] not in sample:
            continue
        for block, saving, long_block, long_saving in byte_runs:
            blocks = text.count(block)
            if blocks:
                saved += blocks * saving
                if blocks >= per_long:
                    saved += text.count(long_block) * long_saving
    return saved


def _by_low_byte(runs: Iterable[_Run]) -> dict[int, tuple[_Run, ...]]:
    """Return ``runs`` grouped by the low byte of their character."""
    out: dict[int, tuple[_Run, ...]] = {}
    for run in runs:
        byte = ord(run[0][0]) & 0xFF
        out[byte] = (*out.get(byte, ()), run)
    return out


class ApproximateEstimator(CachedEstimator):
    """Fast estimate from non-negative per-character weights, calibrated per tokenizer family.

    One count reads the whole text in a few C calls; see `Coefficients` and the module
    docstring. ``floor`` is the family's measured lower bound of estimate ÷ exact.
    """

    exact = False

    def __init__(
        self,
        family: str = "o200k",
        coefficients: Coefficients | None = None,
        *,
        floor: float | None = None,
    ) -> None:
        # The family's own table counts alike in every instance: one shared cache. Custom
        # coefficients or a subclass (which may count otherwise) keep a private one.
        alike = coefficients is None and type(self) is ApproximateEstimator
        super().__init__(shared_as=f"approximate:{family}" if alike else None)
        if coefficients is None:
            if family not in FAMILY_COEFFICIENTS:
                raise ConfigurationError(
                    f"unknown tokenizer family {family!r}; use one of {sorted(FAMILY_COEFFICIENTS)}"
                )
            coefficients = FAMILY_COEFFICIENTS[family]
        self.family = family
        self.method = f"approximate:{family}"
        self.floor = FAMILY_FLOOR.get(family, 0.5) if floor is None else floor
        self.images = image_rule(family)
        self.coefficients = coefficients
        self._low = coefficients.weights
        self._pages = bytes.fromhex(coefficients.pages)
        self._unit = coefficients.unit
        self._page_unit = coefficients.page_unit
        self._rare = coefficients.rare_cjk
        self._cjk_single = coefficients.cjk_single
        if self._cjk_single:
            _rare_cjk(self._cjk_single)  # validated and compiled once, up front
        self._fixed = coefficients.fixed
        self._dense = bytes.fromhex(coefficients.dense)
        self._dense_unit = coefficients.dense_unit
        self._case = coefficients.dense_case
        self._digit = coefficients.dense_digit
        self._symbol = coefficients.dense_symbol
        self._transitions = bool(self._case or self._digit or self._symbol)
        # ASCII text is dense from this many tokens per character (0: no dense table)
        self._dense_gate = coefficients.dense_gate if coefficients.dense_unit else 0.0
        runs = self._run_savings(coefficients, dense=False)
        self._runs = _by_low_byte(runs)
        self._ascii_runs = _by_low_byte(r for r in runs if r[0].isascii())
        self._dense_runs = _by_low_byte(
            self._run_savings(coefficients, dense=True) if coefficients.dense_unit else ()
        )

    @staticmethod
    def _run_savings(coefficients: Coefficients, *, dense: bool) -> tuple[_Run, ...]:
        """Return the `_Run` of each run character (ASCII ones only when ``dense``)."""
        runs = []
        per_long = RUN_LONG // RUN_BLOCK
        for char, alone, long_run in coefficients.runs:
            if dense and not char.isascii():
                continue
            per_char = coefficients.char_tokens(char, dense=dense)
            runs.append(
                (
                    char * RUN_BLOCK,
                    RUN_BLOCK * per_char - alone,
                    char * RUN_LONG,
                    per_long * alone - long_run,
                )
            )
        return tuple(runs)

    @property
    def exact_counter(self) -> TokenEstimator | None:
        """The family's shared exact estimator, loaded on first use."""
        return shared_exact(self.family) if self.family in FAMILIES else None

    def count(self, text: str) -> int:
        """Return the estimated token count of ``text`` (0 for empty text, else ≥ 1)."""
        size = len(text)
        if not size:
            return 0
        ascii_text = text.isascii()
        if ascii_text:
            low = text.encode("ascii")
            weights = low.translate(self._low)
            steps = (adler32(weights) & 0xFFFF) - 1 if size <= _CHUNK else _weigh(weights)
            total = steps * self._unit
            runs = self._ascii_runs
            dense = self._dense_gate
        else:
            data = text.encode("utf-16-le", "surrogatepass")
            low, high = data[0::2], data[1::2]
            total = (
                _weigh(low.translate(self._low)) * self._unit
                + _weigh(high.translate(self._pages)) * self._page_unit
            )
            if self._rare and len(high.translate(None, _NOT_CJK_PAGES)):
                total += self._rare * rare_cjk_count(text, self._cjk_single)
            runs = self._runs
            dense = 0.0
        # A run of RUN_BLOCK characters covers RUN_BLOCK // _STRIDE consecutive samples of
        # every _STRIDE-th code unit, all run characters and all equal. Testing the samples
        # is cheap and rules out nearly every real text; the rest is scanned for each run.
        sample = None
        if size >= RUN_MIN_TEXT:
            sample = low[::_STRIDE]
            if _SPARSE_PROBE in sample.translate(_RUN_MARK):
                total -= _run_savings(text, sample, runs)
            else:
                sample = None
        # Dense: the main estimate, runs counted as runs, is at least dense_gate per character.
        if dense and total >= dense * size:
            total = self._dense_count(low)
            if sample is not None:
                total -= _run_savings(text, sample, self._dense_runs)
        estimate = total + self._fixed
        # One bounded search of the first bytes rules out nearly every text that is not periodic.
        if (
            ascii_text
            and size >= RUN_MIN_TEXT
            and low.find(low[:_PERIOD_PROBE], 1, _PERIOD_END) > 0
        ):
            estimate = self._periodic_bound(low, estimate)
        return 1 if estimate < 1.0 else math.ceil(estimate)

    def _periodic_bound(self, low: bytes, estimate: float) -> float:
        """Return ``estimate``, or what ASCII ``low`` costs if it repeats one unit.

        A text that repeats one short unit (`period`) with a word start in it is one sample
        of a class, not a class: the floor, measured over classes, does not hold for it.
        Per-character weights fitted on prose price short words of common letters ("a a a",
        "ok ok", "aee aee") at a quarter to a third of their tokens. The tokenizer counts each
        repetition alike (every word start begins a new piece), so the family's exact
        tokenizer counts a few units and the rest is multiplied (`periodic_tokens`). Without
        one (custom coefficients, the bound), ``floor`` × its bytes: a byte-level token is at
        least one byte. Units without a word start (runs, ``abab``, CRLF) merge across units
        into long tokens: they keep their estimate.
        """
        if self.floor * len(low) <= estimate:
            return estimate
        unit = period(low)
        if not unit or b" a" not in low[: 2 * unit].translate(_WORD_CLASSES):
            return estimate
        exact = self.exact_counter
        if exact is None:
            return self.floor * len(low)
        return max(estimate, periodic_tokens(low, unit, exact.count))

    def _dense_count(self, low: bytes) -> float:
        """Return the dense table's sum and transition terms of ASCII ``low`` (runs not out)."""
        total = _weigh(low.translate(self._dense)) * self._dense_unit
        if self._transitions:
            classes = low.translate(_LETTER_CLASSES)
            total += (
                self._case * classes.count(b"aA")
                + self._digit * (classes.count(b"a0") + classes.count(b"A0"))
                + self._symbol * (classes.count(b".a") + classes.count(b".A"))
            )
        return total


# Fitted by benchmarks/fit_estimator.py (python -m benchmarks.fit_estimator --write).
# BEGIN FITTED
FAMILY_COEFFICIENTS: dict[str, Coefficients] = {
    "o200k": Coefficients(
        table=(
            "1010101010101010100108101008101010101010101010101010101010101010"
            "06010d0a1f010114010f0807180e1f151f1518180e18180c010a010110010901"
            "01010101011a1f1f01011f0101010301101f16011f161f1f1f1f101f11011407"
            "0e04140d19021e0e0b01100105040101011f01060501011105151f1f1f010e10"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0014140a05080504040808080808081f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f0a"
            "00080808080808080808080808080808090909090a0a0a0a0a0a0a0a0a0a0a0a"
            "0a0a0a0a0a0a0a0a0a0a0a0a0a0a060606060606060606060606060606060606"
            "0606060606060606060606060606060606060606060606060606060606060606"
            "0606060606060606060606060606060606060606060606060606060606060606"
            "1f1f1f1f1f1f1f1f1f1f1f1f1313131313131313131313131313131313131313"
            "1313131313131313131313131313131313131313131313130a0a0a0a0a0a0a0a"
            "1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b0d0d0000000010"
        ),
        unit=0.034894,
        page_unit=0.104683,
        rare_cjk=1.4083,
        fixed=0.0000,
        cjk_single=(
            "c-n<kO^BOC7=C6liIbShB%8L`RdJHWHnv)K*D4h+lQh;;S51G!f<1&%VGqUDi<Tl"
            "fNz*m8g0WOk^pI{vt0*d7^dO{5i$zdMiz0aN55bEE!JZWHedkNIYbiP*AM?#O^UU"
            ");^StjI-M913{Wm|dul(4{CpY0*SNra+nF|M1XVu;Vv5mPiW%*|N?X5nOaX;KLk("
            "Amyjq*`%{SC@n>7+tA(avh@@E$pf^WFjynJ&<$9`y}B75u?<D^>rVKkshdsV0PZU"
            "ssO7ZtsiRPOG`wr&6bvbxIPwxe`2ZE_TgzZI9A?4j{aNB!ugZp8YHSynbEmN!i0r"
            "pqqZ~f;jNTmm>f4$#a9(%mX40p+tEj@(zg8#sy$^NzqaPhHxFANv}p>3T^<<G~Nt"
            "VXd307;i*eneVM&+k4x5CS|n?SJBMzq(t53<kJ^Pb3En|snx5GTBWZN2jMEMXarE"
            "Y!$2$*Y6aMH0SbV#xBkEP!JLUBCIhyBR0LB@C=qMKmF`~8!6M&<CXdfNgDIwl{-C"
            "w$?zVoMsN%vjSegDmG+e!xV(wY~ovtH74uVqn(NF*vzoL6tnpDHW#`b@>TU$+!2_"
            "`G&~y0i01Z&3DOUyXsfvD0q}%qM_bQIoNWJH`(?x%pK)YyDVDTN`tG?7X6>Iu6x#"
            "yv}clD_A9sXld5C8<gGxbe0ILhH(jhpK$8yBVu;F=uT`}5bD&{4Z1klEbe;Ej_LD"
            "rQev%VQLI<aLysx_7U82E*U}nBZeSAXJRdaaqmgi?N&OP*8JdN6U)Y!1a>h&v4=+"
            "t$Oc%Qzzue(et&#VI6KE)%Rye&?b+7<bf@>#%<rkCd{3(1U)q@MMUhzb1kVR_)BO"
            "5<%EGD$?wjq@to5@I&N$eu+=SVT3l?vKhWkw;x+DW!xWS}61CFx`;9Qn|VS2p_g5"
            ">yS8WY5YsG|~}h@rMnX{RV%G1U6z$dOrq~Qn6Y)q4W#cgw?A>(o)LSty1;fb#2_{"
            "9uU(hcc>Jkm%6R35IS~@xj5!C5bT-2N2;taUU>r*JZ~~+MwH}`{FP0gDmZYGIILu"
            "E4{S6}hBp+o><w!{gkU+|p*?>t_zY5Wa_EYlqiHP&gA7f`V`d~FM2|9u&z|inEL="
            "Tc<`<!&^bG7wJsNr?Ek0OAR*^Pcp%Kc=u4?p0Q%5pKTRd}qh~(m*AIUpYkrVKQX6"
            "Ua|qsc=$wy1rA>=%^|BE;P$hahrtkw$1c2(f9YCP^R4&TOolXgN=Io#p*f-UY219"
            "cjI_Q6LKi?+7N#>d};K%(qIiQXmp7xhP&#BBDhavIFDzOE@e&WliF6SI8ViP{n2*"
            ";^ZU}N(nIx#YL<~v7J5s-pOxIto_)pHgsfl$}7VOr?8op)`*UTm4?d~^6N}1Qaxw"
            "xMW+Lub(n6G;To<%Rjr^XJBT4orQnfV7^-Jk8ePgOUpPKMPRL*e|6+|39lcZm{We"
            "7)hlfPolyRi!l0j8F=s89)6a$Q*tjf?D>BIS`ActC1WKo}CE#=K!E>t9ImKwmVBJ"
            "!NRQS(uDVKHAZG={x;F%_n(*NW(3phAGv-cFk+=%u;rt6itO()Q7q0(&=pFW0J6j"
            ">|?36u~ql;D)&Oda-bqhd~I(IYG&|;^+9;?Q7;sd-}&7OeM8Zq7BD^li18QHs;4$"
            "OjZT%{lDM&FqVC_F|%C%4x8rFqMwm{w93&Pn7B+)j*_SpVz-(HI-$10T{Pucd4Ih"
            "wu6b&{GWI9Zt>VLT%jc3vjCb~af?IamR)!|lYlOhoE!fLyvFA9I*baOx{2~7(jTt"
            "_#tSe#Ms}aZ&!LQQO;mwzvWG@(&bd?se>Oz=&S$L7s6jvgGemtj({7F62-9IIeOZ"
            "-@JXEIz&+><C))A50B*>E+}9<^#*VoBAY4i(oYgy7WAW71IJY<|_i!c<`7a4zuXr"
            "6Yz-K~5%NGD{;F0W!l)b(pp?oS32HT$Z8ajl%yoGqkw4LaqO5K1DZVRE-5!Cr<(A"
            "^Da?|EFWsUW=JMLm)^e)?jIq0H&X"
        ),
        dense=(
            "1f1f1f1f1f1f1f1f1f091f1f1f091f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
            "1c0118121a011f1b01011b011f111f010f0c0f0310100d0a050b011f0a1f1f1f"
            "011f111a010101011501011c19190101021901151f1f1f011f1f0f1f1f0a1f01"
            "04010f0a09080b0d0101010301010101010101010101011d0a010104051c1f1f"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034894,
        dense_gate=0.3894,
        dense_case=1.0228,
        dense_digit=1.1773,
        dense_symbol=0.5418,
        runs=(
            (" ", 1.00, 2.00),
            ("\t", 2.00, 16.00),
            ("\n", 2.00, 16.00),
            ("\r", 16.00, 128.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 4.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 4.00),
            ("~", 1.00, 8.00),
            ("0", 11.00, 85.34),
            ("/", 1.00, 4.00),
            ("+", 1.00, 8.00),
            ("|", 8.00, 64.00),
            (":", 2.00, 16.00),
            ("<", 4.00, 32.00),
            (">", 4.00, 32.00),
            ("\\", 8.00, 64.00),
            ("`", 16.00, 128.00),
            ("'", 8.00, 64.00),
            ('"', 8.00, 64.00),
            ("─", 2.00, 16.00),
            ("━", 4.00, 32.00),
            ("═", 4.00, 32.00),
        ),
    ),
    "cl100k": Coefficients(
        table=(
            "1010101010101010100108101008101010101010101010101010101010101010"
            "06010d0b1f010119010e0807180d1f131f1619170d17160c020b01011f010901"
            "01010101011d1b1f01011f0101010701111f0c011d1f1f1f1f1f101f14011807"
            "0c041b0817021f0f1601160104010101031f01040401010905171f1f1f030d10"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0017171007100707070f0f0f0f0f0d1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f10"
            "000808080808080808080808080808080c0c0c0c000000000000000000000000"
            "0000000000000000000000000000070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "1f1f1f1f1f1f1f1f1f1f1f1f1717171717171717171717171717171717171717"
            "1717171717171717171717171717171717171717171717170b0b0b0b0b0b0b0b"
            "1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d00000000000012"
        ),
        unit=0.034950,
        page_unit=0.104851,
        rare_cjk=1.3774,
        fixed=0.0000,
        cjk_single=(
            "c-pmAy>1gh5S|&Yqb0alTS1DbCO~mQ6nOxOO>lt(6;(<jQBWcA1{35WbQV?0h-cs"
            "dEJ~h)$6#k~?`O|G?gGhJ_U-TN_kA<7=gUv_$UQSNcnIPFz+X7KIfga7^;o!VK>$"
            "<KaV{3&DPX~dF*PRLz_IPpw=v0jV8dpf|AN&iP-}SRL7u?jS>;FVYJyNZX4vY((A"
            "kZ80bhE)GB3{2uD>FDCh*s~0x*2ILP40H?>l(*TE6FX=&m9YL{m@M%3=I9WoOZz^"
            "KFM4_C{z?ZD!N;GukdOI(`hx1Mrj%S$I+36shZz#yj+@0DqP-zYvh?HUTpgPLoAg"
            "O>pWYGAvSn!+9(f8)<apCJzRbe^p9sqYJM*I5}4P(jsJhDLLbAurlLLU;NK<`CP$"
            "Ja6sBPQ6k<(gl139YD(kNF!~5gKo=4fB#gNBG36GScj4eIB1^;bk@?FyX*eQD3Pq"
            "fzgi=XoW3vH~YF2iD@eW*se>S_H616j`#{|cvuhffEkq)B@$@SgFd%+AdaGB~3>9"
            "{|Cxl6R4=CUg-@qrFl_?T6WX=zC)Nj+B|6zW6%B9pcIA~L;Y7`K{TV!!32QWkbNK"
            "6g#6jHtxiOc$={goxnYOzzm9%j4TaTqsd~7no`jG0TcEs)b7*mkVJ2aI?t*-lx`Y"
            "26BlskI|s#-Q+jA{V=^wCvTMSgkb%kyUEvA3HJ)}gYGY~O^$|o$*v#K5~*|Sy-O<"
            "S{|bbomXlR=b+lNSL7_P4OeX`c-Qhg??~C{@Y+QW)00lxxI{"
        ),
        dense=(
            "181818181818181818091f181809181818181818181818181818181818181818"
            "19161c1a1f131f1e010101011f121f01100c0e0510120e0a0409011f180e1f1f"
            "01010d1a010101010f01011f08100101061e12131f1f1f011f1f0f151f170f01"
            "010d0e08040c050c1201010401010101010101010101011f11010101071f1f18"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034950,
        dense_gate=0.3900,
        dense_case=1.1601,
        dense_digit=1.1350,
        dense_symbol=0.3388,
        runs=(
            (" ", 1.00, 2.00),
            ("\t", 2.00, 16.00),
            ("\n", 1.00, 8.00),
            ("\r", 32.00, 256.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 4.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 4.00),
            ("~", 1.00, 8.00),
            ("0", 11.00, 85.34),
            ("/", 1.00, 4.00),
            ("+", 1.00, 8.00),
            ("|", 8.00, 64.00),
            (":", 4.00, 32.00),
            ("<", 4.00, 32.00),
            (">", 4.00, 32.00),
            ("\\", 8.00, 64.00),
            ("`", 16.00, 128.00),
            ("'", 16.00, 128.00),
            ('"', 16.00, 128.00),
            ("─", 4.00, 32.00),
            ("━", 16.00, 128.00),
            ("═", 16.00, 128.00),
        ),
    ),
    "deepseek": Coefficients(
        table=(
            "101010101010101010010c10101f101010101010101010101010101010101010"
            "05010b0a1f010116011b060519101f181f1618160e18160b020a030110020a01"
            "0101010a011f1a1401011f01010111010c1f1c01171f1f1f1f1f101f1901140e"
            "0b041b0e16011f1017011f0109050101061f01030301010d05131f1f1f0d0f10"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0013130a060a0505050a0a0a0a0a081f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f0a"
            "0008080808080808080808080808080809090909070707070707070707070707"
            "0707070707070707070707070707050505050505050505050505050505050505"
            "0505050505050505050505050505050505050505050505050505050505050505"
            "0505050505050505050505050505050505050505050505050505050505050505"
            "1f1f1f1f1f1f1f1f1f1f1f1f1515151515151515151515151515151515151515"
            "1515151515151515151515151515151515151515151515150a0a0a0a0a0a0a0a"
            "1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e00000000000011"
        ),
        unit=0.034674,
        page_unit=0.104023,
        rare_cjk=1.5138,
        fixed=0.0000,
        cjk_single=(
            "c-nPUe{@sT9sk~&oAf3P;U*0=v;}TnQ%FmN^ano_w{w%G7-*SEDGr4lQ&y2p2Oeb"
            "`j-$ItlM)JOir|4dSz19V<BY=QgyVM313^)6cECZWGRqIO+oXU@@X#IDeZYSFvzz"
            "zMdwK8Pcfa4y=kxu1*DPCk<I0`$midQIovnj>5&n4UdskNaQkTEHW}4o7s287W`y"
            "!T#O^KYIvBm20XXlqo|B?M%mZaKFo6h2Tv7>NR(<Erl9OG^d7js^YvE8{d!gHKR;"
            "5H|a1SUidPrSpub>;Ak)6=#VP0613$KJsHxw(d2M@akRs{8hje73fU_O<(DrW6n6"
            "j~siT!{$5d2L4_P8qo3&!XMYXeSO{snKxctUc}R_EhJ<A`LQ)m-*~^~!K=Fl-yFV"
            "s!5nk<=w?)LSM0+dTlAM~-s9hImuDU!wR*AuI{Qsxeu~PknuD>I9Bhhg9`tju(EZ"
            ">>$y?^ib&$J117Z^+cSM=gDNx8VAgpl=AJ-ZwZ%kxLt>N^!wlC+VC6rJ?8zTTT!X"
            "yG|X$1~0QUl;#9|Rj0e#jgH6F?Fw1p9D~mhFkZux)7lz1bsQk!|7mrJs~FE(+Aq*"
            "~0!}t=|cmYd|-9@%<n$CkM$z2|(-sc5ZP+VKxQ;mpY+Sox5LOX!Dlscrkb5p~k1q"
            "{)3GeI8)s6>B$RCWm&fV>LV94QIo|<3p{VfnhmK1cu`r9O3_b2Q$aF>!1&&+K{#j"
            "e&l|QxmO5L$H8A*2m5*_7(1kZXOzk_V`v(wMBB>E@I5lqFj@74=J%u7xsV$${)>S"
            "j+xjH;^uePM`?SeL{^-d7W123n+6Y-bflGkUs16njSYh$xBZr3)xIox2uZG7z}00"
            "|FhXl?K`kVpY!3&Mir5fCuYiN3yfod}<Lr|r?P*37krV@}J^_oj^2_MBUJ>X$>8y"
            "Dqll(648#17GV7ul{WCpnb&i_4(WL(gb?y?Y36NC*)>DAt1;};zkmKDFYKk;Adv%"
            "_Q%{L$XFPGyDA{X5#D*`(MI+flAbkPeR~qs+9nB~)x1j%otU2N?$)A?u79SY`(xn"
            "^=m4Z<F~tW|3pVDsbz)zy_(QdC&VjoA((Y2-g}ZC*I}al!$GN@PqRj5q?*g{SC+~"
            "9>!%~xw8f5sv?s9Ne_|jIP5gsQDIFf{T!ieXpn<2m;$SC!r)ryB4Av9^TXqZuG!x"
            "RGoRWVHI>lROx5rF4_g!Lu_*V}(leAponhQ19G27hnE88t(8W!CO@qE)ziuz<{4J"
            "gHz#$LEc7*j3m|C#TDw!Za1(Wc-RVM;(QcnOWqU>+k)j&Brczu-Ua>$5{SwXJzpo"
            "cRlq9tJFa+$H6||+9=7<>TtD*=`)kl!R&DCmz<4u$B~-_fw_QUEBK^KC<-N3dR14"
            "3f%djsf|<)*@C}{jNWhx@eF_ds+!B&?44R;+KSVf7u_SV8m<D~4-&}|&)PBB9cS6"
            "T1>>F=V`9fCUQIH6ko-jE<#HaJ`MD>7B&ymlXwF%1KHQUWwu|OJ#B^c3G@{~f1|A"
            "mpDSWS^Gks*IzjY0?YVq<0Tt`R)TTt0gYiB$3x*WvL`Zq2KmWd~<c?cNr1fFMjLQ"
            "sC(mkqB1gr^1Im*xaSNW4IV})TYlf0rt%HzyT#SnVV`=$V*S<4<ouI5G5Qs>%HLP"
            "Fkfx=crqbzezRux5>T{b0qS7Qd8Xi?w_BQPasYZ5mNrya68%Y3?p*@JDmwNC<Er#"
            "+{q05kt=;jEsuwB_l;=b{r7m0032xExT|a`J5aNA+{TTkFY8i{9ny9>nK({TR-~s"
            "9f{7NDawmktPzCIx#QdQaMNFPSn&Abp2i<Je?LgcqdNGau+*iD(y2##Z50vuLGvQ"
            "ap-VQBj|pG~^4b7<eCmbw*X&PSLT;ALW&xeaU0>|j?L>Cu|q2@^JXCI-4q0wS-5O"
            "QQ9VO6LZP#GTXLDm>Q^70r8k8_HT&HJBk|tAm9zARftoAEn_QWTL)$Ol5DGr(|H7"
            "yC2-8Sml9)J~B)mBh~SX9i=k2<#1dk;oBj}<mSbuARd+K%19QUNrOP!$0yy&(UjY"
            "HmIJ@&#8m=IYAe!!P{T1vr^`mUh#J{-5F5+gLoF(Gjft$pRJ@?{(ZhK_fg$Y*NDc"
            "|mYmQ0^i}KulLza-RLkAN`m|>?=1DTPb91cQMIkTZdAOeVS2^ou(WNAxaQ^lmw38"
            "?l928y5YGEn0JPiYFwgp;tLL&MwU?2Hl+p}wD*ETGy5GS_FisjsL6z$?O<1IucE&"
            "{=DilB&`I8C1Ym7+$V^PLWM;L@1g1#d}v*Ztr>Q!rm)CsyKh=mQSkILueEtxCAg^"
            "G`?zFc5}i^qjPFmEu>-K`i<XwI`+@8IS<iGpxJqnB9HKRaL$$PwL?3K6T^SZfTIB"
            "d*vM}aA*fb`se+<7;D>fFdWY1H$M&w6@b`}*zsmc`?}7!xt(Bdn%U;<yG(uP&X#a"
            "BG?D9pwO^-|2pz)xVkHeT_FZU7^x#SA(yUjlTiL(i5Q~k}Oz_^YB^gr#0!7a;U;5"
            "E<%!`O&%F!db58Fg<r-g99%2Hf-l_;)))1_#XeN7YSU=5L?X&4^4EFx~q2!-uAgM"
            "wVv=ymS>0F_8PE)#iXou&9DpJe_}Sa%phxdI&$0`T8y|9h>*pviMPFu{4L4T<%-c"
            "WKSQRef&%$DuL7iYHZ5G^8x&Tkb#jh3%z<tW+_^O)UKmN9}CLNz|fUZA6Ge5L`;w"
            ")Aj#vLSP|T`BLckjiw!NWDqv!uTC(?6`a+pL7@x?cpl`uPCpRTY0O_ifJtiTP3n+"
            "=^0JEu5bpm-CE&=~<FvTBZR)SbS7u*2an2v6@6ZT)cZw~`PxhzKq{Otfyj+8sC&B"
            "cMQ@aTm<P*q{XXM|6Im=$UunHRnAzZ?DwJw%R@"
        ),
        dense=(
            "1f1f1f1f1f1f1f1f1f09091f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
            "17111d1f1f1f1f1f010115011f141f01100d100411100f0a060b011f180c141f"
            "041b0a1e010401011f010117160e0101071d01011f1f1f071f1f0f1f1f0c1c01"
            "01091111010c0b101501170110010101010101010101011f010101010b1f1f1f"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034674,
        dense_gate=0.3870,
        dense_case=0.9397,
        dense_digit=1.1212,
        dense_symbol=0.3226,
        runs=(
            (" ", 1.00, 2.00),
            ("\t", 4.00, 32.00),
            ("\n", 2.00, 16.00),
            ("\r", 32.00, 256.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 4.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 2.00),
            ("~", 2.00, 16.00),
            ("0", 11.00, 85.34),
            ("/", 1.00, 4.00),
            ("+", 4.00, 32.00),
            ("|", 8.00, 64.00),
            (":", 4.00, 32.00),
            ("<", 16.00, 128.00),
            (">", 8.00, 64.00),
            ("\\", 1.00, 8.00),
            ("`", 16.00, 128.00),
            ("'", 16.00, 128.00),
            ('"', 16.00, 128.00),
            ("─", 2.00, 16.00),
            ("━", 16.00, 128.00),
            ("═", 8.00, 64.00),
        ),
    ),
    "anthropic": Coefficients(
        table=(
            "1010101010101010100406101008101010101010101010101010101010101010"
            "04010a0b1f01011a011f0708120d1f1f141f09191514160d13041a0a1f040a01"
            "0601010a071f081f01011f0101011f010d1f01010a1f1f1f1f1f0f1f11010d15"
            "11021d0c15031f1317011f0609010101091f01030601060102171f1a1e170d10"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0016160f080e0a0a0a1010101010111f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f0f"
            "000f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0c0c0c0c000000000000000000000000"
            "0000000000000000000000000000070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "1f1f1f1f1f1f1f1f1f1f1f1f1717171717171717171717171717171717171717"
            "1717171717171717171717171717171717171717171717170a0909090a0a0a0a"
            "1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e0000000000000b"
        ),
        unit=0.034477,
        page_unit=0.103431,
        rare_cjk=1.1518,
        fixed=0.0000,
        cjk_single=(
            "c-pmAy>1gh5S|&Yt;LDZ+OeXPYeR90QUr-2<px|>qKQ(uG>C!%(a=)NAs42L1O=r"
            "Zf(Njyq^IU-nBDXF_RcxmL1d)F=bhPa{=S)W`st)+p7##n0MkoAaN}crV?gzXBfK"
            "z+gaDcdV4O|5^2wkfflMqp`LBVD=oz2~xrm`ymLxfl3!Oh`&p{v)a2(7I7cd<_`%"
            ";wtit?tjMkByyPGI3bS~Q%i20Q_mA<xvyC0<Owq4`YUW^$qg4#nJL{-|H}?_dwX("
            "zj6)%p_!js8UF?Q@sY{;5A5ht<x1(Hv^}*)up^<DpzQDprq)5+g-R-Frt-{>nrxY"
            "$u-%^5p7MVB9n=0!C_XLmEo8j|BMq*g6ow6d?v{foOdK`X<o8wuqZ6&*>K_3=1Fp"
            "u2^Hbj;)NL#4NR~^WwW~^_awEiMM|uEV5DFk_=R}|%?75e`fy8$Nsv0o9@(OxGxU"
            "9?SDNL}g}yARKt0B162}ivK9hm`8Awg+h9zhLJ91cVX-(yg+B_rL(fM5eB~EZ|BC"
            "SE?E3!V(+S{li2u*s`AS@%>b-1n)IpwVW7ipFI;7at^tcna%C%B|t)5;p6Ou_9j*"
            "D}AS+Ox#&w*6R;iDVfXl)7<UKkY!5C$2u2VbDhX0NctqT;2nU@+t{5t{$Baimt*V"
            "ik_gBF}e~-_};vqk*W^lRw5gx`a4^bLD7n5!_9#^HJj9?0(yJN)yYOkDq_6#Os;9"
            "^y>tH%Vfepdq7v)c#5wQWwM?wf4H5PtW-Q0=@b21L`+j~i()a9%N_zaEAKua7)E2"
            "a`*)VNkQDvRE-^OZa`^Q%dM{i`0+6Jj<P}<^>E>?-H+sXWk;86tQIdm?(yIfQjS&"
            "eIUzBM{4)fr6WV)y~WCK{l4WR+7p3uT`gpcmV>f!od@v){}6@rAHvU6dO47wy_$;"
            "Q"
        ),
        dense=(
            "1f1f1f1f1f1f1f1f1f091f1f1f091f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
            "0a010111011f031f010111011c141f0110120b09100e0e080c0c0315011f1a1f"
            "0e03121f0103010d0701041315120105071f01101f1f1f171f1f0f1f1f1b0101"
            "070a131108080e1114011f0d1501010101020101010109160101150113191f1f"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034477,
        dense_gate=0.3848,
        dense_case=0.7208,
        dense_digit=0.8840,
        dense_symbol=1.0370,
        runs=(
            (" ", 1.00, 0.25),
            ("\t", 4.00, 32.00),
            ("\n", 1.00, 8.00),
            ("\r", 16.00, 128.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 1.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 8.00),
            ("~", 1.00, 8.00),
            ("0", 1.00, 8.00),
            ("/", 1.00, 8.00),
            ("+", 1.00, 8.00),
            ("|", 16.00, 128.00),
            (":", 4.00, 32.00),
            ("<", 4.00, 32.00),
            (">", 2.00, 16.00),
            ("\\", 8.00, 64.00),
            ("`", 2.00, 16.00),
            ("'", 1.00, 8.00),
            ('"', 4.00, 32.00),
            ("─", 4.00, 32.00),
            ("━", 32.00, 256.00),
            ("═", 2.00, 16.00),
        ),
    ),
}
FAMILY_FLOOR: dict[str, float] = {
    "o200k": 0.60,
    "cl100k": 0.60,
    "deepseek": 0.60,
    "anthropic": 0.60,
}
# END FITTED


class BoundEstimator(ApproximateEstimator):
    """A conservative bound for models whose tokenizer is not shipped offline.

    Each weight is the largest of the known families' weights and the sum is divided by the
    smallest family floor, so the count is at least every known family's exact count (on
    the evaluation set, and by construction wherever the families' floors hold). Its own
    ``floor`` is 1.0 relative to those families; the unknown tokenizer itself cannot be
    measured, which is why the manifest names the method ``bound:unknown``.
    """

    def __init__(self) -> None:
        super().__init__("o200k", bound_coefficients(), floor=1.0)
        self.family = "unknown"
        self.method = "bound:unknown"
        self.images = "bound"
        if type(self) is BoundEstimator:
            self._share(self.method)

    @property
    def exact_counter(self) -> TokenEstimator | None:
        """``None``: no exact tokenizer is known for these models."""
        return None


@cache
def bound_coefficients() -> Coefficients:
    """Return the bound's coefficients: the largest weight of any family, ÷ the least floor.

    Per-character weights are the maximum over families (so every character costs at least
    what any family charges it), run costs the maximum too, and everything is divided by the
    smallest `FAMILY_FLOOR`.
    """
    families = [FAMILY_COEFFICIENTS[f] for f in FAMILIES]
    scale = 1.0 / min(FAMILY_FLOOR[f] for f in FAMILIES)
    unit = max(c.unit for c in families)
    page_unit = max(c.page_unit for c in families)
    low = [max(c.weights[b] * c.unit for c in families) for b in range(256)]
    high = [max(bytes.fromhex(c.pages)[b] * c.page_unit for c in families) for b in range(256)]
    runs: dict[str, tuple[float, float]] = {}
    for c in families:
        for char, alone, long_run in c.runs:
            old = runs.get(char, (0.0, 0.0))
            runs[char] = (max(old[0], alone), max(old[1], long_run))
    # Rare for the bound is rare for any family (a family without a set uses GB2312).
    singles = [c.cjk_single for c in families]
    bound = Coefficients(
        cjk_single=_common_cjk(singles) if all(singles) else "",
        table=bytes(min(_MAX_WEIGHT, math.ceil(w / unit - 1e-9)) for w in low).hex(),
        unit=unit * scale,
        pages=bytes(min(_MAX_WEIGHT, math.ceil(w / page_unit - 1e-9)) for w in high).hex(),
        page_unit=page_unit * scale,
        rare_cjk=max(c.rare_cjk for c in families) * scale,
        fixed=max(c.fixed for c in families) * scale,
        runs=tuple((ch, a * scale, b * scale) for ch, (a, b) in runs.items()),
    )
    gates = [c.dense_gate for c in families if c.dense_unit]
    if not gates:
        return bound
    # Dense when any family is dense: the bound's table sum is at least each family's ÷ the
    # least floor. Then every character costs the most any family charges it, dense or not.
    dense = [
        max(max(c.weights[b] * c.unit, bytes.fromhex(c.dense)[b] * c.dense_unit) for c in families)
        for b in range(256)
    ]
    dense_unit = max(max(dense), 1e-9) / _MAX_WEIGHT
    return msgspec.structs.replace(
        bound,
        dense=bytes(min(_MAX_WEIGHT, math.ceil(w / dense_unit - 1e-9)) for w in dense).hex(),
        dense_unit=dense_unit * scale,
        dense_gate=min(gates) * scale,
        dense_case=max(c.dense_case for c in families) * scale,
        dense_digit=max(c.dense_digit for c in families) * scale,
        dense_symbol=max(c.dense_symbol for c in families) * scale,
    )


class ExactEstimator(CachedEstimator):
    """Exact counts from a real tokenizer function."""

    exact = True
    floor = 1.0

    def __init__(
        self,
        method: str,
        encode_len: Callable[[str], int],
        *,
        images: str = "bound",
        shared: bool = False,
    ) -> None:
        super().__init__(shared_as=f"exact:{method}:{images}" if shared else None)
        self.method = method
        self.images = images
        self._encode_len = encode_len

    def count(self, text: str) -> int:
        """Return the exact token count of ``text``."""
        return self._encode_len(text) if text else 0


def litellm_tokenizer_dir() -> Path:
    """Return the folder of tokenizer files that litellm ships, without importing litellm.

    Raises:
        ConfigurationError: when litellm is not installed.
    """
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "exact token counting needs litellm's tokenizer files: install context-harness "
            "with its dependencies (make test sets them up)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


@cache
def tiktoken_encoding(name: str) -> Any:
    """Return the tiktoken encoding ``name`` loaded from litellm's shipped files.

    tiktoken reads its cache folder from the environment when it loads an encoding; it is
    pointed at litellm's files for that moment only, so a user's own setting can never
    make it download and is left as it was.
    """
    import tiktoken

    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(litellm_tokenizer_dir())
    try:
        return tiktoken.get_encoding(name)
    finally:
        if previous is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous


@cache
def _tiktoken_len(encoding: str) -> Callable[[str], int]:
    enc = tiktoken_encoding(encoding)
    return lambda text: len(enc.encode(text, disallowed_special=()))


@cache
def _hf_len(filename: str) -> Callable[[str], int]:
    from tokenizers import Tokenizer

    path = litellm_tokenizer_dir() / filename
    if not path.exists():
        raise ConfigurationError(
            f"litellm does not ship {filename} in {path.parent}; upgrade litellm"
        )
    tok = Tokenizer.from_file(str(path))
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def exact_for_family(family: str) -> ExactEstimator:
    """Return a new exact estimator of one tokenizer family (its counts cached process-wide).

    `shared_exact` returns the one process-wide instance that ``exact_counter`` hands out.
    """
    if family in ("o200k", "cl100k"):
        name = f"{family}_base"
        return ExactEstimator(f"tiktoken:{name}", _tiktoken_len(name), images="openai", shared=True)
    if family == "deepseek":
        return ExactEstimator(
            "tokenizers:deepseek", _hf_len("deepseek_tokenizer.json"), shared=True
        )
    if family == "anthropic":
        return ExactEstimator(
            "tokenizers:anthropic",
            _hf_len("anthropic_tokenizer.json"),
            images="anthropic",
            shared=True,
        )
    raise ConfigurationError(
        f"unknown tokenizer family {family!r}; use o200k, cl100k, deepseek or anthropic"
    )


@cache
def shared_exact(family: str) -> ExactEstimator:
    """Return the process-wide exact estimator of ``family`` (loaded once, caches shared).

    Sharing is safe across sessions and users: its caches are keyed by content.
    """
    return exact_for_family(family)


UNKNOWN_FAMILY = "unknown"
"""What `family_for` returns for a model whose tokenizer is not shipped offline."""


def family_for(model: str) -> str:
    """Return the tokenizer family of ``model``, or `UNKNOWN_FAMILY`.

    OpenAI models (``gpt-*``, ``o1``/``o3``/``o4``, ``chatgpt``, ``text-embedding``) map to
    o200k or cl100k, Claude to anthropic, DeepSeek to deepseek; anything else (Gemini, Llama,
    Mistral, Qwen, local models …) is unknown and gets `BoundEstimator`.
    """
    full = model.lower()
    name = full.rsplit("/", 1)[-1]
    if "claude" in name or full.startswith(("anthropic/", "bedrock/anthropic")):
        return "anthropic"
    if "deepseek" in full:
        return "deepseek"
    if name.startswith(("gpt-3.5", "gpt-4-", "text-embedding")) or name == "gpt-4":
        return "cl100k"
    if name.startswith(("gpt-", "chatgpt", "o1", "o3", "o4", "omni-moderation")):
        return "o200k"
    if full == "scripted":  # providers.ScriptedModel, the offline model, counts like o200k
        return "o200k"
    return UNKNOWN_FAMILY


@cache
def approximate(family: str = "o200k") -> ApproximateEstimator:
    """Return the fast approximate estimator (the default) for a tokenizer family.

    One instance per family and process: building one takes about a millisecond (its tables),
    and its counts are shared anyway (`CountCache`), so an agent or a stateless call per
    request does not pay for it each time. Construct `ApproximateEstimator` for your own.
    """
    if family == UNKNOWN_FAMILY:
        return BoundEstimator()
    return ApproximateEstimator(family)


def estimator_for(model: str, *, exact: bool = False) -> TokenEstimator:
    """Return the estimator for ``model``.

    Approximate (calibrated to its family) by default, the family's exact one with
    ``exact=True``; a model with no offline tokenizer gets `BoundEstimator` either way.
    """
    family = family_for(model)
    if exact and family != UNKNOWN_FAMILY:
        return exact_for_family(family)
    return approximate(family)
