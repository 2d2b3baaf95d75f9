"""Token estimation: a fast approximate default and exact tokenizers, cached per message.

`approximate()` counts with a linear model over the UTF-8 bytes of the text — one weight per
byte value, so letters, digits, punctuation, whitespace and CJK characters each cost what
they cost in the family's tokenizer — fitted per family by ``benchmarks/fit_estimator.py``
and scaled so that it does not under-count. It reads at most about 1 KB of any text (long
texts are sampled at a prime stride) and sums the weights in C (``bytes.translate`` and
``zlib.adler32``), so it runs at 25–100× tiktoken's speed; ``benchmarks/bench_estimation.py``
measures speed and error. Exact estimators use tiktoken (``o200k_base``, ``cl100k_base``) and the
``tokenizers`` JSON files for DeepSeek and Anthropic — all read from the files litellm
ships, never downloaded, and without importing litellm itself.

Every estimator caches message counts by message id, so preparing a request whose history
grew by one message costs one new count, not a recount of the history.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from zlib import adler32

import msgspec

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError
from harness.messages import Message, ToolSchema

MESSAGE_OVERHEAD = 4
"""Tokens of framing per message (role markers, separators)."""
TOOL_CALL_OVERHEAD = 8
"""Tokens of framing per tool call (id, type, name and argument wrappers)."""
TOOL_SCHEMA_OVERHEAD = 8
"""Tokens of framing per tool schema."""
_CACHE_LIMIT = 500_000
_MARK = 0xFFFF_FFFF
_TOKENS = 0xFFFF_FFFF


@runtime_checkable
class TokenEstimator(Protocol):
    """Counts tokens of text, messages, tool schemas and blocks."""

    method: str
    """A label for the manifest: ``approximate:o200k``, ``tiktoken:o200k_base`` …"""
    exact: bool
    """Whether counts are the provider's exact tokenizer's."""

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


class CachedEstimator:
    """Base class: message, tool and block counting with per-id caches over `count`."""

    method = "base"
    exact = False

    def __init__(self) -> None:
        # message id → (content fingerprint << 32) | tokens: one int per message (~36 bytes)
        self._messages: dict[str, int] = {}
        self._blocks: dict[tuple[str, str], int] = {}
        self._tools: dict[bytes, int] = {}

    def count(self, text: str) -> int:  # pragma: no cover - abstract
        """Return the token count of ``text``."""
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        """Return the token count of ``message``, framing included.

        Cached by message id and checked against a fingerprint of the content (its string
        hash, which Python caches on the string), so a message rewritten under the same id
        is recounted rather than served a stale count.
        """
        content = message.content
        mark = (hash(content) if isinstance(content, str) else -1) & _MARK
        hit = self._messages.get(message.id)
        if hit is not None and hit >> 32 == mark:
            return hit & _TOKENS
        tokens = self._count_message(message)
        if len(self._messages) >= _CACHE_LIMIT:
            self._messages.clear()
        self._messages[message.id] = (mark << 32) | min(tokens, _TOKENS)
        return tokens

    def _count_message(self, message: Message) -> int:
        tokens = MESSAGE_OVERHEAD + self.count(message.text)
        if message.content is not None and not isinstance(message.content, str):
            # Non-text parts (images, audio) have no honest text estimate; count a fixed
            # allowance so they are never free.
            tokens += sum(85 for part in message.content if part.text is None)
        for call in message.tool_calls:
            tokens += TOOL_CALL_OVERHEAD + self.count(call.name) + self.count(call.arguments)
        if message.reasoning_content:
            tokens += self.count(message.reasoning_content)
        if message.name:
            tokens += 1 + self.count(message.name)
        return tokens

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Return the total count of ``messages``."""
        count_message = self.count_message
        return sum(count_message(m) for m in messages)

    def count_tools(self, tools: Iterable[ToolSchema]) -> int:
        """Return the token cost of the tool schemas (cached by their JSON)."""
        total = 0
        for tool in tools:
            encoded = msgspec.json.encode(tool)
            tokens = self._tools.get(encoded)
            if tokens is None:
                tokens = TOOL_SCHEMA_OVERHEAD + self.count(encoded.decode())
                self._tools[encoded] = tokens
            total += tokens
        return total

    def count_block(self, block: ContextBlock) -> int:
        """Return the token count of ``block`` as rendered (cached by id and revision)."""
        key = (block.source_id, block.revision)
        tokens = self._blocks.get(key)
        if tokens is None:
            tokens = 2 + self.count(block.source_id) + self.count(block.text)
            if len(self._blocks) >= _CACHE_LIMIT:
                self._blocks.clear()
            self._blocks[key] = tokens
        return tokens


