"""Exact token counts from the tokenizer files litellm ships: offline, loaded on first use.

**Exact** (`ExactEstimator`): tiktoken (``o200k_base``, ``cl100k_base``) and the
``tokenizers`` JSON files for DeepSeek and Anthropic — all read from the files litellm ships,
never downloaded, and without importing litellm itself. tiktoken and tokenizers are imported
when a family's tokenizer is first loaded, so importing the library stays cheap. Exact
estimators have ``floor = 1``; `shared_exact` is the one per family and process that
approximate estimators hand out as ``exact_counter``, its counts in a shared cache.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from harness.errors import ConfigurationError
from harness.tokens._ceiling import byte_ceiling
from harness.tokens._count_cache import CachedEstimator
from harness.tokens._estimator import TokenEstimator
from harness.tokens._floor import byte_floor

FAMILIES = ("o200k", "cl100k", "deepseek", "anthropic")
"""The tokenizer families with an exact tokenizer shipped offline."""
RELEASE_GIL_CHARS = 4096
"""From this many characters a ``tokenizers`` count releases the GIL (tiktoken always does)."""


class LazyLength:
    """A tokenizer's length function, loaded on its first use (or by `load`, off the loop).

    Loading a tokenizer takes 0.3–1.4 s: an estimator that may count exactly is handed out
    at once, and the file is read only when an exact count decides something.
    """

    def __init__(self, load: Callable[[], Callable[[str], int]]) -> None:
        self._load = load
        self._fn: Callable[[str], int] | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the tokenizer is loaded."""
        return self._fn is not None

    def load(self) -> Callable[[str], int]:
        """Load the tokenizer (once; other threads wait for it) and return its function."""
        fn = self._fn
        if fn is None:
            with self._lock:
                fn = self._fn
                if fn is None:
                    fn = self._fn = self._load()
        return fn

    def __call__(self, text: str) -> int:
        """Return the tokens of ``text``."""
        fn = self._fn
        return fn(text) if fn is not None else self.load()(text)


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

    @property
    def loaded(self) -> bool:
        """Whether counting needs no tokenizer to be loaded first."""
        encode_len = self._encode_len
        return not isinstance(encode_len, LazyLength) or encode_len.loaded

    def load(self) -> None:
        """Load the tokenizer now (blocking: async callers run this in a worker thread)."""
        if isinstance(self._encode_len, LazyLength):
            self._encode_len.load()

    @property
    def ceiling(self) -> TokenEstimator:
        """A count never below this one's: the UTF-8 bytes (`ByteCeiling`)."""
        return byte_ceiling(self.method, self.images)

    @property
    def lower_bound(self) -> TokenEstimator | None:
        """A count never above this one's: the bytes over the longest token (`ByteFloor`)."""
        return byte_floor(self.method, self.images)


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
    # tiktoken releases the GIL while it encodes, then builds a list of every token with it
    # held (0.67 s for 16 MB: a worker thread would still stop the event loop); its buffer
    # form holds the same tokens as 4-byte integers and costs the GIL a copy.
    to_buffer = getattr(enc._core_bpe, "encode_to_tiktoken_buffer", None)

    def encode_len(text: str) -> int:
        if to_buffer is None or len(text) < RELEASE_GIL_CHARS:
            return len(enc.encode(text, disallowed_special=()))
        return memoryview(to_buffer(text, set())).nbytes // 4  # specials count as text

    return encode_len


@cache
def _hf_len(filename: str) -> Callable[[str], int]:
    from tokenizers import Tokenizer

    path = litellm_tokenizer_dir() / filename
    if not path.exists():
        raise ConfigurationError(
            f"litellm does not ship {filename} in {path.parent}; upgrade litellm"
        )
    tok = Tokenizer.from_file(str(path))

    def encode_len(text: str) -> int:
        if len(text) < RELEASE_GIL_CHARS:
            return len(tok.encode(text, add_special_tokens=False).ids)
        # encode holds the GIL throughout (2.7 s for 4 MB: a worker thread would still stop
        # the event loop); encode_batch releases it and gives the same ids (and len() of an
        # encoding counts them without making a list).
        return len(tok.encode_batch([text], add_special_tokens=False)[0])

    return encode_len


EXACT_METHODS: dict[str, tuple[str, str]] = {
    "o200k": ("tiktoken:o200k_base", "openai"),
    "cl100k": ("tiktoken:cl100k_base", "openai"),
    "deepseek": ("tokenizers:deepseek", "bound"),
    "anthropic": ("tokenizers:anthropic", "anthropic"),
}
"""Each family's exact counting method and image rule (known without loading a tokenizer)."""


def exact_for_family(family: str) -> ExactEstimator:
    """Return a new exact estimator of one tokenizer family (its counts cached process-wide).

    `shared_exact` returns the one process-wide instance that ``exact_counter`` hands out.
    """
    if family in ("o200k", "cl100k"):
        name = f"{family}_base"
        return ExactEstimator(
            f"tiktoken:{name}",
            LazyLength(lambda: _tiktoken_len(name)),
            images="openai",
            shared=True,
        )
    if family == "deepseek":
        return ExactEstimator(
            "tokenizers:deepseek",
            LazyLength(lambda: _hf_len("deepseek_tokenizer.json")),
            shared=True,
        )
    if family == "anthropic":
        return ExactEstimator(
            "tokenizers:anthropic",
            LazyLength(lambda: _hf_len("anthropic_tokenizer.json")),
            images="anthropic",
            shared=True,
        )
    raise ConfigurationError(
        f"unknown tokenizer family {family!r}; use o200k, cl100k, deepseek or anthropic"
    )


@cache
def shared_exact(family: str) -> ExactEstimator:
    """Return the process-wide exact estimator of ``family`` (caches shared).

    Its tokenizer is loaded on the first exact count (`ExactEstimator.load` loads it ahead).

    Sharing is safe across sessions and users: its caches are keyed by content.
    """
    return exact_for_family(family)