class Coefficients(msgspec.Struct, frozen=True):
    """A linear model over UTF-8 bytes: tokens ≈ fixed + Σ (base + unit · table[byte]).

    Every byte value has its own weight, so the model tells letters from digits,
    punctuation, spaces, newlines, CJK lead bytes and so on; ``table`` keeps the 256
    weights as small integers (0–63, hex-encoded) so that the estimator can sum them in C
    with ``bytes.translate`` and ``zlib.adler32``.
    """

    table: str
    """512 hex digits: for each byte value, its weight in units of ``unit`` (0–63)."""
    unit: float
    """Tokens per weight step."""
    base: float
    """Tokens every byte adds whatever its weight (may be negative)."""
    fixed: float = 0.0
    """Tokens added once per text."""

    def __post_init__(self) -> None:
        try:
            weights = bytes.fromhex(self.table)
        except ValueError as error:
            raise ConfigurationError(f"Coefficients.table must be hex digits: {error}") from None
        if len(weights) != 256 or max(weights) > _MAX_WEIGHT:
            raise ConfigurationError(
                f"Coefficients.table must hold 256 weights of 0–{_MAX_WEIGHT}; "
                "generate it with benchmarks/fit_estimator.py"
            )

    @property
    def weights(self) -> bytes:
        """The 256 integer weights, one per byte value."""
        return bytes.fromhex(self.table)

    def tokens_per_byte(self, byte: int) -> float:
        """Return the tokens one occurrence of ``byte`` adds."""
        return self.base + self.unit * self.weights[byte]


_MAX_WEIGHT = 63
_CHUNK = 1024
"""Bytes one ``adler32`` call sums: ``1 + _CHUNK · _MAX_WEIGHT`` stays under its modulus 65521."""
FULL_ASCII = 1024
"""ASCII texts up to this many characters are read whole; longer ones are sampled."""
FULL_WIDE = 340
"""Texts with non-ASCII characters are read whole up to this many characters."""

# Fitted by benchmarks/fit_estimator.py (python -m benchmarks.fit_estimator); the
# data and the per-workload errors are in its output.
FAMILY_COEFFICIENTS: dict[str, Coefficients] = {
    "o200k": Coefficients(
        table=(
            "2020202020202020203f2f202004202020202020202020202020202020202020"
            "0e1e1d0c221a1d231a1b161f240d2a1c3f1920382331383c2b2a111a240d251c"
            "1f16131816101a1216121a1716160f1314170d191813161b1819171823192211"
            "1c0e170e1b0b21101b0b1109130d0e0e120f0e1410060c221e16101c331b1d20"
            "0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e"
            "0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e"
            "1717171711111111111111111111111111111111111111111111111111111111"
            "0d0d2c151c1c1c1c1c1c0d0d0d0d0d0018181818181818181818181818181818"
        ),
        unit=0.025380,
        base=-0.221320,
        fixed=0.2409,
    ),
    "cl100k": Coefficients(
        table=(
            "1b1b1b1b1b1b1b1b1b3f321b1b001b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b"
            "0a1b1a071f171a221315111c210929173f161e382130383d2a290c1421092119"
            "1c130f13130b150e140c181313120b0f10140816160f1219151614132114220c"
            "1809140918081f0b1a080d050e070b080f0a09100d0207201a150b193217191b"
            "1111111111111111111111111111111111111111111111111111111111111111"
            "1111111111111111111111111111111111111111111111111111111111111111"
            "1e1e1e1e1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a"
            "0808160e1b1b1b1b1b1b08080808080115151515151515151515151515151515"
        ),
        unit=0.023028,
        base=-0.095263,
        fixed=0.2119,
    ),
    "deepseek": Coefficients(
        table=(
            "1f1f1f1f1f1f1f1f1f3f321f1f3f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
            "081e190923191d221a1a141e22082f213e141a35203037392827101a240c231b"
            "1e16131a170f171217111a1716160f1414180e191813161a1919181725192215"
            "1c0b130b19071b0b17050e06110c090a0f0a090f0b00051e160e0c1c341a1d1f"
            "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"
            "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"
            "1a1a1a1a0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c"
            "0c0c1e0f0a0a0a0a0a0a0c0c0c0c0c110f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f"
        ),
        unit=0.022842,
        base=-0.073531,
        fixed=0.1352,
    ),
    "anthropic": Coefficients(
        table=(
            "1e1e1e1e1e1e1e1e1e3f381e1e3b1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e"
            "09211c08231e1f26141911201f0a2d352d201c31232d30322928211e2513231d"
            "20151214160e1311151017151614111413150c18161214181618151c281c1d22"
            "200b110c1c0c200e13070f0e120a0c0a140d0c1311090e1b1b100f202b1f1f1e"
            "1717171717171717171717171717171717171717171717171717171717171717"
            "1717171717171717171717171717171717171717171717171717171717171717"
            "2828282820202020202020202020202020202020202020202020202020202020"
            "0a0a25090c0c0c0c0c0c0a0a0a0a0a001a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a"
        ),
        unit=0.024013,
        base=-0.140408,
        fixed=0.1820,
    ),
}


@cache
def _stride(least: int) -> int:
    """Return the smallest prime ≥ ``least``.

    A prime stride rarely lines up with a periodic layout (table columns, hex-dump lines),
    so the sample stays representative.
    """
    candidate = max(2, least)
    while any(candidate % d == 0 for d in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


def sample_text(text: str) -> tuple[str, float]:
    """Return the part of ``text`` the approximate estimator reads, and its scale.

    Short texts are read whole (scale 1). A longer one is read at every k-th character,
    k prime, so that at most ``FULL_ASCII`` (ASCII) or ``FULL_WIDE`` characters are read
    whatever the length: the estimate of a long tool output costs the same as a short one.
    """
    n = len(text)
    if n <= FULL_WIDE:
        return text, 1.0
    limit = FULL_ASCII if text.isascii() else FULL_WIDE
    if n <= limit:
        return text, 1.0
    sample = text[:: _stride(-(-n // limit))]
    return sample, n / len(sample)


class ApproximateEstimator(CachedEstimator):
    """Fast, conservative estimate from per-byte weights, calibrated per tokenizer family.

    The cost of one count is a few C calls over at most ~1 KB, however long the text;
    see `sample_text` and `Coefficients`.
    """

    exact = False

    def __init__(self, family: str = "o200k", coefficients: Coefficients | None = None) -> None:
        super().__init__()
        if coefficients is None:
            if family not in FAMILY_COEFFICIENTS:
                raise ConfigurationError(
                    f"unknown tokenizer family {family!r}; use one of {sorted(FAMILY_COEFFICIENTS)}"
                )
            coefficients = FAMILY_COEFFICIENTS[family]
        self.family = family
        self.method = f"approximate:{family}"
        self.coefficients = coefficients
        self._table = coefficients.weights
        self._unit = coefficients.unit
        self._base = coefficients.base
        self._fixed = coefficients.fixed

    def count(self, text: str) -> int:
        """Return the estimated token count of ``text`` (0 for empty text, else ≥ 1)."""
        n = len(text)
        if n <= FULL_WIDE or (n <= FULL_ASCII and text.isascii()):
            if not n:
                return 0
            scale = 1.0
        else:
            text, scale = sample_text(text)
        data = text.encode("utf-8", "surrogatepass").translate(self._table)
        size = len(data)
        if size <= _CHUNK:
            weight = (adler32(data) & 0xFFFF) - 1
        else:
            weight = sum(
                (adler32(data[i : i + _CHUNK]) & 0xFFFF) - 1 for i in range(0, size, _CHUNK)
            )
        estimate = (weight * self._unit + size * self._base) * scale + self._fixed
        return 1 if estimate < 1.0 else math.ceil(estimate)


class ExactEstimator(CachedEstimator):
    """Exact counts from a real tokenizer function."""

    exact = True

    def __init__(self, method: str, encode_len: Callable[[str], int]) -> None:
        super().__init__()
        self.method = method
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
    """Return the exact estimator of one tokenizer family."""
    if family in ("o200k", "cl100k"):
        name = f"{family}_base"
        return ExactEstimator(f"tiktoken:{name}", _tiktoken_len(name))
    if family == "deepseek":
        return ExactEstimator("tokenizers:deepseek", _hf_len("deepseek_tokenizer.json"))
    if family == "anthropic":
        return ExactEstimator("tokenizers:anthropic", _hf_len("anthropic_tokenizer.json"))
    raise ConfigurationError(
        f"unknown tokenizer family {family!r}; use o200k, cl100k, deepseek or anthropic"
    )


def family_for(model: str) -> str:
    """Return the tokenizer family of ``model`` (``o200k`` when nothing better is known)."""
    name = model.lower().rsplit("/", 1)[-1]
    full = model.lower()
    if "claude" in name or full.startswith(("anthropic/", "bedrock/anthropic")):
        return "anthropic"
    if "deepseek" in full:
        return "deepseek"
    if name.startswith(("gpt-3.5", "gpt-4-", "text-embedding")) or name == "gpt-4":
        return "cl100k"
    return "o200k"


def approximate(family: str = "o200k") -> ApproximateEstimator:
    """Return the fast approximate estimator (the default) for a tokenizer family."""
    return ApproximateEstimator(family)


def estimator_for(model: str, *, exact: bool = False) -> TokenEstimator:
    """Return the estimator for ``model``: approximate (calibrated to its family) or exact."""
    family = family_for(model)
    return exact_for_family(family) if exact else ApproximateEstimator(family)
